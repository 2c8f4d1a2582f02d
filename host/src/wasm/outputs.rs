//! The contract's side of [`Outputs`]: a packed guest's `output-batch`, and the plain world's
//! `output-record`s.

use super::bindings::current::weir::transform::types::{Header, OutputRecord};
use super::bindings::packed::exports::weir::transform::packed::OutputBatch;
use crate::record::{MalformedBatch, Outputs};

/// A plain-world guest's output record with a negative timestamp, which the contract refuses
/// (as [`Operator`](super::Operator)'s validation does for a packed guest's).
#[derive(Debug, thiserror::Error)]
#[error("output record {index}: negative timestamp {timestamp}")]
pub(crate) struct NegativeTimestamp {
    index: usize,
    timestamp: i64,
}

impl Outputs {
    /// The outputs of a packed guest's call, checked once here so that reading them cannot
    /// fail ([`Outputs::from_frames`]).
    ///
    /// # Errors
    /// [`MalformedBatch`] when `batch`'s lengths and data do not frame exactly its records, a
    /// name is not UTF-8 or a header name is null; it names the record by its index.
    pub(crate) fn from_packed(batch: OutputBatch) -> Result<Self, MalformedBatch> {
        let OutputBatch { timestamps, data, lengths } = batch;
        Self::from_frames(timestamps, data, lengths)
    }

    /// The outputs a plain-world guest's `process` or any guest's `on-timer` returned.
    ///
    /// # Errors
    /// [`NegativeTimestamp`] for the first record whose timestamp is negative. It is checked
    /// here, not left to validation, because [`Outputs`] keeps `some(i64::MIN)` as none.
    pub(crate) fn from_guest(records: &[OutputRecord]) -> Result<Self, NegativeTimestamp> {
        let negative = records.iter().enumerate().find_map(|(index, record)| {
            record.timestamp.filter(|t| *t < 0).map(|timestamp| NegativeTimestamp { index, timestamp })
        });
        match negative {
            Some(negative) => Err(negative),
            None => Ok(Self::from_records(records)),
        }
    }

    /// `records`, packed. A timestamp of `some(i64::MIN)` becomes none: records from a guest
    /// go through [`Outputs::from_guest`].
    pub fn from_records(records: &[OutputRecord]) -> Self {
        let mut outputs = Self::default();
        for record in records {
            let headers = record.headers.iter().map(|h| (h.key.as_str(), h.value.as_deref()));
            outputs.push(
                record.key.as_deref(),
                record.value.as_deref(),
                record.output.as_deref(),
                record.timestamp,
                headers,
            );
        }
        outputs
    }

