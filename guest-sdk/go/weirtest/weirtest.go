//go:build !wasip1

// Package weirtest runs a transform natively (go test), without a host: state and timers are
// in memory, shared by the process, and a call that fails leaves no state writes or timer
// changes behind. Event time moves only when a test says so ([Harness.AdvanceWatermark]).
package weirtest

import (
	"errors"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/internal/abi"
)

// Harness is one transform instance with the SDK's batch and timer loops, like one operator
// instance.
type Harness struct {
	Transform weir.Transform
}

// New creates the transform through factory with config pairs (key, value, key, value, ...).
func New(factory weir.Factory, config ...string) (*Harness, error) {
	if len(config)%2 != 0 {
		return nil, errors.New("weirtest.New: config must be key, value pairs")
	}
	var entries [][2]string
	for i := 0; i < len(config); i += 2 {
		entries = append(entries, [2]string{config[i], config[i+1]})
	}
	t, err := factory(weir.NewConfig(entries...))
	if err != nil {
		return nil, err
	}
	return &Harness{Transform: t}, nil
}

// Process runs one batch; on failure the batch's state writes and timer changes are rolled
// back.
func (h *Harness) Process(records ...weir.Record) ([]weir.Output, *weir.TransformError) {
	return rolledBackOnError(func() ([]weir.Output, *weir.TransformError) { return weir.RunBatch(h.Transform, records) })
}

// AdvanceWatermark moves the watermark to watermarkMs and fires the event-time timers it
// reaches, in order, as the host does between batches; their outputs. On failure, the call's
// state writes are rolled back and the timers stay registered.
func (h *Harness) AdvanceWatermark(watermarkMs int64) ([]weir.Output, *weir.TransformError) {
	abi.SetWatermark(watermarkMs, true)
	return h.fire(weir.EventTime, watermarkMs)
}

// AdvanceProcessingTime fires the processing-time timers at or before nowMs, in order; their
// outputs.
func (h *Harness) AdvanceProcessingTime(nowMs int64) ([]weir.Output, *weir.TransformError) {
	return h.fire(weir.ProcessingTime, nowMs)
}

func (h *Harness) fire(domain weir.TimeDomain, upto int64) ([]weir.Output, *weir.TransformError) {
	return rolledBackOnError(func() ([]weir.Output, *weir.TransformError) {
		var due []weir.Timer
		for _, t := range abi.RegisteredTimers() {
			if t.Domain == domain && t.Time <= upto {
				due = append(due, t)
				abi.TimerCancel(t.Key, t.Time, t.Domain)
			}
		}
		return weir.RunTimers(h.Transform, due)
	})
}

func rolledBackOnError(call func() ([]weir.Output, *weir.TransformError)) ([]weir.Output, *weir.TransformError) {
	state, timers := abi.SnapshotState(), abi.RegisteredTimers()
	outputs, err := call()
	if err != nil {
		abi.ResetState(state)
		abi.ResetTimers(timers)
	}
	return outputs, err
}

// ResetState forgets all state, every timer and the watermark.
func ResetState() {
	abi.ResetState(nil)
	abi.ResetTimers(nil)
	abi.SetWatermark(0, false)
}

// StateEntries returns all state entries as a map.
func StateEntries() map[string][]byte { return abi.SnapshotState() }

// Timers returns the registered timers in firing order (domain, time, key).
func Timers() []weir.Timer { return abi.RegisteredTimers() }
