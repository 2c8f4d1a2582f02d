"""Logging into the host's structured log, tagged with the operator's name.

The host rate-limits each operator instance; lines over the limit are dropped and counted.
Messages take ``%``-style arguments like the standard :mod:`logging` module::

    from weir_guest import log
    log.info("threshold is %d minutes", 15)

:class:`HostHandler` forwards standard :mod:`logging` records too
(``logging.getLogger().addHandler(log.HostHandler())``). ``print`` also works: the host logs
the guest's stdout and stderr line by line. Outside WebAssembly, lines go to stderr.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

TRACE, DEBUG, INFO, WARN, ERROR = range(5)
_NAMES = ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"]

if sys.platform == "wasi":
    from wit_world.imports import log as _imp

    _LEVELS = [_imp.Level.TRACE, _imp.Level.DEBUG, _imp.Level.INFO, _imp.Level.WARN, _imp.Level.ERROR]

    def _write(level: int, message: str) -> None:
        _imp.log(_LEVELS[level], message)
else:
    def _write(level: int, message: str) -> None:
        print(f"[{_NAMES[level]}] {message}", file=sys.stderr)


def log(level: int, message: str, *args: Any) -> None:
    """Writes one line at ``level`` (:data:`TRACE` … :data:`ERROR`)."""
    if not 0 <= level <= 4:
        raise ValueError(f"log level must be TRACE..ERROR (0..4), got {level}")
    _write(level, (message % args) if args else str(message))


def trace(message: str, *args: Any) -> None:
    """Writes one line at trace level."""
    log(TRACE, message, *args)


def debug(message: str, *args: Any) -> None:
    """Writes one line at debug level."""
    log(DEBUG, message, *args)


def info(message: str, *args: Any) -> None:
    """Writes one line at info level."""
    log(INFO, message, *args)


def warn(message: str, *args: Any) -> None:
    """Writes one line at warn level."""
    log(WARN, message, *args)


warning = warn


def error(message: str, *args: Any) -> None:
    """Writes one line at error level."""
    log(ERROR, message, *args)


class HostHandler(logging.Handler):
    """A :mod:`logging` handler that writes records to the host's log."""

    def emit(self, record: logging.LogRecord) -> None:
        no = record.levelno
        level = ERROR if no >= logging.ERROR else WARN if no >= logging.WARNING else \
            INFO if no >= logging.INFO else DEBUG if no >= logging.DEBUG else TRACE
        try:
            _write(level, self.format(record))
        except Exception:  # noqa: BLE001 - a log line must never fail the transform
            self.handleError(record)
