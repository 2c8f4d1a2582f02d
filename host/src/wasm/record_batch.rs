//! The contract's `input-record`s of a [`RecordBatch`]: for guests of the plain `transform`
//! world, for dead letters, and for batches built from records (`weir transform run`, tests).

use super::bindings::current::weir::transform::types::{Header, InputRecord};
use crate::record::{Fields, RecordBatch};

impl RecordBatch {
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
            timestamp: self.timestamps()[index],
            topic: self.topic().to_owned(),
            partition: self.partition(),
            offset: self.offsets()[index],
            event_time: self.columns().event_times[index],
            watermark: self.watermark(index),
        }
    }

    /// Every record as the plain `transform` world's `input-record`.
    pub fn to_records(&self) -> Vec<InputRecord> {
        (0..self.len()).map(|index| self.record(index)).collect()
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
    use crate::record::frames::{NONE, NULL};

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
    fn selects_and_sets_times_in_place() {
        let mut batch =
            RecordBatch::from_records(&[input(0, None, Some("a"), &[]), sample()[0].clone(), sample()[1].clone()]);
        batch.set_time(2, 7, None);
        let kept = batch.select(|index| index != 0);
        let mut expected = sample();
        (expected[1].event_time, expected[1].watermark) = (7, None);
        assert_eq!(debug(&kept.to_records()), debug(&expected));
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

    /// Null and empty keys, values, header names and values; `select` of nothing and of
    /// everything; `one`; `bytes`.
    #[test]
    fn keeps_nulls_empties_and_headers_through_select_and_one() {
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
