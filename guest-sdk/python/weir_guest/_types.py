"""The SDK's value types: records, outputs, configuration, errors, and the Transform base class."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    from .timers import Timer

Bytes = Union[bytes, bytearray, memoryview, str]
"""Keys and values accept ``bytes`` or ``str`` (encoded as UTF-8)."""

_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z|[+-]?(?:inf|infinity|nan)\Z", re.I)


def to_bytes(value: Bytes) -> bytes:
    """``str`` as UTF-8, bytes-like objects as ``bytes``."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"expected bytes or str, got {type(value).__name__}")


def _opt_bytes(value: Optional[Bytes]) -> Optional[bytes]:
    return None if value is None else to_bytes(value)


# One encoder and one decoder for every call: `json.dumps` and `json.loads` with any option
# build a new one per call, which costs more than the parse of a small record.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dumps_json(value: Any) -> bytes:
    """Compact JSON (no spaces, non-ASCII kept, no NaN/Infinity), as the Rust SDK writes it."""
    return _ENCODER.encode(value).encode("utf-8")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def loads_json(data: Bytes) -> Any:
    """Strict JSON: UTF-8 only, no NaN/Infinity."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    if text.startswith("\ufeff"):
        # What `json.loads` says; the decoder itself does not check.
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _DECODER.decode(text)


class TransformError(Exception):
    """A failure a transform reports for a record instead of trapping.

    Raised from :meth:`Transform.process`, it fails the whole batch; the host logs the message
    and, with the ``dead-letter`` policy, writes the offending record to the dead-letter topic
    with the message in its headers. When ``offset`` is ``None``, the SDK fills in the offset of
    the record being processed.
    """

    def __init__(self, message: str, offset: Optional[int] = None):
        super().__init__(message)
        self.message = str(message)
        self.offset = offset

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"TransformError({self.message!r}, offset={self.offset!r})"


class ConfigError(ValueError):
    """A bad configuration; raised by :class:`Config` helpers, reported as ``init``'s error."""


@dataclass(frozen=True)
class Header:
    """One Kafka record header: a UTF-8 name and raw bytes, ``None`` for a Kafka null header
    value (distinct from an empty one)."""

    key: str
    value: Optional[bytes]


def _headers(headers: Iterable[Union[Header, Tuple[str, Optional[Bytes]]]]) -> List[Header]:
    """``Header`` objects from headers or ``(name, value)`` pairs (a ``None`` value is null)."""
    return [h if isinstance(h, Header) else Header(str(h[0]), _opt_bytes(h[1])) for h in headers]


class Record:
    """One input record, as read from a source partition.

    Built by the SDK for :meth:`Transform.process`; tests build them by hand:
    ``Record(key="a", value=b"...", offset=3)``.
    """

    __slots__ = ("key", "value", "headers", "timestamp", "topic", "partition", "offset", "event_time", "watermark")

    def __init__(
        self,
        key: Optional[Bytes] = None,
        value: Optional[Bytes] = None,
        headers: Iterable[Union[Header, Tuple[str, Optional[Bytes]]]] = (),
        timestamp: int = 0,
        topic: str = "",
        partition: int = 0,
        offset: int = 0,
        event_time: Optional[int] = None,
        watermark: Optional[int] = None,
    ):
        #: The record key; ``None`` for a Kafka null key.
        self.key: Optional[bytes] = _opt_bytes(key)
        #: The record value; ``None`` for a Kafka null value (a tombstone).
        self.value: Optional[bytes] = _opt_bytes(value)
        #: The headers, in the order the producer wrote them.
        self.headers: List[Header] = _headers(headers)
        #: Timestamp in milliseconds since the Unix epoch.
        self.timestamp: int = timestamp
        #: The source topic.
        self.topic: str = topic
        #: The source partition.
        self.partition: int = partition
        #: The record's offset in its source partition.
        self.offset: int = offset
        #: Event time in milliseconds since the Unix epoch: what the pipeline's watermark
        #: strategy reads (the timestamp, or a field of the JSON value); the timestamp when it has
        #: none (and when a test leaves it out).
        self.event_time: int = timestamp if event_time is None else event_time
        #: The task's watermark just before this record (milliseconds since the Unix epoch): a
        #: record whose event time is at or below it is late. ``None`` while the task has none.
        self.watermark: Optional[int] = watermark

    @property
    def key_str(self) -> Optional[str]:
        """The key as UTF-8 text; ``None`` for a null key or one that is not valid UTF-8."""
        return _utf8(self.key)

    @property
    def value_str(self) -> Optional[str]:
        """The value as UTF-8 text; ``None`` for a null value or one that is not valid UTF-8."""
        return _utf8(self.value)

    def value_json(self) -> Any:
        """The value parsed as JSON; a :class:`TransformError` carrying this record's offset on a
        null value or one that is not valid JSON."""
        if self.value is None:
            raise TransformError(f"record at offset {self.offset} has a null value, not JSON", self.offset)
        try:
            return loads_json(self.value)
        except ValueError as e:
            raise TransformError(f"value of record at offset {self.offset} is not valid JSON: {e}", self.offset) from None

    def header(self, name: str) -> Optional[bytes]:
        """The value of the first header named ``name``; ``None`` when there is none or its value
        is null (tell those apart through :attr:`headers`)."""
        return next((h.value for h in self.headers if h.key == name), None)

    def __repr__(self) -> str:
        return (f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp}, "
                f"topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"event_time={self.event_time}, watermark={self.watermark!r})")


