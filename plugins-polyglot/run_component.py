#!/usr/bin/env python3
"""Runs a weir:transform@0.1.0 component over a CSV/JSONL file, outside the Weir host.

A development tool for the polyglot SDKs: it prints each output record's raw key and value
bytes (as JSON lines `{"key": "...", "value": "..."}`, value as a string, exactly as the guest
wrote it), so outputs of transforms written in different languages can be compared byte for
byte. `weir transform run` re-serialises output values through serde_json (which sorts object
fields), so it cannot show field order or number formatting; this tool can.

It mirrors `weir transform run`: input rows become JSON objects the way the host's file reader
builds them (`NA` and empty cells -> null, integers and decimals -> numbers, other cells ->
strings), records are keyed by --key fields joined with `|`, offsets are 0-based row numbers,
state is an in-memory map (writes of a failed batch are dropped), WASI is granted with no
preopens, environment, arguments or network.

Needs the `wasmtime` Python package (scripts/build-polyglot.sh installs it into its venv):

    python run_component.py flight-delays-py.wasm --input flights.csv.zip \
        --key origin,carrier --limit 20000 > out.jsonl
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import time
import zipfile
from pathlib import Path

import wasmtime
from wasmtime import component as wc

LEVELS = ["trace", "debug", "info", "warn", "error"]
INT_RE = re.compile(r"^[+-]?[0-9]+$")


def cell_value(cell: str):
    if cell == "" or cell == "NA":
        return None
    if INT_RE.match(cell):
        n = int(cell)
        if -(2**63) <= n < 2**63:
            return n
    try:
        f = float(cell)
    except ValueError:
        return cell
    if f != f or f in (float("inf"), float("-inf")):
        return cell
    return f


def read_rows(path: Path, fmt: str | None):
    """Yields (line, value) like the host's reader (objects with sorted keys, as serde_json's map)."""
    name = path.name.lower()
    if name.endswith(".zip"):
        with zipfile.ZipFile(path) as z:
            entry = next(n for n in z.namelist() if not n.endswith("/") and re.search(r"\.(csv|jsonl|ndjson|json)$", n.lower()))
            data = z.read(entry).decode("utf-8")
            name = entry.lower()
    else:
        data = path.read_text("utf-8")
    fmt = fmt or ("csv" if name.endswith(".csv") else "jsonl")
    if fmt == "csv":
        reader = csv.reader(io.StringIO(data))
        headers = next(reader)
        for line, row in enumerate(reader, start=1):
            yield line, {h: cell_value(c) for h, c in sorted(zip(headers, row))}
    else:
        line = 0
        for line, text in enumerate(data.splitlines(), start=1):
            if text.strip():
                yield line, json.loads(text)


def key_of(value, fields):
    def part(f):
        v = value.get(f) if isinstance(value, dict) else None
        if v is None:
            return ""
        return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))
    return "|".join(part(f) for f in fields)


class Host:
    """One instance of a component with in-memory state, like the host's MemoryState."""

    def __init__(self, wasm: Path, config: list[tuple[str, str]], verbose: bool):
        self.engine = wasmtime.Engine()
        self.component = wc.Component.from_file(self.engine, str(wasm))
        self.state: dict[bytes, bytes] = {}
        self.writes: dict[bytes, bytes | None] = {}
        self.verbose = verbose
        self.log_lines = 0
        linker = wc.Linker(self.engine)
        linker.add_wasip2()
        with linker.root() as root:
            with root.add_instance("weir:transform/state@0.1.0") as st:
                st.add_func("get", self._get)
                st.add_func("put", self._put)
                st.add_func("delete", self._delete)
                st.add_func("scan-prefix", self._scan)
            with root.add_instance("weir:transform/log@0.1.0") as lg:
                lg.add_func("log", self._log)
        self.store = wasmtime.Store(self.engine)
        wasi = wasmtime.WasiConfig()
        wasi.inherit_stderr()
        self.store.set_wasi(wasi)
        self.instance = linker.instantiate(self.store, self.component)
        self.funcs = {}
        for name in ("init", "process", "snapshot", "restore"):
            index = self.instance.get_export_index(self.store, name)
            self.funcs[name] = self.instance.get_func(self.store, index)
        result = self.call("init", [(k, v) for k, v in config])
        if isinstance(result, str) or (isinstance(result, wc.Variant) and result.tag == "err"):
            raise SystemExit(f"init failed: {getattr(result, 'payload', result)}")
        self.writes.clear()

    # --- imports ------------------------------------------------------------------------------
    def _lookup(self, key: bytes):
        if key in self.writes:
            return self.writes[key]
        return self.state.get(key)

    def _get(self, _store, key):
        return self._lookup(bytes(key))

    def _put(self, _store, key, value):
        self.writes[bytes(key)] = bytes(value)

    def _delete(self, _store, key):
        self.writes[bytes(key)] = None

    def _scan(self, _store, prefix, limit):
        prefix = bytes(prefix)
        keys = sorted({k for k in list(self.state) + list(self.writes) if k.startswith(prefix)})
        out = []
        for k in keys:
            v = self._lookup(k)
            if v is not None:
                out.append((k, v))
            if len(out) >= limit:
                break
        return out

    def _log(self, _store, level, message):
        self.log_lines += 1
        if self.verbose:
            print(f"[guest {level}] {message}", file=sys.stderr)

    # --- exports ------------------------------------------------------------------------------
    def call(self, name, *args):
        func = self.funcs[name]
        result = func(self.store, *args)
        func.post_return(self.store)
        return result

    def process(self, batch):
        result = self.call("process", batch)
        if isinstance(result, wc.Variant):
            ok, payload = result.tag == "ok", result.payload
        else:
            ok, payload = isinstance(result, list), result
        if not ok:
            self.writes.clear()
            raise RuntimeError(f"transform error: {payload.message} (offset {payload.offset})")
        for k, v in self.writes.items():
            if v is None:
                self.state.pop(k, None)
            else:
                self.state[k] = v
        self.writes.clear()
        return payload


