//! {{name}}: an aggregate transform, keeping running totals per key in state.
//!
//! Each record has a key and a JSON object value with an integer field `amount`. The transform
//! keeps `[count, total]` per key in state (checkpointed exactly once with the outputs,
//! so a restart neither loses nor double-counts a record) and emits the key's new totals for every
//! record. Change `process` to make it yours, then run `weir transform test`.
use serde_json::json;
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError, state};

/// The transform. The host creates one per operator instance (one per input partition).
pub struct Totals;

impl Transform for Totals {
    /// Called once per instance with the operator's configuration (for the samples:
    /// `[test] config` in weir-transform.toml). An `Err` refuses the configuration.
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&[])?; // no configuration keys: any key is an error naming it
        Ok(Totals)
    }

    /// Called once per record, in offset order. An `Err` fails the batch (none of its outputs
    /// or state writes take effect); the pipeline's error policy decides what happens next.
    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let Some(key) = record.key() else {
            return Err(TransformError::new("record has no key to aggregate by"));
        };
        let value: serde_json::Value = record.value_json()?;
        let Some(amount) = value.get("amount").and_then(serde_json::Value::as_i64) else {
            return Err(TransformError::new("value has no integer field `amount`"));
        };
        // State holds [count, total] per key, as JSON.
        let (count, total) = state::get_json::<(i64, i64)>(key)?.unwrap_or((0, 0));
        let (count, total) = (count + 1, total + amount);
        state::put_json(key, &(count, total))?;
        out.emit(Output::json(Some(key), &json!({ "count": count, "total": total }))?);
        Ok(())
    }
}

weir_guest::export!(Totals);
