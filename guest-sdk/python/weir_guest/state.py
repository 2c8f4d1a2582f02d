"""Durable key-value state, scoped by the host to this operator and task.

Reads see this task's own writes, including those of the current, not yet committed epoch.
Writes become durable only when the epoch's checkpoint commits together with its output
records; after a crash, or when a batch fails, they are rolled back with the output and the
input is replayed. Keep every fact the transform must remember here (or in
``Transform.snapshot``), never only in memory.

Keys and values are bytes (``str`` is encoded as UTF-8); :func:`get_json` / :func:`put_json`
store values as compact JSON, the same bytes the Rust SDK's ``state::put_json`` writes.

Outside WebAssembly the state is an in-memory map (see :mod:`weir_guest.testing`).
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple

from ._types import Bytes, TransformError, dumps_json, loads_json, to_bytes

if sys.platform == "wasi":
    from wit_world.imports import state as _imp

    _get, _put, _delete, _scan = _imp.get, _imp.put, _imp.delete, _imp.scan_prefix
else:
    #: Native (test) state: committed entries; :mod:`weir_guest.testing` layers batches on it.
    _MEMORY: Dict[bytes, bytes] = {}

    def _get(key: bytes) -> Optional[bytes]:
        return _MEMORY.get(key)

    def _put(key: bytes, value: bytes) -> None:
        _MEMORY[key] = value

    def _delete(key: bytes) -> None:
        _MEMORY.pop(key, None)

    def _scan(prefix: bytes, limit: int) -> List[Tuple[bytes, bytes]]:
        keys = sorted(k for k in _MEMORY if k.startswith(prefix))[:limit]
        return [(k, _MEMORY[k]) for k in keys]


def get(key: Bytes) -> Optional[bytes]:
    """The value stored under ``key``, or ``None``."""
    return _get(to_bytes(key))


def put(key: Bytes, value: Bytes) -> None:
    """Stores ``value`` under ``key``, replacing any previous value."""
    _put(to_bytes(key), to_bytes(value))


def delete(key: Bytes) -> None:
    """Removes ``key``; removing a missing key is not an error."""
    _delete(to_bytes(key))


def scan_prefix(prefix: Bytes, limit: int) -> List[Tuple[bytes, bytes]]:
    """Up to ``limit`` ``(key, value)`` entries whose key starts with ``prefix``, in ascending
    byte order of key (the host caps ``limit`` at 10,000)."""
    if limit < 0:
        raise ValueError("limit must not be negative")
    return list(_scan(to_bytes(prefix), min(int(limit), 2**32 - 1)))


def get_json(key: Bytes, default: Any = None) -> Any:
    """The JSON value stored under ``key``, parsed; ``default`` when the key is absent. A
    :class:`TransformError` when the stored bytes are not JSON."""
    data = get(key)
    if data is None:
        return default
    try:
        return loads_json(data)
    except ValueError as e:
        raise TransformError(f"state key {_show(key)}: stored value is not the expected JSON: {e}") from None


def put_json(key: Bytes, value: Any) -> None:
    """Stores ``value`` as compact JSON under ``key`` (dict field order is kept)."""
    try:
        data = dumps_json(value)
    except (TypeError, ValueError) as e:
        raise TransformError(f"state key {_show(key)}: cannot serialise value as JSON: {e}") from None
    put(key, data)


def _show(key: Bytes) -> str:
    text = key if isinstance(key, str) else bytes(key).decode("utf-8", "replace")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
