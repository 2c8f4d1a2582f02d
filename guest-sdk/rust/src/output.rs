use serde::Serialize;

use crate::bindings::weir::transform::types::{Header, OutputRecord};
use crate::{Record, TransformError};

/// One output record, built with [`Output::new`] (or [`Output::json`],
/// [`Output::from_value`]) and the builder methods, then handed to [`Emitter::emit`].
///
/// By default an output gets the timestamp of the input record that produced it (the SDK sets
/// it once [`Transform::process`](crate::Transform::process) returns) and goes to the sink's
/// default topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output(OutputRecord);

impl Output {
    /// An output with `key` and `value` (`None` for a Kafka null key or value), no headers.
    ///
    /// With a literal `None`, name a type: `Output::new(None::<&str>, Some(bytes))`, or use
    /// [`Output::from_value`].
    pub fn new(key: Option<impl Into<Vec<u8>>>, value: Option<impl Into<Vec<u8>>>) -> Self {
        Output(OutputRecord {
            key: key.map(Into::into),
            value: value.map(Into::into),
            headers: Vec::new(),
            timestamp: None,
            output: None,
        })
    }

    /// `record` unchanged: same key, value and headers; its timestamp is filled in like any
    /// output's (the record's own, once `process` returns).
    pub fn from_record(record: &Record) -> Self {
        Output(OutputRecord {
            key: record.key().map(<[u8]>::to_vec),
            value: record.value().map(<[u8]>::to_vec),
            headers: record.headers().to_vec(),
            timestamp: None,
            output: None,
        })
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
        self.0.headers.push(Header { key: key.into(), value: Some(value.into()) });
        self
    }

    /// Appends a header with a null value (Kafka's null, distinct from an empty value).
    pub fn null_header(mut self, key: impl Into<String>) -> Self {
        self.0.headers.push(Header { key: key.into(), value: None });
        self
    }

    /// Sets the timestamp (milliseconds since the Unix epoch) instead of keeping the input
    /// record's.
    pub fn timestamp_ms(mut self, timestamp_ms: i64) -> Self {
        self.0.timestamp = Some(timestamp_ms);
        self
    }

    /// Sends the record to the sink output named `name` instead of the default topic. Naming an
    /// output the pipeline does not define fails the batch in the host.
    pub fn to_output(mut self, name: impl Into<String>) -> Self {
        self.0.output = Some(name.into());
        self
    }

    /// The key; `None` for a null key.
    pub fn key(&self) -> Option<&[u8]> {
        self.0.key.as_deref()
    }

    /// The value; `None` for a null value.
    pub fn value(&self) -> Option<&[u8]> {
        self.0.value.as_deref()
    }

    /// The headers.
    pub fn headers(&self) -> &[Header] {
        &self.0.headers
    }

    /// The timestamp, if set: by [`Output::timestamp_ms`], or by the SDK (the producing
    /// record's) once `process` has returned.
    pub fn timestamp(&self) -> Option<i64> {
        self.0.timestamp
    }

    /// The named sink output, if one was set.
    pub fn output_name(&self) -> Option<&str> {
        self.0.output.as_deref()
    }

    pub(crate) fn into_raw(self) -> OutputRecord {
        self.0
    }
}

/// Collects the output records of a batch.
#[derive(Debug, Default)]
pub struct Emitter {
    outputs: Vec<Output>,
    /// The address of the record being processed (0: none), only compared with: an address, not
    /// a pointer, so that `Emitter` stays `Send` and `Sync`.
    current: usize,
    /// Outputs that [forward](Emitter::forward) the record being processed, still empty: the
    /// SDK moves the record's key, value and headers into them once `process` returns
    /// ([`Emitter::end_record`]) instead of copying them.
    forwards: Vec<usize>,
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

    /// Emits `record` unchanged (same key, value and headers) to the default output. Like any
    /// output, it gets the timestamp of the record being processed, which for that record
    /// itself is its own.
    pub fn forward(&mut self, record: &Record) {
        if std::ptr::from_ref(record).addr() == self.current {
            self.forwards.push(self.outputs.len());
            self.emit(Output::new(None::<Vec<u8>>, None::<Vec<u8>>));
        } else {
            self.emit(Output::from_record(record));
        }
    }

    /// How many records have been emitted so far in this batch.
    pub fn len(&self) -> usize {
        self.outputs.len()
    }

    /// Whether nothing has been emitted so far in this batch.
    pub fn is_empty(&self) -> bool {
        self.outputs.is_empty()
    }

    /// Marks `record` as the one being processed.
    pub(crate) fn begin_record(&mut self, record: &Record) {
        self.current = std::ptr::from_ref(record).addr();
    }

    /// Fills the outputs that forwarded `record`, the one being processed: the last takes its
    /// buffers, any others get copies.
    pub(crate) fn end_record(&mut self, record: Record) {
        self.current = 0;
        let Some(last) = self.forwards.pop() else { return };
        for index in self.forwards.drain(..) {
            let copy = Output::from_record(&record).0;
            let output = &mut self.outputs[index].0;
            (output.key, output.value, output.headers) = (copy.key, copy.value, copy.headers);
        }
        let output = &mut self.outputs[last].0;
        (output.key, output.value, output.headers) = record.into_parts();
    }

    /// Sets the timestamp of the outputs from index `first` on that have none.
    pub(crate) fn default_timestamps(&mut self, first: usize, timestamp_ms: i64) {
        for output in &mut self.outputs[first..] {
            output.0.timestamp.get_or_insert(timestamp_ms);
        }
    }

    pub(crate) fn into_outputs(self) -> Vec<Output> {
        self.outputs
    }
}
