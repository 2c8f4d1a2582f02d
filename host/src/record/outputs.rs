//! [`Outputs`]: the output records of a call, kept in the packed world's `output-batch` layout
//! as a packed guest returns it, until the sink copies them into its producer. Its conversions
//! from a guest's batch and from and to the contract's `output-record` are in the WebAssembly
//! host (`wasm`).

use super::frames::{Frames, Headers, MalformedBatch, NONE, Start, push_bytes};

/// Output records as flat lists: per record a timestamp; every key, value, sink output name
/// and header back to back in one buffer framed by a list of lengths (DESIGN.md, "The WIT
/// contract", `output-batch`).
///
/// A packed guest's output batch becomes one without a copy ([`Outputs::from_frames`]), and a
/// record costs no allocation of its own; the outputs of a plain guest are packed
/// (`Outputs::from_records`, in the WebAssembly host).
#[derive(Debug, Default)]
pub struct Outputs {
    /// Per record: its timestamp, or [`NONE`].
    timestamps: Vec<i64>,
    data: Vec<u8>,
    lengths: Vec<u32>,
    /// Per record: where its key's length and bytes are.
    starts: Vec<Start>,
}

/// One record of [`Outputs`], borrowed.
#[derive(Debug, Clone)]
pub struct OutputView<'a> {
    /// `None` for a Kafka null key.
    pub key: Option<&'a [u8]>,
    /// `None` for a Kafka null value (a tombstone).
    pub value: Option<&'a [u8]>,
    /// The sink output it goes to; `None` for the sink's topic.
    pub output: Option<&'a str>,
    /// Milliseconds since the Unix epoch; `None` for the timestamp of the batch's last input.
    pub timestamp: Option<i64>,
    /// Name, value (`None` for a null), in order.
    pub headers: Headers<'a>,
}

impl Outputs {
    /// The outputs of a packed guest's call (its `output-batch`'s fields), checked once here so
    /// that reading them cannot fail.
    ///
    /// # Errors
    /// [`MalformedBatch`] when `lengths` and `data` do not frame exactly the records of
    /// `timestamps`, a name is not UTF-8 or a header name is null; it names the record by its
    /// index.
    pub(crate) fn from_frames(timestamps: Vec<i64>, data: Vec<u8>, lengths: Vec<u32>) -> Result<Self, MalformedBatch> {
        let mut frames = Frames { data: &data, lengths: &lengths };
        let mut starts = Vec::new();
        for index in 0..timestamps.len() {
            let malformed = |problem: &str| MalformedBatch(format!("output record {index}: {problem}"));
            let (data_left, lengths_left) = (frames.data.len(), frames.lengths.len());
            starts.push(Start { length: lengths.len() - lengths_left, data: data.len() - data_left });
            frames.bytes().map_err(malformed)?; // key
            frames.bytes().map_err(malformed)?; // value
            frames.text().map_err(malformed)?; // sink output
            for _ in 0..frames.length().map_err(malformed)? {
                frames.text().map_err(malformed)?.ok_or_else(|| malformed("a null header name"))?;
                frames.bytes().map_err(malformed)?;
            }
        }
        if !frames.lengths.is_empty() || !frames.data.is_empty() {
            let (lengths, bytes) = (frames.lengths.len(), frames.data.len());
            return Err(MalformedBatch(format!("{lengths} lengths and {bytes} bytes of data left after its records")));
        }
        Ok(Self { timestamps, data, lengths, starts })
    }

    /// Records in the batch.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Whether the batch holds no record.
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The records, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = OutputView<'_>> {
        self.starts.iter().zip(&self.timestamps).map(|(&start, &timestamp)| {
            let mut frames = Frames::at(&self.data, &self.lengths, start);
            let (key, value) = (frames.framed_bytes(), frames.framed_bytes());
            let output = frames.framed_text();
            let timestamp = (timestamp != NONE).then_some(timestamp);
            OutputView { key, value, output, timestamp, headers: frames.headers() }
        })
    }

    /// Key and value bytes of all the records: what `weir_bytes_out_total` counts.
    pub fn bytes(&self) -> u64 {
        let size = |bytes: Option<&[u8]>| bytes.map_or(0, <[u8]>::len) as u64;
        self.iter().map(|record| size(record.key) + size(record.value)).sum()
    }

    /// Gives the records without a timestamp `timestamp` (milliseconds since the Unix epoch).
    pub(crate) fn set_missing_timestamps(&mut self, timestamp: i64) {
        for missing in self.timestamps.iter_mut().filter(|t| **t == NONE) {
            *missing = timestamp;
        }
    }

    /// Moves `other`'s records to the end of these.
    pub fn append(&mut self, mut other: Outputs) {
        let base = Start::at_end(&self.data, &self.lengths);
        let moved = other.starts.iter().map(|s| Start { length: s.length + base.length, data: s.data + base.data });
        self.starts.extend(moved);
        self.timestamps.append(&mut other.timestamps);
        self.data.append(&mut other.data);
        self.lengths.append(&mut other.lengths);
    }

    /// Adds a record for sink output `output` (`None`: the sink's topic) with `timestamp`
    /// (`None`: none) and `headers` (name, value; `None` for a null value) in order.
    pub(crate) fn push<'h>(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        output: Option<&str>,
        timestamp: Option<i64>,
        headers: impl ExactSizeIterator<Item = (&'h str, Option<&'h [u8]>)>,
    ) {
        let (data, lengths) = (&mut self.data, &mut self.lengths);
        self.starts.push(Start::at_end(data, lengths));
        self.timestamps.push(timestamp.unwrap_or(NONE));
        push_bytes(data, lengths, key);
        push_bytes(data, lengths, value);
        push_bytes(data, lengths, output.map(str::as_bytes));
        lengths.push(headers.len() as u32);
        for (name, value) in headers {
            push_bytes(data, lengths, Some(name.as_bytes()));
            push_bytes(data, lengths, value);
        }
    }
}
