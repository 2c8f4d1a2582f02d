"""Durable key-value state, scoped by the host to this operator and task.

Reads see this task's own writes, including those of the current, not yet committed epoch.
Writes become durable only when the epoch's checkpoint commits together with its output
records; after a crash, or when a batch fails, they are rolled back with the output and the
input is replayed. Keep every fact the transform must remember here (or in
``Transform.snapshot``), never only in memory.

Keys and values are bytes (``str`` is encoded as UTF-8); :func:`get_json` / :func:`put_json`
store values as compact JSON, the same bytes the Rust SDK's ``state::put_json`` writes, and
:func:`update_json` keeps a running aggregate per key with one parse per batch and one
serialisation when the batch's writes go to the host.

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

    __slots__ = ("value", "present")

    def __init__(self, value: Any, present: bool):
        self.value = value
        #: Whether the key holds a value (a stored JSON ``null`` is one; ``value`` is then ``None``).
        self.present = present


#: The keys the current ``process`` or ``on-timer`` call read or wrote, with their values as it
#: last saw them (``None``: absent or deleted; a ``_Decoded`` kept by :func:`update_json`);
#: ``None`` between calls (see :func:`in_call`).
_CALL: Optional[Dict[bytes, Union[None, bytes, _Decoded]]] = None
#: The keys of ``_CALL`` written by the call and not yet passed to the host.
_DIRTY: Set[bytes] = set()
#: The keys whose :func:`update_json` is running: their value is half-changed, so nothing reads,
#: writes or flushes them until the update returns.
_LENT: Set[bytes] = set()
#: The first failure the current call must end with although no record caused it (a kept value
#: that cannot be serialised, an update that did not finish).
_FAILED: Optional[TransformError] = None
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
    global _CALL, _CALL_BYTES, _FAILED
    _CALL, _CALL_BYTES, _FAILED = {}, 0, None
    _DIRTY.clear()
    _LENT.clear()
    try:
        result = run()
        _flush()
        if _FAILED is not None:
            raise _FAILED
        return result
    finally:
        _CALL, _FAILED = None, None
        _DIRTY.clear()


def _fail(error: TransformError) -> None:
    """Fails the current call when it ends, with the first such error."""
    global _FAILED
    if _FAILED is None:
        _FAILED = error


def _flush() -> None:
    """Passes the current call's unwritten writes to the host, but for lent keys (they stay
    unwritten) and values that cannot be serialised (the call fails)."""
    if _CALL is None:
        return
    for key in sorted(_DIRTY - _LENT):
        value = _bytes(key, _CALL[key])
        if value is None:
            _delete(key)
        elif value is not _UNSERIALISABLE:
            _put(key, value)
    _DIRTY.intersection_update(_LENT)


#: What :func:`_bytes` gives for a kept value that cannot be serialised.
_UNSERIALISABLE: Any = object()


def _bytes(key: bytes, value: Union[None, bytes, _Decoded]) -> Optional[bytes]:
    """What a kept value stands for as bytes; ``_UNSERIALISABLE`` (the call then fails) for a
    parsed one that is not JSON."""
    if not isinstance(value, _Decoded):
        return value
    if not value.present:
        return None
    try:
        return _encode(key, value.value)
    except TransformError as e:
        _fail(e)
        return _UNSERIALISABLE


def _keep(key: bytes, value: Optional[bytes]) -> None:
    """Records ``value`` as ``key``'s in the current call, within ``CALL_BYTES_LIMIT``."""
    global _CALL_BYTES
    assert _CALL is not None
    _CALL[key] = value
    _CALL_BYTES += len(key) + (0 if value is None else len(value))
    if _CALL_BYTES > CALL_BYTES_LIMIT:
        _flush()
        lent = {k: _CALL[k] for k in _LENT}
        _CALL.clear()
        _CALL.update(lent)
        _CALL_BYTES = 0


def _not_lent(key: bytes) -> None:
    if key in _LENT:
        raise TransformError(
            f"state key {_show(key)}: used inside its own update_json; read or write it before or after the update"
        )


def _write(key: bytes, value: Optional[bytes]) -> None:
    if _CALL is None:
        if value is None:
            _delete(key)
        else:
            _put(key, value)
    else:
        _not_lent(key)
        _DIRTY.add(key)
        _keep(key, value)


