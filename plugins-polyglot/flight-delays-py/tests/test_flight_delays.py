"""Native tests of the Python flight-delays port (the Rust plugin's tests, ported)."""

import json

import pytest

from flight_delays import FlightDelays
from weir_guest import Record, TransformError
from weir_guest.testing import Harness, reset_state, state_value


def flight(origin, carrier, dep_delay):
    return (f'{{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_time":515,"dep_delay":{dep_delay},'
            f'"carrier":"{carrier}","flight":1545,"origin":"{origin}","dest":"IAH","distance":1400}}')


def run(h, values):
    out = h.process([Record(value=v, offset=i) for i, v in enumerate(values)])
    return [o.value.decode() for o in out]


@pytest.fixture(autouse=True)
def clean_state():
    reset_state()


def test_running_statistics_per_origin_and_carrier():
    h = Harness(FlightDelays)
    out = run(h, [
        flight("EWR", "UA", "null"),
        flight("EWR", "UA", "2"),
        flight("JFK", "AA", "-4"),
        flight("EWR", "UA", "16.0"),
        flight("EWR", "UA", "15"),
    ])
    # Byte for byte what the Rust plugin writes.
    assert out[0] == '{"origin":"EWR","carrier":"UA","flights":1,"departed":0,"delayed":0,"total_dep_delay":0,"max_dep_delay":null,"mean_dep_delay":null}'
    assert out[2] == '{"origin":"JFK","carrier":"AA","flights":1,"departed":1,"delayed":0,"total_dep_delay":-4,"max_dep_delay":-4,"mean_dep_delay":-4.0}'
    assert out[4] == '{"origin":"EWR","carrier":"UA","flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16,"mean_dep_delay":11.0}'
    stats = json.loads(state_value("EWR|UA"))
    assert (stats["flights"], stats["delayed"]) == (4, 1)
    assert state_value("EWR|UA") == b'{"flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16}'


def test_threshold_and_config_errors():
    h = Harness(FlightDelays, {"threshold_minutes": "1"})
    assert '"delayed":1' in run(h, [flight("LGA", "DL", "2")])[0]
    with pytest.raises(ValueError, match="`threshold`"):
        Harness(FlightDelays, {"threshold": "1"})
    with pytest.raises(ValueError) as e:
        Harness(FlightDelays, {"threshold_minutes": "x"})
    assert "`threshold_minutes`" in str(e.value) and '"x"' in str(e.value)


@pytest.mark.parametrize("bad, problem", [
    ("[1]", "not a JSON object"),
    ('{"origin":"EWR"}', "`carrier` is missing"),
    ('{"origin":1,"carrier":"UA"}', "`origin` is not a string"),
    (flight("EWR", "UA", "2.5"), "not a whole number"),
    (flight("EWR", "UA", "true"), "not a number or null"),
    ("nope", "not JSON"),
])
def test_bad_records_fail_with_their_offset(bad, problem):
    h = Harness(FlightDelays)
    with pytest.raises(TransformError) as e:
        run(h, [flight("EWR", "UA", "1"), bad])
    assert e.value.offset == 1
    assert "offset 1" in e.value.message and problem in e.value.message, e.value.message
    # A failed batch leaves no state behind.
    assert state_value("EWR|UA") is None
