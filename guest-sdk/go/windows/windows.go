// Package windows groups keyed records into event-time windows, built on package state and
// package timers (docs/event-time.md): the Rust SDK's weir_guest::windows in Go, with the same
// semantics and the same state layout.
//
// A [Windows] value describes how records are grouped in time — [NewTumbling], [NewHopping] or
// [NewSession] windows, each a half-open interval [start, end) of event time in milliseconds —
// and what happens to late records. [Add] folds a record into an accumulator per (key, window),
// kept in state as JSON; [Close], called from OnTimer, hands back a window's final accumulator
// once the watermark has passed its end plus the allowed lateness. So each window yields
// exactly one result, exactly once, even across crashes.
//
// # Late records
//
// A record is late for a window when, before the record, the task's watermark had already
// reached the window's end − 1 + allowed lateness (the window is closed, or closes after this
// batch). A record late for every window it belongs to is counted ([Windows.LateCount]) or,
// with [Windows.LateTo], forwarded unchanged to a named sink output. Whether a record is late
// depends only on the records before it in its partition, so it is the same in every replay.
//
// # Example: records per key per minute
//
//	type count struct{ N int64 }
//
//	func (c *count) Merge(other count) { c.N += other.N }
//
//	type perMinute struct{ w *windows.Windows }
//
//	func (p perMinute) Process(r *weir.Record, emit *weir.Emitter) error {
//		_, err := windows.Add(p.w, r.Key, r, emit, func(c *count) { c.N++ })
//		return err
//	}
//
//	func (p perMinute) OnTimer(t *weir.Timer, emit *weir.Emitter) error {
//		closed, err := windows.Close[count](p.w, t)
//		if err != nil || closed == nil {
//			return err
//		}
//		out, err := weir.JSON(closed.Key, []int64{closed.Window.StartMs, closed.Value.N})
//		emit.Emit(out)
//		return err
//	}
//
// with perMinute{windows.NewTumbling("per-minute", 60_000)} from the factory.
package windows

import (
	"bytes"
	"encoding/binary"
	"encoding/json"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/state"
	"example.invalid/weir/guest-sdk/go/timers"
)

// maxWindowsPerKey is the most windows of one key read back at once (hopping windows overlap
// size / slide times).
const maxWindowsPerKey = 10_000

const signBit = uint64(1) << 63

// Accumulator is a window's accumulator, kept in state as JSON (encoding/json) between the
// records that update it: a pointer to A whose Merge folds other into it (session windows that
// a record bridges become one). A's zero value is the empty accumulator.
type Accumulator[A any] interface {
	*A
	Merge(other A)
}

// Kind is how records are grouped in event time: [Tumbling], [Hopping] or [Session].
type Kind interface{ isKind() }

// Tumbling windows of SizeMs, one after the other from the Unix epoch on.
type Tumbling struct{ SizeMs int64 }

// Hopping windows of SizeMs starting every SlideMs from the Unix epoch on; a record belongs to
// every window that covers it.
type Hopping struct{ SizeMs, SlideMs int64 }

// Session windows: per key, records less than GapMs apart in event time share a window, which
// ends GapMs after its last record.
type Session struct{ GapMs int64 }

func (Tumbling) isKind() {}
func (Hopping) isKind()  {}
func (Session) isKind()  {}

// Window is the half-open interval [StartMs, EndMs) of event time.
type Window struct {
	StartMs int64 // first millisecond in the window (since the Unix epoch)
	EndMs   int64 // first millisecond after the window
}

// Closed is a window closed by [Close]: its key, bounds and final accumulator.
type Closed[A any] struct {
	Key    []byte
	Window Window
	Value  A
}

// Windows are windows of one kind, under a name that scopes their state and timers (one
// transform may keep several).
type Windows struct {
	name       string
	kind       Kind
	lateness   int64
	lateOutput *string
}

