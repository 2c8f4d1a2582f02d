//! How large a record may be: librdkafka's producer's count of a record's size, and the limit a
//! pipeline sets from its producer's and topics' `message.max.bytes`.

use super::OutputView;
use crate::config::DEFAULT_MAX_RECORD_BYTES;

/// librdkafka's largest per-record overhead in a v2 record batch (`RD_KAFKAP_MESSAGE_V2_MAX_OVERHEAD`:
/// length, attributes, timestamp delta, offset delta, key length, value length and header count,
/// each varint at its widest).
const RECORD_OVERHEAD_BYTES: usize = 5 + 1 + 10 + 5 + 5 + 5 + 5;

/// The size limit of one output record and the setting it comes from, for the error message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLimit {
    /// Largest [`wire_size`] accepted, in bytes; by default [`DEFAULT_MAX_RECORD_BYTES`].
    pub bytes: usize,
    /// The setting that sets it, e.g. `sink.producer."message.max.bytes"`, and what to change.
    pub setting: String,
}

impl Default for RecordLimit {
    /// librdkafka's default `message.max.bytes`.
    fn default() -> Self {
        Self {
            bytes: DEFAULT_MAX_RECORD_BYTES,
            setting: "librdkafka's default `message.max.bytes` (sink.producer.\"message.max.bytes\" in a pipeline)"
                .into(),
        }
    }
}

impl OutputView<'_> {
    /// Size of the record as librdkafka's producer counts it ([`wire_size`]), in bytes.
    pub fn size(&self) -> usize {
        wire_size(self.key, self.value, self.headers.clone().map(|(name, value)| (name.len(), value.map(<[u8]>::len))))
    }
}

/// Size of a record as librdkafka's producer checks it against `message.max.bytes` before
/// queueing it (`rd_kafka_msg_max_wire_size`): key + value + serialised headers (`headers` of
/// (name, value) lengths, `None` for a null value) + the largest per-record overhead, in bytes.
/// Uncompressed, so an upper bound of what the broker sees.
pub fn wire_size(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl Iterator<Item = (usize, Option<usize>)>,
) -> usize {
    let headers: usize = headers
        .map(|(name, value)| {
            // A null value is written as length -1: one varint byte, no bytes.
            let value = value.unwrap_or(0);
            name + value + varint_len(name) + varint_len(value)
        })
        .sum();
    RECORD_OVERHEAD_BYTES + key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len) + headers
}

/// Size of a state write's record in the changelog topic (DESIGN.md, "State"), as librdkafka's
/// producer counts it: the record key (one byte naming the entry, then `key`, the state key with
/// the store's operator and task prefix), the value, and the largest per-record overhead.
pub fn changelog_record_size(key: usize, value: usize) -> usize {
    RECORD_OVERHEAD_BYTES + 1 + key + value
}

/// Bytes of Kafka's zig-zag varint of a length.
fn varint_len(len: usize) -> usize {
    let bits = usize::BITS - (len << 1).leading_zeros();
    (bits as usize).div_ceil(7).max(1)
}
