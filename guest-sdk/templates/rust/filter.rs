//! {{name}}: a filter transform, forwarding the records that pass a test and dropping the rest.
//!
//! Each record's value is a JSON object with a numeric field `amount`; records with an amount of
//! at least `min_amount` (configuration, default 100) are forwarded unchanged (key, value,
//! headers, timestamp). Change `process` to make it yours, then run `weir transform test`.
use weir_guest::{Config, Emitter, Record, Transform, TransformError};

/// The transform. The host creates one per operator instance (one per input partition).
pub struct MinAmount {
    /// Configuration key `min_amount`.
    min_amount: f64,
}

impl Transform for MinAmount {
    /// Called once per instance with the operator's configuration (for the samples:
    /// `[test] config` in weir-transform.toml). An `Err` refuses the configuration.
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&["min_amount"])?;
        Ok(MinAmount { min_amount: config.parse("min_amount", 100.0)? })
    }

    /// Called once per record, in offset order. An `Err` fails the batch (none of its outputs
    /// are written); the pipeline's error policy decides what happens next.
    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let value: serde_json::Value = record.value_json()?;
        let Some(amount) = value.get("amount").and_then(serde_json::Value::as_f64) else {
            return Err(TransformError::new("value has no numeric field `amount`"));
        };
        if amount >= self.min_amount {
            out.forward(record);
        }
        Ok(())
    }
}

weir_guest::export!(MinAmount);
