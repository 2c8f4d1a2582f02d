"""The component's exports: the loop that drives a Transform (shared with weir_guest.testing)."""

from __future__ import annotations

import sys
import traceback
from typing import Any, Iterable, List, Optional, Tuple, Type

from . import state
from ._types import Config, Emitter, Header, Output, Record, Transform, TransformError
from .timers import TimeDomain, Timer


def run_batch(transform: Transform, records: Iterable[Record]) -> List[Output]:
    """Runs ``records`` through ``transform``; raises TransformError (with the record's offset
    filled in) on the first failure. Outputs without a timestamp get their record's."""
    def run() -> List[Output]:
        emit = Emitter()
        for record in records:
            _call(transform.process, record, emit, record.timestamp, record.offset)
        return emit.outputs

    return state.in_call(run)


def run_timers(transform: Transform, timers: Iterable[Timer]) -> List[Output]:
    """Runs due ``timers`` through ``transform.on_timer``; raises TransformError on the first
    failure. Outputs without a timestamp get their timer's time."""
    def run() -> List[Output]:
        emit = Emitter()
        for timer in timers:
            _call(transform.on_timer, timer, emit, timer.time, None)
        return emit.outputs

    return state.in_call(run)


def _call(handler: Any, arg: Any, emit: Emitter, timestamp: int, offset: Optional[int]) -> None:
    """``handler(arg, emit)``; any failure as a TransformError (with ``offset`` when it has
    none); gives the outputs it emitted without a timestamp ``timestamp``."""
    outputs = emit.outputs
    first = len(outputs)
    try:
        handler(arg, emit)
    except TransformError as e:
        if e.offset is None:
            e.offset = offset
        raise
    except BaseException as e:  # noqa: BLE001 - a bug, or sys.exit(): fail the call, naming it
        # Left to componentize-py, the exception would trap with a message that names
        # neither it nor the record; fail the call like a TransformError instead (the host
        # discards the instance either way), with the traceback in the log.
        traceback.print_exception(e, file=sys.stderr)
        raise TransformError(f"uncaught {describe(e)}", offset) from e
    for o in outputs[first:]:
        if o.timestamp is None:
            o.timestamp = timestamp


def describe(e: BaseException) -> str:
    """``Type: message (file:line in function)``, the innermost frame of the traceback."""
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    frames = traceback.extract_tb(e.__traceback__)
    if frames:
        frame = frames[-1]
        text += f" ({frame.filename.rsplit('/', 1)[-1]}:{frame.lineno} in {frame.name})"
    return text


def create(cls: Type[Transform], config: Iterable[Tuple[str, str]]) -> Transform:
    """``cls(Config(config))``; any exception becomes a ``str`` error for ``init``."""
    try:
        return cls(Config(list(config)))
    except Exception as e:  # noqa: BLE001 - every init failure is reported, not trapped
        text = str(e)
        raise _InitError(text if text and isinstance(e, ValueError) else f"{type(e).__name__}: {text}") from None


class _InitError(Exception):
    pass


def export(cls: Type[Transform]) -> type:
    """Exports ``cls`` as the component's ``weir:transform`` world.

    Call it once in the app module and bind the result to ``WitWorld``, the name componentize-py
    looks for::

        WitWorld = weir_guest.export(MyTransform)

    ``process``, ``on_timer``, ``snapshot`` and ``restore`` before a successful ``init`` fail (or
    return an empty snapshot).
    """
    if not (isinstance(cls, type) and issubclass(cls, Transform)):
        raise TypeError("export() takes a subclass of weir_guest.Transform")

    if sys.platform != "wasi":
        # Natively there is no component: return a stand-in that the testing harness can drive.
        return type("WitWorld", (), {"transform_class": cls})

    from componentize_py_types import Err
    from wit_world.imports import types as wit

    holder: List[Optional[Transform]] = [None]

    def to_record(r: Any) -> Record:
        rec = Record.__new__(Record)
        rec.key = r.key
        rec.value = r.value
        # The SDK's own Header, as outside a component: Output() and emit.forward() take those.
        rec.headers = [Header(h.key, h.value) for h in r.headers]
        rec.timestamp = r.timestamp
        rec.topic = r.topic
        rec.partition = r.partition
        rec.offset = r.offset
        rec.event_time = r.event_time
        rec.watermark = r.watermark
        return rec

    def to_timer(t: Any) -> Timer:
        return Timer(t.key, t.time, TimeDomain(t.domain.value))

    def to_raw(o: Output) -> Any:
        return wit.OutputRecord(
            o.key, o.value, [wit.Header(h.key, h.value) for h in o.headers], o.timestamp, o.output
        )

    def run(name: str, call: Any, items: Any) -> List[Any]:
        transform = holder[0]
        if transform is None:
            raise Err(wit.TransformError(f"{name} called before a successful init", None))
        try:
            outputs = call(transform, items)
        except TransformError as e:
            raise Err(wit.TransformError(e.message, e.offset)) from None
        return [to_raw(o) for o in outputs]

    class WitWorld:
        transform_class = cls

        def init(self, config: List[Tuple[str, str]]) -> None:
            holder[0] = None
            try:
                holder[0] = create(cls, config)
            except _InitError as e:
                raise Err(str(e)) from None

        def process(self, batch: List[Any]) -> List[Any]:
            return run("process", run_batch, map(to_record, batch))

        def on_timer(self, timers: List[Any]) -> List[Any]:
            return run("on-timer", run_timers, map(to_timer, timers))

        def snapshot(self) -> bytes:
            transform = holder[0]
            return b"" if transform is None else bytes(transform.snapshot() or b"")

        def restore(self, snapshot: bytes) -> None:
            transform = holder[0]
            if transform is None:
                raise Err("restore called before a successful init")
            try:
                transform.restore(bytes(snapshot))
            except Exception as e:  # noqa: BLE001 - reported as restore's error
                raise Err(str(e) or type(e).__name__) from None

    return WitWorld
