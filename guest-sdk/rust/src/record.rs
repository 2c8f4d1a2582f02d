use std::sync::Arc;

use serde::Deserialize;

use crate::TransformError;
use crate::bindings::weir::transform::types::InputRecord;
use crate::bytes::Bytes;

/// One Kafka record header: a UTF-8 name and raw bytes, `None` for a Kafka null header value
/// (distinct from an empty one). Kafka allows repeated names; the order the producer wrote them
/// in is kept.
pub use crate::bindings::weir::transform::types::Header;

/// One input record, as read from a source partition.
///
/// The SDK hands each record of a batch to [`Transform::process`](crate::Transform::process).
/// Records can also be built by hand with [`Record::new`] and the `with_*` methods, for tests.
///
/// The key and value of a record the host handed over point into the buffer of its whole batch
/// (cloning a record does not copy them): a record kept past its batch keeps that buffer.
#[derive(Debug, Clone)]
pub struct Record {
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    pub(crate) timestamp: i64,
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) event_time: i64,
    pub(crate) watermark: Option<i64>,
}

impl Record {
    pub(crate) fn from_raw(raw: InputRecord) -> Self {
        Record {
            key: raw.key.map(Bytes::Owned),
            value: raw.value.map(Bytes::Owned),
            headers: raw.headers,
            timestamp: raw.timestamp,
            topic: raw.topic.into(),
            partition: raw.partition,
            offset: raw.offset,
            event_time: raw.event_time,
            watermark: raw.watermark,
        }
    }

    /// Builds a record (mainly for tests): no headers, timestamp 0, topic `""`, partition 0,
    /// offset 0, event time 0, no watermark. Pass `None::<&str>` for a null key or value.
    pub fn new(key: Option<impl Into<Vec<u8>>>, value: Option<impl Into<Vec<u8>>>) -> Self {
        Record {
            key: key.map(|key| Bytes::Owned(key.into())),
            value: value.map(|value| Bytes::Owned(value.into())),
            headers: Vec::new(),
            timestamp: 0,
            topic: "".into(),
            partition: 0,
            offset: 0,
            event_time: 0,
            watermark: None,
        }
    }

