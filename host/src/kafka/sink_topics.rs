//! What the sink's topics accept, read from their configs at start: the largest record (the
//! smallest of the producer's `message.max.bytes` and the topics' `max.message.bytes`), and each
//! topic's [`TopicRules`] (timestamp bounds, a key for compacted topics).
//!
//! librdkafka refuses a larger record locally (`MSG_SIZE_TOO_LARGE`), and a broker refuses a
//! record batch larger than its topic's limit or a record its topic's rules refuse; either way
//! the epoch could never commit. Weir checks every output against these when the operator returns
//! it (the operator's limits `max_record` and `sink_rules`), and every state write against the
//! changelog topic's size limit when the guest makes it (`max_state_record`), so the record is
//! dead-lettered or fails the pipeline clearly instead.

use std::collections::BTreeMap;

use rdkafka::error::KafkaError;

use super::Admin;
use crate::config::{DEFAULT_MAX_RECORD_BYTES, SinkConfig};
use crate::record::{RecordLimit, SinkRules, TopicRules};

/// Bytes of a v2 record batch's header, which a broker counts against `max.message.bytes`
/// besides the record (`RD_KAFKAP_MSGSET_V2_SIZE`).
const RECORD_BATCH_HEADER_BYTES: usize = 61;

/// What the sink's topics accept.
#[derive(Debug, Clone)]
pub struct SinkTopics {
    /// The largest output record: see [`record_limit`], over the sink topic, its named outputs
    /// and its dead-letter topic.
    pub max_record: RecordLimit,
    /// The sink topic's and the named outputs' rules.
    pub rules: SinkRules,
    /// The dead-letter topic's rules (no rule without one).
    pub dead_letters: TopicRules,
}

/// What `sink`'s topics accept, from one describe-configs request through `admin` (a client of
/// the sink's cluster).
///
/// # Errors
/// When the sink's cluster cannot be reached or refuses to describe a topic's configuration.
pub async fn sink_topics(admin: &Admin, sink: &SinkConfig) -> Result<SinkTopics, KafkaError> {
    let configs = topic_configs(admin, sink.topics().collect()).await?;
    let rules = |topic: &str| TopicRules::from_configs(topic, &configs[topic]);
    Ok(SinkTopics {
        max_record: record_limit(sink, &configs),
        rules: SinkRules {
            topic: sink.topic.as_deref().map(rules).unwrap_or_default(),
            // A PostgreSQL table's output has no topic's rules.
            outputs: sink
                .outputs
                .iter()
                .map(|(name, topic)| (name.clone(), rules(topic)))
                .chain(sink.postgres.iter().filter_map(|pg| Some((pg.output.clone()?, TopicRules::default()))))
                .collect(),
        },
        dead_letters: sink.dead_letter_topic.as_deref().map(rules).unwrap_or_default(),
    })
}

/// The record limit of the changelog topic `changelog` (written by `sink`'s producer, in the
/// checkpoint's transaction): see [`record_limit`]. `admin` is a client of the sink's cluster.
///
/// # Errors
/// When the sink's cluster cannot be reached or refuses to describe the topic's configuration.
pub async fn changelog_record_limit(
    admin: &Admin,
    sink: &SinkConfig,
    changelog: &str,
) -> Result<RecordLimit, KafkaError> {
    Ok(record_limit(sink, &topic_configs(admin, vec![changelog]).await?))
}

/// The configs of `topics`, through `admin`.
async fn topic_configs(
    admin: &Admin,
    mut topics: Vec<&str>,
) -> Result<BTreeMap<String, BTreeMap<String, String>>, KafkaError> {
    topics.sort_unstable();
    topics.dedup();
    if topics.is_empty() {
        // Only a PostgreSQL table: a describe of nothing is refused.
        return Ok(BTreeMap::new());
    }
    admin.topics_configs(&topics).await
}

/// The record limit of `sink`'s producer writing to the topics of `configs`: its
/// `message.max.bytes` (from `sink.producer`, else librdkafka's default of 1,000,000), lowered
/// to any of the topics' `max.message.bytes` less the batch header. Its `setting` names where
/// the smallest limit comes from.
fn record_limit(sink: &SinkConfig, configs: &BTreeMap<String, BTreeMap<String, String>>) -> RecordLimit {
    let mut limit = match sink.producer.get("message.max.bytes").and_then(|v| v.parse::<usize>().ok()) {
        Some(bytes) => RecordLimit { bytes, setting: format!("sink.producer.\"message.max.bytes\" = {bytes}") },
        None => RecordLimit {
            bytes: DEFAULT_MAX_RECORD_BYTES,
            setting: format!(
                "librdkafka's default message.max.bytes = {DEFAULT_MAX_RECORD_BYTES} (set sink.producer.\"message.max.bytes\")"
            ),
        },
    };
    for (topic, configs) in configs {
        let Some(max) = configs.get("max.message.bytes").and_then(|v| v.parse::<usize>().ok()) else { continue };
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
    limit
}
