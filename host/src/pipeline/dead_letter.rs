//! Dead letters: records an operator failed on under `on_error = "dead-letter"`, and the
//! record each becomes on the dead-letter topic.

use crate::record::{RecordLimit, TopicRules};
use crate::wasm::{Header, InputRecord, OperatorError, OutputRecord, record_size};

/// Header of a dead letter naming the parts of the input left out to fit the record limit.
const DROPPED_HEADER: &str = "weir.dropped";

/// A record an operator failed on under `on_error = "dead-letter"`, with the error.
#[derive(Debug)]
pub struct DeadLetter {
    /// The record as the failing operator received it.
    pub record: InputRecord,
    /// The failure.
    pub error: OperatorError,
}

impl DeadLetter {
    /// The record as it goes to the dead-letter topic: key, value and headers of the input,
    /// plus `weir.error`, `weir.operator`, `weir.topic`, `weir.partition`, `weir.offset`.
    ///
    /// It keeps the input's timestamp unless the dead-letter topic's `rules` refuse it at
    /// `now_ms` (e.g. the record was dead-lettered for that very timestamp): then the producer
    /// stamps its clock and a `weir.timestamp` header keeps the input's. A record without a key
    /// bound for a compacted dead-letter topic is keyed by its source position,
    /// `<topic>/<partition>/<offset>`, which no other dead letter shares.
    ///
    /// When that is larger than `limit` (the input was itself too large to write, or the
    /// added headers push it over), the input's value, then its key, then its headers are left
    /// out, and a `weir.dropped` header says which and how large they were: the record can
    /// still be read at its source offset.
    pub fn to_output(&self, limit: &RecordLimit, rules: &TopicRules, now_ms: i64) -> OutputRecord {
        let mut output = self.full_output();
        if rules.requires_key && output.key.is_none() {
            let position = format!("{}/{}/{}", self.record.topic, self.record.partition, self.record.offset);
            output.key = Some(position.into_bytes());
        }
        if rules.refusal(true, output.timestamp, now_ms).is_some() {
            let original = output.timestamp.take().unwrap_or_default();
            output
                .headers
                .push(Header { key: "weir.timestamp".into(), value: Some(original.to_string().into_bytes()) });
        }
        let mut dropped = Vec::new();
        let mut input_headers = self.record.headers.len();
        while record_size(&output) > limit.bytes {
            let (part, bytes) = if let Some(value) = output.value.take() {
                ("value", value.len())
            } else if let Some(key) = output.key.take() {
                ("key", key.len())
            } else if input_headers > 0 {
                let bytes = output
                    .headers
                    .drain(..input_headers)
                    .map(|h| h.key.len() + h.value.as_ref().map_or(0, Vec::len))
                    .sum();
                input_headers = 0;
                ("headers", bytes)
            } else {
                // Weir's own headers alone are too large: the producer refuses the record and
                // the pipeline stops with that error.
                break;
            };
            dropped.push(format!("{part} ({bytes} bytes)"));
            output.headers.retain(|h| h.key != DROPPED_HEADER);
            output.headers.push(Header { key: DROPPED_HEADER.into(), value: Some(dropped.join(", ").into_bytes()) });
        }
        output
    }

    /// The input record with the error headers.
    fn full_output(&self) -> OutputRecord {
        let mut headers = self.record.headers.clone();
        let header = |key: &str, value: String| Header { key: key.into(), value: Some(value.into_bytes()) };
        headers.push(header("weir.error", self.error.kind.to_string()));
        headers.push(header("weir.operator", self.error.operator.clone()));
        headers.push(header("weir.topic", self.record.topic.clone()));
        headers.push(header("weir.partition", self.record.partition.to_string()));
        headers.push(header("weir.offset", self.record.offset.to_string()));
        OutputRecord {
            key: self.record.key.clone(),
            value: self.record.value.clone(),
            headers,
            timestamp: Some(self.record.timestamp),
            output: None,
        }
    }
}
