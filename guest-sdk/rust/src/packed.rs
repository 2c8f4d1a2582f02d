//! The packed batches of the `packed` interface (guest-sdk/wit): what the host hands over and
//! takes back through `process-packed`, as [`Record`]s and from [`Output`]s.

use std::sync::Arc;

use crate::bindings::exports::weir::transform::packed::{InputBatch, OutputBatch};
use crate::bindings::weir::transform::types::Header;
use crate::bytes::Bytes;
use crate::{Output, Record, TransformError};

/// The length that stands for a Kafka null (key, value, header value) or the default output.
const NULL: u32 = u32::MAX;
/// The watermark or output timestamp that stands for none.
const NONE: i64 = i64::MIN;

/// The records of `batch`, whose keys and values point into its `data`.
///
/// # Errors
/// When its lists do not frame the same number of records (a bug in the host).
pub(crate) fn records(batch: InputBatch) -> Result<Vec<Record>, TransformError> {
    let InputBatch { topic, partition, offsets, timestamps, event_times, watermarks, data, lengths } = batch;
    let count = offsets.len();
    if [timestamps.len(), event_times.len(), watermarks.len()].iter().any(|&len| len != count) {
        return Err(malformed("its per-record lists differ in length"));
    }
    let (topic, buffer) = (Arc::<str>::from(topic), Arc::new(data));
    let mut frames = Frames { buffer: &buffer, at: 0, lengths: lengths.iter() };
    let mut records = Vec::with_capacity(count);
    for i in 0..count {
        let key = frames.bytes()?;
        let value = frames.bytes()?;
        let headers = (0..frames.length()?)
            .map(|_| {
                let key = frames.bytes()?.ok_or_else(|| malformed("a null header name"))?;
                let key =
                    String::from_utf8(key.into_vec()).map_err(|_| malformed("a header name that is not UTF-8"))?;
                Ok(Header { key, value: frames.bytes()?.map(Bytes::into_vec) })
            })
            .collect::<Result<_, TransformError>>()?;
        records.push(Record {
            key,
            value,
            headers,
            timestamp: timestamps[i],
            topic: topic.clone(),
            partition,
            offset: offsets[i],
            event_time: event_times[i],
            watermark: (watermarks[i] != NONE).then_some(watermarks[i]),
        });
    }
    if frames.lengths.len() > 0 || frames.at != buffer.len() {
        return Err(malformed("its lengths do not frame its data"));
    }
    Ok(records)
}

fn malformed(problem: &str) -> TransformError {
    TransformError::new(format!("the host sent a malformed packed batch ({problem}): a bug in the host"))
}

/// Reads an input batch's lengths and the ranges of its data they frame, in order.
struct Frames<'a> {
    buffer: &'a Arc<Vec<u8>>,
    at: usize,
    lengths: std::slice::Iter<'a, u32>,
}

impl Frames<'_> {
    fn length(&mut self) -> Result<u32, TransformError> {
        self.lengths.next().copied().ok_or_else(|| malformed("its lengths end early"))
    }

    fn bytes(&mut self) -> Result<Option<Bytes>, TransformError> {
        let length = self.length()?;
        if length == NULL {
            return Ok(None);
        }
        let start = self.at;
        let end = start.checked_add(length as usize).filter(|&end| end <= self.buffer.len());
        let Some(end) = end else { return Err(malformed("a length runs past its data")) };
        self.at = end;
        Ok(Some(Bytes::Shared { buffer: self.buffer.clone(), start, end }))
    }
}

/// `outputs` as one output batch.
pub(crate) fn pack(outputs: Vec<Output>) -> OutputBatch {
    let size = |bytes: &Option<Bytes>| bytes.as_ref().map_or(0, |b| b.as_slice().len());
    let bytes = outputs.iter().map(|o| size(&o.key) + size(&o.value)).sum();
    let mut batch = OutputBatch {
        timestamps: Vec::with_capacity(outputs.len()),
        data: Vec::with_capacity(bytes),
        lengths: Vec::with_capacity(outputs.len() * 4),
    };
    for output in outputs {
        // NONE stands for no timestamp on the wire; the host refuses every negative timestamp,
        // so a transform's own NONE goes as the next value to be refused as `process` would.
        let timestamp = output.timestamp.map_or(NONE, |t| t.max(NONE + 1));
        batch.timestamps.push(timestamp);
        push(&mut batch, output.key.as_ref().map(Bytes::as_slice));
        push(&mut batch, output.value.as_ref().map(Bytes::as_slice));
        push(&mut batch, output.output.as_deref().map(str::as_bytes));
        batch.lengths.push(output.headers.len() as u32);
        for header in &output.headers {
            push(&mut batch, Some(header.key.as_bytes()));
            push(&mut batch, header.value.as_deref());
        }
    }
    batch
}

