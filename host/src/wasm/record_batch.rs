//! [`RecordBatch`]: the input records of one call, kept in the packed world's `input-batch`
//! layout from the moment they are read, so that a packed guest gets them without another copy.

use super::bindings::current::weir::transform::types::{Header, InputRecord};
use super::bindings::packed::exports::weir::transform::packed::InputBatch;
use super::packed_batch::{Frames, Headers, NONE, NULL, Start, push_bytes};

/// Input records of one source partition, in offset order, as flat lists: per record an offset,
/// a timestamp, an event time and a watermark; every key, value and header back to back in one
/// buffer framed by a list of lengths (DESIGN.md, "The WIT contract", `input-batch`).
///
/// A record costs no allocation of its own: the runner copies each consumed record's bytes
/// once, into this buffer, and a packed guest's `process-packed` takes the buffers as they are.
/// Guests of the plain `transform` world get [`RecordBatch::to_records`].
#[derive(Debug, Default)]
pub struct RecordBatch {
    columns: InputBatch,
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

    /// Adds `record`.
    ///
    /// # Panics
    /// As [`RecordBatch::push`].
    pub fn push_record(&mut self, record: &InputRecord) {
        let headers = record.headers.iter().map(|h| (h.key.as_bytes(), h.value.as_deref()));
        self.push(fields(record), headers);
    }

    /// A batch of `records`, which must all be of one source partition.
    ///
    /// # Panics
    /// As [`RecordBatch::push`].
    pub fn from_records(records: &[InputRecord]) -> Self {
        let mut batch = Self::default();
        for record in records {
            batch.push_record(record);
        }
        batch
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

    /// Key and value bytes of all the records: what `weir_bytes_in_total` counts.
    pub fn bytes(&self) -> u64 {
        let lengths = &self.columns.lengths;
        let size = |length: u32| if length == NULL { 0 } else { u64::from(length) };
        self.starts.iter().map(|start| start.length).map(|at| size(lengths[at]) + size(lengths[at + 1])).sum()
    }

    /// Record `index` as the plain `transform` world's `input-record`.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn record(&self, index: usize) -> InputRecord {
        let (key, value, headers) = self.parts(index);
        InputRecord {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: headers
                .map(|(key, value)| Header { key: key.to_owned(), value: value.map(<[u8]>::to_vec) })
                .collect(),
            timestamp: self.columns.timestamps[index],
            topic: self.columns.topic.clone(),
            partition: self.columns.partition,
            offset: self.columns.offsets[index],
            event_time: self.columns.event_times[index],
            watermark: self.watermark(index),
        }
    }

    /// Every record as the plain `transform` world's `input-record`.
    pub fn to_records(&self) -> Vec<InputRecord> {
        (0..self.len()).map(|index| self.record(index)).collect()
    }

    /// A batch of the records for which `keep(index)` holds, in order.
    pub fn select(&self, mut keep: impl FnMut(usize) -> bool) -> Self {
        let mut batch = Self::default();
        for index in (0..self.len()).filter(|&index| keep(index)) {
            batch.push_copy(self, index, []);
        }
        batch
    }

    /// A batch of record `index` alone.
    ///
    /// # Panics
    /// When `index` is out of bounds.
    pub fn one(&self, index: usize) -> Self {
        let mut batch = Self::default();
        batch.push_copy(self, index, []);
        batch
    }

    /// Adds to each record, after its own headers, those `extra` gives for its value (name,
    /// value).
    pub fn add_headers<'h>(&mut self, mut extra: impl FnMut(Option<&[u8]>) -> Vec<(&'h str, &'h [u8])>) {
        let mut batch = Self::default();
        for index in 0..self.len() {
            let added = extra(self.value(index));
            batch.push_copy(self, index, added.into_iter().map(|(name, value)| (name.as_bytes(), Some(value))));
        }
        *self = batch;
    }

    /// The batch in the packed world's layout, for `process-packed`.
    pub(crate) fn columns(&self) -> &InputBatch {
        &self.columns
    }

    /// Adds record `index` of `from`, with `extra` headers after its own.
    fn push_copy<'h>(
        &mut self,
        from: &'h Self,
        index: usize,
        extra: impl IntoIterator<Item = (&'h [u8], Option<&'h [u8]>)>,
    ) {
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
        self.push(fields, headers.map(|(name, value)| (name.as_bytes(), value)).chain(extra));
    }

    /// Record `index`'s key and value (`None` for a null) and its headers.
    fn parts(&self, index: usize) -> (Option<&[u8]>, Option<&[u8]>, Headers<'_>) {
        let mut frames = Frames::at(&self.columns.data, &self.columns.lengths, self.starts[index]);
        let (key, value) = (frames.framed_bytes(), frames.framed_bytes());
        (key, value, frames.headers())
    }
}