    /// The records as the contract's `output-record`s.
    pub fn to_records(&self) -> Vec<OutputRecord> {
        let owned = |bytes: Option<&[u8]>| bytes.map(<[u8]>::to_vec);
        self.iter()
            .map(|record| OutputRecord {
                key: owned(record.key),
                value: owned(record.value),
                headers: record
                    .headers
                    .map(|(key, value)| Header { key: key.to_owned(), value: owned(value) })
                    .collect(),
                timestamp: record.timestamp,
                output: record.output.map(str::to_owned),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::frames::{NONE, NULL};

    fn output(timestamps: Vec<i64>, data: &[u8], lengths: Vec<u32>) -> OutputBatch {
        OutputBatch { timestamps, data: data.to_vec(), lengths }
    }

    #[test]
    fn reads_what_the_wit_describes() {
        let batch = output(vec![5, NONE], b"kvdlqh1", vec![1, 1, 3, 0, NULL, NULL, NULL, 2, 1, 1, 0, NULL]);
        let outputs = Outputs::from_packed(batch).unwrap();
        assert_eq!(outputs.len(), 2);
        let records: Vec<_> = outputs.iter().collect();
        let (first, second) = (&records[0], &records[1]);
        assert_eq!((first.key, first.value), (Some(&b"k"[..]), Some(&b"v"[..])));
        assert_eq!((first.output, first.timestamp, first.headers.len()), (Some("dlq"), Some(5), 0));
        assert_eq!((second.key, second.value, second.output, second.timestamp), (None, None, None, None));
        let headers: Vec<_> = second.headers.clone().collect();
        assert_eq!(headers, [("h", Some(&b"1"[..])), ("", None)]);
        assert_eq!(outputs.bytes(), 2);
    }

    #[test]
    fn refuses_batches_that_do_not_frame() {
        for (batch, problem) in [
            (output(vec![0], b"", vec![NULL, NULL, NULL]), "output record 0: its lengths end early"),
            (output(vec![0], b"ab", vec![3, NULL, NULL, 0]), "output record 0: a length runs past its data"),
            (output(vec![0], b"", vec![NULL, NULL, NULL, 1, NULL, NULL]), "output record 0: a null header name"),
            (
                output(vec![0, 0], b"\xff", vec![NULL, NULL, NULL, 0, NULL, NULL, 1, 0]),
                "output record 1: a name that is not UTF-8",
            ),
            (output(vec![0], b"\xff", vec![NULL, NULL, NULL, 1, 1, NULL]), "output record 0: a name that is not UTF-8"),
            (output(vec![0], b"x", vec![NULL, NULL, NULL, 0]), "0 lengths and 1 bytes of data left after its records"),
            (output(vec![], b"", vec![0]), "1 lengths and 0 bytes of data left"),
        ] {
            let error = Outputs::from_packed(batch).unwrap_err().to_string();
            assert!(error.contains(problem), "{error}");
        }
    }

    fn record(
        key: &str,
        output: Option<&str>,
        timestamp: Option<i64>,
        headers: &[(&str, Option<&str>)],
    ) -> OutputRecord {
        OutputRecord {
            key: Some(key.as_bytes().to_vec()),
            value: None,
            headers: headers
                .iter()
                .map(|(k, v)| Header { key: (*k).to_owned(), value: v.map(|v| v.as_bytes().to_vec()) })
                .collect(),
            timestamp,
            output: output.map(str::to_owned),
        }
    }

    #[test]
    fn packs_records_and_appends_batches_in_order() {
        let first = [record("a", None, Some(1), &[("h", None)]), record("b", Some("dlq"), None, &[])];
        let second = [record("c", None, None, &[("x", Some("y")), ("z", Some(""))])];
        let mut outputs = Outputs::from_records(&first);
        outputs.append(Outputs::default());
        outputs.append(Outputs::from_records(&second));
        let expected: Vec<_> = first.iter().chain(&second).collect();
        assert_eq!(format!("{:?}", outputs.to_records().iter().collect::<Vec<_>>()), format!("{expected:?}"));
        assert_eq!(outputs.len(), 3);
        assert_eq!(outputs.bytes(), 3);
    }

    fn out(
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        output: Option<&str>,
        timestamp: Option<i64>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> OutputRecord {
        OutputRecord {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers
                .iter()
                .map(|(k, v)| Header { key: (*k).to_owned(), value: v.map(<[u8]>::to_vec) })
                .collect(),
            timestamp,
            output: output.map(str::to_owned),
        }
    }

    /// Nulls and empties of every field survive `from_records`, `append` and `to_records`, and
    /// `size()` agrees with `record_size`, `bytes()` with the sum of key and value lengths.
    #[test]
    fn round_trips_nulls_empties_and_sizes() {
        let records = vec![
            out(None, None, None, None, &[]),
            out(Some(b""), Some(b""), Some(""), Some(0), &[("", None), ("", Some(b""))]),
            out(Some(b"k"), None, Some("dlq"), Some(i64::MAX), &[("h", Some(b"\xff\x00"))]),
            out(None, Some(&[7u8; 300][..]), None, None, &[("n\u{e9}", None)]),
        ];
        let mut outputs = Outputs::default();
        for record in &records {
            outputs.append(Outputs::from_records(std::slice::from_ref(record)));
        }
        outputs.append(Outputs::default());
        assert_eq!(format!("{:?}", outputs.to_records()), format!("{records:?}"));
        for (view, record) in outputs.iter().zip(&records) {
            assert_eq!(view.size(), super::super::record_size(record));
        }
        let expected: usize =
            records.iter().map(|r| r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len)).sum();
        assert_eq!(outputs.bytes(), expected as u64);
    }

    /// Lengths that lie (u32::MAX - 1, a header count of u32::MAX, a NULL header count, more
    /// timestamps than records) give a MalformedBatch, never a panic.
    #[test]
    fn lying_lengths_give_errors() {
        let batch = |timestamps: Vec<i64>, data: &[u8], lengths: Vec<u32>| OutputBatch {
            timestamps,
            data: data.to_vec(),
            lengths,
        };
        for b in [
            batch(vec![0], b"ab", vec![NULL - 1, NULL, NULL, 0]),
            batch(vec![0], b"ab", vec![1, NULL - 1, NULL, 0]),
            batch(vec![0], b"", vec![NULL, NULL, NULL, NULL]),
            batch(vec![0], b"", vec![NULL, NULL, NULL, NULL - 1, 0, 0]),
            batch(vec![0, 0, 0], b"", vec![NULL, NULL, NULL, 0]),
            batch(vec![0], b"", vec![]),
            batch(vec![0], b"ab", vec![2, NULL, NULL - 1, 0]),
        ] {
            assert!(Outputs::from_packed(b).is_err());
        }
    }

    /// A guest's negative timestamps are refused with the validation's message, the least one
    /// too, which the packed layout would otherwise keep as none (and the sink would replace).
    #[test]
    fn a_guests_negative_timestamp_is_refused() {
        for timestamp in [i64::MIN, -1] {
            let records =
                [out(Some(b"k"), Some(b"v"), None, Some(0), &[]), out(None, None, None, Some(timestamp), &[])];
            let error = Outputs::from_guest(&records).unwrap_err();
            assert_eq!(error.to_string(), format!("output record 1: negative timestamp {timestamp}"));
        }
        let records = [out(None, None, None, Some(0), &[]), out(None, None, None, None, &[])];
        let timestamps: Vec<_> = Outputs::from_guest(&records).unwrap().iter().map(|r| r.timestamp).collect();
        assert_eq!(timestamps, [Some(0), None]);
    }

    /// Outputs past 4 GiB (`append` in `isolate` over one-record replays, in `fire_timers`
    /// over rounds) still find each record: positions are not `u32`. Allocates 4 GiB.
    #[test]
    fn outputs_past_4_gib_keep_their_records() {
        let big = vec![0u8; (u32::MAX - 16) as usize];
        let mut outputs = Outputs::from_records(&[out(None, Some(&big), None, None, &[])]);
        drop(big);
        outputs.append(Outputs::from_records(&[out(None, Some(&[1u8; 32]), None, None, &[])]));
        outputs.append(Outputs::from_records(&[out(Some(b"key"), Some(b"after"), None, None, &[])]));
        let last = outputs.iter().last().unwrap();
        assert_eq!((last.key, last.value), (Some(&b"key"[..]), Some(&b"after"[..])));
    }
}
