"""flights-hourly (Python port): the mean departure delay per origin airport and hour, over the
nycflights13 `flights` table streamed as JSON, in 1-hour tumbling event-time windows.

Behaves exactly like the Rust plugin (plugins/flights-hourly, see its README): event time is
the flight's `time_hour` (the pipeline's watermark strategy reads it), records are keyed by
`origin`, and each (origin, hour) yields one output once the watermark has passed the hour (plus
the allowed lateness), keyed by the origin, timestamped with the hour's last millisecond, with
the same JSON fields in the same order and the same windows state. Configuration:
`allowed_lateness_ms` (default 0) and `late_output` (a sink output for flights too late for
their hour; by default they are counted in state).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from weir_guest import Output, Transform, TransformError, export
from weir_guest.windows import Windows

HOUR_MS = 3_600_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass
class Hour:
    """One (origin, hour)'s sums, kept in state as the Rust plugin keeps them."""

    flights: int = 0
    departed: int = 0
    total_dep_delay: int = 0

    def merge(self, other: "Hour") -> None:
        self.flights += other.flights
        self.departed += other.departed
        self.total_dep_delay += other.total_dep_delay

    def count(self, dep_delay):
        """Counts one flight; ``dep_delay`` is ``None`` when it did not depart."""
        self.flights += 1
        if dep_delay is not None:
            self.departed += 1
            self.total_dep_delay += dep_delay


def rfc3339(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` of a time in milliseconds since the Unix epoch (UTC; whole
    seconds)."""
    return (_EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%SZ")


class FlightsHourly(Transform):
    def __init__(self, config):
        config.allow_only(["allowed_lateness_ms", "late_output"])
        self.hours = Windows.tumbling("hours", HOUR_MS).allowed_lateness_ms(config.get_int("allowed_lateness_ms", 0))
        if "late_output" in config:
            self.hours.late_to(config["late_output"])

    def process(self, record, emit):
        flight = record.value_json()
        offset = record.offset
        origin = flight.get("origin") if isinstance(flight, dict) else None
        if not isinstance(origin, str):
            raise TransformError(f"record at offset {offset}: field `origin` is missing or not a string")
        d = flight.get("dep_delay")
        if d is None:
            dep_delay = None
        elif isinstance(d, (int, float)) and not isinstance(d, bool) and float(d).is_integer():
            dep_delay = int(d)
        else:
            text = json.dumps(d, separators=(",", ":"), ensure_ascii=False)
            raise TransformError(f"record at offset {offset}: `dep_delay` is not a whole number: {text}")
        self.hours.add(origin, record, emit, Hour, lambda hour: hour.count(dep_delay))

    def on_timer(self, timer, emit):
        closed = self.hours.close(timer, Hour)
        if closed is None:
            return
        hour, start = closed.value, closed.window.start_ms
        summary = {
            "origin": closed.key.decode("utf-8", "replace"),
            "hour": rfc3339(start),
            "window_start_ms": start,
            "flights": hour.flights,
            "departed": hour.departed,
            "total_dep_delay": hour.total_dep_delay,
            "mean_dep_delay": hour.total_dep_delay / hour.departed if hour.departed else None,
        }
        emit(Output.json(closed.key, summary).with_timestamp(closed.window.end_ms - 1))


WitWorld = export(FlightsHourly)
