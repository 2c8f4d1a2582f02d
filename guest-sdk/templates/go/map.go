// Command {{name}} is a map transform, one output per input record.
//
// Each record's value is a JSON object with a string field `name`; the output keeps the record's
// key and adds `"greeting": "Hello, <name>!"` to the object. Change Process to make it yours,
// then run `weir transform test` (and `--update` once the new outputs are right).
package main

import (
	weir "example.invalid/weir/guest-sdk/go"
)

// Greeter is the transform. The host creates one per operator instance (one per input
// partition).
type Greeter struct{}

// New is called once per instance with the operator's configuration (for the samples:
// `[test] config` in weir-transform.toml). An error refuses the configuration.
func New(config weir.Config) (weir.Transform, error) {
	// No configuration keys: any key is an error naming it.
	return Greeter{}, config.AllowOnly()
}

// Process is called once per record, in offset order. An error fails the batch (none of its
// outputs are written); the pipeline's error policy decides what happens next.
func (Greeter) Process(r *weir.Record, emit *weir.Emitter) error {
	var value map[string]any
	if err := r.ValueJSON(&value); err != nil {
		return err
	}
	name, ok := value["name"].(string)
	if !ok {
		return weir.Errorf("value has no string field `name`")
	}
	value["greeting"] = "Hello, " + name + "!"
	// A new output has no headers; Output.WithHeader adds some.
	out, err := weir.JSON(r.Key, value)
	if err != nil {
		return err
	}
	emit.Emit(out)
	return nil
}

func init() { weir.Export(New) }

// main is not called: the component's exports are the entry points.
func main() {}
