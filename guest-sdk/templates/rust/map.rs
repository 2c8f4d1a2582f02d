//! {{name}}: a map transform, one output per input record.
//!
//! Each record's value is a JSON object with a string field `name`; the output keeps the record's
//! key and adds `"greeting": "Hello, <name>!"` to the object. Change `process` to
//! make it yours, then run `weir transform test` (and `--update` once the new outputs are right).
use serde_json::Value;
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError};

/// The transform. The host creates one per operator instance (one per input partition).
pub struct Greeter;

impl Transform for Greeter {
    /// Called once per instance with the operator's configuration (for the samples:
    /// `[test] config` in weir-transform.toml). An `Err` refuses the configuration.
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&[])?; // no configuration keys: any key is an error naming it
        Ok(Greeter)
    }

    /// Called once per record, in offset order. An `Err` fails the batch (none of its outputs
    /// are written); the pipeline's error policy decides what happens next.
    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let mut value: Value = record.value_json()?;
        let Some(name) = value.get("name").and_then(Value::as_str) else {
            return Err(TransformError::new("value has no string field `name`"));
        };
        value["greeting"] = Value::from(format!("Hello, {name}!"));
        // A new output has no headers; `Output::header` adds some.
        out.emit(Output::json(record.key(), &value)?);
        Ok(())
    }
}

weir_guest::export!(Greeter);
