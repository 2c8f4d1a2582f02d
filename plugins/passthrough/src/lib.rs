//! `passthrough`: forwards every record unchanged — key, value and headers; the output keeps the
//! input record's timestamp and goes to the sink's default topic.
//!
//! Configuration: none (any key is an init error). Useful to measure the host's overhead and
//! as the smallest possible transform.

use weir_guest::{Config, Emitter, Record, Transform, TransformError};

/// The transform; it has no state.
pub struct Passthrough;

impl Transform for Passthrough {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&[])?;
        Ok(Passthrough)
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        out.forward(record);
        Ok(())
    }
}

weir_guest::export!(Passthrough);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::testing::Harness;

    #[test]
    fn forwards_unchanged() {
        let mut h = Harness::<Passthrough>::new(&[]).unwrap();
        let r = Record::new(Some("k"), Some("v"))
            .with_header("h", "1")
            .with_null_header("n")
            .with_header("e", "")
            .with_timestamp_ms(5);
        let out = h.process(vec![r, Record::new(None::<&str>, None::<&str>)]).unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].key(), out[0].value()), (Some(&b"k"[..]), Some(&b"v"[..])));
        let headers: Vec<_> = out[0].headers().iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        assert_eq!(headers, vec![("h", Some(&b"1"[..])), ("n", None), ("e", Some(&b""[..]))]);
        assert_eq!((out[0].timestamp(), out[0].output_name()), (Some(5), None));
        assert_eq!((out[1].key(), out[1].value()), (None, None));
        assert!(Harness::<Passthrough>::new(&[("x", "1")]).unwrap_err().contains("`x`"));
    }
}
