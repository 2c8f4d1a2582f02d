//! The pipeline's changelog topic (DESIGN.md, "State"): one compacted partition per task,
//! written inside each checkpoint's transaction and read back read_committed to restore.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::Admin;
use crate::types::TaskId;

/// How long one poll of a restore waits; when it returns nothing, the positions are checked for
/// partitions whose end is a transaction marker.
const POLL_TIMEOUT: Duration = Duration::from_millis(20);

/// A pipeline's changelog topic and which of its partitions holds each task.
///
/// Task (source topic i of n, partition p) writes partition `p * n + i`: a source partition added
/// later never moves another task's changelog partition.
#[derive(Debug, Clone)]
pub struct Changelog {
    /// The topic (`state.changelog_topic`).
    pub topic: String,
    /// The pipeline's source topics, in the pipeline file's order.
    source_topics: Vec<String>,
}

/// What is wrong with an existing changelog topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangelogProblem {
    /// Its `cleanup.policy` is not `compact` (it would lose state to retention).
    NotCompacted(String),
    /// It has more partitions than the pipeline's tasks can use: another pipeline's, or the
    /// source topics changed.
    TooManyPartitions {
        /// Partitions the topic has.
        found: i32,
        /// Partitions the pipeline needs.
        needed: i32,
    },
}

impl Changelog {
    /// The changelog `topic` of a pipeline reading `source_topics`.
    pub fn new(topic: &str, source_topics: &[String]) -> Self {
        Self { topic: topic.to_owned(), source_topics: source_topics.to_vec() }
    }

    /// The pipeline's source topics, in the pipeline file's order.
    pub fn source_topics(&self) -> &[String] {
        &self.source_topics
    }

    /// The changelog partition of `task`.
    ///
    /// # Panics
    /// If the task's topic is not a source topic (a bug in Weir).
    pub fn partition(&self, task: &TaskId) -> i32 {
        let index = self
            .source_topics
            .iter()
            .position(|t| *t == task.topic)
            .unwrap_or_else(|| panic!("task {task} reads no source topic of the pipeline (this is a bug in Weir)"));
        task.partition * self.source_topics.len() as i32 + index as i32
    }

    /// Partitions the topic needs for `tasks`.
    pub fn partitions_needed<'a>(&self, tasks: impl IntoIterator<Item = &'a TaskId>) -> i32 {
        tasks.into_iter().map(|t| self.partition(t) + 1).max().unwrap_or(1)
    }

    /// Creates the topic (`cleanup.policy=compact`, the broker's replication factor) with
    /// `needed` partitions when missing, adds partitions when it has fewer, and says what is
    /// wrong with an existing one that cannot serve.
    ///
    /// # Errors
    /// `Err(KafkaError)` when the cluster refuses or cannot be reached; `Ok(Err(problem))` when
    /// the existing topic cannot be used.
    pub async fn ensure(&self, admin: &Admin, needed: i32) -> Result<Result<(), ChangelogProblem>, KafkaError> {
        let found = admin.topics(&[self.topic.as_str()])?;
        match found.get(&self.topic) {
            Some(super::TopicCheck::Exists(partitions)) => {
                let policy = admin.topic_config(&self.topic, "cleanup.policy").await?;
                if !policy.split(',').any(|p| p.trim() == "compact") {
                    return Ok(Err(ChangelogProblem::NotCompacted(policy)));
                }
                if *partitions > needed {
                    return Ok(Err(ChangelogProblem::TooManyPartitions { found: *partitions, needed }));
                }
                if *partitions < needed {
                    admin.create_partitions(&self.topic, needed).await?;
                    tracing::info!(topic = %self.topic, from = partitions, to = needed, "added partitions to the changelog topic for new tasks");
                }
            }
            _ => {
                admin.create_topic_with(&self.topic, needed, &[("cleanup.policy", "compact")]).await?;
                tracing::info!(topic = %self.topic, partitions = needed, "created the changelog topic");
            }
        }
        Ok(Ok(()))
    }
}

/// Reads changelog partitions read_committed up to their last stable offset, for a restore.
pub struct ChangelogReader {
    consumer: BaseConsumer<RestoreContext>,
    changelog: Changelog,
}

/// Logs the consumer's errors except reaching a partition's end, which librdkafka reports as an
/// error event and which is a restore's normal end.
struct RestoreContext;

impl ClientContext for RestoreContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(error, KafkaError::PartitionEOF(_)) {
            tracing::error!(%error, reason, "changelog reader");
        }
    }
}

impl ConsumerContext for RestoreContext {}

/// A batch of changelog records of one partition, in offset order: key, value (`None`: a
/// tombstone), offset.
pub type RecordBatch = Vec<(Vec<u8>, Option<Vec<u8>>, i64)>;

