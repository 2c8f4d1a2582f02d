// Package weir is the SDK for writing Weir transforms in Go.
//
// A Weir transform is a WebAssembly component of the weir:transform@0.2.0 world
// (guest-sdk/wit/transform.wit). This package hides the component-model plumbing: implement
// [Transform], register a [Factory] with [Export] from an init function of package main, and
// build the package with guest-sdk/go/build.sh (standard Go: GOOS=wasip1 GOARCH=wasm
// -buildmode=c-shared, then wrapped into a component with the WASI preview1 reactor adapter).
//
// The host calls the factory once per operator instance with the operator's [Config], then hands
// over batches of records; the SDK calls [Transform.Process] once per record, in offset order,
// and collects what it emits. A non-nil error stops the batch: none of its outputs or state
// writes take effect (the host rolls them back) and the pipeline's error policy decides what
// happens next. A panic traps the instance (the runtime prints it to stderr, which the host
// logs); the host then discards the instance and restores a fresh one from the last checkpoint.
// Anything that must survive a crash goes through package state, or through [Snapshotter] and
// [Restorer] for data kept in memory. Guests get no filesystem, network or environment.
//
// Event time (docs/event-time.md): each record carries its EventTime and the Watermark it saw;
// timers (package timers) call [TimerHandler.OnTimer] once the watermark or the wall clock
// reaches them, and package windows builds tumbling, hopping and session windows on both.
//
// Example: count records per key.
//
//	package main
//
//	import (
//		weir "example.invalid/weir/guest-sdk/go"
//		"example.invalid/weir/guest-sdk/go/state"
//	)
//
//	type counter struct{}
//
//	func (counter) Process(r *weir.Record, emit *weir.Emitter) error {
//		if r.Key == nil {
//			return nil
//		}
//		var n int64
//		if _, err := state.GetJSON(r.Key, &n); err != nil {
//			return err
//		}
//		n++
//		if err := state.PutJSON(r.Key, n); err != nil {
//			return err
//		}
//		out, err := weir.JSON(r.Key, n)
//		if err != nil {
//			return err
//		}
//		emit.Emit(out)
//		return nil
//	}
//
//	func init() {
//		weir.Export(func(c weir.Config) (weir.Transform, error) {
//			return counter{}, c.AllowOnly()
//		})
//	}
//
//	func main() {}
//
// Natively (not GOOS=wasip1), state and timers are in memory and logs go to stderr, so
// transforms can be tested with `go test` through package weirtest.
package weir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"unicode/utf8"

	"example.invalid/weir/guest-sdk/go/internal/abi"
)

// Contract is the WIT package and version this SDK implements.
const Contract = "weir:transform@0.2.0"

// Transform is the logic of one operator. One value exists per operator instance (one per
// task); it sees every record of its task, in offset order.
type Transform interface {
	// Process handles one input record, emitting zero or more outputs through emit. Outputs
	// without a timestamp get r's. A non-nil error fails the whole batch; an error that is
	// not a *TransformError with an offset gets r's offset.
	Process(r *Record, emit *Emitter) error
}

// Snapshotter is implemented by transforms that keep state in memory: Snapshot is called at
// every checkpoint barrier. Without it, snapshots are empty.
type Snapshotter interface {
	Snapshot() []byte
}

// Restorer is implemented by transforms that keep state in memory: Restore gets the last
// committed snapshot (empty when there is none) on a fresh instance, after the factory.
type Restorer interface {
	Restore(snapshot []byte) error
}

// TimerHandler is implemented by transforms that register timers (package timers, or package
// windows): OnTimer handles one due timer, emitting zero or more outputs; outputs without a
// timestamp get the timer's time. The host calls it between batches, for each due timer in
// order; an error fails the call and the pipeline (no record caused it), and the timers stay
// registered. Without it, timers are ignored.
type TimerHandler interface {
	OnTimer(t *Timer, emit *Emitter) error
}

// TimeDomain is the clock a timer follows: [EventTime] or [ProcessingTime].
type TimeDomain = abi.TimeDomain

const (
	// EventTime is the task's watermark: a timer fires once the watermark reaches its time.
	EventTime = abi.EventTime
	// ProcessingTime is the host's wall clock: a timer fires once the clock reaches its time.
	ProcessingTime = abi.ProcessingTime
)

// Timer is a due timer handed to [TimerHandler.OnTimer]: the key it was registered for, its
// time (milliseconds since the Unix epoch) and its clock.
type Timer = abi.Timer

