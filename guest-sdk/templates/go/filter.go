// Command {{name}} is a filter transform, forwarding the records that pass a test and dropping
// the rest.
//
// Each record's value is a JSON object with a numeric field `amount`; records with an amount of
// at least `min_amount` (configuration, default 100) are forwarded unchanged (key, value,
// headers, timestamp). Change Process to make it yours, then run `weir transform test`.
package main

import (
	weir "example.invalid/weir/guest-sdk/go"
)

// MinAmount is the transform. The host creates one per operator instance (one per input
// partition).
type MinAmount struct {
	// Configuration key `min_amount`.
	min float64
}

// New is called once per instance with the operator's configuration (for the samples:
// `[test] config` in weir-transform.toml). An error refuses the configuration.
func New(config weir.Config) (weir.Transform, error) {
	if err := config.AllowOnly("min_amount"); err != nil {
		return nil, err
	}
	min, err := config.Float("min_amount", 100)
	return MinAmount{min: min}, err
}

// amountField names the fields of a value that Process reads.
var amountField = []string{"amount"}

// Process is called once per record, in offset order. An error fails the batch (none of its
// outputs are written); the pipeline's error policy decides what happens next.
func (t MinAmount) Process(r *weir.Record, emit *weir.Emitter) error {
	// Read only the fields used, in one pass that still checks the whole value is JSON
	// (r.ValueJSON into a struct also works, at several times the cost per record).
	var fields [1][]byte
	if err := r.ValueFields(amountField, fields[:]); err != nil {
		return err
	}
	amount, err := weir.FloatField("amount", fields[0])
	if err != nil {
		return err
	}
	if amount >= t.min {
		emit.Forward(r)
	}
	return nil
}

func init() { weir.Export(New) }

// main is not called: the component's exports are the entry points.
func main() {}
