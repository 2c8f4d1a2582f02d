"""Run a transform under plain CPython (pytest), without a host.

State is an in-memory map shared by the process (:func:`reset_state` clears it); a batch that
fails leaves no state behind, as in the host::

    from weir_guest.testing import Harness
    from weir_guest import Record

    h = Harness(FlightDelays, {"threshold_minutes": "1"})
    outputs = h.process([Record(value=b'{"origin":"EWR","carrier":"UA","dep_delay":2}')])
"""

from __future__ import annotations

import sys
from typing import Dict, Iterable, List, Optional, Tuple, Type, Union

from . import state as _state
from ._runtime import create, run_batch
from ._types import Output, Record, Transform

if sys.platform == "wasi":  # pragma: no cover
    raise ImportError("weir_guest.testing is for native tests, not for use inside a component")


class Harness:
    """One transform instance with the SDK's batch loop, like one operator instance."""

    def __init__(self, cls: Type[Transform], config: Union[Dict[str, str], Iterable[Tuple[str, str]], None] = None):
        items = list(config.items()) if isinstance(config, dict) else list(config or [])
        #: The transform object. ``__init__`` errors propagate as ``ValueError`` with the
        #: message the host would get.
        try:
            self.transform = create(cls, items)
        except Exception as e:
            raise ValueError(str(e)) from None

    def process(self, records: Iterable[Record]) -> List[Output]:
        """Runs one batch. On TransformError, state writes of the batch are rolled back."""
        before = dict(_state._MEMORY)
        try:
            return run_batch(self.transform, list(records))
        except BaseException:
            _state._MEMORY.clear()
            _state._MEMORY.update(before)
            raise

    def snapshot(self) -> bytes:
        return bytes(self.transform.snapshot() or b"")

    def restore(self, snapshot: bytes) -> None:
        self.transform.restore(snapshot)


def reset_state() -> None:
    """Forgets all state."""
    _state._MEMORY.clear()


def state_entries() -> List[Tuple[bytes, bytes]]:
    """All state entries, in key order."""
    return sorted(_state._MEMORY.items())


def state_value(key: Union[bytes, str]) -> Optional[bytes]:
    return _state.get(key)
