// Package abi is the boundary between the SDK and the host: the weir:transform@0.2.0 imports
// (state, log, timers) and the hooks behind the world's exports (init, process, snapshot,
// restore, on-timer).
//
// Under GOOS=wasip1 (abi_wasip1.go) it implements the component model's canonical ABI by hand:
// the core module imports "weir:transform/state@0.2.0", "weir:transform/log@0.2.0" and
// "weir:transform/timers@0.2.0" and exports init, process, snapshot, restore, on-timer, their
// cabi_post_* functions and cabi_realloc, which `wasm-tools component new` (or `jco new`) lifts
// into the component. Elsewhere (abi_native.go) state and timers are in memory and log lines go
// to stderr, for `go test`.
//
// Not part of the SDK's API.
package abi

// Header is one Kafka record header. A nil Value is `none` (a Kafka null header value); a
// non-nil empty slice is an empty value.
type Header struct {
	Key   string
	Value []byte
}

// InputRecord mirrors the WIT input-record. A nil Key or Value is `none`; a non-nil empty
// slice is `some` of an empty list.
type InputRecord struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp int64
	Topic     string
	Partition int32
	Offset    int64
	EventTime int64
	Watermark *int64 // nil: `none`
}

// TimeDomain is the WIT time-domain enum.
type TimeDomain uint8

// The clocks of timers, in the WIT enum's order.
const (
	EventTime TimeDomain = iota
	ProcessingTime
)

// Timer mirrors the WIT timer.
type Timer struct {
	Key    []byte
	Time   int64
	Domain TimeDomain
}

// OutputRecord mirrors the WIT output-record; nil pointers and slices are `none`.
type OutputRecord struct {
	Key       []byte
	Value     []byte
	Headers   []Header
	Timestamp *int64
	Output    *string
}

// TransformError mirrors the WIT transform-error.
type TransformError struct {
	Message string
	Offset  *int64
}

// Level is the WIT log level enum (trace = 0 … error = 4).
type Level uint8

// Hooks are the world's exports; weir.Export sets them.
type Hooks struct {
	Init     func(config [][2]string) error
	Process  func(batch []InputRecord) ([]OutputRecord, *TransformError)
	Snapshot func() []byte
	Restore  func(snapshot []byte) error
	OnTimer  func(timers []Timer) ([]OutputRecord, *TransformError)
}

// Exports holds the hooks the exported functions call.
var Exports Hooks

// ScanEntry is one (key, value) pair of a scan-prefix result.
type ScanEntry struct {
	Key   []byte
	Value []byte
}
