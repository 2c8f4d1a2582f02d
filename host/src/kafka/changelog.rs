//! The pipeline's changelog topic (DESIGN.md, "State"): one compacted partition per task,
//! written inside each checkpoint's transaction and read back read_committed to restore.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::error::KafkaError;

use super::Admin;
use super::reader::{RecordBatch, TopicReader};
use crate::types::TaskId;

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
    reader: TopicReader,
    changelog: Changelog,
}

impl ChangelogReader {
    /// A read_committed consumer of `changelog` on `brokers` (the sink's cluster) with librdkafka
    /// `overrides`, without a consumer group.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(brokers: &str, overrides: &BTreeMap<String, String>, changelog: Changelog) -> Result<Self, KafkaError> {
        Ok(Self {
            reader: TopicReader::new(brokers, overrides, &changelog.topic, "weir-changelog-restore")?,
            changelog,
        })
    }

    /// The changelog it reads.
    pub fn changelog(&self) -> &Changelog {
        &self.changelog
    }

    /// See [`TopicReader::range`].
    ///
    /// # Errors
    /// When the partition's leader cannot be reached within `timeout`.
    pub fn range(&self, partition: i32, timeout: Duration) -> Result<(i64, i64), KafkaError> {
        self.reader.range(partition, timeout)
    }

    /// See [`TopicReader::read`].
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
        apply: impl FnMut(i32, RecordBatch, i64) -> Result<(), E>,
    ) -> Result<(), E> {
        self.reader.read(from, until, batch_size, timeout, kafka, apply)
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
