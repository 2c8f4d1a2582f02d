"""Durable key-value state, scoped by the host to this operator and task.

Reads see this task's own writes, including those of the current, not yet committed epoch.
Writes become durable only when the epoch's checkpoint commits together with its output
records; after a crash, or when a batch fails, they are rolled back with the output and the
input is replayed. Keep every fact the transform must remember here (or in
``Transform.snapshot``), never only in memory.

Keys and values are bytes (``str`` is encoded as UTF-8); :func:`get_json` / :func:`put_json`
store values as compact JSON, the same bytes the Rust SDK's ``state::put_json`` writes, and
:func:`update_json` keeps a running aggregate per key at one parse and one serialisation per
batch.

Within one ``process`` or ``on-timer`` call the SDK keeps the keys read and written in guest
memory and passes the call's writes to the host when the call succeeds (:func:`in_call`): a key
costs one host call to read and one to write per batch, not per record.

Outside WebAssembly the state is an in-memory map (see :mod:`weir_guest.testing`).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict, List, Optional, Set, Tuple, TypeVar, Union

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


class _Decoded:
    """A value :func:`update_json` keeps parsed in the current call; serialised when it goes to
    the host or is read as bytes."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


#: The keys the current ``process`` or ``on-timer`` call read or wrote, with their values as it
#: last saw them (``None``: absent or deleted; a ``_Decoded`` kept by :func:`update_json`);
#: ``None`` between calls (see :func:`in_call`).
_CALL: Optional[Dict[bytes, Union[None, bytes, _Decoded]]] = None
#: The keys of ``_CALL`` written by the call and not yet passed to the host.
_DIRTY: Set[bytes] = set()
#: Bytes of keys and values that entered ``_CALL`` since it was last emptied.
_CALL_BYTES = 0
#: How many bytes of keys and values a call keeps before it hands its writes to the host and
#: forgets what it read: a batch over many large values must not hold them all in memory.
CALL_BYTES_LIMIT = 1 << 20

T = TypeVar("T")


def in_call(run: Callable[[], T]) -> T:
    """Runs one ``process`` or ``on-timer`` call with its state reads and writes kept in the
    guest: a key crosses to the host at most once to be read and once to be written per call,
    rather than at every record that uses it. The writes reach the host when ``run`` returns
    (in key order; earlier before a prefix scan, or past ``CALL_BYTES_LIMIT``); when it raises,
    those not passed on yet are dropped, and the host rolls back the rest."""
    global _CALL, _CALL_BYTES
    _CALL, _CALL_BYTES = {}, 0
    _DIRTY.clear()
    try:
        result = run()
        _flush()
        return result
    finally:
        _CALL = None
        _DIRTY.clear()


def _flush() -> None:
    """Passes the current call's unwritten writes to the host."""
    if _CALL is None:
        return
    for key in sorted(_DIRTY):
        value = _CALL[key]
        if isinstance(value, _Decoded):
            value = None if value.value is None else _encode(key, value.value)
        if value is None:
            _delete(key)
        else:
            _put(key, value)
    _DIRTY.clear()


def _keep(key: bytes, value: Optional[bytes]) -> None:
    """Records ``value`` as ``key``'s in the current call, within ``CALL_BYTES_LIMIT``."""
    global _CALL_BYTES
    assert _CALL is not None
    _CALL[key] = value
    _CALL_BYTES += len(key) + (0 if value is None else len(value))
    if _CALL_BYTES > CALL_BYTES_LIMIT:
        _flush()
        _CALL.clear()
        _CALL_BYTES = 0


def _write(key: bytes, value: Optional[bytes]) -> None:
    if _CALL is None:
        if value is None:
            _delete(key)
        else:
            _put(key, value)
    else:
        _DIRTY.add(key)
        _keep(key, value)


def get(key: Bytes) -> Optional[bytes]:
    """The value stored under ``key``, or ``None``."""
    key = to_bytes(key)
    call = _CALL
    if call is None:
        return _get(key)
    if key in call:
        value = call[key]
        if isinstance(value, _Decoded):
            return None if value.value is None else _encode(key, value.value)
        return value
    value = _get(key)
    _keep(key, value)
    return value