// stored is a window as kept in state: {"end":…,"acc":…}, as the Rust SDK writes it.
type stored[A any] struct {
	End int64 `json:"end"`
	Acc A     `json:"acc"`
}

// NewTumbling returns tumbling windows of sizeMs (at least 1) named name.
func NewTumbling(name string, sizeMs int64) *Windows {
	return &Windows{name: name, kind: Tumbling{max(sizeMs, 1)}}
}

// NewHopping returns hopping windows of sizeMs every slideMs (each at least 1) named name.
func NewHopping(name string, sizeMs, slideMs int64) *Windows {
	return &Windows{name: name, kind: Hopping{max(sizeMs, 1), max(slideMs, 1)}}
}

// NewSession returns session windows with a gap of gapMs (at least 1) named name.
func NewSession(name string, gapMs int64) *Windows {
	return &Windows{name: name, kind: Session{max(gapMs, 1)}}
}

// AllowedLatenessMs keeps each window open for ms more of event time after its end, so that
// records up to that late still count; its result comes that much later. By default 0.
func (w *Windows) AllowedLatenessMs(ms int64) *Windows {
	w.lateness = max(ms, 0)
	return w
}

// LateTo forwards records late for all their windows, unchanged, to the sink output named
// output instead of counting them.
func (w *Windows) LateTo(output string) *Windows {
	w.lateOutput = &output
	return w
}

// Kind returns the kind of windows.
func (w *Windows) Kind() Kind { return w.kind }

// Add folds r into the windows of key it belongs to (by its event time) that are not closed,
// with update. It returns false when the record was late for all of them: then it was counted
// or forwarded to the late output and update was not called. It fails when an accumulator in
// state does not decode into A.
func Add[A any, P Accumulator[A]](w *Windows, key []byte, r *weir.Record, emit *weir.Emitter, update func(P)) (bool, error) {
	time, watermark := r.EventTime, r.Watermark
	open := func(win Window) bool { return watermark == nil || w.fireTime(win) > *watermark }
	added := false
	switch kind := w.kind.(type) {
	case Tumbling:
		start := floorDiv(time, kind.SizeMs) * kind.SizeMs
		ok, err := updateWindow(w, key, Window{start, start + kind.SizeMs}, open, update)
		if err != nil {
			return false, err
		}
		added = ok
	case Hopping:
		for start := floorDiv(time, kind.SlideMs) * kind.SlideMs; start > time-kind.SizeMs; start -= kind.SlideMs {
			ok, err := updateWindow(w, key, Window{start, start + kind.SizeMs}, open, update)
			if err != nil {
				return false, err
			}
			added = added || ok
		}
	case Session:
		merged := Window{time, time + kind.GapMs}
		var acc A
		var bridged []Window
		windows, err := windowsOf[A](w, key)
		if err != nil {
			return false, err
		}
		for _, sw := range windows {
			if sw.window.StartMs < merged.EndMs && merged.StartMs < sw.window.EndMs {
				merged = Window{min(merged.StartMs, sw.window.StartMs), max(merged.EndMs, sw.window.EndMs)}
				P(&acc).Merge(sw.acc)
				bridged = append(bridged, sw.window)
			}
		}
		if open(merged) {
			for _, b := range bridged {
				state.Delete(w.windowKey(key, b.StartMs))
				timers.Cancel(w.timerKey(key), w.fireTime(b), weir.EventTime)
			}
			update(&acc)
			if err := store(w, key, merged, acc); err != nil {
				return false, err
			}
			added = true
		}
	}
	if !added {
		if w.lateOutput == nil {
			if err := state.PutJSON(w.lateKey(), w.LateCount()+1); err != nil {
				return false, err
			}
		} else {
			emit.Emit(weir.FromRecord(r).To(*w.lateOutput))
		}
	}
	return added, nil
}

