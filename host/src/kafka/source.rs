//! The source: one read_committed consumer with every source partition assigned manually.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::types::TaskId;

/// A committed offset of the pipeline's consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// Next offset to read.
    pub offset: i64,
    /// Metadata committed with it (a [`super::CheckpointMetadata`] when Weir committed it).
    pub metadata: String,
}

/// The pipeline's consumer: `isolation.level=read_committed`, no auto commit, manual assignment
/// (the group is used for its committed offsets only; it never rebalances), and
/// `auto.offset.reset=error`: a position out of the log's range is an error for Weir's
/// `source.offset_reset` policy to handle, never a silent jump.
pub struct Source {
    consumer: BaseConsumer,
}

impl Source {
    /// A consumer of `brokers` in group `group_id`, with librdkafka `overrides`.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(brokers: &str, overrides: &BTreeMap<String, String>, group_id: &str) -> Result<Self, KafkaError> {
        let own = [
            ("group.id", group_id),
            ("isolation.level", "read_committed"),
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("enable.partition.eof", "false"),
            ("auto.offset.reset", "error"),
        ];
        Ok(Self { consumer: super::client_config(brokers, overrides, &own).create()? })
    }

    /// The underlying consumer, for polling.
    pub fn consumer(&self) -> &BaseConsumer {
        &self.consumer
    }

    /// The group's committed offsets of `tasks` (partitions without one are left out).
    ///
    /// With `read_committed`, librdkafka asks for stable offsets (KIP-447): the fetch waits for
    /// transactional offset commits still in flight.
    ///
    /// # Errors
    /// When the group coordinator cannot be reached within `timeout`.
    pub fn group_offsets(
        &self,
        tasks: &[TaskId],
        timeout: Duration,
    ) -> Result<BTreeMap<TaskId, GroupOffset>, KafkaError> {
        let mut list = TopicPartitionList::new();
        for task in tasks {
            list.add_partition(&task.topic, task.partition);
        }
        let committed = self.consumer.committed_offsets(list, timeout)?;
        Ok(committed
            .elements()
            .iter()
            .filter_map(|element| match element.offset() {
                Offset::Offset(offset) => Some((
                    TaskId { topic: element.topic().to_owned(), partition: element.partition() },
                    GroupOffset { offset, metadata: element.metadata().to_owned() },
                )),
                _ => None,
            })
            .collect())
    }

    /// For each of `tasks`, the earliest offset whose timestamp is at or after `timestamp_ms`, or
    /// the partition's end offset when there is none.
    ///
    /// # Errors
    /// When the brokers cannot be reached within `timeout`.
    pub fn offsets_for_timestamp(
        &self,
        tasks: &[TaskId],
        timestamp_ms: i64,
        timeout: Duration,
    ) -> Result<BTreeMap<TaskId, i64>, KafkaError> {
        let mut list = TopicPartitionList::new();
        for task in tasks {
            list.add_partition_offset(&task.topic, task.partition, Offset::Offset(timestamp_ms))?;
        }
        let found = self.consumer.offsets_for_times(list, timeout)?;
        let mut offsets = BTreeMap::new();
        for element in found.elements() {
            let task = TaskId { topic: element.topic().to_owned(), partition: element.partition() };
            let offset = match element.offset() {
                Offset::Offset(offset) => offset,
                _ => self.watermarks(&task, timeout)?.1,
            };
            offsets.insert(task, offset);
        }
        Ok(offsets)
    }

    /// The end offset of each of `tasks`, read in one `ListOffsets` request per leader: the
    /// last stable offset, the consumer being read_committed (KIP-98). Partitions whose leader
    /// did not answer are left out.
    ///
    /// # Errors
    /// When the brokers cannot be reached within `timeout`.
    pub fn end_offsets(&self, tasks: &[TaskId], timeout: Duration) -> Result<BTreeMap<TaskId, i64>, KafkaError> {
        let mut list = TopicPartitionList::new();
        for task in tasks {
            list.add_partition_offset(&task.topic, task.partition, Offset::End)?;
        }
        let found = self.consumer.offsets_for_times(list, timeout)?;
        Ok(found
            .elements()
            .iter()
            .filter_map(|element| match (element.error(), element.offset()) {
                (Ok(()), Offset::Offset(offset)) => {
                    Some((TaskId { topic: element.topic().to_owned(), partition: element.partition() }, offset))
                }
                _ => None,
            })
            .collect())
    }

    /// Assigns every partition of `positions`, starting at the given offsets (replacing any
    /// earlier assignment).
    ///
    /// # Errors
    /// When librdkafka refuses the assignment.
    pub fn assign(&self, positions: &BTreeMap<TaskId, i64>) -> Result<(), KafkaError> {
        self.consumer.assign(&Self::position_list(positions)?)
    }

    /// Adds the partitions of `positions` to the assignment, starting at the given offsets.
    ///
    /// # Errors
    /// When librdkafka refuses the assignment.
    pub fn assign_more(&self, positions: &BTreeMap<TaskId, i64>) -> Result<(), KafkaError> {
        self.consumer.incremental_assign(&Self::position_list(positions)?)
    }

    fn position_list(positions: &BTreeMap<TaskId, i64>) -> Result<TopicPartitionList, KafkaError> {
        let mut list = TopicPartitionList::new();
        for (task, offset) in positions {
            list.add_partition_offset(&task.topic, task.partition, Offset::Offset(*offset))?;
        }
        Ok(list)
    }

    /// The consumer's position in each assigned partition that has one: the offset after the
    /// last record handed to Weir, or further when librdkafka stepped over records a
    /// read_committed reader never receives (transaction markers, aborted records).
    ///
    /// # Errors
    /// When librdkafka cannot report the assignment.
    pub fn positions(&self) -> Result<BTreeMap<TaskId, i64>, KafkaError> {
        Ok(self
            .consumer
            .position()?
            .elements()
            .iter()
            .filter_map(|element| match element.offset() {
                Offset::Offset(offset) => {
                    Some((TaskId { topic: element.topic().to_owned(), partition: element.partition() }, offset))
                }
                _ => None,
            })
            .collect())
    }

    /// The number of partitions of each of `topics` that exists (a deleted topic is left out).
    ///
    /// # Errors
    /// When the cluster cannot be reached within `timeout`.
    pub fn partition_counts(&self, topics: &[String], timeout: Duration) -> Result<BTreeMap<String, i32>, KafkaError> {
        let mut counts = BTreeMap::new();
        // One request per topic: the metadata of every topic of a large cluster is not needed.
        for topic in topics {
            let metadata = self.consumer.fetch_metadata(Some(topic), timeout)?;
            if let Some(found) = metadata.topics().iter().find(|t| t.name() == topic && t.error().is_none()) {
                counts.insert(topic.clone(), found.partitions().len() as i32);
            }
        }
        Ok(counts)
    }

    /// The group metadata to pass to `send_offsets_to_transaction`.
    ///
    /// # Errors
    /// When the consumer has no group (a bug: [`Source::new`] always sets one).
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata, KafkaError> {
        self.consumer.group_metadata().ok_or(KafkaError::ClientCreation("the source consumer has no group.id".into()))
    }

    /// The offset list of a checkpoint: next offset per partition, each with `metadata` (a
    /// [`super::CheckpointMetadata`]).
    ///
    /// # Errors
    /// When an offset is invalid.
    pub fn offset_list(offsets: &BTreeMap<TaskId, i64>, metadata: &str) -> Result<TopicPartitionList, KafkaError> {
        let mut list = TopicPartitionList::new();
        for (task, offset) in offsets {
            list.add_partition_offset(&task.topic, task.partition, Offset::Offset(*offset))?;
        }
        for mut element in list.elements() {
            element.set_metadata(metadata);
        }
        Ok(list)
    }

    /// Commits `offsets` for the group directly (at-least-once and none guarantees).
    ///
    /// # Errors
    /// When the commit fails.
    pub fn commit(&self, offsets: &BTreeMap<TaskId, i64>, metadata: &str) -> Result<(), KafkaError> {
        self.consumer.commit(&Self::offset_list(offsets, metadata)?, rdkafka::consumer::CommitMode::Sync)
    }

    /// Low and high watermarks of a partition (the high one is the last stable offset under
    /// read_committed).
    ///
    /// # Errors
    /// When the leader cannot be reached within `timeout`.
    pub fn watermarks(&self, task: &TaskId, timeout: Duration) -> Result<(i64, i64), KafkaError> {
        self.consumer.fetch_watermarks(&task.topic, task.partition, timeout)
    }
}
