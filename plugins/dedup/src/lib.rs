//! `dedup`: drops records whose key was seen recently, by record count and/or event time.
//!
//! See `README.md` next to this crate for the exact semantics and configuration.

use serde::{Deserialize, Serialize};
use weir_guest::{Config, Emitter, Record, Transform, TransformError, state};

/// State key of the per-task sequence counter (the number of records seen so far).
const SEQ_KEY: &[u8] = b"seq";
/// Prefix of the per-key state entries: `key:` followed by the record key's bytes.
const KEY_PREFIX: &[u8] = b"key:";

/// The transform: only its configuration lives in memory.
pub struct Dedup {
    window: Window,
}

/// When a repeated key counts as a duplicate. At least one bound is set.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    records: Option<u64>,
    ms: Option<u64>,
}

/// The last occurrence of a key, kept in state as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Seen {
    /// Sequence number of the record (1 for the task's first record).
    seq: u64,
    /// Its timestamp, in milliseconds.
    ts: i64,
}

impl Window {
    /// Whether `now` repeats a key last seen at `prev`.
    fn is_duplicate(&self, prev: Seen, now: Seen) -> bool {
        self.records.is_some_and(|n| now.seq.saturating_sub(prev.seq) <= n)
            || self.ms.is_some_and(|t| now.ts.abs_diff(prev.ts) <= t)
    }
}

impl Transform for Dedup {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&["window_records", "window_ms"])?;
        let window = Window { records: config.parse_opt("window_records")?, ms: config.parse_opt("window_ms")? };
        match window {
            Window { records: None, ms: None } => Err("set `window_records`, `window_ms` or both".to_string()),
            Window { records: Some(0), .. } => Err("config key `window_records`: must be at least 1".to_string()),
            _ => Ok(Dedup { window }),
        }
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let seq = state::get_json::<u64>(SEQ_KEY)?.unwrap_or(0) + 1;
        state::put_json(SEQ_KEY, &seq)?;
        let Some(key) = record.key() else {
            out.forward(record);
            return Ok(());
        };
        let state_key = [KEY_PREFIX, key].concat();
        let now = Seen { seq, ts: record.timestamp_ms() };
        let previous = state::get_json::<Seen>(&state_key)?;
        state::put_json(&state_key, &now)?;
        if !previous.is_some_and(|prev| self.window.is_duplicate(prev, now)) {
            out.forward(record);
        }
        Ok(())
    }
}

weir_guest::export!(Dedup);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::testing::Harness;

    /// Runs `(key, timestamp)` records (value = index) and returns the indexes forwarded.
    fn kept(config: &[(&str, &str)], records: &[(Option<&str>, i64)]) -> Vec<usize> {
        let mut h = Harness::<Dedup>::new(config).unwrap();
        let batch = records
            .iter()
            .enumerate()
            .map(|(i, (k, ts))| Record::new(*k, Some(i.to_string())).with_timestamp_ms(*ts).with_offset(i as i64));
        let out = h.process(batch.collect()).unwrap();
        out.iter().map(|o| std::str::from_utf8(o.value().unwrap()).unwrap().parse().unwrap()).collect()
    }

    #[test]
    fn by_record_count() {
        let rs = [(Some("a"), 0), (Some("a"), 0), (Some("b"), 0), (None, 0), (Some("a"), 0)];
        // window 1: only an immediate repeat is dropped; the null key counts as a record.
        assert_eq!(kept(&[("window_records", "1")], &rs), vec![0, 2, 3, 4]);
        // window 2: index 4 is 3 records after index 1 (the last "a", itself dropped).
        assert_eq!(kept(&[("window_records", "2")], &rs), vec![0, 2, 3, 4]);
        assert_eq!(kept(&[("window_records", "3")], &rs), vec![0, 2, 3]);
    }

    #[test]
    fn by_event_time() {
        let rs = [(Some("a"), 1000), (Some("a"), 1500), (Some("a"), 2600), (Some("a"), 2300)];
        // Compared with the key's last occurrence, dropped or not; out-of-order times count.
        assert_eq!(kept(&[("window_ms", "500")], &rs), vec![0, 2]);
        assert_eq!(kept(&[("window_ms", "499")], &rs), vec![0, 1, 2]);
    }

    #[test]
    fn either_bound_drops() {
        let both = [("window_ms", "100"), ("window_records", "1")];
        let rs = [(Some("a"), 0), (Some("b"), 0), (Some("a"), 50), (Some("a"), 500), (Some("b"), 1000)];
        assert_eq!(kept(&both, &rs), vec![0, 1, 4]);
    }

    #[test]
    fn config_errors() {
        assert!(Harness::<Dedup>::new(&[]).unwrap_err().contains("window_records"));
        assert!(Harness::<Dedup>::new(&[("window_records", "0")]).is_err());
        assert!(Harness::<Dedup>::new(&[("window_ms", "-1")]).unwrap_err().contains("`window_ms`"));
        assert!(Harness::<Dedup>::new(&[("window", "1")]).unwrap_err().contains("`window`"));
    }
}
