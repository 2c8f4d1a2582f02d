//go:build !wasip1

package weir_test

import (
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/state"
	"example.invalid/weir/guest-sdk/go/timers"
	"example.invalid/weir/guest-sdk/go/weirtest"
)

// probe emits one output per record; fails on "fail"; "ts" gets its own timestamp; "plain"
// returns a plain error; "panic" indexes past a slice's end.
type probe struct{}

func (probe) Process(r *weir.Record, emit *weir.Emitter) error {
	state.Put(r.Value, "seen")
	switch string(r.Value) {
	case "fail":
		return weir.Errorf("failed")
	case "plain":
		return errors.New("plain error")
	case "panic":
		var empty []int
		_ = empty[len(r.Value)]
	case "ts":
		emit.Emit(weir.NewOutput(nil, []byte("ts")).WithTimestamp(-1))
	default:
		emit.Forward(r)
	}
	return nil
}

func newProbe(weir.Config) (weir.Transform, error) { return probe{}, nil }

func rec(value string, offset int64) weir.Record {
	return weir.Record{Value: []byte(value), Offset: offset, Timestamp: offset * 10}
}

func TestOutputsGetTheirRecordsTimestamp(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(newProbe)
	out, err := h.Process(rec("a", 1), rec("ts", 2), rec("b", 3))
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, o := range out {
		got = append(got, *o.Timestamp)
	}
	if len(got) != 3 || got[0] != 10 || got[1] != -1 || got[2] != 30 {
		t.Fatalf("timestamps %v", got)
	}
}

func TestAPanicFailsTheBatchNamingItAndTheOffset(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(newProbe)
	_, err := h.Process(rec("a", 1), rec("panic", 7))
	if err == nil || err.Offset == nil || *err.Offset != 7 {
		t.Fatalf("error %#v", err)
	}
	if want := "uncaught panic: runtime error: index out of range [5] with length 0"; err.Message != want {
		t.Fatalf("message %q, want %q", err.Message, want)
	}
	if _, err := h.Process(rec("b", 8)); err != nil {
		t.Fatalf("the next batch fails: %v", err)
	}
}

