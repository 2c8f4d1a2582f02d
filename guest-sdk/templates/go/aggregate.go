// Command {{name}} is an aggregate transform, keeping running totals per key in state.
//
// Each record has a key and a JSON object value with an integer field `amount`. The transform
// keeps `[count, total]` per key in state (checkpointed exactly once with the outputs, so a
// restart neither loses nor double-counts a record) and emits the key's new totals for every
// record. Change Process to make it yours, then run `weir transform test`.
package main

import (
	weir "example.invalid/weir/guest-sdk/go"
	"example.invalid/weir/guest-sdk/go/state"
)

// Totals is the transform. The host creates one per operator instance (one per input
// partition).
type Totals struct{}

// New is called once per instance with the operator's configuration (for the samples:
// `[test] config` in weir-transform.toml). An error refuses the configuration.
func New(config weir.Config) (weir.Transform, error) {
	// No configuration keys: any key is an error naming it.
	return Totals{}, config.AllowOnly()
}

// amountField names the fields of a value that Process reads.
var amountField = []string{"amount"}

// Process is called once per record, in offset order. An error fails the batch (none of its
// outputs or state writes take effect); the pipeline's error policy decides what happens next.
func (Totals) Process(r *weir.Record, emit *weir.Emitter) error {
	if r.Key == nil {
		return weir.Errorf("record has no key to aggregate by")
	}
	// Read only the fields used, in one pass that still checks the whole value is JSON
	// (r.ValueJSON into a struct also works, at several times the cost per record).
	var fields [1][]byte
	if err := r.ValueFields(amountField, fields[:]); err != nil {
		return err
	}
	amount, err := weir.IntField("amount", fields[0])
	if err != nil {
		return err
	}
	var totals [2]int64 // count, total
	if _, err := state.GetJSON(r.Key, &totals); err != nil {
		return err
	}
	totals[0]++
	totals[1] += amount
	if err := state.PutJSON(r.Key, totals); err != nil {
		return err
	}
	out, err := weir.JSON(r.Key, map[string]int64{"count": totals[0], "total": totals[1]})
	if err != nil {
		return err
	}
	emit.Emit(out)
	return nil
}

func init() { weir.Export(New) }

// main is not called: the component's exports are the entry points.
func main() {}