/// The fields of `record`.
fn fields(record: &InputRecord) -> Fields<'_> {
    Fields {
        topic: &record.topic,
        partition: record.partition,
        offset: record.offset,
        timestamp: record.timestamp,
        event_time: record.event_time,
        watermark: record.watermark,
        key: record.key.as_deref(),
        value: record.value.as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(offset: i64, key: Option<&str>, value: Option<&str>, headers: &[(&str, Option<&str>)]) -> InputRecord {
        InputRecord {
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: headers
                .iter()
                .map(|(k, v)| Header { key: (*k).to_owned(), value: v.map(|v| v.as_bytes().to_vec()) })
                .collect(),
            timestamp: offset * 10,
            topic: "flights".into(),
            partition: 3,
            offset,
            event_time: offset * 100,
            watermark: (offset > 1).then_some(offset),
        }
    }

    /// The records as text: the generated types have no `PartialEq`.
    fn debug(records: &[InputRecord]) -> String {
        format!("{records:?}")
    }

    fn sample() -> Vec<InputRecord> {
        vec![input(1, Some("k"), None, &[("h", Some("")), ("n", None)]), input(2, Some(""), Some("vv"), &[])]
    }

    #[test]
    fn frames_keys_values_and_headers_with_nulls_as_the_wit_describes() {
        let batch = RecordBatch::from_records(&sample());
        let columns = batch.columns();
        assert_eq!((columns.topic.as_str(), columns.partition), ("flights", 3));
        assert_eq!(columns.offsets, [1, 2]);
        assert_eq!(columns.timestamps, [10, 20]);
        assert_eq!(columns.event_times, [100, 200]);
        assert_eq!(columns.watermarks, [NONE, 2]);
        assert_eq!(columns.data, b"khnvv");
        assert_eq!(columns.lengths, [1, NULL, 2, 1, 0, 1, NULL, 0, 2, 0]);
    }

    #[test]
    fn gives_back_the_records_it_was_given() {
        let records = sample();
        let batch = RecordBatch::from_records(&records);
        assert_eq!((batch.len(), batch.topic(), batch.partition()), (2, "flights", 3));
        assert_eq!(debug(&batch.to_records()), debug(&records));
        assert_eq!((batch.value(0), batch.value(1)), (None, Some(&b"vv"[..])));
        assert_eq!((batch.watermark(0), batch.watermark(1)), (None, Some(2)));
        assert_eq!(batch.bytes(), 1 + 2);
        assert!(RecordBatch::default().is_empty());
    }

    #[test]
    fn selects_sets_times_and_adds_headers_in_place() {
        let mut batch =
            RecordBatch::from_records(&[input(0, None, Some("a"), &[]), sample()[0].clone(), sample()[1].clone()]);
        batch.set_time(2, 7, None);
        let kept = batch.select(|index| index != 0);
        let mut expected = sample();
        (expected[1].event_time, expected[1].watermark) = (7, None);
        assert_eq!(debug(&kept.to_records()), debug(&expected));

        let mut joined = kept;
        joined.add_headers(|value| match value {
            Some(_) => vec![("airport", &b"JFK"[..]), ("empty", &b""[..])],
            None => Vec::new(),
        });
        expected[1].headers = vec![
            Header { key: "airport".into(), value: Some(b"JFK".to_vec()) },
            Header { key: "empty".into(), value: Some(Vec::new()) },
        ];
        assert_eq!(debug(&joined.to_records()), debug(&expected));
    }

    #[test]
    fn hands_on_a_header_name_that_is_not_utf8_lossily() {
        let mut batch = RecordBatch::default();
        let fields = Fields {
            topic: "t",
            partition: 0,
            offset: 5,
            timestamp: 1,
            event_time: 1,
            watermark: None,
            key: None,
            value: Some(b"v"),
        };
        batch.push(fields, [(&b"a\xffb"[..], Some(&b"x"[..]))]);
        let header = &batch.record(0).headers[0];
        assert_eq!((header.key.as_str(), header.value.as_deref()), ("a\u{fffd}b", Some(&b"x"[..])));
    }

    #[test]
    #[should_panic(expected = "a batch of flights[3] was given a record of flights[4]")]
    fn refuses_a_record_of_another_partition() {
        let mut other = sample()[1].clone();
        other.partition = 4;
        RecordBatch::from_records(&[sample()[0].clone(), other]);
    }

    fn fields<'a>(offset: i64, key: Option<&'a [u8]>, value: Option<&'a [u8]>) -> Fields<'a> {
        Fields { topic: "t", partition: 1, offset, timestamp: offset, event_time: offset, watermark: None, key, value }
    }

    /// Null and empty keys, values, header names and values; headers added by a join after a
    /// record's own; `select` of nothing and of everything; `one`; `bytes`.
    #[test]
    fn keeps_nulls_empties_and_headers_through_select_one_and_add_headers() {
        let mut batch = RecordBatch::default();
        batch.push(fields(0, None, None), []);
        batch.push(fields(1, Some(b""), Some(b"")), [(&b""[..], None), (&b""[..], Some(&b""[..]))]);
        batch.push(fields(2, Some(b"k"), Some(b"{\"a\":1}")), [(&b"own"[..], Some(&b"x"[..])), (&b"n"[..], None)]);
        let records = batch.to_records();
        assert_eq!((records[0].key.as_deref(), records[0].value.as_deref()), (None, None));
        assert_eq!((records[1].key.as_deref(), records[1].value.as_deref()), (Some(&b""[..]), Some(&b""[..])));
        assert_eq!(
            format!("{:?}", records[1].headers),
            format!(
                "{:?}",
                [Header { key: String::new(), value: None }, Header { key: String::new(), value: Some(Vec::new()) },]
            )
        );
        assert_eq!(batch.bytes(), 1 + 7);

        let none = batch.select(|_| false);
        assert!(none.is_empty());
        assert_eq!(none.bytes(), 0);
        let all = batch.select(|_| true);
        assert_eq!(format!("{:?}", all.to_records()), format!("{records:?}"));
        for (index, record) in records.iter().enumerate() {
            assert_eq!(format!("{:?}", batch.one(index).to_records()), format!("{:?}", std::slice::from_ref(record)));
        }

        let mut joined = batch.select(|_| true);
        joined.add_headers(|value| match value {
            Some(v) if v.starts_with(b"{") => vec![("weir.table.t", &b"row"[..])],
            _ => Vec::new(),
        });
        let got = joined.to_records();
        assert_eq!(format!("{:?}", &got[..2]), format!("{:?}", &records[..2]));
        let headers: Vec<_> = got[2].headers.iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        assert_eq!(headers, [("own", Some(&b"x"[..])), ("n", None), ("weir.table.t", Some(&b"row"[..]))]);
        // The join copies; the batch before it is unchanged.
        assert_eq!(format!("{:?}", batch.to_records()), format!("{records:?}"));
    }

    /// Stamping order: `set_time` on one record leaves the others' times, and `select` keeps them.
    #[test]
    fn set_time_is_per_record() {
        let mut batch = RecordBatch::default();
        for offset in 0..3 {
            batch.push(fields(offset, None, Some(b"v")), []);
        }
        batch.set_time(1, 42, Some(41));
        let kept = batch.select(|index| index != 0).to_records();
        assert_eq!((kept[0].event_time, kept[0].watermark), (42, Some(41)));
        assert_eq!((kept[1].event_time, kept[1].watermark), (2, None));
    }

    /// A batch past 4 GiB of keys, values and headers (`source.batch_size` 65536 records of
    /// 70 KB) still finds each record, which dead-letter replay and event-time stamping read one
    /// by one: positions are not `u32`. Allocates 4 GiB.
    #[test]
    fn a_batch_past_4_gib_reads_its_records() {
        let big = vec![0u8; (u32::MAX - 16) as usize];
        let mut batch = RecordBatch::default();
        batch.push(fields(0, None, Some(&big)), []);
        drop(big);
        batch.push(fields(1, None, Some(&[1u8; 32])), []);
        batch.push(fields(2, Some(b"key"), Some(b"after")), []);
        assert_eq!(batch.value(2), Some(&b"after"[..]));
        let record = batch.one(2).record(0);
        assert_eq!((record.key.as_deref(), record.value.as_deref()), (Some(&b"key"[..]), Some(&b"after"[..])));
    }
}