def make_record(key: bytes | None, value: bytes, offset: int, timestamp: int, topic: str):
    r = wc.Record()
    r.key = key
    r.value = value
    r.headers = []
    r.timestamp = timestamp
    r.topic = topic
    r.partition = 0
    r.offset = offset
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("component", type=Path)
    ap.add_argument("--input", type=Path, required=True)
    ap.add_argument("--format", choices=["csv", "jsonl"])
    ap.add_argument("--key", default="", help="comma-separated key fields")
    ap.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--limit", type=int)
    ap.add_argument("-v", "--verbose", action="store_true", help="print guest log lines to stderr")
    args = ap.parse_args()

    config = [tuple(c.split("=", 1)) for c in args.config]
    fields = [f for f in args.key.split(",") if f]
    started = time.monotonic()
    host = Host(args.component, config, args.verbose)
    init_s = time.monotonic() - started
    topic = args.input.name
    timestamp = int(time.time() * 1000)
    out = sys.stdout
    batch = []
    count = 0

    def flush():
        for o in host.process(batch):
            key = None if o.key is None else bytes(o.key).decode("utf-8", "replace")
            value = None if o.value is None else bytes(o.value).decode("utf-8", "replace")
            rec = {"key": key, "value": value}
            if o.headers:
                rec["headers"] = [[h.key, bytes(h.value).decode("utf-8", "replace")] for h in o.headers]
            if o.output is not None:
                rec["output"] = o.output
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
        batch.clear()

    for line, value in read_rows(args.input, args.format):
        if args.limit is not None and line > args.limit:
            break
        key = key_of(value, fields).encode() if fields else None
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        batch.append(make_record(key, text.encode("utf-8"), line - 1, timestamp, topic))
        count += 1
        if len(batch) == args.batch_size:
            flush()
    if batch:
        flush()
    took = time.monotonic() - started
    print(f"run_component: {count} records through {args.component.name}: instantiate+init {init_s:.2f}s, "
          f"total {took:.2f}s, {host.log_lines} log lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
