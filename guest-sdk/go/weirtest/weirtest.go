//go:build !wasip1

// Package weirtest runs a transform natively (go test), without a host: state is an
// in-memory map shared by the process, and a batch that fails leaves no state behind.
package weirtest

import (
	"errors"

	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/internal/abi"
)

// Harness is one transform instance with the SDK's batch loop, like one operator instance.
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

// Process runs one batch; on failure the batch's state writes are rolled back.
func (h *Harness) Process(records ...weir.Record) ([]weir.Output, *weir.TransformError) {
	before := abi.SnapshotState()
	outputs, err := weir.RunBatch(h.Transform, records)
	if err != nil {
		abi.ResetState(before)
	}
	return outputs, err
}

// ResetState forgets all state.
func ResetState() { abi.ResetState(nil) }

// StateEntries returns all state entries as a map.
func StateEntries() map[string][]byte { return abi.SnapshotState() }
