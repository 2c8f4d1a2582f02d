//go:build !wasip1

package windows_test

import (
	"fmt"
	"reflect"
	"strconv"
	"testing"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/state"
	"example.invalid/weir/guest-sdk/go/weirtest"
	"example.invalid/weir/guest-sdk/go/windows"
)

type sum struct {
	N int64 `json:"n"`
}

func (s *sum) Merge(other sum) { s.N += other.N }

// summer sums the values (numbers) per key in its windows; emits "start,end,sum" per closed
// window.
type summer struct{ w *windows.Windows }

func (s summer) Process(r *weir.Record, emit *weir.Emitter) error {
	n, _ := strconv.ParseInt(string(r.Value), 10, 64)
	_, err := windows.Add(s.w, r.Key, r, emit, func(acc *sum) { acc.N += n })
	return err
}

func (s summer) OnTimer(t *weir.Timer, emit *weir.Emitter) error {
	c, err := windows.Close[sum](s.w, t)
	if err != nil || c == nil {
		return err
	}
	emit.Emit(weir.NewOutput(c.Key, fmt.Appendf(nil, "%d,%d,%d", c.Window.StartMs, c.Window.EndMs, c.Value.N)))
	return nil
}

// newSummer: config kind (tumbling, hopping, session), lateness (ms), late ("output": late
// records to output "late").
func newSummer(c weir.Config) (weir.Transform, error) {
	w := windows.NewTumbling("s", 10)
	switch kind, _ := c.Get("kind"); kind {
	case "hopping":
		w = windows.NewHopping("s", 10, 5)
	case "session":
		w = windows.NewSession("s", 10)
	}
	lateness, err := c.Int("lateness", 0)
	w.AllowedLatenessMs(lateness)
	if late, _ := c.Get("late"); late == "output" {
		w.LateTo("late")
	}
	return summer{w}, err
}

// rec is a record of key "k" with value n at event time t, seen at watermark wm (none when
// wm is nil).
func rec(n, t int64, wm ...int64) weir.Record {
	r := weir.Record{Key: []byte("k"), Value: []byte(strconv.FormatInt(n, 10)), EventTime: t}
	if len(wm) > 0 {
		r.Watermark = &wm[0]
	}
	return r
}

// values returns the outputs' values, or the error as "error: <message>".
func values(outputs []weir.Output, err *weir.TransformError) []string {
	if err != nil {
		return []string{"error: " + err.Message}
	}
	got := []string{}
	for _, o := range outputs {
		got = append(got, string(o.Value))
	}
	return got
}

func newHarness(t *testing.T, config ...string) *weirtest.Harness {
	t.Helper()
	weirtest.ResetState()
	h, err := weirtest.New(newSummer, config...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func expect(t *testing.T, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestTumblingWindowsCloseOnceWhenTheWatermarkPassesTheirEnd(t *testing.T) {
	h := newHarness(t)
	expect(t, values(h.Process(rec(8, -1), rec(1, 0, -2), rec(2, 9, -2), rec(4, 10, 8))))
	expect(t, values(h.AdvanceWatermark(-2)))
	expect(t, values(h.AdvanceWatermark(8)), "-10,0,8")
	expect(t, values(h.AdvanceWatermark(9)), "0,10,3")
	expect(t, values(h.AdvanceWatermark(100)), "10,20,4")
	expect(t, values(h.AdvanceWatermark(1000))) // each once
	// At watermark 9, window [0, 10) is closed: a record for it is late, and counted.
	expect(t, values(h.Process(rec(16, 5, 9))))
	if n := h.Transform.(summer).w.LateCount(); n != 1 {
		t.Fatalf("late count %d", n)
	}
	expect(t, values(h.AdvanceWatermark(2000))) // no window reopens
}

func TestAllowedLatenessKeepsAWindowOpenAndLateRecordsCanGoToAnOutput(t *testing.T) {
	h := newHarness(t, "lateness", "5", "late", "output")
	out, err := h.Process(rec(1, 0), rec(2, 3, 11), rec(4, 3, 14))
	if err != nil || len(out) != 1 || *out[0].Sink != "late" || string(out[0].Value) != "4" {
		t.Fatalf("the record at watermark 14 is late (window fires at 9 + 5): %v %v", out, err)
	}
	expect(t, values(h.AdvanceWatermark(14)), "0,10,3")
	if n := h.Transform.(summer).w.LateCount(); n != 0 {
		t.Fatalf("late count %d", n)
	}
}

func TestHoppingWindowsCountARecordInEveryWindowThatCoversIt(t *testing.T) {
	h := newHarness(t, "kind", "hopping")
	if k := h.Transform.(summer).w.Kind(); k != (windows.Hopping{SizeMs: 10, SlideMs: 5}) {
		t.Fatalf("kind %#v", k)
	}
	expect(t, values(h.Process(rec(1, 7), rec(2, 12, 6))))
	expect(t, values(h.AdvanceWatermark(100)), "0,10,1", "5,15,3", "10,20,2")
}

func TestSessionWindowsMergeRecordsCloserThanTheGap(t *testing.T) {
	h := newHarness(t, "kind", "session")
	// 0 and 18 start two sessions; 9 bridges them (within the gap of 10 of each).
	expect(t, values(h.Process(rec(1, 0), rec(2, 18, -1), rec(4, 9, -1), rec(8, 50, -1))))
	var times []int64
	for _, tm := range weirtest.Timers() {
		times = append(times, tm.Time)
	}
	if !reflect.DeepEqual(times, []int64{27, 59}) {
		t.Fatalf("the bridged sessions' timers are not cancelled: %v", times)
	}
	expect(t, values(h.AdvanceWatermark(100)), "0,28,7", "50,60,8")
}

func TestTheStateLayoutIsTheRustSDKs(t *testing.T) {
	h := newHarness(t)
	expect(t, values(h.Process(rec(3, 12))))
	key := "weir.w\x00s\x00\x00\x00\x00\x01k\x80\x00\x00\x00\x00\x00\x00\x0a"
	if v, _ := state.Get(key); string(v) != `{"end":20,"acc":{"n":3}}` {
		t.Fatalf("state %q", v)
	}
	want := []weir.Timer{{Key: []byte("weir.t\x00s\x00k"), Time: 19, Domain: weir.EventTime}}
	if got := weirtest.Timers(); !reflect.DeepEqual(got, want) {
		t.Fatalf("timers %v", got)
	}
}

type failing struct{ summer }

func (f failing) OnTimer(t *weir.Timer, emit *weir.Emitter) error {
	_ = f.summer.OnTimer(t, emit)
	return weir.Errorf("no")
}

func TestAFailedTimerCallKeepsItsTimersAndState(t *testing.T) {
	h := newHarness(t)
	h.Transform = failing{h.Transform.(summer)}
	expect(t, values(h.Process(rec(1, 0))))
	if _, err := h.AdvanceWatermark(100); err == nil || err.Offset != nil {
		t.Fatalf("error %v", err)
	}
	if len(weirtest.Timers()) != 1 || len(state.ScanPrefix("weir.w", 10)) != 1 {
		t.Fatal("the failed call's changes are not rolled back")
	}
	h.Transform = h.Transform.(failing).summer
	expect(t, values(h.AdvanceWatermark(100)), "0,10,1")
}