impl ChangelogReader {
    /// A read_committed consumer of `changelog` on `brokers` (the sink's cluster) with librdkafka
    /// `overrides`, without a consumer group.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(brokers: &str, overrides: &BTreeMap<String, String>, changelog: Changelog) -> Result<Self, KafkaError> {
        let own = [
            ("group.id", "weir-changelog-restore"),
            ("isolation.level", "read_committed"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
            ("auto.offset.reset", "error"),
        ];
        let consumer = super::client_config(brokers, overrides, &own).create_with_context(RestoreContext)?;
        Ok(Self { consumer, changelog })
    }

    /// The changelog it reads.
    pub fn changelog(&self) -> &Changelog {
        &self.changelog
    }

    /// The start offset and last stable offset of `partition` (the end a read_committed reader
    /// reaches once no transaction is open on it).
    ///
    /// # Errors
    /// When the partition's leader cannot be reached within `timeout`.
    pub fn range(&self, partition: i32, timeout: Duration) -> Result<(i64, i64), KafkaError> {
        self.consumer.fetch_watermarks(&self.changelog.topic, partition, timeout)
    }

    /// Reads each partition of `from` (partition → first offset) up to `until[partition]`,
    /// calling `apply(partition, batch, next_offset)` with batches of at most `batch_size`
    /// records; the last call of a partition has `next_offset == until[partition]`.
    ///
    /// # Errors
    /// `kafka(error)` when a fetch fails or no record arrives for `timeout`; `apply`'s error.
    pub fn read<E>(
        &self,
        from: &BTreeMap<i32, i64>,
        until: &BTreeMap<i32, i64>,
        batch_size: usize,
        timeout: Duration,
        kafka: impl Fn(KafkaError) -> E,
        mut apply: impl FnMut(i32, RecordBatch, i64) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut list = TopicPartitionList::new();
        for (partition, offset) in from {
            list.add_partition_offset(&self.changelog.topic, *partition, Offset::Offset(*offset)).map_err(&kafka)?;
        }
        self.consumer.assign(&list).map_err(&kafka)?;
        let mut open: BTreeSet<i32> = from.keys().copied().collect();
        let mut batches: BTreeMap<i32, RecordBatch> = BTreeMap::new();
        let mut last_progress = Instant::now();
        while !open.is_empty() {
            match self.consumer.poll(POLL_TIMEOUT) {
                Some(Ok(message)) => {
                    last_progress = Instant::now();
                    let partition = message.partition();
                    let batch = batches.entry(partition).or_default();
                    let key = message.key().unwrap_or_default().to_vec();
                    batch.push((key, message.payload().map(<[u8]>::to_vec), message.offset()));
                    let next = message.offset() + 1;
                    if next >= until[&partition] {
                        open.remove(&partition);
                        apply(partition, std::mem::take(batch), until[&partition])?;
                    } else if batch.len() >= batch_size {
                        apply(partition, std::mem::take(batch), next)?;
                    }
                }
                Some(Err(error)) => return Err(kafka(error)),
                None => {
                    // Transaction markers and aborted records are never handed out, but the
                    // position steps over them: a partition whose position reached its end is done.
                    let positions = self.consumer.position().map_err(&kafka)?;
                    for partition in open.clone() {
                        let position =
                            positions.find_partition(&self.changelog.topic, partition).and_then(|e| match e.offset() {
                                Offset::Offset(offset) => Some(offset),
                                _ => None,
                            });
                        if position.is_some_and(|p| p >= until[&partition]) {
                            open.remove(&partition);
                            apply(partition, batches.remove(&partition).unwrap_or_default(), until[&partition])?;
                            last_progress = Instant::now();
                        }
                    }
                    if !open.is_empty() && last_progress.elapsed() > timeout {
                        return Err(kafka(KafkaError::Global(RDKafkaErrorCode::OperationTimedOut)));
                    }
                }
            }
        }
        self.consumer.unassign().map_err(&kafka)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_of_several_topics_interleave_and_never_move() {
        let changelog = Changelog::new("c", &["a".into(), "b".into()]);
        let task = |topic: &str, partition| TaskId { topic: topic.into(), partition };
        assert_eq!(changelog.partition(&task("a", 0)), 0);
        assert_eq!(changelog.partition(&task("b", 0)), 1);
        assert_eq!(changelog.partition(&task("a", 1)), 2);
        assert_eq!(changelog.partition(&task("b", 5)), 11);
        assert_eq!(changelog.partitions_needed(&[task("a", 0), task("a", 1), task("b", 0)]), 3);
        let single = Changelog::new("c", &["a".into()]);
        assert_eq!(single.partition(&task("a", 7)), 7);
    }
}
