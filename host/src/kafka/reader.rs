//! A read_committed reader of one topic without a consumer group: restores read the changelog
//! with it, and tables (`[[source.tables]]`) their topic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::repeats::LogContext;
use crate::config::ClusterConfig;

/// How long one poll of [`TopicReader::read`] waits; when it returns nothing, the positions are
/// checked for partitions whose end is a transaction marker.
const POLL_TIMEOUT: Duration = Duration::from_millis(20);

/// A batch of records of one partition that [`TopicReader::read`] hands on, in offset order: key,
/// value (`None`: a tombstone), offset.
pub type ReadBatch = Vec<(Vec<u8>, Option<Vec<u8>>, i64)>;

/// One record of a followed topic: key, value (`None`: a tombstone).
pub type KeyValue = (Vec<u8>, Option<Vec<u8>>);

/// Reads partitions of one topic read_committed, from given offsets, without a consumer group.
pub struct TopicReader {
    /// Its context logs each kind of error at most once per interval: a reader nobody polls for
    /// a while (a changelog reader between restores) queues one per connection attempt during a
    /// broker outage, and hands them all to its next poll.
    consumer: BaseConsumer<LogContext>,
    topic: String,
}

impl TopicReader {
    /// A read_committed consumer of `topic` on `cluster` with librdkafka `overrides`, in
    /// consumer group `group`, which it never joins or commits to (it assigns partitions
    /// itself). librdkafka still looks up the group's coordinator (and refuses to assign without
    /// a group), so the principal needs `Describe` on `group` (ACLs): a pipeline's readers use
    /// its `source.group_id`, to which it has the rights already.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        topic: &str,
        group: &str,
    ) -> Result<Self, KafkaError> {
        let context = LogContext::new(format!("topic reader of {topic}"));
        let consumer =
            super::consumer_config(cluster, overrides, &[("group.id", group)]).create_with_context(context)?;
        Ok(Self { consumer, topic: topic.to_owned() })
    }

    /// The start offset and last stable offset of `partition` (the end a read_committed reader
    /// reaches once no transaction is open on it).
    ///
    /// # Errors
    /// When the partition's leader cannot be reached within `timeout`.
    pub fn range(&self, partition: i32, timeout: Duration) -> Result<(i64, i64), KafkaError> {
        match self.consumer.fetch_watermarks(&self.topic, partition, timeout) {
            // A partition added since this client cached the topic's metadata (a changelog grown
            // for a source partition added while running): a metadata request refreshes the
            // cache, then the partition is known.
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownPartition)) => {
                self.consumer.fetch_metadata(Some(&self.topic), timeout)?;
                self.consumer.fetch_watermarks(&self.topic, partition, timeout)
            }
            range => range,
        }
    }

    /// The topic's partition count.
    ///
    /// # Errors
    /// When the metadata cannot be read within `timeout`, or the topic does not exist
    /// (`UnknownTopicOrPartition`).
    pub fn partitions(&self, timeout: Duration) -> Result<i32, KafkaError> {
        let metadata = self.consumer.fetch_metadata(Some(&self.topic), timeout)?;
        let topic = metadata.topics().iter().find(|t| t.name() == self.topic);
        match topic {
            Some(topic) if topic.error().is_none() && !topic.partitions().is_empty() => {
                Ok(topic.partitions().len() as i32)
            }
            _ => Err(KafkaError::MetadataFetch(RDKafkaErrorCode::UnknownTopicOrPartition)),
        }
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
        mut apply: impl FnMut(i32, ReadBatch, i64) -> Result<(), E>,
    ) -> Result<(), E> {
        self.follow(from).map_err(&kafka)?;
        let mut open: BTreeSet<i32> = from.keys().copied().collect();
        let mut batches: BTreeMap<i32, ReadBatch> = BTreeMap::new();
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
                            positions.find_partition(&self.topic, partition).and_then(|e| match e.offset() {
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

    /// Reads each partition of `from` (partition → first offset) from then on, record by record
    /// through [`next_now`](Self::next_now).
    ///
    /// # Errors
    /// When the assignment fails.
    pub fn follow(&self, from: &BTreeMap<i32, i64>) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        for (partition, offset) in from {
            list.add_partition_offset(&self.topic, *partition, Offset::Offset(*offset))?;
        }
        self.consumer.assign(&list)
    }

    /// The next record already fetched, without waiting.
    ///
    /// # Errors
    /// A failed fetch.
    pub fn next_now(&self) -> Option<Result<KeyValue, KafkaError>> {
        self.consumer
            .poll(Duration::ZERO)
            .map(|message| message.map(|m| (m.key().unwrap_or_default().to_vec(), m.payload().map(<[u8]>::to_vec))))
    }
}
