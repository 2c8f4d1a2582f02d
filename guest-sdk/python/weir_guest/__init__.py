"""weir_guest — write Weir transforms in Python.

A Weir *transform* is a WebAssembly component that implements the ``weir:transform@0.2.0``
world (``guest-sdk/wit/transform.wit``). This package hides the component-model plumbing:
subclass :class:`Transform`, bind its export once with :func:`export`, and build the module with
``guest-sdk/python/build.sh`` (componentize-py), which bundles CPython, this package and your
code into one component.

The host creates the transform once per operator instance with the operator's configuration
(``__init__(self, config)``), then hands over batches of records; the SDK calls
:meth:`Transform.process` once per record, in offset order, with a callable ``emit`` that
collects output records. Raising :class:`TransformError` fails the whole batch: none of its
outputs or state writes take effect and the pipeline's error policy decides what happens next.
Any other exception traps the instance (its traceback goes to stderr, which the host logs); the
host then discards the instance and restores a fresh one from the last checkpoint. Everything
that must survive a crash goes through :mod:`weir_guest.state`, or through
:meth:`Transform.snapshot` / :meth:`Transform.restore` for data kept in memory.

Event time (docs/event-time.md): each record carries its ``event_time`` and the ``watermark`` it
saw; :mod:`weir_guest.timers` call :meth:`Transform.on_timer` once the watermark or the wall
clock reaches them, and :mod:`weir_guest.windows` builds tumbling, hopping and session windows on
both.

Example — count records per key::

    from weir_guest import Output, Transform, export, log, state

    class Counter(Transform):
        def __init__(self, config):
            config.allow_only(["min_len"])
            self.min_len = config.get_int("min_len", 0)

        def process(self, record, emit):
            if record.key is None:
                log.debug("skipping record at offset %d without key", record.offset)
                return
            if len(record.value or b"") < self.min_len:
                return
            count = (state.get_json(record.key) or 0) + 1
            state.put_json(record.key, count)
            emit(Output.json(record.key, count).header("counted-by", "weir"))

    WitWorld = export(Counter)   # componentize-py looks for `WitWorld` in the app module

Outside WebAssembly (``sys.platform != "wasi"``) state and timers are in memory and log lines go
to stderr, so transforms can be unit-tested with :class:`weir_guest.testing.Harness` under plain
CPython and pytest.
"""

from __future__ import annotations

from . import log, state, timers, windows
from ._types import (
    Config,
    ConfigError,
    Emitter,
    Header,
    Output,
    Record,
    Transform,
    TransformError,
    dumps_json,
    loads_json,
)
from ._runtime import export

__all__ = [
    "Config",
    "ConfigError",
    "Emitter",
    "Header",
    "Output",
    "Record",
    "Transform",
    "TransformError",
    "dumps_json",
    "export",
    "loads_json",
    "log",
    "state",
    "timers",
    "windows",
]

__version__ = "0.2.0"
#: The WIT contract this SDK implements.
CONTRACT = "weir:transform@0.2.0"
