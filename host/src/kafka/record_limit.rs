//! The largest record the sink's producer can write to a set of topics: the smallest of the
//! producer's `message.max.bytes` and the topics' `max.message.bytes`.
//!
//! librdkafka refuses a larger record locally (`MSG_SIZE_TOO_LARGE`) and a broker refuses a
//! record batch larger than its topic's limit; either way the epoch could never commit. Weir
//! checks every output against the sink topics' limit when the operator returns it
//! ([`crate::wasm::OperatorLimits::max_record`]), and every state write against the changelog
//! topic's when the guest makes it ([`crate::wasm::OperatorLimits::max_state_record`]), so the
//! record is dead-lettered or fails the pipeline clearly instead.

use rdkafka::error::KafkaError;

use super::Admin;
use crate::config::SinkConfig;
use crate::wasm::{DEFAULT_MAX_RECORD_BYTES, RecordLimit};

/// Bytes of a v2 record batch's header, which a broker counts against `max.message.bytes`
/// besides the record (`RD_KAFKAP_MSGSET_V2_SIZE`).
const RECORD_BATCH_HEADER_BYTES: usize = 61;

/// The record limit of `sink`'s outputs: see [`record_limit`], over the sink topic, its named
/// outputs and its dead-letter topic.
///
/// # Errors
/// When the sink's cluster cannot be reached or does not report a topic's configuration.
pub async fn sink_record_limit(sink: &SinkConfig) -> Result<RecordLimit, KafkaError> {
    let mut topics = vec![sink.topic.as_str()];
    topics.extend(sink.outputs.values().map(String::as_str));
    topics.extend(sink.dead_letter_topic.as_deref());
    record_limit(sink, topics).await
}

/// The record limit of the changelog topic `changelog` (written by `sink`'s producer, in the
/// checkpoint's transaction): see [`record_limit`].
///
/// # Errors
/// When the sink's cluster cannot be reached or does not report the topic's configuration.
pub async fn changelog_record_limit(sink: &SinkConfig, changelog: &str) -> Result<RecordLimit, KafkaError> {
    record_limit(sink, vec![changelog]).await
}

/// The record limit of `sink`'s producer writing to `topics`: its `message.max.bytes` (from
/// `sink.producer`, else librdkafka's default of 1,000,000), lowered to any of the topics'
/// `max.message.bytes` less the batch header. Its `setting` names where the smallest limit
/// comes from.
async fn record_limit(sink: &SinkConfig, mut topics: Vec<&str>) -> Result<RecordLimit, KafkaError> {
    let mut limit = match sink.producer.get("message.max.bytes").and_then(|v| v.parse::<usize>().ok()) {
        Some(bytes) => RecordLimit { bytes, setting: format!("sink.producer.\"message.max.bytes\" = {bytes}") },
        None => RecordLimit {
            bytes: DEFAULT_MAX_RECORD_BYTES,
            setting: format!(
                "librdkafka's default message.max.bytes = {DEFAULT_MAX_RECORD_BYTES} (set sink.producer.\"message.max.bytes\")"
            ),
        },
    };
    topics.sort_unstable();
    topics.dedup();
    let admin = Admin::new(&sink.cluster, &sink.producer)?;
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