def get(key: Bytes) -> Optional[bytes]:
    """The value stored under ``key``, or ``None``."""
    key = to_bytes(key)
    call = _CALL
    if call is None:
        return _get(key)
    if key in call:
        _not_lent(key)
        value = _bytes(key, call[key])
        # Unserialisable: the call fails when it ends; what it reads until then does not matter.
        return None if value is _UNSERIALISABLE else value
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
    prefix = to_bytes(prefix)
    for key in _LENT:
        if key.startswith(prefix):
            _not_lent(key)
    # The host answers the scan: it must hold the call's writes so far.
    _flush()
    return list(_scan(prefix, min(int(limit), 2**32 - 1)))


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
    is absent), and stores what it returns as JSON; returns that.

    The fast way to keep a running aggregate per key, as the Rust SDK's
    ``state::update_json``: within a ``process`` or ``on-timer`` call the SDK keeps the parsed
    value and serialises it when the call's writes go to the host (at its end), so a key updated
    at every record of a batch is parsed and serialised once per batch, not once per record as a
    :func:`get_json` / :func:`put_json` pair is (a :func:`get` of the key or a prefix scan in
    between serialises it again). Outside a call it is exactly that pair::

        def add(stats):
            stats = stats or {"flights": 0}
            stats["flights"] += 1
            return stats

        stats = state.update_json("EWR", add)

    ``update`` may change the value in place, and must return the value to store: ``None`` for
    a stored value (a stored JSON ``null`` included) is refused (a forgotten ``return``; delete a
    key with :func:`delete`), and leaves an absent key absent. The returned value is the one
    kept and changed in place by the next update of the key, so return a value of the key's own
    (not a shared default or constant, nor another key's value), and treat it as read-only once
    ``update_json`` returns. Keep only what comes back from JSON as it went in (dicts with
    ``str`` keys, lists, strings, numbers, booleans): the next batch reads the JSON. A kept value
    counts towards the call's bound (``CALL_BYTES_LIMIT``) as the bytes it was stored as when it
    was first read, not as what it grows to.

    Raises :class:`TransformError` when the stored bytes are not JSON (``update`` does not run),
    when it returns ``None`` for a stored value, and, within a call, when ``update`` uses ``key``
    itself through this module (a get, write, scan over it or nested update). Within a call, when
    ``update`` raises (or returns ``None`` for a stored value), so does ``update_json``, and the
    call fails even if the transform catches it: the value may be half-changed. A kept value that
    cannot be serialised as JSON when it goes to the host fails the call.
    """
    key = to_bytes(key)
    call = _CALL
    if call is None:
        data = get(key)
        value = _returned(key, data is not None, update(None if data is None else _decode(key, data)))
        if value is not None:
            put_json(key, value)
        return value
    _not_lent(key)
    kept = call.get(key)
    if not isinstance(kept, _Decoded):
        # Read as by get(), which counts the stored bytes towards the bound; the parsed value
        # then takes the entry's place.
        data = kept if key in call else get(key)
        kept = _Decoded(None if data is None else _decode(key, data), data is not None)
        call[key] = kept
    _LENT.add(key)
    try:
        value = _returned(key, kept.present, update(kept.value))
    except BaseException as e:
        _fail(TransformError(f"state key {_show(key)}: its update_json did not finish ({type(e).__name__}: {e})"))
        raise
    finally:
        _LENT.discard(key)
    if value is not None:
        kept.value, kept.present = value, True
        _DIRTY.add(key)
    return value


def _returned(key: bytes, present: bool, value: Any) -> Any:
    """What an update_json function returned; ``None`` for a stored value (``present``) is a
    forgotten ``return``, not a deletion."""
    if value is None and present:
        raise TransformError(
            f"state key {_show(key)}: the update_json function returned None; return the value to store"
            " (delete a key with state.delete)"
        )
    return value


def _decode(key: bytes, data: bytes) -> Any:
    try:
        return loads_json(data)
    except ValueError as e:
        raise TransformError(f"state key {_show(key)}: stored value is not the expected JSON: {e}") from None


def _encode(key: Bytes, value: Any) -> bytes:
    try:
        return dumps_json(value)
    except Exception as e:  # noqa: BLE001 - also RecursionError from a value nested too deep
        raise TransformError(f"state key {_show(key)}: cannot serialise value as JSON: {e}") from None


def _show(key: Bytes) -> str:
    text = key if isinstance(key, str) else bytes(key).decode("utf-8", "replace")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
