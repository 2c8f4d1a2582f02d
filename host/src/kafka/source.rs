//! The source: one read_committed consumer with every source partition assigned manually.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerGroupMetadata};
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};

use crate::types::{CheckpointId, TaskId};

/// Prefix of the per-partition offset metadata Weir commits with each checkpoint.
const METADATA_PREFIX: &str = "weir:ckpt=";

/// The offset metadata naming checkpoint `id`: `weir:ckpt=<id>`.
pub fn checkpoint_metadata(id: CheckpointId) -> String {
    format!("{METADATA_PREFIX}{id}")
}

/// The checkpoint a group offset's metadata names, if Weir wrote it.
pub fn parse_checkpoint_metadata(metadata: &str) -> Option<CheckpointId> {
    metadata.strip_prefix(METADATA_PREFIX)?.parse().ok().map(CheckpointId)
}

/// A committed offset of the pipeline's consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// Next offset to read.
    pub offset: i64,
    /// Metadata committed with it (`weir:ckpt=N` when Weir committed it).
    pub metadata: String,
}

/// The pipeline's consumer: `isolation.level=read_committed`, no auto commit, manual assignment
/// (the group is used for its committed offsets only; it never rebalances).
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

    /// For each of `tasks`, the earliest offset whose timestamp is at or after `timestamp_ms`
    /// (the end of the partition when there is none).
    ///
    /// # Errors
    /// When the brokers cannot be reached within `timeout`.
    pub fn offsets_for_timestamp(
        &self,
        tasks: &[TaskId],
        timestamp_ms: i64,
        timeout: Duration,
    ) -> Result<BTreeMap<TaskId, Offset>, KafkaError> {
        let mut list = TopicPartitionList::new();
        for task in tasks {
            list.add_partition_offset(&task.topic, task.partition, Offset::Offset(timestamp_ms))?;
        }
        let found = self.consumer.offsets_for_times(list, timeout)?;
        Ok(found
            .elements()
            .iter()
            .map(|e| (TaskId { topic: e.topic().to_owned(), partition: e.partition() }, e.offset()))
            .collect())
    }

    /// Assigns every partition of `positions`, starting at the given offsets.
    ///
    /// # Errors
    /// When librdkafka refuses the assignment.
    pub fn assign(&self, positions: &BTreeMap<TaskId, Offset>) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        for (task, offset) in positions {
            list.add_partition_offset(&task.topic, task.partition, *offset)?;
        }
        self.consumer.assign(&list)
    }

    /// The group metadata to pass to `send_offsets_to_transaction`.
    ///
    /// # Errors
    /// When the consumer has no group (a bug: [`Source::new`] always sets one).
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata, KafkaError> {
        self.consumer.group_metadata().ok_or(KafkaError::ClientCreation("the source consumer has no group.id".into()))
    }

    /// The offset list of a checkpoint: next offset per partition, metadata `weir:ckpt=<id>`.
    ///
    /// # Errors
    /// When an offset is invalid.
    pub fn offset_list(offsets: &BTreeMap<TaskId, i64>, id: CheckpointId) -> Result<TopicPartitionList, KafkaError> {
        let mut list = TopicPartitionList::new();
        let metadata = checkpoint_metadata(id);
        for (task, offset) in offsets {
            list.add_partition_offset(&task.topic, task.partition, Offset::Offset(*offset))?;
        }
        for mut element in list.elements() {
            element.set_metadata(metadata.clone());
        }
        Ok(list)
    }

    /// Commits `offsets` for the group directly (at-least-once and none guarantees).
    ///
    /// # Errors
    /// When the commit fails.
    pub fn commit(&self, offsets: &BTreeMap<TaskId, i64>, id: CheckpointId) -> Result<(), KafkaError> {
        self.consumer.commit(&Self::offset_list(offsets, id)?, rdkafka::consumer::CommitMode::Sync)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_metadata_round_trips_and_rejects_foreign_metadata() {
        assert_eq!(checkpoint_metadata(CheckpointId(42)), "weir:ckpt=42");
        assert_eq!(parse_checkpoint_metadata("weir:ckpt=42"), Some(CheckpointId(42)));
        assert_eq!(parse_checkpoint_metadata(""), None);
        assert_eq!(parse_checkpoint_metadata("weir:ckpt=x"), None);
        assert_eq!(parse_checkpoint_metadata("reset by hand"), None);
    }
}