// Factory creates a transform from the operator's configuration. An error stops the pipeline
// from starting; name the offending key in it.
type Factory func(config Config) (Transform, error)

// Header is one Kafka record header: a UTF-8 name and raw bytes; a nil Value is a Kafka null
// header value, a non-nil empty slice an empty one.
type Header = abi.Header

// Record is one input record. A nil Key or Value is a Kafka null; a non-nil empty slice is an
// empty one. Key, Value and header values alias the host's buffers: do not modify them.
type Record struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp int64 // milliseconds since the Unix epoch
	Topic     string
	Partition int32
	Offset    int64
	// EventTime is what the pipeline's watermark strategy reads (the timestamp, or a field of
	// the JSON value), in milliseconds since the Unix epoch; the timestamp when it has none.
	EventTime int64
	// Watermark is the task's watermark just before this record: a record whose event time is
	// at or below it is late. nil while the task has none.
	Watermark *int64
}

// KeyString returns the key as text; ok is false for a null key or invalid UTF-8.
func (r *Record) KeyString() (s string, ok bool) { return utf8Text(r.Key) }

// ValueString returns the value as text; ok is false for a null value or invalid UTF-8.
func (r *Record) ValueString() (s string, ok bool) { return utf8Text(r.Value) }

// ValueJSON decodes the value as JSON into v; the error names the record's offset.
func (r *Record) ValueJSON(v any) error {
	if r.Value == nil {
		return Errorf("record at offset %d has a null value, not JSON", r.Offset).WithOffset(r.Offset)
	}
	if err := json.Unmarshal(r.Value, v); err != nil {
		return Errorf("value of record at offset %d is not valid JSON: %v", r.Offset, err).WithOffset(r.Offset)
	}
	return nil
}

// ValueFields reads the named fields of the value, a JSON object, with [ReadFields]: the fast
// path for a transform that uses a few fields (ValueJSON builds every field with reflection).
// raw[i] is the text of field names[i] as written, nil when absent; read it with [StringField],
// [IntField] or [FloatField] (`null` is the text "null"). The error names the record's offset.
func (r *Record) ValueFields(names []string, raw [][]byte) error {
	if r.Value == nil {
		return Errorf("record at offset %d has a null value, not JSON", r.Offset).WithOffset(r.Offset)
	}
	if err := ReadFields(r.Value, names, raw); err != nil {
		return Errorf("record at offset %d: %v", r.Offset, err).WithOffset(r.Offset)
	}
	return nil
}

// Header returns the value of the first header named name (nil for a null value); ok is false
// when there is none.
func (r *Record) Header(name string) (value []byte, ok bool) {
	for _, h := range r.Headers {
		if h.Key == name {
			return h.Value, true
		}
	}
	return nil, false
}

func utf8Text(b []byte) (string, bool) {
	if b == nil || !utf8.Valid(b) {
		return "", false
	}
	return string(b), true
}

// Output is one output record. By default it gets the timestamp of the input record that
// produced it and goes to the sink's default topic.
type Output struct {
	Key       []byte // nil: a Kafka null key
	Value     []byte // nil: a Kafka null value
	Headers   []Header
	Timestamp *int64  // nil: the producing record's
	Sink      *string // named sink output; nil: the default topic
}

// NewOutput returns an output with key and value (nil for null), no headers.
func NewOutput(key, value []byte) Output { return Output{Key: key, Value: value} }

// FromRecord returns r as an output, unchanged: same key, value and headers; its timestamp is
// filled in like any output's (the record's own, once Process returns).
func FromRecord(r *Record) Output {
	return Output{Key: r.Key, Value: r.Value, Headers: r.Headers}
}

// JSON returns an output with key and v encoded as compact JSON (struct field order kept,
// no HTML escaping).
func JSON(key []byte, v any) (Output, error) {
	data, err := MarshalJSON(v)
	if err != nil {
		return Output{}, Errorf("cannot serialise output as JSON: %v", err)
	}
	return Output{Key: key, Value: data}, nil
}

// WithHeader returns o with a header appended (repeated names allowed, order kept); a nil value
// is a Kafka null header value, distinct from an empty one.
func (o Output) WithHeader(key string, value []byte) Output {
	o.Headers = append(o.Headers[:len(o.Headers):len(o.Headers)], Header{Key: key, Value: value})
	return o
}

// WithTimestamp returns o with its timestamp set (milliseconds since the Unix epoch).
func (o Output) WithTimestamp(ms int64) Output {
	o.Timestamp = &ms
	return o
}

