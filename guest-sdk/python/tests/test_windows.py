"""Native tests of weir_guest.windows: the Rust SDK's windows tests, ported."""

from dataclasses import dataclass

import pytest

from weir_guest import Output, Record, Transform, TransformError, state
from weir_guest.testing import Harness, reset_state, timers
from weir_guest.timers import TimeDomain
from weir_guest.windows import Hopping, Windows


@dataclass
class Sum:
    n: int = 0

    def merge(self, other):
        self.n += other.n


class Summer(Transform):
    """Sums the values (numbers) per key in the windows the config's ``kind`` names; emits
    ``start,end,sum`` per closed window; late records to output ``late`` when ``late = output``."""

    def __init__(self, config):
        kind = config.get("kind", "tumbling")
        if kind == "hopping":
            self.windows = Windows.hopping("s", 10, 5)
        elif kind == "session":
            self.windows = Windows.session("s", 10)
        else:
            self.windows = Windows.tumbling("s", 10)
        self.windows.allowed_lateness_ms(config.get_int("lateness", 0))
        if config.get("late") == "output":
            self.windows.late_to("late")

    def process(self, record, emit):
        n = int(record.value_str or "0")

        def add(s):
            s.n += n

        self.windows.add(record.key or b"", record, emit, Sum, add)

    def on_timer(self, timer, emit):
        c = self.windows.close(timer, Sum)
        if c is not None:
            emit(Output(c.key, f"{c.window.start_ms},{c.window.end_ms},{c.value.n}"))


def rec(n, t, wm=None):
    """A record of key ``k`` with value ``n`` at event time ``t``, seen at watermark ``wm``."""
    return Record(key="k", value=str(n), event_time=t, watermark=wm)


def values(outputs):
    return [o.value.decode() for o in outputs]


@pytest.fixture(autouse=True)
def clean_state():
    reset_state()


def test_tumbling_windows_close_once_when_the_watermark_passes_their_end():
    h = Harness(Summer)
    h.process([rec(8, -1), rec(1, 0, -2), rec(2, 9, -2), rec(4, 10, 8)])
    assert values(h.advance_watermark(-2)) == []
    assert values(h.advance_watermark(8)) == ["-10,0,8"]
    assert values(h.advance_watermark(9)) == ["0,10,3"]
    assert values(h.advance_watermark(100)) == ["10,20,4"]
    assert values(h.advance_watermark(1000)) == [], "each once"
    # At watermark 9, window [0, 10) is closed: a record for it is late, and counted.
    assert h.process([rec(16, 5, 9)]) == []
    assert h.transform.windows.late_count() == 1
    assert values(h.advance_watermark(2000)) == [], "no window reopens"


def test_allowed_lateness_keeps_a_window_open_and_late_records_can_go_to_an_output():
    h = Harness(Summer, {"lateness": "5", "late": "output"})
    out = h.process([rec(1, 0), rec(2, 3, 11), rec(4, 3, 14)])
    assert len(out) == 1, "the record at watermark 14 is late (window fires at 9 + 5)"
    assert (out[0].output, out[0].value) == ("late", b"4")
    assert values(h.advance_watermark(14)) == ["0,10,3"]
    assert h.transform.windows.late_count() == 0


def test_hopping_windows_count_a_record_in_every_window_that_covers_it():
    h = Harness(Summer, {"kind": "hopping"})
    assert h.transform.windows.kind == Hopping(10, 5)
    h.process([rec(1, 7), rec(2, 12, 6)])
    assert values(h.advance_watermark(100)) == ["0,10,1", "5,15,3", "10,20,2"]


def test_session_windows_merge_records_closer_than_the_gap():
    h = Harness(Summer, {"kind": "session"})
    # 0 and 18 start two sessions; 9 bridges them (within the gap of 10 of each).
    h.process([rec(1, 0), rec(2, 18, -1), rec(4, 9, -1), rec(8, 50, -1)])
    assert [t[1] for t in timers()] == [27, 59], "the bridged sessions' timers are cancelled"
    assert values(h.advance_watermark(100)) == ["0,28,7", "50,60,8"]


def test_state_layout_is_the_rust_sdks():
    h = Harness(Summer)
    h.process([rec(3, 12)])
    # weir.w\0<name>\0<key length BE><key><start ^ 2^63 BE> -> {"end":..,"acc":..}
    key = b"weir.w\0s\0" + b"\0\0\0\x01k" + bytes.fromhex("800000000000000a")
    assert state.get(key) == b'{"end":20,"acc":{"n":3}}'
    assert timers() == [(TimeDomain.EVENT_TIME, 19, b"weir.t\0s\0k")]


def test_a_failed_timer_call_keeps_its_timers_and_state():
    class Failing(Summer):
        def on_timer(self, timer, emit):
            super().on_timer(timer, emit)
            raise TransformError("no")

    h = Harness(Failing)
    h.process([rec(1, 0)])
    with pytest.raises(TransformError):
        h.advance_watermark(100)
    assert len(timers()) == 1 and len(state.scan_prefix(b"weir.w", 10)) == 1
    h.transform.on_timer = Summer.on_timer.__get__(h.transform)
    assert values(h.advance_watermark(100)) == ["0,10,1"]