// Close returns the window that t closes, removed from state with its accumulator, if t is one
// of w's timers; nil for a timer of something else. It fails when the accumulator in state
// does not decode into A.
func Close[A any](w *Windows, t *weir.Timer) (*Closed[A], error) {
	prefix := w.timerKey(nil)
	if t.Domain != weir.EventTime || !bytes.HasPrefix(t.Key, prefix) {
		return nil, nil
	}
	key := t.Key[len(prefix):]
	windows, err := windowsOf[A](w, key)
	if err != nil {
		return nil, err
	}
	for _, sw := range windows {
		if w.fireTime(sw.window) == t.Time {
			state.Delete(w.windowKey(key, sw.window.StartMs))
			return &Closed[A]{Key: bytes.Clone(key), Window: sw.window, Value: sw.acc}, nil
		}
	}
	return nil, nil
}

// LateCount returns how many records were late for all their windows (when they are counted,
// the default).
func (w *Windows) LateCount() uint64 {
	var n uint64
	if _, err := state.GetJSON(w.lateKey(), &n); err != nil {
		return 0
	}
	return n
}

// fireTime is when a window's timer fires: its end − 1 + allowed lateness.
func (w *Windows) fireTime(win Window) int64 { return win.EndMs - 1 + w.lateness }

// updateWindow applies update to window win of key if it is open; whether it was.
func updateWindow[A any, P Accumulator[A]](w *Windows, key []byte, win Window, open func(Window) bool, update func(P)) (bool, error) {
	if !open(win) {
		return false, nil
	}
	var s stored[A]
	if _, err := state.GetJSON(w.windowKey(key, win.StartMs), &s); err != nil {
		return false, weir.Errorf("windows `%s`: %v", w.name, err)
	}
	update(&s.Acc)
	return true, store(w, key, win, s.Acc)
}

func store[A any](w *Windows, key []byte, win Window, acc A) error {
	if err := state.PutJSON(w.windowKey(key, win.StartMs), stored[A]{End: win.EndMs, Acc: acc}); err != nil {
		return err
	}
	timers.RegisterEventTime(w.timerKey(key), w.fireTime(win))
	return nil
}

type storedWindow[A any] struct {
	window Window
	acc    A
}

// windowsOf returns the windows of key in state, by start.
func windowsOf[A any](w *Windows, key []byte) ([]storedWindow[A], error) {
	full := w.windowKey(key, 0)
	prefix := full[:len(full)-8]
	entries := state.ScanPrefix(prefix, maxWindowsPerKey)
	windows := make([]storedWindow[A], 0, len(entries))
	for _, e := range entries {
		if len(e.Key) != len(prefix)+8 {
			return nil, weir.Errorf("windows `%s`: a state key under their prefix is not a window", w.name)
		}
		var s stored[A]
		if err := json.Unmarshal(e.Value, &s); err != nil {
			return nil, weir.Errorf("windows `%s`: stored accumulator is not the expected JSON: %v", w.name, err)
		}
		start := int64(binary.BigEndian.Uint64(e.Key[len(prefix):]) ^ signBit)
		windows = append(windows, storedWindow[A]{Window{start, s.End}, s.Acc})
	}
	return windows, nil
}

// windowKey is `weir.w\0<name>\0<key length: 4 bytes BE><key><start: i64 with the sign bit
// flipped, BE>`: the windows of one key sort by start, and no key's prefix is another's.
func (w *Windows) windowKey(key []byte, startMs int64) []byte {
	b := w.scope('w')
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	return binary.BigEndian.AppendUint64(b, uint64(startMs)^signBit)
}

// timerKey is `weir.t\0<name>\0<key>`: the timer key of key's windows.
func (w *Windows) timerKey(key []byte) []byte { return append(w.scope('t'), key...) }

func (w *Windows) lateKey() []byte { return w.scope('l') }

func (w *Windows) scope(kind byte) []byte {
	b := append([]byte("weir."), kind, 0)
	b = append(b, w.name...)
	return append(b, 0)
}

// floorDiv is a / b rounded down (b > 0), as Rust's div_euclid.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}
