#!/usr/bin/env python3
"""Compares output JSON lines of the flight-delays ports against a reference (the first file).

Reads the output of `weir transform run` (value already parsed as JSON) or of
run_component.py (value as the raw string the guest wrote), in any mix:

    python compare.py out-rust.jsonl out-py.jsonl out-js.jsonl out-go.jsonl

Records must agree one by one in key and value; values are compared as parsed JSON, numbers by
numeric equality (11 == 11.0), objects including their field order when both sides kept it
(raw values do; `weir transform run` sorts fields). Also counts byte-identical raw values and
values where a float of the reference is written as an integer (11.0 -> 11), which is how
JavaScript and Go format whole-number floats. Exit status 1 on any real difference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path):
    rows = []
    for line in path.read_text("utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        value = rec.get("value")
        raw = None
        if isinstance(value, str):
            raw = value
            try:
                value = json.loads(value)
                ordered = True
            except ValueError:
                ordered = False
        else:
            ordered = False  # weir transform run re-serialises through a sorted map
        rows.append((rec.get("key"), value, raw, ordered))
    return rows


def same(a, b, ordered: bool, notes: dict, path: str = "") -> str | None:
    """None when equal; else a description of the first difference."""
    if isinstance(a, bool) or isinstance(b, bool):
        return None if a is b else f"{path or '.'}: {a!r} != {b!r}"
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if a != b:
            return f"{path}: {a!r} != {b!r}"
        if isinstance(a, float) and isinstance(b, int):
            notes["float written as integer"] = notes.get("float written as integer", 0) + 1
        elif isinstance(a, int) and isinstance(b, float):
            return f"{path}: integer {a!r} written as float {b!r}"
        return None
    if isinstance(a, dict) and isinstance(b, dict):
        if ordered and list(a) != list(b):
            return f"{path or '.'}: field order {list(a)} != {list(b)}"
        if set(a) != set(b):
            return f"{path or '.'}: fields {sorted(a)} != {sorted(b)}"
        for k in a:
            d = same(a[k], b[k], ordered, notes, f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: list length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = same(x, y, ordered, notes, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b and type(a) is type(b) else f"{path or '.'}: {a!r} != {b!r}"


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    paths = [Path(p) for p in sys.argv[1:]]
    ref_path, ref = paths[0], load(paths[0])
    failed = False
    print(f"reference: {ref_path} ({len(ref)} records)")
    for path in paths[1:]:
        rows = load(path)
        notes: dict = {}
        diffs = []
        identical = comparable_raw = 0
        if len(rows) != len(ref):
            diffs.append(f"{len(rows)} records, reference has {len(ref)}")
        for i, ((k1, v1, r1, o1), (k2, v2, r2, o2)) in enumerate(zip(ref, rows)):
            if k1 != k2:
                diffs.append(f"record {i}: key {k1!r} != {k2!r}")
                continue
            d = same(v1, v2, o1 and o2, notes)
            if d:
                diffs.append(f"record {i} (key {k1}): {d}")
            if r1 is not None and r2 is not None:
                comparable_raw += 1
                identical += r1 == r2
        status = "SAME" if not diffs else "DIFFERENT"
        failed |= bool(diffs)
        extra = f"; {identical}/{comparable_raw} values byte-identical" if comparable_raw else ""
        notes_text = "".join(f"; {n}: {c}" for n, c in notes.items())
        print(f"{path}: {len(rows)} records, {status} as parsed JSON{extra}{notes_text}")
        for d in diffs[:10]:
            print(f"  {d}")
        if len(diffs) > 10:
            print(f"  ... {len(diffs) - 10} more")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