def _utf8(b: Optional[bytes]) -> Optional[str]:
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


class Output:
    """One output record. By default it gets the timestamp of the input record that produced it
    and goes to the sink's default topic. Builder methods return the output itself::

        emit(Output(key="k", value=b"v").header("h", "1").to_output("audit"))
    """

    __slots__ = ("key", "value", "headers", "timestamp", "output")

    def __init__(
        self,
        key: Optional[Bytes] = None,
        value: Optional[Bytes] = None,
        headers: Iterable[Union[Header, Tuple[str, Optional[Bytes]]]] = (),
        timestamp: Optional[int] = None,
        output: Optional[str] = None,
    ):
        self.key: Optional[bytes] = _opt_bytes(key)
        self.value: Optional[bytes] = _opt_bytes(value)
        self.headers: List[Header] = _headers(headers)
        #: Milliseconds since the Unix epoch; ``None`` takes the producing record's.
        self.timestamp: Optional[int] = timestamp
        #: Named sink output; ``None`` is the default topic.
        self.output: Optional[str] = output

    @classmethod
    def json(cls, key: Optional[Bytes], value: Any) -> "Output":
        """An output with ``key`` and ``value`` serialised as compact JSON (field order kept)."""
        try:
            data = dumps_json(value)
        except (TypeError, ValueError) as e:
            raise TransformError(f"cannot serialise output as JSON: {e}") from None
        return cls(key, data)

    @classmethod
    def from_record(cls, record: "Record") -> "Output":
        """``record`` unchanged: same key, value and headers; its timestamp is filled in like any
        output's (the record's own, once ``process`` returns)."""
        return cls(record.key, record.value, list(record.headers))

    def header(self, key: str, value: Optional[Bytes]) -> "Output":
        """Appends a header (repeated names are allowed and keep their order); a ``None`` value
        is a Kafka null header value, distinct from an empty one."""
        self.headers.append(Header(str(key), _opt_bytes(value)))
        return self

    def with_timestamp(self, timestamp_ms: int) -> "Output":
        """Sets the timestamp instead of keeping the input record's."""
        self.timestamp = int(timestamp_ms)
        return self

    def to_output(self, name: str) -> "Output":
        """Sends the record to the sink output ``name`` (the host fails the batch when the
        pipeline defines no such output)."""
        self.output = str(name)
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Output) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def __repr__(self) -> str:
        return (f"Output(key={self.key!r}, value={self.value!r}, headers={self.headers!r}, "
                f"timestamp={self.timestamp!r}, output={self.output!r})")


class Emitter:
    """Collects the outputs of a batch. Call it to emit: ``emit(Output(...))``."""

    __slots__ = ("outputs",)

    def __init__(self) -> None:
        self.outputs: List[Output] = []

    def __call__(self, output: Output) -> None:
        if not isinstance(output, Output):
            raise TypeError(f"emit() takes an Output, got {type(output).__name__}")
        self.outputs.append(output)

    emit = __call__

    def forward(self, record: Record) -> None:
        """Emits ``record`` unchanged: same key, value, headers and timestamp, default output."""
        self.outputs.append(Output.from_record(record))

    def __len__(self) -> int:
        return len(self.outputs)


