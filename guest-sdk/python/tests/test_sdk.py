"""Native tests of weir_guest (pytest guest-sdk/python)."""

import sys

import pytest

from weir_guest import Config, ConfigError, Output, Record, Transform, TransformError, export, state, timers
from weir_guest.testing import Harness, reset_state, state_entries
from weir_guest import testing
from weir_guest.timers import TimeDomain


class Probe(Transform):
    """One output per record; fails on "fail"; "ts" gets its own timestamp; "bug" raises;
    "exit" calls sys.exit(3)."""

    def process(self, r, emit):
        state.put(r.value or b"", b"seen")
        if r.value == b"fail":
            raise TransformError("failed")
        if r.value == b"bug":
            raise KeyError("boom")
        if r.value == b"exit":
            sys.exit(3)
        if r.value == b"ts":
            emit(Output(value="ts").with_timestamp(-1))
        else:
            emit.forward(r)


def rec(value, offset):
    return Record(value=value, offset=offset, timestamp=offset * 10)


@pytest.fixture(autouse=True)
def clean_state():
    reset_state()


def test_outputs_get_their_records_timestamp():
    h = Harness(Probe)
    out = h.process([rec("a", 1), rec("ts", 2), rec("b", 3)])
    assert [o.timestamp for o in out] == [10, -1, 30]


def test_errors_get_the_offset_and_roll_back_state():
    h = Harness(Probe)
    h.process([rec("a", 1)])
    with pytest.raises(TransformError) as e:
        h.process([rec("b", 2), rec("fail", 3)])
    assert (e.value.message, e.value.offset) == ("failed", 3)
    assert state_entries() == [(b"a", b"seen")]


def test_other_exceptions_fail_the_batch_naming_type_message_and_offset():
    # Like a TransformError (the host also discards the instance), with the exception named.
    h = Harness(Probe)
    with pytest.raises(TransformError) as e:
        h.process([rec("x", 1), rec("bug", 2)])
    assert e.value.offset == 2 and isinstance(e.value.__cause__, KeyError)
    assert e.value.message.startswith("uncaught KeyError: 'boom' (test_sdk.py:"), e.value.message
    assert state_entries() == []


def test_sys_exit_fails_the_batch_naming_it():
    h = Harness(Probe)
    with pytest.raises(TransformError) as e:
        h.process([rec("exit", 4)])
    assert e.value.offset == 4 and e.value.message.startswith("uncaught SystemExit: 3"), e.value.message


def test_config_helpers():
    c = Config([("n", "1"), ("bad", "x"), ("n", "2")])
    assert c["n"] == "2" and c.get_int("n", 0) == 2 and c.get_int("missing", 7) == 7
    with pytest.raises(ConfigError, match=r'`bad`: invalid value "x"'):
        c.get_int("bad", 0)
    with pytest.raises(ConfigError, match="`missing`"):
        c.require("missing")
    with pytest.raises(ConfigError, match=r"`bad` \(allowed: n\)"):
        c.allow_only(["n"])
    c.allow_only(["n", "bad"])
    assert c.entries == [("n", "1"), ("bad", "x"), ("n", "2")]
    with pytest.raises(ConfigError):
        Config({"i": " 1"}).get_int("i")  # no whitespace, as Rust's i64::from_str
    assert Config({"f": "1.5e3"}).get_float("f") == 1500.0
    assert Config({"b": "true"}).get_bool("b") is True


def test_init_errors_are_reported_as_text():
    class Strict(Transform):
        def __init__(self, config):
            config.allow_only([])

        def process(self, record, emit):
            pass

    with pytest.raises(ValueError, match="unknown config key `x`"):
        Harness(Strict, {"x": "1"})


def test_state_json_helpers():
    state.put_json("k", {"b": 1, "a": [True, None]})
    assert state.get("k") == b'{"b":1,"a":[true,null]}'  # compact, field order kept
    assert state.get_json("k") == {"b": 1, "a": [True, None]}
    assert state.get_json("missing", 0) == 0
    state.put("bad", "{")
    with pytest.raises(TransformError, match='state key "bad": stored value is not the expected JSON'):
        state.get_json("bad")
    state.put("p/2", "y")
    state.put("p/1", "x")
    assert [k for k, _ in state.scan_prefix("p/", 10)] == [b"p/1", b"p/2"]
    state.delete("p/1")
    assert state.get("p/1") is None


