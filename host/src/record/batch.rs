//! [`RecordBatch`]: the input records of one call, kept in the packed world's `input-batch`
//! layout from the moment they are read, so that a packed guest gets them without another copy.
//! Its conversions from and to the contract's `input-record` are in the WebAssembly host
//! (`wasm`).

use wasmtime::component::{ComponentType, Lower};

use super::frames::{Frames, Headers, NONE, NULL, Start, push_bytes};

/// A batch's columns, laid out as the `packed-transform` world's `input-batch` record
/// (guest-sdk/wit), which the host lowers into a packed guest as they are.
#[derive(Debug, Default, ComponentType, Lower)]
#[component(record)]
pub(crate) struct Columns {
    pub(crate) topic: String,
    pub(crate) partition: i32,
    pub(crate) offsets: Vec<i64>,
    pub(crate) timestamps: Vec<i64>,
    #[component(name = "event-times")]
    pub(crate) event_times: Vec<i64>,
    pub(crate) watermarks: Vec<i64>,
    pub(crate) data: Vec<u8>,
    pub(crate) lengths: Vec<u32>,
}

/// Input records of one source partition, in offset order, as flat lists: per record an offset,
/// a timestamp, an event time and a watermark; every key, value and header back to back in one
/// buffer framed by a list of lengths (DESIGN.md, "The WIT contract", `input-batch`).
///
/// A record costs no allocation of its own: the runner copies each consumed record's bytes
/// once, into this buffer, and a packed guest's `process-packed` takes the buffers as they are.
/// Guests of the plain `transform` world get its records one by one (`RecordBatch::to_records`,
/// in the WebAssembly host).
#[derive(Debug, Default)]
pub struct RecordBatch {
    columns: Columns,
    /// Per record: where its key's length and bytes are.
    starts: Vec<Start>,
}

/// The fields of a record that [`RecordBatch::push`] adds, headers aside.
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    /// Source topic; every record of a batch has the same.
    pub topic: &'a str,
    /// Source partition; every record of a batch has the same.
    pub partition: i32,
    /// Offset in the source partition.
    pub offset: i64,
    /// Kafka timestamp, milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Event time, milliseconds since the Unix epoch.
    pub event_time: i64,
    /// The task's watermark just before the record, if any.
    pub watermark: Option<i64>,
    /// `None` for a Kafka null key.
    pub key: Option<&'a [u8]>,
    /// `None` for a Kafka null value (a tombstone).
    pub value: Option<&'a [u8]>,
}

