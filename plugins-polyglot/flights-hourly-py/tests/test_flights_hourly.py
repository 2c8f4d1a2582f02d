"""Native tests of the Python flights-hourly port (the Rust plugin's tests, ported)."""

import json

import pytest

from flights_hourly import HOUR_MS, FlightsHourly, rfc3339
from weir_guest import Record, TransformError
from weir_guest.testing import Harness, reset_state

T0 = 1_357_034_400_000  # 2013-01-01T10:00:00Z


def flight(origin, delay, hour_ms, watermark=None, offset=0):
    value = json.dumps({"origin": origin, "dep_delay": delay})
    return Record(key=origin, value=value, event_time=hour_ms, watermark=watermark, offset=offset)


@pytest.fixture(autouse=True)
def clean_state():
    reset_state()


def test_one_mean_per_origin_and_hour_once_the_hour_is_over():
    h = Harness(FlightsHourly)
    out = h.process([
        flight("EWR", 2, T0),
        flight("EWR", 4, T0 + 60_000, T0 - 1),
        flight("EWR", None, T0, T0 + 59_999),
        flight("JFK", -3, T0, T0 + 59_999),
        flight("EWR", 10, T0 + HOUR_MS, T0 + 59_999),
    ])
    assert out == []
    out = h.advance_watermark(T0 + HOUR_MS - 1)
    assert [o.value.decode() for o in out] == [
        '{"origin":"EWR","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,'
        '"flights":3,"departed":2,"total_dep_delay":6,"mean_dep_delay":3.0}',
        '{"origin":"JFK","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,'
        '"flights":1,"departed":1,"total_dep_delay":-3,"mean_dep_delay":-3.0}',
    ]
    assert [(o.key, o.timestamp) for o in out] == [(b"EWR", T0 + HOUR_MS - 1), (b"JFK", T0 + HOUR_MS - 1)]
    assert rfc3339(-1000) == "1969-12-31T23:59:59Z"


def test_late_flights_are_counted_or_go_to_the_late_output():
    h = Harness(FlightsHourly, {"allowed_lateness_ms": "1000", "late_output": "late"})
    out = h.process([flight("EWR", 1, T0), flight("EWR", 5, T0, T0 + HOUR_MS - 1 + 999),
                     flight("LGA", 7, T0, T0 + HOUR_MS - 1 + 1000)])
    assert [(o.key, o.output) for o in out] == [(b"LGA", "late")]
    out = h.advance_watermark(T0 + HOUR_MS + 999)
    assert [json.loads(o.value)["flights"] for o in out] == [2]
    h = Harness(FlightsHourly)
    h.process([flight("EWR", 1, T0, T0 + HOUR_MS)])
    assert h.transform.hours.late_count() == 1


def test_bad_records_and_config():
    h = Harness(FlightsHourly)
    with pytest.raises(TransformError) as e:
        h.process([Record(value='{"dep_delay":1}', offset=4)])
    assert (e.value.message, e.value.offset) == ("record at offset 4: field `origin` is missing or not a string", 4)
    with pytest.raises(TransformError) as e:
        h.process([Record(value='{"origin":"EWR","dep_delay":1.5}', offset=5)])
    assert e.value.message == "record at offset 5: `dep_delay` is not a whole number: 1.5"
    with pytest.raises(ValueError, match=r'config key `allowed_lateness_ms`: invalid value "x"'):
        Harness(FlightsHourly, {"allowed_lateness_ms": "x"})
    with pytest.raises(ValueError, match="unknown config key `hours`"):
        Harness(FlightsHourly, {"hours": "1"})
