//! The largest output record the sink can write: the smallest of the producer's
//! `message.max.bytes` and the sink topics' `max.message.bytes`.
//!
//! librdkafka refuses a larger record locally (`MSG_SIZE_TOO_LARGE`) and a broker refuses a
//! record batch larger than its topic's limit; either way the epoch could never commit. Weir
//! checks every output against this limit when the operator returns it
//! ([`crate::wasm::OperatorLimits::max_record`]), so the record is dead-lettered or fails the
//! pipeline clearly instead.

use rdkafka::error::KafkaError;

use super::Admin;
use crate::config::SinkConfig;
use crate::wasm::{DEFAULT_MAX_RECORD_BYTES, RecordLimit};

/// Bytes of a v2 record batch's header, which a broker counts against `max.message.bytes`
/// besides the record (`RD_KAFKAP_MSGSET_V2_SIZE`).
const RECORD_BATCH_HEADER_BYTES: usize = 61;

/// The record limit of `sink`: its producer's `message.max.bytes` (from `sink.producer`, else
/// librdkafka's default of 1,000,000), lowered to any sink topic's `max.message.bytes` less the
/// batch header. Its `setting` names where the smallest limit comes from.
///
/// # Errors
/// When the sink's cluster cannot be reached or does not report a topic's configuration.
pub async fn sink_record_limit(sink: &SinkConfig) -> Result<RecordLimit, KafkaError> {
    let mut limit = match sink.producer.get("message.max.bytes").and_then(|v| v.parse::<usize>().ok()) {
        Some(bytes) => RecordLimit { bytes, setting: format!("sink.producer.\"message.max.bytes\" = {bytes}") },
        None => RecordLimit {
            bytes: DEFAULT_MAX_RECORD_BYTES,
            setting: format!(
                "librdkafka's default message.max.bytes = {DEFAULT_MAX_RECORD_BYTES} (set sink.producer.\"message.max.bytes\")"
            ),
        },
    };
    let mut topics = vec![sink.topic.as_str()];
    topics.extend(sink.outputs.values().map(String::as_str));
    topics.extend(sink.dead_letter_topic.as_deref());
    topics.sort_unstable();
    topics.dedup();
    let admin = Admin::new(&sink.brokers, &sink.producer)?;
    for (topic, max) in admin.max_message_bytes(&topics).await? {
        let bytes = max.saturating_sub(RECORD_BATCH_HEADER_BYTES);
        if bytes < limit.bytes {
            limit = RecordLimit {
                bytes,
                setting: format!(
                    "max.message.bytes = {max} of topic `{topic}` (less {RECORD_BATCH_HEADER_BYTES} bytes of record batch header)"
                ),
            };
        }
    }
    Ok(limit)
}