def put(key: Bytes, value: Bytes) -> None:
    """Stores ``value`` under ``key``, replacing any previous value."""
    _write(to_bytes(key), to_bytes(value))


def delete(key: Bytes) -> None:
    """Removes ``key``; removing a missing key is not an error."""
    _write(to_bytes(key), None)


def scan_prefix(prefix: Bytes, limit: int) -> List[Tuple[bytes, bytes]]:
    """Up to ``limit`` ``(key, value)`` entries whose key starts with ``prefix``, in ascending
    byte order of key (the host caps ``limit`` at 10,000)."""
    if limit < 0:
        raise ValueError("limit must not be negative")
    # The host answers the scan: it must hold the call's writes so far.
    _flush()
    return list(_scan(to_bytes(prefix), min(int(limit), 2**32 - 1)))


def get_json(key: Bytes, default: Any = None) -> Any:
    """The JSON value stored under ``key``, parsed; ``default`` when the key is absent. A
    :class:`TransformError` when the stored bytes are not JSON."""
    data = get(key)
    return default if data is None else _decode(key, data)


def put_json(key: Bytes, value: Any) -> None:
    """Stores ``value`` as compact JSON under ``key`` (dict field order is kept)."""
    put(key, _encode(key, value))


def update_json(key: Bytes, update: Callable[[Any], T]) -> T:
    """Calls ``update`` with the JSON value stored under ``key``, parsed (``None`` when the key
    is absent), and stores what it returns as JSON (``None`` deletes the key); returns that.

    The fast way to keep a running aggregate per key, as the Rust SDK's
    ``state::update_json``: within a ``process`` or ``on-timer`` call the SDK keeps the parsed
    value and serialises it once, when the call's writes go to the host, so a key updated at
    every record of a batch is parsed and serialised once per batch, not once per record as a
    :func:`get_json` / :func:`put_json` pair is. Outside a call it is exactly that pair::

        def add(stats):
            stats = stats or {"flights": 0}
            stats["flights"] += 1
            return stats

        stats = state.update_json("EWR", add)

    ``update`` may change the value in place and return it; the returned value is the one kept,
    so treat it as read-only once ``update_json`` returns. When ``update`` raises, the
    exception propagates and the changes it made in place stay (the call usually fails then,
    and all its writes with it). What ``update`` returns is stored even if it wrote ``key``
    itself. Keep only what comes back from JSON as it went in (dicts with
    ``str`` keys, lists, strings, numbers, booleans, ``None``): the next batch reads the JSON.

    Raises :class:`TransformError` when the stored bytes are not JSON (``update`` does not run)
    or, when the call's writes go to the host, when the value cannot be serialised as JSON.
    """
    key = to_bytes(key)
    call = _CALL
    if call is None:
        value = update(get_json(key))
        if value is None:
            delete(key)
        else:
            put_json(key, value)
        return value
    kept = call.get(key)
    if not isinstance(kept, _Decoded):
        # Read as by get(), which counts the stored bytes towards the bound; the parsed value
        # then takes the entry's place.
        data = kept if key in call else get(key)
        kept = _Decoded(None if data is None else _decode(key, data))
    call[key] = kept
    _DIRTY.add(key)
    kept.value = update(kept.value)
    # Again: a flush for the bound may have forgotten it while ``update`` ran.
    call[key] = kept
    _DIRTY.add(key)
    return kept.value


def _decode(key: bytes, data: bytes) -> Any:
    try:
        return loads_json(data)
    except ValueError as e:
        raise TransformError(f"state key {_show(key)}: stored value is not the expected JSON: {e}") from None


def _encode(key: Bytes, value: Any) -> bytes:
    try:
        return dumps_json(value)
    except (TypeError, ValueError) as e:
        raise TransformError(f"state key {_show(key)}: cannot serialise value as JSON: {e}") from None


def _show(key: Bytes) -> str:
    text = key if isinstance(key, str) else bytes(key).decode("utf-8", "replace")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