impl RecordBatch {
    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// Adds a record with `headers` (name, value; `None` for a null value) in order. A header
    /// name that is not UTF-8 is handed on lossily: the contract has UTF-8 names
    /// (docs/configuration.md, "Records").
    ///
    /// # Panics
    /// When `fields` names another topic or partition than the batch's first record: a batch is
    /// one partition's, which its callers ensure (a bug in Weir otherwise).
    pub fn push<'h>(&mut self, fields: Fields<'_>, headers: impl IntoIterator<Item = (&'h [u8], Option<&'h [u8]>)>) {
        let columns = &mut self.columns;
        if self.starts.is_empty() {
            columns.topic.clear();
            columns.topic.push_str(fields.topic);
            columns.partition = fields.partition;
        } else {
            assert!(
                columns.partition == fields.partition && columns.topic == fields.topic,
                "a batch of {}[{}] was given a record of {}[{}] (a bug in Weir)",
                columns.topic,
                columns.partition,
                fields.topic,
                fields.partition
            );
        }
        self.starts.push(Start::at_end(&columns.data, &columns.lengths));
        columns.offsets.push(fields.offset);
        columns.timestamps.push(fields.timestamp);
        columns.event_times.push(fields.event_time);
        columns.watermarks.push(fields.watermark.unwrap_or(NONE));
        let (data, lengths) = (&mut columns.data, &mut columns.lengths);
        push_bytes(data, lengths, fields.key);
        push_bytes(data, lengths, fields.value);
        let count_at = lengths.len();
        lengths.push(0);
        let mut count = 0;
        for (name, value) in headers {
            push_bytes(data, lengths, Some(String::from_utf8_lossy(name).as_bytes()));
            push_bytes(data, lengths, value);
            count += 1;
        }
        lengths[count_at] = count;
    }

    /// Source topic of the records; empty for an empty batch.
    pub fn topic(&self) -> &str {
        &self.columns.topic
    }

    /// Source partition of the records; 0 for an empty batch.
    pub fn partition(&self) -> i32 {
        self.columns.partition
    }

    /// Per record: its offset.
    pub fn offsets(&self) -> &[i64] {
        &self.columns.offsets
    }

    /// Per record: its Kafka timestamp, milliseconds since the Unix epoch.
    pub fn timestamps(&self) -> &[i64] {
        &self.columns.timestamps
    }

    /// The watermark just before record `index`.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn watermark(&self, index: usize) -> Option<i64> {
        let watermark = self.columns.watermarks[index];
        (watermark != NONE).then_some(watermark)
    }

    /// Sets the event time of record `index` and the watermark just before it.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn set_time(&mut self, index: usize, event_time: i64, watermark: Option<i64>) {
        self.columns.event_times[index] = event_time;
        self.columns.watermarks[index] = watermark.unwrap_or(NONE);
    }

    /// The value of record `index`; `None` for a null one.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn value(&self, index: usize) -> Option<&[u8]> {
        self.parts(index).1
    }

    /// Heap memory the batch holds, in bytes: its buffers' capacities. What the records it
    /// holds cost a tenant's memory pool while they wait to be processed.
    pub(crate) fn memory(&self) -> usize {
        let columns = &self.columns;
        let times = columns.offsets.capacity()
            + columns.timestamps.capacity()
            + columns.event_times.capacity()
            + columns.watermarks.capacity();
        columns.topic.capacity()
            + times * size_of::<i64>()
            + columns.data.capacity()
            + columns.lengths.capacity() * size_of::<u32>()
            + self.starts.capacity() * size_of::<Start>()
    }

    /// Key and value bytes of all the records: what `weir_bytes_in_total` counts.
    pub fn bytes(&self) -> u64 {
        let lengths = &self.columns.lengths;
        let size = |length: u32| if length == NULL { 0 } else { u64::from(length) };
        self.starts.iter().map(|start| start.length).map(|at| size(lengths[at]) + size(lengths[at + 1])).sum()
    }

    /// A batch of the records for which `keep(index)` holds, in order.
    pub fn select(&self, mut keep: impl FnMut(usize) -> bool) -> Self {
        let mut batch = Self::default();
        for index in (0..self.len()).filter(|&index| keep(index)) {
            batch.push_copy(self, index);
        }
        batch
    }

    /// A batch of record `index` alone.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn one(&self, index: usize) -> Self {
        let mut batch = Self::default();
        batch.push_copy(self, index);
        batch
    }

    /// The batch in the packed world's layout, for `process-packed`.
    pub(crate) fn columns(&self) -> &Columns {
        &self.columns
    }

    /// Adds a copy of record `index` of `from`.
    fn push_copy(&mut self, from: &Self, index: usize) {
        let (key, value, headers) = from.parts(index);
        let columns = &from.columns;
        let fields = Fields {
            topic: &columns.topic,
            partition: columns.partition,
            offset: columns.offsets[index],
            timestamp: columns.timestamps[index],
            event_time: columns.event_times[index],
            watermark: from.watermark(index),
            key,
            value,
        };
        self.push(fields, headers.map(|(name, value)| (name.as_bytes(), value)));
    }

    /// Record `index`'s key and value (`None` for a null) and its headers.
    pub(crate) fn parts(&self, index: usize) -> (Option<&[u8]>, Option<&[u8]>, Headers<'_>) {
        let mut frames = Frames::at(&self.columns.data, &self.columns.lengths, self.starts[index]);
        let (key, value) = (frames.framed_bytes(), frames.framed_bytes());
        (key, value, frames.headers())
    }
}
