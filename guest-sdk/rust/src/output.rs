use serde::Serialize;

use crate::bindings::weir::transform::types::{Header, OutputRecord};
use crate::bytes::Bytes;
use crate::{Record, TransformError};

/// One output record, built with [`Output::new`] (or [`Output::json`],
/// [`Output::from_value`]) and the builder methods, then handed to [`Emitter::emit`].
///
/// By default an output gets the timestamp of the input record that produced it (the SDK sets
/// it once [`Transform::process`](crate::Transform::process) returns) and goes to the sink's
/// default topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    pub(crate) headers: Vec<Header>,
    pub(crate) timestamp: Option<i64>,
    pub(crate) output: Option<String>,
}

impl Output {
    /// An output with `key` and `value` (`None` for a Kafka null key or value), no headers.
    ///
    /// With a literal `None`, name a type: `Output::new(None::<&str>, Some(bytes))`, or use
    /// [`Output::from_value`].
    pub fn new(key: Option<impl Into<Vec<u8>>>, value: Option<impl Into<Vec<u8>>>) -> Self {
        Output {
            key: key.map(|key| Bytes::Owned(key.into())),
            value: value.map(|value| Bytes::Owned(value.into())),
            headers: Vec::new(),
            timestamp: None,
            output: None,
        }
    }

    /// `record` unchanged: same key, value and headers; its timestamp is filled in like any
    /// output's (the record's own, once `process` returns). The key and value are not copied.
    pub fn from_record(record: &Record) -> Self {
        Output {
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record.headers.clone(),
            timestamp: None,
            output: None,
        }
    }

    /// An output with a null key and `value`.
    pub fn from_value(value: impl Into<Vec<u8>>) -> Self {
        Output::new(None::<Vec<u8>>, Some(value))
    }

    /// An output with `key` and `value` serialised as JSON.
    pub fn json<T: Serialize + ?Sized>(key: Option<impl Into<Vec<u8>>>, value: &T) -> Result<Self, TransformError> {
        let bytes = serde_json::to_vec(value)
            .map_err(|e| TransformError::new(format!("cannot serialise output as JSON: {e}")))?;
        Ok(Output::new(key, Some(bytes)))
    }

    /// Appends a header. Repeated names are allowed and keep their order.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push(Header { key: key.into(), value: Some(value.into()) });
        self
    }

    /// Appends a header with a null value (Kafka's null, distinct from an empty value).
    pub fn null_header(mut self, key: impl Into<String>) -> Self {
        self.headers.push(Header { key: key.into(), value: None });
        self
    }

    /// Sets the timestamp (milliseconds since the Unix epoch) instead of keeping the input
    /// record's.
    pub fn timestamp_ms(mut self, timestamp_ms: i64) -> Self {
        self.timestamp = Some(timestamp_ms);
        self
    }

    /// Sends the record to the sink output named `name` instead of the default topic. Naming an
    /// output the pipeline does not define fails the batch in the host.
    pub fn to_output(mut self, name: impl Into<String>) -> Self {
        self.output = Some(name.into());
        self
    }

    /// The key; `None` for a null key.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_ref().map(Bytes::as_slice)
    }

    /// The value; `None` for a null value.
    pub fn value(&self) -> Option<&[u8]> {
        self.value.as_ref().map(Bytes::as_slice)
    }

    /// The headers.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// The timestamp, if set: by [`Output::timestamp_ms`], or by the SDK (the producing
    /// record's) once `process` has returned.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The named sink output, if one was set.
    pub fn output_name(&self) -> Option<&str> {
        self.output.as_deref()
    }

    pub(crate) fn into_raw(self) -> OutputRecord {
        OutputRecord {
            key: self.key.map(Bytes::into_vec),
            value: self.value.map(Bytes::into_vec),
            headers: self.headers,
            timestamp: self.timestamp,
            output: self.output,
        }
    }
}

/// Collects the output records of a batch.
#[derive(Debug, Default)]
pub struct Emitter {
    outputs: Vec<Output>,
}

impl Emitter {
    /// An empty emitter.
    pub fn new() -> Self {
        Emitter::default()
    }

    /// Emits `output`.
    pub fn emit(&mut self, output: Output) {
        self.outputs.push(output);
    }

    /// Emits `record` unchanged (same key, value and headers) to the default output, without
    /// copying its key and value ([`Output::from_record`]). Like any output, it gets the
    /// timestamp of the record being processed, which for that record itself is its own.
    pub fn forward(&mut self, record: &Record) {
        self.emit(Output::from_record(record));
    }

    /// How many records have been emitted so far in this batch.
    pub fn len(&self) -> usize {
        self.outputs.len()
    }

    /// Whether nothing has been emitted so far in this batch.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// Sets the timestamp of the outputs from index `first` on that have none.
    pub(crate) fn default_timestamps(&mut self, first: usize, timestamp_ms: i64) {
        for output in &mut self.outputs[first..] {
            output.timestamp.get_or_insert(timestamp_ms);
        }
    }

    pub(crate) fn into_outputs(self) -> Vec<Output> {
        self.outputs
    }
}