def test_json_helpers_read_and_write_as_json_loads_and_dumps_do():
    import json
    from weir_guest import loads_json
    from weir_guest._types import dumps_json
    for text in ['{"a":[1,2.5,null,"\\u00e9"]}', ' 7 ', '"x"']:
        assert loads_json(text.encode()) == json.loads(text)
    for bad in [b"\xef\xbb\xbf{}", b"NaN", b"{} x", b"{"]:
        with pytest.raises(ValueError) as mine:
            loads_json(bad)
        with pytest.raises(ValueError) as theirs:
            json.loads(bad.decode("utf-8"), parse_constant=lambda name: (_ for _ in ()).throw(ValueError(f"{name} is not valid JSON")))
        assert str(mine.value) == str(theirs.value)
    value = {"é": [1.0, None, True], "b": {"c": "\n"}}
    assert dumps_json(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        dumps_json(float("nan"))


def test_output_json_and_export_stand_in():
    o = Output.json("k", {"x": 1.0, "y": "é"}).header("h", "v").to_output("side")
    assert o.value == '{"x":1.0,"y":"é"}'.encode()
    assert o.headers[0].key == "h" and o.output == "side"
    assert export(Probe).transform_class is Probe


def test_records_carry_event_time_watermark_and_null_header_values():
    r = Record(key="k", headers=[("a", None), ("b", b"")], timestamp=5, watermark=3)
    assert (r.event_time, r.watermark) == (5, 3), "event time defaults to the timestamp"
    assert Record(timestamp=5, event_time=7).event_time == 7
    assert [h.value for h in r.headers] == [None, b""]
    assert r.header("a") is None and r.header("b") == b""
    o = Output.from_record(r).header("c", None).header("d", "")
    assert [h.value for h in o.headers] == [None, b"", None, b""]


class Alarm(Transform):
    """Registers a timer per record (value: time; key: clock, "p" for processing time) and
    emits the timer's key when it fires; a timer key "bug" raises."""

    def process(self, r, emit):
        domain = TimeDomain.PROCESSING_TIME if r.key == b"p" else TimeDomain.EVENT_TIME
        timers.register(r.value, int(r.key_str if r.key_str not in (None, "p") else 0), domain)
        if r.value == b"cancel":
            timers.cancel(r.value, 0, domain)

    def on_timer(self, timer, emit):
        if timer.key == b"bug":
            raise KeyError("boom")
        emit(Output(value=timer.key))


def test_timers_fire_in_order_once_with_their_time_as_timestamp():
    h = Harness(Alarm)
    h.process([Record(key="20", value="b"), Record(key="10", value="a"), Record(key="p", value="x"),
               Record(value="cancel")])
    assert [t[2] for t in testing.timers()] == [b"a", b"b", b"x"]
    out = h.advance_watermark(15)
    assert [(o.value, o.timestamp) for o in out] == [(b"a", 10)]
    assert timers.watermark() == 15
    assert [o.value for o in h.advance_watermark(100)] == [b"b"]
    assert h.advance_watermark(200) == []
    assert [o.value for o in h.advance_processing_time(0)] == [b"x"]


def test_an_uncaught_exception_in_on_timer_fails_the_call_without_an_offset():
    h = Harness(Alarm)
    h.process([Record(key="1", value="bug")])
    with pytest.raises(TransformError) as e:
        h.advance_watermark(5)
    assert e.value.offset is None and e.value.message.startswith("uncaught KeyError: 'boom'")
    assert [t[2] for t in testing.timers()] == [b"bug"], "the timer stays registered"


class Counter(Transform):
    """Counts per value in state; records what the host held at each record; "scan" emits a
    prefix scan, "fail" fails."""

    host_saw = []

    def process(self, r, emit):
        state.put(r.value, str(int(state.get(r.value) or b"0") + 1))
        if r.value == b"k2":
            state.delete("scratch")
        self.host_saw.append(len(state_entries()))
        if r.value == b"scan":
            for key, value in state.scan_prefix("k", 10):
                emit(Output(key=key, value=value))
        if r.value == b"fail":
            raise TransformError("failed")


def test_a_batch_reads_its_own_writes_and_passes_them_on_when_it_succeeds():
    state.put("scratch", "x")
    Counter.host_saw = []
    h = Harness(Counter)
    h.process([rec(b"k1", 1), rec(b"k1", 2), rec(b"k2", 3)])
    assert h.transform.host_saw == [1, 1, 1], "the host holds none of the batch's writes before it ends"
    assert state_entries() == [(b"k1", b"2"), (b"k2", b"1")]

    out = h.process([rec(b"k3", 4), rec(b"scan", 5)])
    assert [o.key for o in out] == [b"k1", b"k2", b"k3"], "a scan sees the batch's writes"
    with pytest.raises(TransformError):
        h.process([rec(b"k1", 6), rec(b"fail", 7)])
    assert dict(state_entries())[b"k1"] == b"2", "a failed batch passes none of its writes on"
    state.put("after", "a")
    assert (b"after", b"a") in state_entries(), "outside a batch, a write goes straight to the host"


class Large(Transform):
    """Writes two values that together pass the SDK's per-call byte bound."""

    host_saw = None

    def process(self, r, emit):
        value = b"v" * (state.CALL_BYTES_LIMIT // 2 + 1)
        state.put("a", value)
        state.put("b", value)
        Large.host_saw = len(state_entries())
        assert state.get("a") == value
        state.put("a", "small")


def test_a_batch_over_large_values_hands_them_on_early():
    h = Harness(Large)
    h.process([rec(b"x", 1)])
    assert Large.host_saw == 2, "past the bound the writes so far are with the host"
    assert dict(state_entries())[b"a"] == b"small"


class Tally(Transform):
    """Keeps {"n": count, "last": value} per key with update_json; records what the host held
    and what get() read at each record; "boom" fails in the update, "scan" scans."""

    host_saw = []
    read = []

    def process(self, r, emit):
        key = r.key

        def add(stats):
            stats = stats or {"n": 0}
            stats["n"] += 1
            stats["last"] = r.value.decode()
            if r.value == b"boom":
                raise TransformError("boom")
            return stats

        stats = state.update_json(key, add)
        self.host_saw.append(dict(state_entries()).get(key))
        self.read.append(state.get(key))
        if r.value == b"scan":
            emit(Output(value=b";".join(v for _, v in state.scan_prefix("", 10))))
        emit(Output(key=key, value=str(stats["n"])))


def test_update_json_keeps_a_key_parsed_within_a_call_and_writes_it_once():
    Tally.host_saw, Tally.read = [], []
    state.put_json("a", {"n": 5})
    h = Harness(Tally)
    out = h.process([Record(key="a", value="x"), Record(key="b", value="y"), Record(key="a", value="z")])
    assert [o.value for o in out] == [b"6", b"1", b"7"]
    assert Tally.host_saw == [b'{"n":5}', None, b'{"n":5}'], "the host gets the value when the call ends"
    assert Tally.read == [b'{"n":6,"last":"x"}', b'{"n":1,"last":"y"}', b'{"n":7,"last":"z"}']
    assert state_entries() == [(b"a", b'{"n":7,"last":"z"}'), (b"b", b'{"n":1,"last":"y"}')]

    out = h.process([Record(key="b", value="scan")])
    assert out[0].value == b'{"n":7,"last":"z"};{"n":2,"last":"scan"}', "a scan sees the kept value"

    with pytest.raises(TransformError, match="boom"):
        h.process([Record(key="a", value="q"), Record(key="a", value="boom")])
    assert dict(state_entries())[b"a"] == b'{"n":7,"last":"z"}', "a failed call passes none of its updates on"


def test_update_json_outside_a_call_and_its_errors():
    assert state.update_json("k", lambda v: (v or 0) + 1) == 1
    assert state.update_json("k", lambda v: v + 1) == 2 and state.get("k") == b"2"
    with pytest.raises(TransformError, match='state key "k": the update_json function returned None; return the value'):
        state.update_json("k", lambda v: None)
    assert state.get("k") == b"2", "a forgotten return deletes nothing"
    assert state.update_json("absent", lambda v: None) is None and state.get("absent") is None
    state.put_json("null", None)
    with pytest.raises(TransformError, match='state key "null": the update_json function returned None'):
        state.update_json("null", lambda v: v)

    class Bad(Transform):
        def process(self, r, emit):
            if r.value != b"read":
                state.update_json(r.key, lambda v: {"x": float(r.value)})
            else:
                state.get(r.key)

    h = Harness(Bad)
    state.put("stored", "{")
    with pytest.raises(TransformError, match='state key "stored": stored value is not the expected JSON'):
        h.process([Record(key="stored", value="1")])
    for reader in [[], [Record(key="nan", value="read", offset=4)]]:
        with pytest.raises(TransformError, match='state key "nan": cannot serialise value as JSON') as e:
            h.process([Record(key="nan", value="nan", offset=3)] + reader)
        assert e.value.offset is None, "it fails the call, not a record (nor the record that read it)"
    assert state_entries() == [(b"k", b"2"), (b"null", b"null"), (b"stored", b"{")]

    class Null(Transform):
        def process(self, r, emit):
            if r.value == b"put":
                state.put_json("null", None)
            try:
                state.update_json("null", lambda v: v)
            except TransformError:
                pass
            emit(Output(value=repr(state.get("null") if r.value == b"get" else None)))

    for value in ["get", "put"]:
        with pytest.raises(TransformError, match='state key "null": its update_json did not finish'):
            Harness(Null).process([Record(value=value)])
    assert dict(state_entries())[b"null"] == b"null", "a stored JSON null is a value, kept"

    deep: list = []
    for _ in range(100_000):
        deep = [deep]

    class Deep(Transform):
        def process(self, r, emit):
            state.update_json("deep", lambda v: deep)

    with pytest.raises(TransformError, match='state key "deep": cannot serialise value as JSON: .*recursion') as e:
        Harness(Deep).process([Record(value="x")])
    assert e.value.offset is None


class Lender(Transform):
    """Updates key "a"; within the update, does what the record's value says."""

    def process(self, r, emit):
        def add(v):
            v = v or {"seen": []}
            v["seen"] = set(v["seen"])  # not JSON while the update runs
            what = r.value
            if what == b"scan-other":
                state.scan_prefix("b", 10)
            elif what == b"scan-own":
                state.scan_prefix("", 10)
            elif what == b"get-own":
                state.get("a")
            elif what == b"nested":
                state.update_json("a", lambda w: w)
            elif what == b"put-own":
                state.put("a", "1")
            elif what == b"raise":
                raise KeyError("boom")
            v["seen"] = sorted(v["seen"] | {what.decode()})
            return v

        if r.value == b"raise-caught":
            try:
                state.update_json("a", lambda v: 1 / 0)
            except ZeroDivisionError:
                pass
        else:
            state.update_json("a", add)


def test_update_json_lends_its_key_to_the_update_alone():
    h = Harness(Lender)
    state.put("a", '{"seen":[]}')
    h.process([Record(value="scan-other")])
    assert state_entries() == [(b"a", b'{"seen":["scan-other"]}')], "a flush while the update runs leaves it alone"
    for what in ["scan-own", "get-own", "nested", "put-own"]:
        with pytest.raises(TransformError, match='state key "a": used inside its own update_json'):
            h.process([Record(value=what)])
    with pytest.raises(TransformError, match="uncaught KeyError"):
        h.process([Record(value="raise")])
    with pytest.raises(TransformError, match=r'state key "a": its update_json did not finish \(ZeroDivisionError') as e:
        h.process([Record(value="raise-caught", offset=7)])
    assert e.value.offset is None, "caught or not, an update that did not finish fails the call"
    assert state_entries() == [(b"a", b'{"seen":["scan-other"]}')]


class Growing(Transform):
    """Updates "a" with update_json and, inside the update, writes past the byte bound."""

    def process(self, r, emit):
        def add(v):
            state.put("big", b"v" * (state.CALL_BYTES_LIMIT + 1))
            return (v or 0) + 1

        state.update_json("a", add)
        state.update_json("a", lambda v: v * 10)


def test_update_json_survives_a_flush_for_the_bound_inside_its_update():
    h = Harness(Growing)
    h.process([Record(value="x")])
    assert dict(state_entries())[b"a"] == b"10"
