"""Run a transform under plain CPython (pytest), without a host.

State and timers are in-memory, shared by the process (:func:`reset_state` clears them); a call
that fails leaves no state writes or timer changes behind, as in the host. Event time moves
only when a test says so (:meth:`Harness.advance_watermark`)::

    from weir_guest.testing import Harness
    from weir_guest import Record

    h = Harness(FlightDelays, {"threshold_minutes": "1"})
    outputs = h.process([Record(value=b'{"origin":"EWR","carrier":"UA","dep_delay":2}')])
"""

from __future__ import annotations

import sys
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Type, TypeVar, Union

from . import state as _state
from . import timers as _timers
from ._runtime import create, run_batch, run_timers
from ._types import Output, Record, Transform
from .timers import TimeDomain, Timer

if sys.platform == "wasi":  # pragma: no cover
    raise ImportError("weir_guest.testing is for native tests, not for use inside a component")

T = TypeVar("T")


class Harness:
    """One transform instance with the SDK's batch and timer loops, like one operator instance."""

    def __init__(self, cls: Type[Transform], config: Union[Dict[str, str], Iterable[Tuple[str, str]], None] = None):
        items = list(config.items()) if isinstance(config, dict) else list(config or [])
        #: The transform object. ``__init__`` errors propagate as ``ValueError`` with the
        #: message the host would get.
        try:
            self.transform = create(cls, items)
        except Exception as e:
            raise ValueError(str(e)) from None

    def process(self, records: Iterable[Record]) -> List[Output]:
        """Runs one batch. On TransformError, the batch's state writes and timer changes are
        rolled back."""
        return _rolled_back_on_error(lambda: run_batch(self.transform, list(records)))

    def advance_watermark(self, watermark: int) -> List[Output]:
        """Moves the watermark to ``watermark`` and fires the event-time timers it reaches, in
        order, as the host does between batches; their outputs. On failure, the call's state
        writes are rolled back and the timers stay registered."""
        _timers._WATERMARK[0] = watermark
        return self._fire(TimeDomain.EVENT_TIME, watermark)

    def advance_processing_time(self, now: int) -> List[Output]:
        """Fires the processing-time timers at or before ``now``, in order; their outputs."""
        return self._fire(TimeDomain.PROCESSING_TIME, now)

    def _fire(self, domain: TimeDomain, upto: int) -> List[Output]:
        def fire() -> List[Output]:
            due = sorted(t for t in _timers._TIMERS if t[0] == domain and t[1] <= upto)
            _timers._TIMERS.difference_update(due)
            return run_timers(self.transform, [Timer(key, time, domain) for _, time, key in due])
        return _rolled_back_on_error(fire)

    def snapshot(self) -> bytes:
        return bytes(self.transform.snapshot() or b"")

    def restore(self, snapshot: bytes) -> None:
        self.transform.restore(snapshot)


def _rolled_back_on_error(call: Callable[[], T]) -> T:
    state, timers = dict(_state._MEMORY), set(_timers._TIMERS)
    try:
        return call()
    except BaseException:
        _state._MEMORY.clear()
        _state._MEMORY.update(state)
        _timers._TIMERS.clear()
        _timers._TIMERS.update(timers)
        raise


def reset_state() -> None:
    """Forgets all state, every timer and the watermark."""
    _state._MEMORY.clear()
    _timers._TIMERS.clear()
    _timers._WATERMARK[0] = None


def state_entries() -> List[Tuple[bytes, bytes]]:
    """All state entries, in key order."""
    return sorted(_state._MEMORY.items())


def state_value(key: Union[bytes, str]) -> Optional[bytes]:
    return _state.get(key)


def timers() -> List[Tuple[TimeDomain, int, bytes]]:
    """The registered timers: (domain, time, key), in firing order."""
    return [(TimeDomain(d), time, key) for d, time, key in sorted(_timers._TIMERS)]