class Config(dict):
    """The operator's configuration: a ``dict`` of ``str`` to ``str`` (the last value wins for a
    repeated key), with :attr:`entries` keeping every ``(key, value)`` pair in file order.

    The helpers raise :class:`ConfigError` naming the key (and the bad value); raised from
    ``__init__``, it becomes ``init``'s error and stops the pipeline from starting.
    """

    def __init__(self, entries: Union[Iterable[Tuple[str, str]], dict, None] = None):
        pairs = list(entries.items() if isinstance(entries, dict) else (entries or ()))
        super().__init__(pairs)
        #: All ``(key, value)`` pairs, in file order.
        self.entries: List[Tuple[str, str]] = [(str(k), str(v)) for k, v in pairs]

    def require(self, key: str) -> str:
        """The value of ``key``, or a ConfigError naming the missing key."""
        if key not in self:
            raise ConfigError(f"missing required config key `{key}`")
        return self[key]

    def parse(self, key: str, default: Any, parser: Callable[[str], Any]) -> Any:
        """``parser(value)``, or ``default`` when the key is absent; a ConfigError naming the key
        and value when the parser raises ``ValueError``."""
        if key not in self:
            return default
        value = self[key]
        try:
            return parser(value)
        except ValueError as e:
            raise ConfigError(f"config key `{key}`: invalid value {json.dumps(value)}: {e}") from None

    def get_int(self, key: str, default: Optional[int] = None) -> Optional[int]:
        """The value as a (64-bit) integer: optional sign and ASCII digits, nothing else."""
        def parse(v: str) -> int:
            if not _INT.match(v):
                raise ValueError("invalid digit found in string" if v else "cannot parse integer from empty string")
            n = int(v)
            if not -(2**63) <= n < 2**63:
                raise ValueError("number too large to fit in target type")
            return n
        return self.parse(key, default, parse)

    def get_float(self, key: str, default: Optional[float] = None) -> Optional[float]:
        """The value as a float (decimal or exponent notation)."""
        def parse(v: str) -> float:
            if not _FLOAT.match(v):
                raise ValueError("invalid float literal")
            return float(v)
        return self.parse(key, default, parse)

    def get_bool(self, key: str, default: Optional[bool] = None) -> Optional[bool]:
        """The value as a boolean: exactly ``true`` or ``false``."""
        def parse(v: str) -> bool:
            if v not in ("true", "false"):
                raise ValueError("provided string was not `true` or `false`")
            return v == "true"
        return self.parse(key, default, parse)

    def allow_only(self, allowed: Sequence[str]) -> None:
        """A ConfigError naming the first key not in ``allowed``, so typos in a pipeline file do
        not go unnoticed."""
        for k, _ in self.entries:
            if k not in allowed:
                if not allowed:
                    raise ConfigError(f"unknown config key `{k}` (this transform takes no configuration)")
                raise ConfigError(f"unknown config key `{k}` (allowed: {', '.join(allowed)})")


class Transform:
    """Base class of a Weir transform: the logic of one operator.

    One object exists per operator instance (one per task). It is created with the operator's
    configuration, then sees every record of its task, in offset order. A fresh instance may
    replace it at any time (after a trap, or when the host recycles its memory): keep durable
    data in :mod:`weir_guest.state`, or make :meth:`snapshot` and :meth:`restore` carry it.
    """

    def __init__(self, config: Config):
        """Creates the instance from the operator's configuration. Raise :class:`ConfigError`
        (or any exception) for a bad one: its message becomes ``init``'s error. The default
        accepts any configuration; call ``config.allow_only([...])`` to reject unknown keys."""

    def process(self, record: Record, emit: Emitter) -> None:
        """Handles one input record, emitting zero or more :class:`Output` objects with
        ``emit(output)``. Outputs without a timestamp get ``record``'s. Raise
        :class:`TransformError` to fail the batch."""
        raise NotImplementedError(f"{type(self).__name__} must implement process(record, emit)")

    def snapshot(self) -> bytes:
        """In-memory state that is not kept in :mod:`weir_guest.state`, serialised; called at
        every checkpoint barrier. The default returns ``b""``."""
        return b""

    def restore(self, snapshot: bytes) -> None:
        """Restores what :meth:`snapshot` returned, on a fresh instance after ``__init__``;
        ``snapshot`` is empty when there is none. Raise to refuse it. The default ignores it."""
        return None

    def on_timer(self, timer: "Timer", emit: Emitter) -> None:
        """Handles a due timer (registered through :mod:`weir_guest.timers` or by
        :mod:`weir_guest.windows`), emitting zero or more outputs; outputs without a timestamp
        get the timer's time. The host calls it between batches, for each due timer in order;
        raising fails the call and the pipeline (no record caused it), and the timers stay
        registered. The default ignores timers."""
        return None