fn push(batch: &mut OutputBatch, bytes: Option<&[u8]>) {
    match bytes {
        Some(bytes) => {
            batch.lengths.push(bytes.len() as u32);
            batch.data.extend_from_slice(bytes);
        }
        None => batch.lengths.push(NULL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_point_into_the_batch_and_read_nulls_and_headers() {
        let batch = InputBatch {
            topic: "flights".into(),
            partition: 3,
            offsets: vec![7, 8],
            timestamps: vec![70, 80],
            event_times: vec![700, 800],
            watermarks: vec![NONE, 5],
            data: b"kvh1".to_vec(),
            lengths: vec![1, 1, 0, NULL, NULL, 2, 1, 1, 0, NULL],
        };
        let records = records(batch).unwrap();
        let (a, b) = (&records[0], &records[1]);
        assert_eq!((a.key(), a.value(), a.headers()), (Some(&b"k"[..]), Some(&b"v"[..]), &[][..]));
        assert_eq!((a.topic(), a.partition(), a.offset(), a.timestamp_ms()), ("flights", 3, 7, 70));
        assert_eq!((a.event_time_ms(), a.watermark_ms(), b.watermark_ms()), (700, None, Some(5)));
        assert!(matches!(&a.key, Some(Bytes::Shared { .. })), "the key is not copied");
        assert_eq!((b.key(), b.value()), (None, None));
        let headers: Vec<_> = b.headers().iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        assert_eq!(headers, [("h", Some(&b"1"[..])), ("", None)]);
    }

    #[test]
    fn malformed_batches_are_refused() {
        let batch = |offsets: Vec<i64>, data: &[u8], lengths: Vec<u32>| InputBatch {
            topic: String::new(),
            partition: 0,
            timestamps: vec![0; offsets.len()],
            event_times: vec![0; offsets.len()],
            watermarks: vec![0; offsets.len()],
            offsets,
            data: data.to_vec(),
            lengths,
        };
        for (batch, problem) in [
            (batch(vec![1], b"", vec![NULL]), "its lengths end early"),
            (batch(vec![1], b"a", vec![2, NULL, 0]), "a length runs past its data"),
            (batch(vec![1], b"ab", vec![1, NULL, 0]), "its lengths do not frame its data"),
            (batch(vec![1], b"", vec![NULL, NULL, 1, NULL, NULL]), "a null header name"),
        ] {
            let error = records(batch).unwrap_err();
            assert!(error.message().contains(problem), "{error}");
        }
        let mut uneven = batch(vec![1], b"", vec![NULL, NULL, 0]);
        uneven.watermarks.clear();
        assert!(records(uneven).unwrap_err().message().contains("per-record lists differ"));
    }

    #[test]
    fn pack_frames_what_it_is_given() {
        let outputs = vec![
            Output::new(Some("k"), Some("v")).to_output("dlq"),
            Output::new(None::<&str>, None::<&str>).header("h", "1").null_header("").timestamp_ms(5),
            Output::new(None::<&str>, Some("")).timestamp_ms(i64::MIN),
        ];
        let batch = pack(outputs);
        // The least s64 means none on the wire: a transform's own goes as a negative timestamp,
        // which the host refuses as it would from `process`.
        assert_eq!(batch.timestamps, [NONE, 5, NONE + 1]);
        assert_eq!(batch.data, b"kvdlqh1");
        assert_eq!(batch.lengths, [1, 1, 3, 0, NULL, NULL, NULL, 2, 1, 1, 0, NULL, NULL, 0, NULL, 0]);
    }
}
