//! The packed batches of the `packed-transform` world (`input-batch`, `output-batch` in
//! guest-sdk/wit): records as a few flat lists, which the canonical ABI copies in one piece each,
//! instead of one value per record and field. Input batches are [`super::RecordBatch`]es.

use super::bindings::current::weir::transform::types::{Header, OutputRecord};
use super::bindings::packed::exports::weir::transform::packed::OutputBatch;

/// The length that stands for a Kafka null (key, value, header value) or the default output.
pub(crate) const NULL: u32 = u32::MAX;
/// The watermark or output timestamp that stands for none.
pub(crate) const NONE: i64 = i64::MIN;

/// A packed guest's output batch whose lengths do not frame its data: a bug in its SDK.
#[derive(Debug, thiserror::Error)]
#[error(
    "the transform returned a malformed output batch ({0}); this is a bug in its SDK: rebuild it with a released one"
)]
pub(crate) struct MalformedBatch(String);

/// Unpacks `batch` onto the end of `outputs`.
///
/// # Errors
/// [`MalformedBatch`] when its lengths and data do not frame exactly its records, a name is not
/// UTF-8 or a header name is null; it names the record by its index in `outputs`.
pub(crate) fn unpack(batch: &OutputBatch, outputs: &mut Vec<OutputRecord>) -> Result<(), MalformedBatch> {
    let mut frames = Frames { data: &batch.data, lengths: batch.lengths.iter() };
    let first = outputs.len();
    // Each record takes at least four lengths: reserve no more than the lengths can frame, so
    // that a guest's long list of timestamps alone cannot make the host allocate.
    outputs.reserve(batch.timestamps.len().min(batch.lengths.len() / 4));
    for (index, &timestamp) in batch.timestamps.iter().enumerate() {
        let malformed = |problem: &str| MalformedBatch(format!("output record {}: {problem}", first + index));
        let key = frames.bytes().map_err(malformed)?.map(<[u8]>::to_vec);
        let value = frames.bytes().map_err(malformed)?.map(<[u8]>::to_vec);
        let output = frames.text().map_err(malformed)?;
        let count = frames.length().map_err(malformed)?;
        let mut headers = Vec::with_capacity(count.min(1024) as usize);
        for _ in 0..count {
            let key = frames.text().map_err(malformed)?.ok_or_else(|| malformed("a null header name"))?;
            let value = frames.bytes().map_err(malformed)?.map(<[u8]>::to_vec);
            headers.push(Header { key, value });
        }
        let timestamp = (timestamp != NONE).then_some(timestamp);
        outputs.push(OutputRecord { key, value, headers, timestamp, output });
    }
    if frames.lengths.len() > 0 || !frames.data.is_empty() {
        let (lengths, bytes) = (frames.lengths.len(), frames.data.len());
        return Err(MalformedBatch(format!("{lengths} lengths and {bytes} bytes of data left after its records")));
    }
    Ok(())
}

/// Reads an output batch's lengths and the byte ranges they frame, in order.
struct Frames<'a> {
    data: &'a [u8],
    lengths: std::slice::Iter<'a, u32>,
}

impl<'a> Frames<'a> {
    fn length(&mut self) -> Result<u32, &'static str> {
        self.lengths.next().copied().ok_or("its lengths end early")
    }

    /// The next byte range; `None` for a null.
    fn bytes(&mut self) -> Result<Option<&'a [u8]>, &'static str> {
        let length = self.length()?;
        if length == NULL {
            return Ok(None);
        }
        let (bytes, rest) = self.data.split_at_checked(length as usize).ok_or("a length runs past its data")?;
        self.data = rest;
        Ok(Some(bytes))
    }

    /// The next byte range as UTF-8 text; `None` for a null.
    fn text(&mut self) -> Result<Option<String>, &'static str> {
        match self.bytes()? {
            Some(bytes) => String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| "a name that is not UTF-8"),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(timestamps: Vec<i64>, data: &[u8], lengths: Vec<u32>) -> OutputBatch {
        OutputBatch { timestamps, data: data.to_vec(), lengths }
    }

    #[test]
    fn unpack_reads_what_the_wit_describes() {
        let batch = output(vec![5, NONE], b"kvdlqh1", vec![1, 1, 3, 0, NULL, NULL, NULL, 2, 1, 1, 0, NULL]);
        let mut outputs = Vec::new();
        unpack(&batch, &mut outputs).unwrap();
        assert_eq!(outputs.len(), 2);
        let (first, second) = (&outputs[0], &outputs[1]);
        assert_eq!((first.key.as_deref(), first.value.as_deref()), (Some(&b"k"[..]), Some(&b"v"[..])));
        assert_eq!((first.output.as_deref(), first.timestamp, first.headers.len()), (Some("dlq"), Some(5), 0));
        assert_eq!((second.key.as_deref(), second.value.as_deref(), second.output.as_deref()), (None, None, None));
        assert_eq!(second.timestamp, None);
        let headers: Vec<_> = second.headers.iter().map(|h| (h.key.as_str(), h.value.as_deref())).collect();
        assert_eq!(headers, [("h", Some(&b"1"[..])), ("", None)]);
    }

    #[test]
    fn unpack_refuses_batches_that_do_not_frame() {
        for (batch, problem) in [
            (output(vec![0], b"", vec![NULL, NULL, NULL]), "output record 0: its lengths end early"),
            (output(vec![0], b"ab", vec![3, NULL, NULL, 0]), "output record 0: a length runs past its data"),
            (output(vec![0], b"", vec![NULL, NULL, NULL, 1, NULL, NULL]), "output record 0: a null header name"),
            (
                output(vec![0, 0], b"\xff", vec![NULL, NULL, NULL, 0, NULL, NULL, 1, 0]),
                "output record 1: a name that is not UTF-8",
            ),
            (output(vec![0], b"x", vec![NULL, NULL, NULL, 0]), "0 lengths and 1 bytes of data left after its records"),
            (output(vec![], b"", vec![0]), "1 lengths and 0 bytes of data left"),
        ] {
            let error = unpack(&batch, &mut Vec::new()).unwrap_err().to_string();
            assert!(error.contains(problem), "{error}");
        }
        // A second run of a call's batch (another partition) names its records after the first's.
        let mut outputs = Vec::new();
        unpack(&output(vec![0], b"", vec![NULL, NULL, NULL, 0]), &mut outputs).unwrap();
        let error = unpack(&output(vec![0], b"", vec![NULL]), &mut outputs).unwrap_err().to_string();
        assert!(error.contains("output record 1: its lengths end early"), "{error}");
    }
}
