"""Timers and the task's watermark (the contract's ``timers`` import; docs/event-time.md).

A transform registers a timer for a key at a time on a clock; once it is due — the task's
watermark reached it (event time), or the host's wall clock did (processing time) — the host
calls :meth:`Transform.on_timer <weir_guest.Transform.on_timer>` with it, between batches.
Timers are state: registering and cancelling take effect with the call's state writes (not at
all when the call fails), survive crashes, and a timer fires exactly once, its removal
committing with what ``on_timer`` emitted and wrote::

    from weir_guest import timers

    timers.register_event_time(record.key, record.event_time + 60_000)

Outside WebAssembly, timers and the watermark are in-memory; :class:`weir_guest.testing.Harness`
fires them.
"""

from __future__ import annotations

import enum
import sys
from dataclasses import dataclass
from typing import Optional, Set, Tuple

from ._types import Bytes, to_bytes


class TimeDomain(enum.IntEnum):
    """The clock a timer follows."""

    #: The task's watermark: the timer fires once the watermark reaches its time.
    EVENT_TIME = 0
    #: The host's wall clock: the timer fires once the clock reaches its time.
    PROCESSING_TIME = 1


@dataclass(frozen=True)
class Timer:
    """A timer handed to ``on_timer``: the key it was registered for, its time (milliseconds
    since the Unix epoch) and its clock."""

    key: bytes
    time: int
    domain: TimeDomain


if sys.platform == "wasi":
    from wit_world.imports import timers as _imp
    from wit_world.imports import types as _wit

    _DOMAINS = {TimeDomain.EVENT_TIME: _wit.TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME: _wit.TimeDomain.PROCESSING_TIME}

    def _register(key: bytes, time: int, domain: TimeDomain) -> None:
        _imp.register(key, time, _DOMAINS[domain])

    def _cancel(key: bytes, time: int, domain: TimeDomain) -> None:
        _imp.cancel(key, time, _DOMAINS[domain])

    _watermark = _imp.watermark
else:
    #: Native (test) timers: (clock, time, key), fired by :mod:`weir_guest.testing`.
    _TIMERS: Set[Tuple[int, int, bytes]] = set()
    #: Native (test) watermark, moved by :mod:`weir_guest.testing`.
    _WATERMARK: list = [None]

    def _register(key: bytes, time: int, domain: TimeDomain) -> None:
        _TIMERS.add((int(domain), time, key))

    def _cancel(key: bytes, time: int, domain: TimeDomain) -> None:
        _TIMERS.discard((int(domain), time, key))

    def _watermark() -> Optional[int]:
        return _WATERMARK[0]


def register(key: Bytes, time_ms: int, domain: TimeDomain) -> None:
    """Registers a timer for ``key`` at ``time_ms`` on ``domain``; one timer per (key, time,
    domain), so registering it again changes nothing. A timer whose time has passed fires after
    this call."""
    _register(to_bytes(key), int(time_ms), TimeDomain(domain))


def register_event_time(key: Bytes, time_ms: int) -> None:
    """Registers an event-time timer: it fires once the task's watermark reaches ``time_ms``."""
    register(key, time_ms, TimeDomain.EVENT_TIME)


def register_processing_time(key: Bytes, time_ms: int) -> None:
    """Registers a processing-time timer: it fires once the host's wall clock reaches ``time_ms``."""
    register(key, time_ms, TimeDomain.PROCESSING_TIME)


def cancel(key: Bytes, time_ms: int, domain: TimeDomain) -> None:
    """Removes the timer for (``key``, ``time_ms``, ``domain``), if there is one."""
    _cancel(to_bytes(key), int(time_ms), TimeDomain(domain))


def watermark() -> Optional[int]:
    """The task's watermark now (milliseconds since the Unix epoch; ``None`` while it has none).
    Within ``process`` it is the watermark after the batch's last record; what a record saw is
    its ``watermark`` attribute."""
    return _watermark()