// To returns o addressed to the named sink output; the host fails the batch when the pipeline
// defines no such output.
func (o Output) To(name string) Output {
	o.Sink = &name
	return o
}

// MarshalJSON encodes v as compact JSON without HTML escaping (the bytes serde_json writes
// for the same data, except for the formatting of some floats: Go writes 11.0 as 11).
func MarshalJSON(v any) ([]byte, error) {
	e := jsonEncoders.Get().(*jsonEncoder)
	defer e.release()
	e.buf.Reset()
	if err := e.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(bytes.TrimSuffix(e.buf.Bytes(), []byte{'\n'})), nil
}

// jsonEncoder is an encoder with the buffer it writes into. MarshalJSON keeps them between calls
// (as encoding/json keeps its own encode states): a new encoder, and a buffer grown from empty,
// per call cost about a third of encoding a small struct.
type jsonEncoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var jsonEncoders = sync.Pool{New: func() any {
	e := &jsonEncoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// release returns e to the pool unless one large value grew its buffer past 64 KiB, which the
// pool would otherwise hold on to.
func (e *jsonEncoder) release() {
	if e.buf.Cap() <= 64<<10 {
		jsonEncoders.Put(e)
	}
}

// JSONFloat is a float64 that encoding/json writes as Rust's serde_json does: a whole number
// as 11.0, where encoding/json writes 11 (both write the shortest digits that read back the
// same). For outputs that must equal a Rust transform's byte for byte; not for magnitudes that
// need an exponent (from 1e21), where the two formats differ anyway.
type JSONFloat float64

// MarshalJSON writes the shortest decimal digits, with ".0" for a whole number.
func (f JSONFloat) MarshalJSON() ([]byte, error) {
	b := strconv.AppendFloat(nil, float64(f), 'f', -1, 64)
	if !bytes.ContainsRune(b, '.') {
		b = append(b, ".0"...)
	}
	return b, nil
}

// Emitter collects the outputs of a batch.
type Emitter struct {
	outputs []Output
}

// Emit emits o.
func (e *Emitter) Emit(o Output) { e.outputs = append(e.outputs, o) }

// Forward emits r unchanged: same key, value, headers and timestamp, default output.
func (e *Emitter) Forward(r *Record) { e.Emit(FromRecord(r)) }

// Len is the number of outputs emitted so far in this batch.
func (e *Emitter) Len() int { return len(e.outputs) }

// Outputs returns the outputs emitted so far.
func (e *Emitter) Outputs() []Output { return e.outputs }

// TransformError is a failure a transform reports for a record instead of panicking: the
// host logs Message and, with the dead-letter policy, writes the offending record to the
// dead-letter topic with the message in its headers.
type TransformError struct {
	Message string
	Offset  *int64 // the offending input record's offset, if known
}

// Errorf returns a TransformError with a formatted message and no offset.
func Errorf(format string, args ...any) *TransformError {
	return &TransformError{Message: fmt.Sprintf(format, args...)}
}

// WithOffset sets the offset of the offending input record.
func (e *TransformError) WithOffset(offset int64) *TransformError {
	e.Offset = &offset
	return e
}

func (e *TransformError) Error() string { return e.Message }

// RunBatch runs records through t: the loop behind the exported process function, shared
// with package weirtest. It stops at the first error, returned as a *TransformError with the
// failing record's offset filled in when it carries none. A panic in Process is such an error
// too, "uncaught panic: <value>" (with the stack on stderr, which the host logs): left to the
// runtime it would trap with a bare "unreachable" that names neither it nor the record.
func RunBatch(t Transform, records []Record) ([]Output, *TransformError) {
	// Only a normal return passes the batch's writes on, not a runtime.Goexit.
	succeeded := false
	abi.BeginCall()
	defer func() { abi.EndCall(succeeded) }()
	// Most transforms emit about one output per record: room for that up front, rather than
	// the ten reallocations and copies of appending 1,024 outputs one by one; capped, since a
	// filter of a large batch would keep the room in its memory for good.
	emit := Emitter{outputs: make([]Output, 0, min(len(records), 1024))}
	for i := range records {
		r := &records[i]
		off := r.Offset
		if failure := call(&emit, r.Timestamp, &off, func() error { return t.Process(r, &emit) }); failure != nil {
			return nil, failure
		}
	}
	succeeded = true
	return emit.outputs, nil
}

// RunTimers runs due timers through t's OnTimer (none when t is no [TimerHandler]): the loop
// behind the exported on-timer function, shared with package weirtest. Outputs without a
// timestamp get their timer's time; errors and panics are handled as in [RunBatch], without
// an offset.
func RunTimers(t Transform, due []Timer) ([]Output, *TransformError) {
	handler, ok := t.(TimerHandler)
	if !ok {
		return nil, nil
	}
	succeeded := false
	abi.BeginCall()
	defer func() { abi.EndCall(succeeded) }()
	var emit Emitter
	for i := range due {
		timer := &due[i]
		if failure := call(&emit, timer.Time, nil, func() error { return handler.OnTimer(timer, &emit) }); failure != nil {
			return nil, failure
		}
	}
	succeeded = true
	return emit.outputs, nil
}

// call runs handler, which emits into emit: its failure (or panic) as a *TransformError with
// offset filled in when it has none; on success the outputs it emitted without a timestamp
// get timestamp.
func call(emit *Emitter, timestamp int64, offset *int64, handler func() error) *TransformError {
	first := len(emit.outputs)
	err := recovering(offset, handler)
	if te, ok := err.(*TransformError); ok && te == nil {
		err = nil // a nil *TransformError returned as an error (Go's typed nil) is success
	}
	if err != nil {
		var te *TransformError
		if !errors.As(err, &te) || te == nil {
			te = &TransformError{Message: err.Error()}
		}
		failure := *te
		if failure.Offset == nil {
			failure.Offset = offset
		}
		return &failure
	}
	for j := first; j < len(emit.outputs); j++ {
		if emit.outputs[j].Timestamp == nil {
			ts := timestamp
			emit.outputs[j].Timestamp = &ts
		}
	}
	return nil
}

// recovering calls handler, turning a panic into a *TransformError (at offset, when there is
// one).
func recovering(offset *int64, handler func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			where := "in OnTimer"
			if offset != nil {
				where = fmt.Sprintf("at offset %d", *offset)
			}
			fmt.Fprintf(os.Stderr, "uncaught panic %s: %v\n%s", where, p, debug.Stack())
			err = &TransformError{Message: fmt.Sprintf("uncaught panic: %v", p), Offset: offset}
		}
	}()
	return handler()
}

