"""Event-time windows over keyed records, built on :mod:`weir_guest.state` and
:mod:`weir_guest.timers` (docs/event-time.md); the Rust SDK's ``weir_guest::windows`` in Python,
with the same semantics and the same state layout.

A :class:`Windows` object describes how records are grouped in time — :meth:`tumbling
<Windows.tumbling>`, :meth:`hopping <Windows.hopping>` or :meth:`session <Windows.session>`
windows, each a half-open interval ``[start, end)`` of event time in milliseconds — and what
happens to late records. :meth:`Windows.add` folds a record into an accumulator per (key,
window), kept in state; :meth:`Windows.close`, called from ``on_timer``, hands back a window's
final accumulator once the watermark has passed its end plus the allowed lateness. So each
window yields exactly one result, exactly once, even across crashes.

Accumulators: a class whose ``cls()`` is the empty accumulator, with ``merge(self, other)``
(session windows that a record bridges become one), stored as JSON: a dataclass of JSON values
(``dataclasses.asdict``, read back with ``cls(**fields)``), or any class with ``to_json(self)``
and a classmethod ``from_json(cls, value)``.

Late records: a record is late for a window when, before the record, the task's watermark had
already reached the window's end − 1 + allowed lateness (the window is closed, or closes after
this batch). A record late for every window it belongs to is counted (:meth:`Windows.late_count`)
or, with :meth:`Windows.late_to`, forwarded unchanged to a named sink output. Whether a record
is late depends only on the records before it in its partition, so it is the same in every
replay.

Example — records per key per minute::

    from dataclasses import dataclass
    from weir_guest import Output, Transform
    from weir_guest.windows import Windows

    @dataclass
    class Count:
        n: int = 0
        def merge(self, other):
            self.n += other.n

    class PerMinute(Transform):
        def __init__(self, config):
            self.windows = Windows.tumbling("per-minute", 60_000)

        def process(self, record, emit):
            self.windows.add(record.key or b"", record, emit, Count, lambda c: setattr(c, "n", c.n + 1))

        def on_timer(self, timer, emit):
            closed = self.windows.close(timer, Count)
            if closed is not None:
                emit(Output.json(closed.key, [closed.window.start_ms, closed.value.n]))
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from typing import Any, Callable, Generic, List, Optional, Tuple, Type, TypeVar, Union

from . import state, timers
from ._types import Bytes, Emitter, Output, Record, TransformError, loads_json, to_bytes
from .timers import TimeDomain, Timer

#: Most windows of one key read back at once (hopping windows overlap ``size / slide`` times).
MAX_WINDOWS_PER_KEY = 10_000

A = TypeVar("A")


@dataclass(frozen=True)
class Tumbling:
    """Windows of ``size_ms``, one after the other from the Unix epoch on."""

    size_ms: int


@dataclass(frozen=True)
class Hopping:
    """Windows of ``size_ms`` starting every ``slide_ms`` from the Unix epoch on; a record
    belongs to every window that covers it."""

    size_ms: int
    slide_ms: int


@dataclass(frozen=True)
class Session:
    """Per key, records less than ``gap_ms`` apart in event time share a window, which ends
    ``gap_ms`` after its last record."""

    gap_ms: int


WindowKind = Union[Tumbling, Hopping, Session]


@dataclass(frozen=True)
class Window:
    """A window: the half-open interval ``[start_ms, end_ms)`` of event time."""

    #: First millisecond in the window (milliseconds since the Unix epoch).
    start_ms: int
    #: First millisecond after the window.
    end_ms: int


@dataclass
class Closed(Generic[A]):
    """A window closed by :meth:`Windows.close`: its key, bounds and final accumulator."""

    key: bytes
    window: Window
    value: A


class Windows:
    """Windows of one kind, under a name that scopes their state and timers (one transform may
    keep several). Builder methods return the object itself."""

    def __init__(self, name: str, kind: WindowKind):
        self.name = str(name)
        #: How records are grouped: :class:`Tumbling`, :class:`Hopping` or :class:`Session`.
        self.kind: WindowKind = kind
        self._lateness = 0
        self._late_output: Optional[str] = None

    @classmethod
    def tumbling(cls, name: str, size_ms: int) -> "Windows":
        """Tumbling windows of ``size_ms`` (at least 1) named ``name``."""
        return cls(name, Tumbling(max(int(size_ms), 1)))

    @classmethod
    def hopping(cls, name: str, size_ms: int, slide_ms: int) -> "Windows":
        """Hopping windows of ``size_ms`` every ``slide_ms`` (each at least 1) named ``name``."""
        return cls(name, Hopping(max(int(size_ms), 1), max(int(slide_ms), 1)))

    @classmethod
    def session(cls, name: str, gap_ms: int) -> "Windows":
        """Session windows with a gap of ``gap_ms`` (at least 1) named ``name``."""
        return cls(name, Session(max(int(gap_ms), 1)))

    def allowed_lateness_ms(self, ms: int) -> "Windows":
        """Keeps each window open for ``ms`` more of event time after its end, so that records
        up to that late still count; its result comes that much later. By default 0."""
        self._lateness = max(int(ms), 0)
        return self

    def late_to(self, output: str) -> "Windows":
        """Forwards records late for all their windows, unchanged, to the sink output ``output``
        instead of counting them."""
        self._late_output = str(output)
        return self

    def add(self, key: Bytes, record: Record, emit: Emitter, acc_type: Type[A], update: Callable[[A], Any]) -> bool:
        """Folds ``record`` into the windows of ``key`` it belongs to (by its event time) that
        are not closed, with ``update(acc)``, which changes the accumulator (an ``acc_type``) in
        place. Returns ``False`` when the record was late for all of them: then it was counted
        or forwarded to the late output and ``update`` was not called.

        Raises :class:`TransformError` when an accumulator in state does not load into
        ``acc_type`` or cannot be stored."""
        key = to_bytes(key)
        time = record.event_time
        watermark = record.watermark

        def is_open(w: Window) -> bool:
            return watermark is None or self._fire_time(w) > watermark

        added = False
        kind = self.kind
        if isinstance(kind, Tumbling):
            start = time // kind.size_ms * kind.size_ms
            added = self._update_window(key, Window(start, start + kind.size_ms), is_open, acc_type, update)
        elif isinstance(kind, Hopping):
            start = time // kind.slide_ms * kind.slide_ms
            while start > time - kind.size_ms:
                added |= self._update_window(key, Window(start, start + kind.size_ms), is_open, acc_type, update)
                start -= kind.slide_ms
        else:
            merged = Window(time, time + kind.gap_ms)
            acc = acc_type()
            bridged = []
            for window, stored in self._windows_of(key, acc_type):
                if window.start_ms < merged.end_ms and merged.start_ms < window.end_ms:
                    merged = Window(min(merged.start_ms, window.start_ms), max(merged.end_ms, window.end_ms))
                    acc.merge(stored)
                    bridged.append(window)
            if is_open(merged):
                for window in bridged:
                    state.delete(self._window_key(key, window.start_ms))
                    timers.cancel(self._timer_key(key), self._fire_time(window), TimeDomain.EVENT_TIME)
                update(acc)
                self._store(key, merged, acc)
                added = True
        if not added:
            if self._late_output is None:
                state.put_json(self._late_key(), self.late_count() + 1)
            else:
                emit(Output.from_record(record).to_output(self._late_output))
        return added

    def close(self, timer: Timer, acc_type: Type[A]) -> Optional[Closed[A]]:
        """If ``timer`` is one of these windows' timers, the window it closes, removed from
        state with its accumulator; ``None`` for a timer of something else.

        Raises :class:`TransformError` when the accumulator in state does not load into
        ``acc_type``."""
        prefix = self._timer_key(b"")
        if timer.domain != TimeDomain.EVENT_TIME or not timer.key.startswith(prefix):
            return None
        key = timer.key[len(prefix):]
        for window, acc in self._windows_of(key, acc_type):
            if self._fire_time(window) == timer.time:
                state.delete(self._window_key(key, window.start_ms))
                return Closed(key, window, acc)
        return None

    def late_count(self) -> int:
        """How many records were late for all their windows (when they are counted, the
        default)."""
        try:
            return int(state.get_json(self._late_key(), 0))
        except (TransformError, TypeError, ValueError):
            return 0

    def _fire_time(self, window: Window) -> int:
        """When a window's timer fires: its end − 1 + allowed lateness."""
        return window.end_ms - 1 + self._lateness

    def _update_window(self, key: bytes, window: Window, is_open: Callable[[Window], bool],
                       acc_type: Type[A], update: Callable[[A], Any]) -> bool:
        if not is_open(window):
            return False
        stored = state.get_json(self._window_key(key, window.start_ms))
        acc = acc_type() if stored is None else self._load(acc_type, stored["acc"])
        update(acc)
        self._store(key, window, acc)
        return True

    def _store(self, key: bytes, window: Window, acc: Any) -> None:
        value = acc.to_json() if hasattr(acc, "to_json") else dataclasses.asdict(acc)
        state.put_json(self._window_key(key, window.start_ms), {"end": window.end_ms, "acc": value})
        timers.register_event_time(self._timer_key(key), self._fire_time(window))

    def _load(self, acc_type: Type[A], value: Any) -> A:
        try:
            if hasattr(acc_type, "from_json"):
                return acc_type.from_json(value)  # type: ignore[attr-defined]
            return acc_type(**value)
        except (TypeError, ValueError, KeyError) as e:
            raise TransformError(f"windows `{self.name}`: stored accumulator is not the expected JSON: {e}") from None

    def _windows_of(self, key: bytes, acc_type: Type[A]) -> List[Tuple[Window, A]]:
        """The windows of ``key`` in state, by start."""
        prefix = self._window_key(key, 0)[:-8]
        windows = []
        for state_key, data in state.scan_prefix(prefix, MAX_WINDOWS_PER_KEY):
            if len(state_key) != len(prefix) + 8:
                raise TransformError(f"windows `{self.name}`: a state key under their prefix is not a window")
            try:
                stored = loads_json(data)
                end = stored["end"]
            except (ValueError, TypeError, KeyError) as e:
                raise TransformError(f"windows `{self.name}`: stored accumulator is not the expected JSON: {e}") from None
            (start,) = struct.unpack(">Q", state_key[len(prefix):])
            windows.append((Window(start - (1 << 63), end), self._load(acc_type, stored["acc"])))
        return windows

    def _window_key(self, key: bytes, start_ms: int) -> bytes:
        """``weir.w\\0<name>\\0<key length: 4 bytes BE><key><start: i64 with the sign bit
        flipped, BE>``: the windows of one key sort by start, and no key's prefix is another's."""
        return self._scope(b"w") + struct.pack(">I", len(key)) + key + struct.pack(">Q", start_ms + (1 << 63))

    def _timer_key(self, key: bytes) -> bytes:
        """``weir.t\\0<name>\\0<key>``: the timer key of ``key``'s windows."""
        return self._scope(b"t") + key

    def _late_key(self) -> bytes:
        return self._scope(b"l")

    def _scope(self, kind: bytes) -> bytes:
        return b"weir." + kind + b"\0" + self.name.encode("utf-8") + b"\0"