func TestErrorsGetTheOffsetAndRollBackState(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(newProbe)
	if _, err := h.Process(rec("a", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := h.Process(rec("b", 2), rec("fail", 3))
	if err == nil || err.Message != "failed" || *err.Offset != 3 {
		t.Fatalf("error %+v", err)
	}
	_, err = h.Process(rec("plain", 4))
	if err == nil || err.Message != "plain error" || *err.Offset != 4 {
		t.Fatalf("error %+v", err)
	}
	entries := weirtest.StateEntries()
	if len(entries) != 1 || string(entries["a"]) != "seen" {
		t.Fatalf("state %v", entries)
	}
}

func TestConfig(t *testing.T) {
	c := weir.NewConfig([2]string{"n", "1"}, [2]string{"bad", "x"}, [2]string{"n", "2"})
	if v, _ := c.Get("n"); v != "2" {
		t.Fatal(v)
	}
	if n, err := c.Int("n", 0); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	if n, err := c.Int("missing", 7); n != 7 || err != nil {
		t.Fatal(n, err)
	}
	if _, err := c.Int("bad", 0); err == nil || !strings.Contains(err.Error(), "config key `bad`: invalid value \"x\"") {
		t.Fatal(err)
	}
	if _, err := c.Require("missing"); err == nil || !strings.Contains(err.Error(), "`missing`") {
		t.Fatal(err)
	}
	if err := c.AllowOnly("n"); err == nil || !strings.Contains(err.Error(), "`bad` (allowed: n)") {
		t.Fatal(err)
	}
	if err := c.AllowOnly("n", "bad"); err != nil {
		t.Fatal(err)
	}
	if _, err := weir.NewConfig([2]string{"i", " 1"}).Int("i", 0); err == nil {
		t.Fatal("leading space accepted")
	}
}

func TestStateJSON(t *testing.T) {
	weirtest.ResetState()
	type doc struct {
		B int    `json:"b"`
		A string `json:"a"`
	}
	if err := state.PutJSON("k", doc{1, "<&>"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := state.Get("k"); string(v) != `{"b":1,"a":"<&>"}` {
		t.Fatalf("%s", v)
	}
	var d doc
	if found, err := state.GetJSON("k", &d); !found || err != nil || d.A != "<&>" {
		t.Fatal(found, err, d)
	}
	if found, err := state.GetJSON("missing", &d); found || err != nil {
		t.Fatal(found, err)
	}
	state.Put("bad", "{")
	if _, err := state.GetJSON("bad", &d); err == nil || !strings.Contains(err.Error(), `state key "bad": stored value is not the expected JSON`) {
		t.Fatal(err)
	}
	state.Put("p/2", "y")
	state.Put("p/1", "x")
	if e := state.ScanPrefix("p/", 10); len(e) != 2 || string(e[0].Key) != "p/1" {
		t.Fatal(e)
	}
	state.Delete("p/1")
	if _, ok := state.Get("p/1"); ok {
		t.Fatal("not deleted")
	}
}

// checkNothing returns a nil *TransformError, which becomes a non-nil error interface.
func checkNothing() *weir.TransformError { return nil }

type typedNil struct{}

func (typedNil) Process(r *weir.Record, emit *weir.Emitter) error {
	emit.Forward(r)
	return checkNothing()
}

func TestTypedNilTransformErrorIsSuccess(t *testing.T) {
	outputs, err := weir.RunBatch(typedNil{}, []weir.Record{{Value: []byte("a"), Offset: 7}})
	if err != nil {
		t.Fatalf("a nil *TransformError failed the batch: %v", err)
	}
	if len(outputs) != 1 || string(outputs[0].Value) != "a" {
		t.Fatalf("outputs %+v", outputs)
	}
}

func TestNullHeaderValuesStayDistinctFromEmptyOnes(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(newProbe)
	r := rec("x", 1)
	r.Headers = []weir.Header{{Key: "a", Value: nil}, {Key: "b", Value: []byte{}}}
	out, err := h.Process(r)
	if err != nil {
		t.Fatal(err)
	}
	hs := weir.FromRecord(&r).WithHeader("c", nil).Headers
	if out[0].Headers[0].Value != nil || out[0].Headers[1].Value == nil || hs[2].Value != nil || len(hs) != 3 {
		t.Fatalf("headers %#v, %#v", out[0].Headers, hs)
	}
	if v, ok := r.Header("a"); v != nil || !ok {
		t.Fatalf("Header(a) = %v, %v", v, ok)
	}
}

// alarm registers a timer per record (value: its key; key: its time, or "p" for processing
// time at 0) and emits the timer's key when it fires; a timer key "bug" panics.
type alarm struct{}

func (alarm) Process(r *weir.Record, emit *weir.Emitter) error {
	if string(r.Key) == "p" {
		timers.RegisterProcessingTime(r.Value, 0)
		return nil
	}
	at, _ := strconv.ParseInt(string(r.Key), 10, 64)
	timers.RegisterEventTime(r.Value, at)
	if string(r.Value) == "cancel" {
		timers.Cancel(r.Value, at, weir.EventTime)
	}
	return nil
}

func (alarm) OnTimer(t *weir.Timer, emit *weir.Emitter) error {
	if string(t.Key) == "bug" {
		panic("boom")
	}
	emit.Emit(weir.NewOutput(nil, t.Key))
	return nil
}

func timed(key, value string) weir.Record { return weir.Record{Key: []byte(key), Value: []byte(value)} }

func TestTimersFireInOrderOnceWithTheirTimeAsTimestamp(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(func(weir.Config) (weir.Transform, error) { return alarm{}, nil })
	if _, err := h.Process(timed("20", "b"), timed("10", "a"), timed("p", "x"), timed("0", "cancel")); err != nil {
		t.Fatal(err)
	}
	if ts := weirtest.Timers(); len(ts) != 3 || string(ts[0].Key) != "a" || ts[2].Domain != weir.ProcessingTime {
		t.Fatalf("timers %v", ts)
	}
	out, err := h.AdvanceWatermark(15)
	if err != nil || len(out) != 1 || string(out[0].Value) != "a" || *out[0].Timestamp != 10 {
		t.Fatalf("outputs %v, %v", out, err)
	}
	if w, ok := timers.Watermark(); w != 15 || !ok {
		t.Fatalf("watermark %d, %v", w, ok)
	}
	if out, _ := h.AdvanceWatermark(100); len(out) != 1 || string(out[0].Value) != "b" {
		t.Fatalf("outputs %v", out)
	}
	if out, _ := h.AdvanceWatermark(200); len(out) != 0 {
		t.Fatalf("fired twice: %v", out)
	}
	if out, _ := h.AdvanceProcessingTime(0); len(out) != 1 || string(out[0].Value) != "x" {
		t.Fatalf("outputs %v", out)
	}
}

func TestAPanicInOnTimerFailsTheCallWithoutAnOffset(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(func(weir.Config) (weir.Transform, error) { return alarm{}, nil })
	if _, err := h.Process(timed("1", "bug")); err != nil {
		t.Fatal(err)
	}
	_, err := h.AdvanceWatermark(5)
	if err == nil || err.Offset != nil || err.Message != "uncaught panic: boom" {
		t.Fatalf("error %#v", err)
	}
	if len(weirtest.Timers()) != 1 {
		t.Fatal("the timer is not registered any more")
	}
}

func TestATransformWithoutOnTimerIgnoresTimers(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(newProbe)
	timers.RegisterEventTime("k", 1)
	if out, err := h.AdvanceWatermark(5); len(out) != 0 || err != nil {
		t.Fatalf("outputs %v, %v", out, err)
	}
}

func TestJSONFloatIsWrittenAsRustWritesIt(t *testing.T) {
	got, err := weir.MarshalJSON([]weir.JSONFloat{11, -2.5, 1.0 / 3, 0})
	if want := "[11.0,-2.5,0.3333333333333333,0.0]"; err != nil || string(got) != want {
		t.Fatalf("got %s (%v), want %s", got, err, want)
	}
}

// cacheProbe counts per key in state, and reads the host's entries as each record sees them.
type cacheProbe struct{ hostSaw []int }

func (c *cacheProbe) Process(r *weir.Record, emit *weir.Emitter) error {
	n := 0
	if v, ok := state.Get(r.Value); ok {
		n, _ = strconv.Atoi(string(v))
	}
	state.Put(r.Value, strconv.Itoa(n+1))
	if string(r.Value) == "k2" {
		state.Delete("scratch")
	}
	c.hostSaw = append(c.hostSaw, len(weirtest.StateEntries()))
	if string(r.Value) == "scan" {
		for _, e := range state.ScanPrefix("k", 10) {
			emit.Emit(weir.NewOutput(e.Key, e.Value))
		}
	}
	if string(r.Value) == "fail" {
		return weir.Errorf("failed")
	}
	return nil
}

func TestABatchReadsItsOwnWritesAndPassesThemOnWhenItSucceeds(t *testing.T) {
	weirtest.ResetState()
	state.Put("scratch", "x")
	probe := &cacheProbe{}
	h, _ := weirtest.New(func(weir.Config) (weir.Transform, error) { return probe, nil })
	if _, err := h.Process(rec("k1", 1), rec("k1", 2), rec("k2", 3)); err != nil {
		t.Fatal(err)
	}
	if got := probe.hostSaw; len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("the host held %v entries during the batch, want only the one from before", got)
	}
	entries := weirtest.StateEntries()
	if len(entries) != 2 || string(entries["k1"]) != "2" || string(entries["k2"]) != "1" {
		t.Fatalf("state after the batch: %q", entries)
	}

	// A scan sees the batch's writes; a failed batch passes none of its writes on.
	out, err := h.Process(rec("k3", 4), rec("scan", 5))
	if err != nil || len(out) != 3 || string(out[2].Key) != "k3" {
		t.Fatalf("scan outputs %v, error %v", out, err)
	}
	if _, err := h.Process(rec("k1", 6), rec("fail", 7)); err == nil {
		t.Fatal("the batch should fail")
	}
	if got := string(weirtest.StateEntries()["k1"]); got != "2" {
		t.Fatalf("k1 = %q after a failed batch, want 2", got)
	}
	state.Put("after", "a")
	if _, ok := weirtest.StateEntries()["after"]; !ok {
		t.Fatal("outside a batch, a write goes straight to the host")
	}
}

// goexiter writes a key, then ends its goroutine the way t.Fatal does.
type goexiter struct{}

func (goexiter) Process(r *weir.Record, emit *weir.Emitter) error {
	state.Put("written", "1")
	runtime.Goexit()
	return nil
}

func TestABatchWhoseGoroutineExitsPassesNoWriteOn(t *testing.T) {
	weirtest.ResetState()
	h, _ := weirtest.New(func(weir.Config) (weir.Transform, error) { return goexiter{}, nil })
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = h.Process(rec("a", 1))
	}()
	<-done
	if entries := weirtest.StateEntries(); len(entries) != 0 {
		t.Fatalf("state after a batch that never returned: %q", entries)
	}
}

// large writes two values that together pass the SDK's per-call byte bound.
type large struct{ hostSaw int }

func (l *large) Process(r *weir.Record, emit *weir.Emitter) error {
	value := strings.Repeat("v", 600_000)
	state.Put("a", value)
	state.Put("b", value)
	l.hostSaw = len(weirtest.StateEntries())
	if v, ok := state.Get("a"); !ok || string(v) != value {
		return weir.Errorf("a read back wrong")
	}
	state.Put("a", "small")
	return nil
}

func TestABatchOverLargeValuesHandsThemOnEarly(t *testing.T) {
	weirtest.ResetState()
	l := &large{}
	h, _ := weirtest.New(func(weir.Config) (weir.Transform, error) { return l, nil })
	if _, err := h.Process(rec("x", 1)); err != nil {
		t.Fatal(err)
	}
	if l.hostSaw != 2 {
		t.Fatalf("the host held %d entries past the bound, want 2", l.hostSaw)
	}
	if got := string(weirtest.StateEntries()["a"]); got != "small" {
		t.Fatalf("a = %.10q", got)
	}
}