    /// Appends a header (builder style, for tests).
    pub fn with_header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push(Header { key: key.into(), value: Some(value.into()) });
        self
    }

    /// Appends a header with a null value (builder style, for tests).
    pub fn with_null_header(mut self, key: impl Into<String>) -> Self {
        self.headers.push(Header { key: key.into(), value: None });
        self
    }

    /// Sets the timestamp (builder style, for tests).
    pub fn with_timestamp_ms(mut self, timestamp_ms: i64) -> Self {
        self.timestamp = timestamp_ms;
        self
    }

    /// Sets the event time (builder style, for tests).
    pub fn with_event_time_ms(mut self, event_time_ms: i64) -> Self {
        self.event_time = event_time_ms;
        self
    }

    /// Sets the watermark the record saw (builder style, for tests).
    pub fn with_watermark_ms(mut self, watermark_ms: i64) -> Self {
        self.watermark = Some(watermark_ms);
        self
    }

    /// Sets the source topic (builder style, for tests).
    pub fn with_topic(mut self, topic: impl Into<String>) -> Self {
        self.topic = topic.into().into();
        self
    }

    /// Sets the source partition (builder style, for tests).
    pub fn with_partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// Sets the source offset (builder style, for tests).
    pub fn with_offset(mut self, offset: i64) -> Self {
        self.offset = offset;
        self
    }

    /// The record key; `None` for a Kafka null key.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_ref().map(Bytes::as_slice)
    }

    /// The record key as UTF-8; `None` for a null key or one that is not valid UTF-8.
    pub fn key_str(&self) -> Option<&str> {
        self.key().and_then(|k| std::str::from_utf8(k).ok())
    }

    /// The record value; `None` for a Kafka null value (a tombstone).
    pub fn value(&self) -> Option<&[u8]> {
        self.value.as_ref().map(Bytes::as_slice)
    }

    /// The record value as UTF-8; `None` for a null value or one that is not valid UTF-8.
    pub fn value_str(&self) -> Option<&str> {
        self.value().and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Parses the value as JSON into `T`, which may borrow from the record: declare only the
    /// fields the transform reads, and only those are deserialised (serde skips the others
    /// without building them), with `&'a str` or `Cow<'a, str>` fields pointing into the value
    /// instead of copying it.
    ///
    /// ```
    /// # use std::borrow::Cow;
    /// # use serde::Deserialize;
    /// # use weir_guest::{Record, TransformError};
    /// #[derive(Deserialize)]
    /// struct Flight<'a> {
    ///     // `Cow` borrows unless the JSON string has escapes; a `&'a str` field refuses those.
    ///     #[serde(borrow)]
    ///     origin: Cow<'a, str>,
    ///     dep_delay: Option<i64>,
    /// }
    ///
    /// let record = Record::new(None::<&str>, Some(r#"{"origin":"EWR","dep_delay":2,"dest":"IAH"}"#));
    /// let flight: Flight = record.value_json()?;
    /// assert!(matches!(flight.origin, Cow::Borrowed("EWR")));
    /// # Ok::<(), TransformError>(())
    /// ```
    ///
    /// As with serde everywhere, a derived struct ignores unknown fields, and also accepts a
    /// JSON array of its fields in declaration order.
    ///
    /// # Errors
    ///
    /// Fails, naming this record's partition and offset and carrying the offset, on a null
    /// value, on a value that is not JSON, and on one that does not deserialise into `T`, with
    /// serde's message (a missing field by name, a wrong type by line and column).
    pub fn value_json<'a, T: Deserialize<'a>>(&'a self) -> Result<T, TransformError> {
        let (partition, offset) = (self.partition(), self.offset());
        let fail = |problem: String| {
            TransformError::new(format!("record at partition {partition} offset {offset}: {problem}"))
                .with_offset(offset)
        };
        let value = self.value().ok_or_else(|| fail("null value, expected JSON".into()))?;
        // One UTF-8 check of the whole value lets serde_json skip checking each string it reads
        // (every field name): 14 % fewer guest instructions for flight-delays. Bytes that are
        // not UTF-8 get `from_slice` itself, so results and errors are the same.
        let parsed = match std::str::from_utf8(value) {
            Ok(text) => serde_json::from_str(text),
            Err(_) => serde_json::from_slice(value),
        };
        parsed.map_err(|e| match e.classify() {
            serde_json::error::Category::Data => fail(format!("value is not the expected JSON: {e}")),
            _ => fail(format!("value is not valid JSON: {e}")),
        })
    }

    /// The headers, in the order the producer wrote them.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// The value of the first header named `name`; `None` when there is none or its value is
    /// null (tell those apart through [`Record::headers`]).
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers.iter().find(|h| h.key == name).and_then(|h| h.value.as_deref())
    }

    /// Record timestamp in milliseconds since the Unix epoch (CreateTime or LogAppendTime, as
    /// the source topic is configured).
    pub fn timestamp_ms(&self) -> i64 {
        self.timestamp
    }

    /// Event time in milliseconds since the Unix epoch: what the pipeline's watermark strategy
    /// reads (`[source.watermark]`: the timestamp, or a field of the JSON value); the timestamp
    /// when it has none.
    pub fn event_time_ms(&self) -> i64 {
        self.event_time
    }

    /// The task's watermark just before this record (milliseconds since the Unix epoch): a
    /// record with an event time at or below it is late. `None` while the task has none.
    pub fn watermark_ms(&self) -> Option<i64> {
        self.watermark
    }

    /// The source topic the record was read from.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The source partition the record was read from.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The record's offset in its source partition.
    pub fn offset(&self) -> i64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    use serde::Deserialize;

    use super::Record;

    #[derive(Debug, Deserialize)]
    struct Flight<'a> {
        origin: &'a str,
        #[serde(borrow)]
        carrier: Cow<'a, str>,
        dep_delay: Option<i64>,
    }

    fn record(value: &str) -> Record {
        Record::new(None::<&str>, Some(value)).with_partition(3).with_offset(42)
    }

    #[test]
    fn value_json_borrows_the_declared_fields_and_skips_the_rest() {
        let record = record(r#"{"year":2013,"origin":"EWR","carrier":"U\u0041","dep_delay":null,"x":[{"y":1}]}"#);
        let flight: Flight = record.value_json().unwrap();
        let value = record.value().unwrap().as_ptr_range();
        assert!(value.contains(&flight.origin.as_ptr()), "origin points into the record");
        assert!(matches!(flight.carrier, Cow::Owned(ref c) if c == "UA"), "an escaped string is unescaped");
        assert_eq!(flight.dep_delay, None);
        // Owned types still work, as before.
        let any: serde_json::Value = record.value_json().unwrap();
        assert_eq!(any["year"], 2013);
    }

    #[test]
    fn value_json_reads_bytes_that_are_not_utf8_as_serde_json_does() {
        // In a skipped field they are never looked at; in a field read, they are an error.
        let skipped = Record::new(None::<&str>, Some(&b"{\"x\":\"\xff\",\"origin\":\"EWR\",\"carrier\":\"UA\"}"[..]));
        let flight: Flight = skipped.value_json().unwrap();
        assert_eq!((flight.origin, &*flight.carrier), ("EWR", "UA"));
        let read = Record::new(None::<&str>, Some(&b"{\"origin\":\"\xff\",\"carrier\":\"UA\"}"[..]));
        let error = read.value_json::<Flight>().unwrap_err();
        assert!(error.message().contains("invalid unicode code point"), "{error}");
    }

    #[test]
    fn value_json_errors_name_partition_offset_and_problem() {
        for (value, expected) in [
            (Some("{\"origin\":"), "value is not valid JSON: EOF while parsing a value at line 1 column 10"),
            (Some("nope"), "value is not valid JSON: expected ident at line 1 column 2"),
            (Some(r#"{"origin":"EWR"}"#), "value is not the expected JSON: missing field `carrier`"),
            (
                Some(r#"{"origin":1}"#),
                "value is not the expected JSON: invalid type: integer `1`, expected a borrowed string",
            ),
            (None, "null value, expected JSON"),
        ] {
            let record = Record::new(None::<&str>, value).with_partition(3).with_offset(42);
            let error = record.value_json::<Flight>().unwrap_err();
            assert_eq!(error.offset(), Some(42));
            assert!(error.message().starts_with("record at partition 3 offset 42: "), "{error}");
            assert!(error.message().contains(expected), "{error}");
        }
    }
}
