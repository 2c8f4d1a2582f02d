// Package timers registers timers and reads the task's watermark (the contract's timers
// import; docs/event-time.md).
//
// A transform registers a timer for a key at a time on a clock; once it is due — the task's
// watermark reached it (event time), or the host's wall clock did (processing time) — the host
// calls the transform's OnTimer ([weir.TimerHandler]) with it, between batches. Timers are
// state: registering and cancelling take effect with the call's state writes (not at all when
// the call fails), survive crashes, and a timer fires exactly once, its removal committing with
// what OnTimer emitted and wrote.
//
// Natively (not GOOS=wasip1), timers and the watermark are in memory; package weirtest fires
// them.
package timers

import (
	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/internal/abi"
)

// Bytes is a key: a string (its UTF-8 bytes) or a byte slice.
type Bytes interface {
	~string | ~[]byte
}

// Register registers a timer for key at timeMs on domain; there is one timer per (key, time,
// domain), so registering it again changes nothing. A timer whose time has passed fires after
// this call.
func Register[K Bytes](key K, timeMs int64, domain weir.TimeDomain) {
	abi.TimerRegister([]byte(key), timeMs, domain)
}

// RegisterEventTime registers an event-time timer: it fires once the task's watermark reaches
// timeMs.
func RegisterEventTime[K Bytes](key K, timeMs int64) { Register(key, timeMs, weir.EventTime) }

// RegisterProcessingTime registers a processing-time timer: it fires once the host's wall clock
// reaches timeMs.
func RegisterProcessingTime[K Bytes](key K, timeMs int64) {
	Register(key, timeMs, weir.ProcessingTime)
}

// Cancel removes the timer for (key, timeMs, domain), if there is one.
func Cancel[K Bytes](key K, timeMs int64, domain weir.TimeDomain) {
	abi.TimerCancel([]byte(key), timeMs, domain)
}

// Watermark returns the task's watermark now (milliseconds since the Unix epoch); ok is false
// while it has none. Within Process it is the watermark after the batch's last record; what a
// record saw is its Watermark.
func Watermark() (watermarkMs int64, ok bool) { return abi.Watermark() }