var instance Transform

// Export registers the factory as the component's transform. Call it exactly once, from an
// init function of package main. process, on-timer, snapshot and restore before a successful
// init fail (or return an empty snapshot).
func Export(factory Factory) {
	if factory == nil {
		panic("weir.Export: nil factory")
	}
	abi.Exports = abi.Hooks{
		Init: func(entries [][2]string) error {
			instance = nil
			t, err := factory(NewConfig(entries...))
			if err != nil {
				return err
			}
			if t == nil {
				return errors.New("the factory returned no transform")
			}
			instance = t
			return nil
		},
		Process: func(batch []abi.InputRecord) ([]abi.OutputRecord, *abi.TransformError) {
			if instance == nil {
				return nil, &abi.TransformError{Message: "process called before a successful init"}
			}
			records := make([]Record, len(batch))
			for i, b := range batch {
				records[i] = Record(b)
			}
			return toRaw(RunBatch(instance, records))
		},
		OnTimer: func(due []abi.Timer) ([]abi.OutputRecord, *abi.TransformError) {
			if instance == nil {
				return nil, &abi.TransformError{Message: "on-timer called before a successful init"}
			}
			return toRaw(RunTimers(instance, due))
		},
		Snapshot: func() []byte {
			if s, ok := instance.(Snapshotter); ok {
				return s.Snapshot()
			}
			return nil
		},
		Restore: func(snapshot []byte) error {
			if instance == nil {
				return errors.New("restore called before a successful init")
			}
			if r, ok := instance.(Restorer); ok {
				return r.Restore(snapshot)
			}
			return nil
		},
	}
}

// toRaw converts the result of RunBatch or RunTimers for the ABI.
func toRaw(outputs []Output, failure *TransformError) ([]abi.OutputRecord, *abi.TransformError) {
	if failure != nil {
		return nil, &abi.TransformError{Message: failure.Message, Offset: failure.Offset}
	}
	raw := make([]abi.OutputRecord, len(outputs))
	for i, o := range outputs {
		raw[i] = abi.OutputRecord{Key: o.Key, Value: o.Value, Headers: o.Headers, Timestamp: o.Timestamp, Output: o.Sink}
	}
	return raw, nil
}
