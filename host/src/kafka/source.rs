//! The source: one read_committed consumer, a static member of the pipeline's consumer group
//! (KIP-345) with the cooperative-sticky assignor (KIP-429), or a plain client of the group for
//! its offsets (`weir status`).
//!
//! # Rebalances
//! The group's rebalance events are not applied by the consumer: [`GroupContext`] keeps them,
//! and the runner takes each with [`Source::take_rebalance`] after a poll, finishes or drops the
//! work of revoked partitions, restores assigned ones, and only then calls
//! [`Source::unassign`] or [`Source::assign_more`]. librdkafka waits for that call (its
//! `WAIT_ASSIGN_CALL` / `WAIT_UNASSIGN_CALL` states) and pauses the assignment meanwhile.

use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, mpsc};
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::group::{decode_assignment, instance_of};
use super::repeats::{Repeats, log_client_error};
use crate::config::ClusterConfig;
use crate::types::TaskId;
use rdkafka::config::RDKafkaLogLevel;

/// A change of the partitions the group gives this process, to apply between polls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rebalance {
    /// These partitions are now this process's (cooperative: in addition to those it has).
    Assign(Vec<TaskId>),
    /// These partitions must be given up. `lost`: the group already gave them to another member
    /// (this process missed `session.timeout.ms` or `max.poll.interval.ms`), so nothing of them
    /// may be committed any more.
    Revoke {
        /// The partitions.
        tasks: Vec<TaskId>,
        /// Whether the assignment was lost rather than revoked in order.
        lost: bool,
    },
}

/// The source consumer's context: keeps the group's rebalance events for the runner (see the
/// module doc) while `defer` is set; applies them at once otherwise (on close).
#[derive(Default)]
pub struct GroupContext {
    /// Events received and not yet taken, oldest first.
    pending: Mutex<Vec<Rebalance>>,
    /// The event taken last, until the runner applies it: librdkafka waits for that call, even
    /// to close the consumer.
    unapplied: Mutex<Option<Rebalance>>,
    defer: AtomicBool,
    /// librdkafka's error events, logged once per kind and interval (a broker outage raises
    /// one per connection attempt).
    repeats: Repeats,
}

impl ClientContext for GroupContext {
    fn log(&self, _: RDKafkaLogLevel, facility: &str, line: &str) {
        super::failure::note_client_log(facility, line);
    }
    fn error(&self, error: KafkaError, reason: &str) {
        log_client_error(&self.repeats, "source consumer", &error, reason);
    }
}

impl ConsumerContext for GroupContext {
    fn rebalance(&self, consumer: &BaseConsumer<Self>, err: RDKafkaRespErr, tpl: &mut TopicPartitionList) {
        let tasks: Vec<TaskId> = tpl.elements().iter().map(|e| TaskId::new(e.topic(), e.partition())).collect();
        let event = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => Rebalance::Assign(tasks),
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                Rebalance::Revoke { tasks, lost: consumer.assignment_lost() }
            }
            _ => {
                tracing::error!(error = %RDKafkaErrorCode::from(err), "consumer group rebalance failed");
                return;
            }
        };
        if self.defer.load(Ordering::Acquire) {
            self.pending.lock().unwrap_or_else(|e| e.into_inner()).push(event);
            return;
        }
        // Closing: nothing runs any more, so the assignment is applied as librdkafka asks.
        apply(consumer, &event, tpl);
    }
}

/// Applies `event` (of the partitions of `tpl`) as librdkafka's default rebalance does.
fn apply(consumer: &BaseConsumer<GroupContext>, event: &Rebalance, tpl: &TopicPartitionList) {
    let applied = match (event, consumer.rebalance_protocol()) {
        (Rebalance::Assign(_), RebalanceProtocol::Cooperative) => consumer.incremental_assign(tpl),
        (Rebalance::Assign(_), _) => consumer.assign(tpl),
        (Rebalance::Revoke { .. }, RebalanceProtocol::Cooperative) => consumer.incremental_unassign(tpl),
        (Rebalance::Revoke { .. }, _) => consumer.unassign(),
    };
    if let Err(error) = applied {
        tracing::warn!(%error, "applying a rebalance while closing the source consumer");
    }
}

/// The partitions of `tasks`, without offsets.
fn partition_list(tasks: &[TaskId]) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for task in tasks {
        list.add_partition(&task.topic, task.partition);
    }
    list
}

/// A committed offset of the pipeline's consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffset {
    /// Next offset to read.
    pub offset: i64,
    /// Metadata committed with it (a [`super::CheckpointMetadata`] when Weir committed it).
    pub metadata: String,
}

/// The pipeline's consumer: `isolation.level=read_committed`, no auto commit, and
/// `auto.offset.reset=error`: a position out of the log's range is an error for Weir's
/// `source.offset_reset` policy to handle, never a silent jump. As a member of the group
/// ([`Source::member`]) it subscribes to the source topics; otherwise it only reads the group's
/// offsets and the partitions' watermarks.
pub struct Source {
    /// Closed on a thread of its own when the source is dropped ([`close`]).
    consumer: ManuallyDrop<BaseConsumer<GroupContext>>,
    group_id: String,
}

/// How a member of the group is configured: see [`Source::member`].
#[derive(Debug, Clone)]
pub struct Membership<'a> {
    /// `group.instance.id` (KIP-345 static membership): `weir run --instance`.
    pub instance: &'a str,
    /// `topic.metadata.refresh.interval.ms`: how soon partitions added to a source topic reach
    /// the group (`source.partition_discovery_interval_ms`).
    pub discovery_interval: Duration,
}

impl Source {
    /// A client of `cluster` for group `group_id`'s offsets, with librdkafka `overrides`; it never
    /// joins the group.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn new(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        group_id: &str,
    ) -> Result<Self, KafkaError> {
        Self::create(cluster, overrides, group_id, &[])
    }

    /// A member of group `group_id`: static (`group.instance.id` = `membership.instance`), with
    /// the `cooperative-sticky` assignor, so a restart within `session.timeout.ms` keeps its
    /// partitions and a rebalance moves only the partitions that change owner. Call
    /// [`Source::subscribe`] to join.
    ///
    /// # Errors
    /// When librdkafka rejects the configuration.
    pub fn member(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        group_id: &str,
        membership: &Membership<'_>,
    ) -> Result<Self, KafkaError> {
        let refresh = membership.discovery_interval.as_millis().to_string();
        let own = [
            ("group.instance.id", membership.instance),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("topic.metadata.refresh.interval.ms", refresh.as_str()),
        ];
        let source = Self::create(cluster, overrides, group_id, &own)?;
        source.consumer.context().defer.store(true, Ordering::Release);
        Ok(source)
    }

    fn create(
        cluster: &ClusterConfig,
        overrides: &BTreeMap<String, String>,
        group_id: &str,
        member: &[(&str, &str)],
    ) -> Result<Self, KafkaError> {
        let own: Vec<(&str, &str)> = [("group.id", group_id)].into_iter().chain(member.iter().copied()).collect();
        let consumer = super::consumer_config(cluster, overrides, &own).create_with_context(GroupContext::default())?;
        Ok(Self { consumer: ManuallyDrop::new(consumer), group_id: group_id.to_owned() })
    }

    /// Joins the group for `topics`; the assignment arrives as a [`Rebalance`] from a later poll.
    ///
    /// # Errors
    /// When librdkafka refuses the subscription.
    pub fn subscribe(&self, topics: &[String]) -> Result<(), KafkaError> {
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        self.consumer.subscribe(&topics)
    }

    /// Leaves the group and joins it again for `topics`, so that the leader assigns every
    /// partition anew: a static member that rejoins keeps its old assignment without a
    /// rebalance (KIP-345), which leaves partitions added meanwhile without an owner. Every
    /// partition is revoked first (a [`Rebalance::Revoke`], to apply as usual); librdkafka sends
    /// `LeaveGroup` once that is applied (a static member leaves only when it unsubscribes, never
    /// on close) and then joins with the subscription.
    ///
    /// # Errors
    /// When librdkafka refuses the subscription.
    pub fn rejoin(&self, topics: &[String]) -> Result<(), KafkaError> {
        self.consumer.unsubscribe();
        self.subscribe(topics)
    }

    /// The group's assignment as its coordinator describes it (`DescribeGroups`): each partition
    /// a member owns, with the member's `group.instance.id` (the coordinator names a static
    /// member `<group.instance.id>-<uuid>`; a dynamic member's whole member id is given). `None`
    /// while the group is not `Stable` (its assignments are being replaced) or when a member's
    /// assignment cannot be decoded; empty when the group has no member.
    ///
    /// # Errors
    /// When the coordinator cannot be reached within `timeout`.
    pub fn owners(&self, timeout: Duration) -> Result<Option<BTreeMap<TaskId, String>>, KafkaError> {
        let groups = self.consumer.fetch_group_list(Some(&self.group_id), timeout)?;
        let Some(group) = groups.groups().iter().find(|g| g.name() == self.group_id) else {
            return Ok(Some(BTreeMap::new()));
        };
        match group.state() {
            "Stable" => {}
            "Empty" | "Dead" => return Ok(Some(BTreeMap::new())),
            _ => return Ok(None),
        }
        let mut owners = BTreeMap::new();
        for member in group.members() {
            match decode_assignment(member.assignment().unwrap_or_default()) {
                Ok(assigned) => owners.extend(assigned.into_iter().map(|task| (task, instance_of(member.id())))),
                Err(error) => {
                    tracing::debug!(member = member.id(), %error, "cannot read a group member's assignment");
                    return Ok(None);
                }
            }
        }
        Ok(Some(owners))
    }

    /// Whether a poll received a rebalance event that is not taken yet.
    pub fn rebalance_pending(&self) -> bool {
        !self.consumer.context().pending.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    /// The next rebalance event received by a poll and not yet taken, oldest first. The
    /// consumer waits until it is applied with [`Source::unassign`] or [`Source::assign_more`]
    /// (or the source is dropped).
    pub fn take_rebalance(&self) -> Option<Rebalance> {
        let context = self.consumer.context();
        let mut pending = context.pending.lock().unwrap_or_else(|e| e.into_inner());
        let event = (!pending.is_empty()).then(|| pending.remove(0))?;
        *context.unapplied.lock().unwrap_or_else(|e| e.into_inner()) = Some(event.clone());
        Some(event)
    }

    /// Gives up `tasks` (after a [`Rebalance::Revoke`]): librdkafka stops fetching them and the
    /// group may hand them to another member.
    ///
    /// # Errors
    /// When librdkafka refuses.
    pub fn unassign(&self, tasks: &[TaskId]) -> Result<(), KafkaError> {
        self.applied();
        self.consumer.incremental_unassign(&partition_list(tasks))
    }

    /// Takes `tasks` without reading them (assigned, then paused): acknowledges an assignment
    /// that the runner gives back at once with [`Source::rejoin`], which revokes it.
    ///
    /// # Errors
    /// When librdkafka refuses.
    pub fn hold(&self, tasks: &[TaskId]) -> Result<(), KafkaError> {
        self.applied();
        let list = partition_list(tasks);
        self.consumer.incremental_assign(&list)?;
        self.consumer.pause(&list)
    }

    /// The taken event is being applied.
    fn applied(&self) {
        *self.consumer.context().unapplied.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The underlying consumer, for polling.
    pub fn consumer(&self) -> &BaseConsumer<GroupContext> {
        &self.consumer
    }

    /// The consumer group, `source.group_id`.
    pub fn group_id(&self) -> &str {
        &self.group_id
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
                    TaskId::new(element.topic(), element.partition()),
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
            let task = TaskId::new(element.topic(), element.partition());
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
                (Ok(()), Offset::Offset(offset)) => Some((TaskId::new(element.topic(), element.partition()), offset)),
                _ => None,
            })
            .collect())
    }

    /// Adds the partitions of `positions` to the assignment, starting at the given offsets
    /// (after a [`Rebalance::Assign`], once their tasks are restored).
    ///
    /// # Errors
    /// When librdkafka refuses the assignment.
    pub fn assign_more(&self, positions: &BTreeMap<TaskId, i64>) -> Result<(), KafkaError> {
        self.applied();
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
                Offset::Offset(offset) => Some((TaskId::new(element.topic(), element.partition()), offset)),
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

    /// The live group metadata (generation, member id, `group.instance.id`) to pass to
    /// `send_offsets_to_transaction`: with it the group coordinator refuses the offsets of a
    /// member the group has moved on from (KIP-447), so a zombie cannot commit.
    ///
    /// # Errors
    /// [`RDKafkaErrorCode::IllegalGeneration`] when the consumer is not a member of the group
    /// right now (generation -1: it never joined, or it was removed and not yet back): the
    /// coordinator does not check offsets sent with generation -1, so they are never sent.
    pub fn group_metadata(&self) -> Result<ConsumerGroupMetadata, KafkaError> {
        let before = self.generation();
        let metadata = self
            .consumer
            .group_metadata()
            .ok_or(KafkaError::ClientCreation("the source consumer has no group.id (a bug in Weir)".into()))?;
        // The generation is read on both sides of the metadata: equal, it is the metadata's.
        let after = self.generation();
        if before < 0 || before != after {
            return Err(KafkaError::ConsumerCommit(RDKafkaErrorCode::IllegalGeneration));
        }
        Ok(metadata)
    }

    /// The group metadata as the consumer holds it, member of the group or not (unlike
    /// [`Source::group_metadata`]): for a probe of the transaction coordinator in a transaction
    /// that is never committed (the runner's check for a takeover of its transactional ids).
    pub fn held_group_metadata(&self) -> Option<ConsumerGroupMetadata> {
        self.consumer.group_metadata()
    }

    /// The consumer's current group generation; -1 when it is not a member.
    pub fn generation(&self) -> i32 {
        // SAFETY: the client pointer is valid while the consumer lives; the metadata returned is
        // owned here and destroyed after reading it.
        unsafe {
            let metadata = rdsys::rd_kafka_consumer_group_metadata(self.consumer.client().native_ptr());
            if metadata.is_null() {
                return -1;
            }
            let generation = rdsys::rd_kafka_consumer_group_metadata_generation_id(metadata);
            rdsys::rd_kafka_consumer_group_metadata_destroy(metadata);
            generation
        }
    }

    /// The offset list of a checkpoint: next offset per partition, each with `metadata` and the
    /// partition's watermark, if `watermarks` has one ([`super::CheckpointMetadata`]).
    ///
    /// # Errors
    /// When an offset is invalid.
    pub fn offset_list(
        offsets: &BTreeMap<TaskId, i64>,
        metadata: &super::CheckpointMetadata,
        watermarks: &BTreeMap<TaskId, i64>,
    ) -> Result<TopicPartitionList, KafkaError> {
        let mut list = TopicPartitionList::new();
        for (task, offset) in offsets {
            let metadata = super::CheckpointMetadata { watermark: watermarks.get(task).copied(), ..metadata.clone() };
            list.add_partition_offset(&task.topic, task.partition, Offset::Offset(*offset))?;
            list.find_partition(&task.topic, task.partition)
                .ok_or(KafkaError::AdminOp(RDKafkaErrorCode::UnknownPartition))?
                .set_metadata(metadata.encode());
        }
        Ok(list)
    }

    /// Commits `offsets` for the group directly (at-least-once and none guarantees).
    ///
    /// # Errors
    /// When the commit fails.
    pub fn commit(
        &self,
        offsets: &BTreeMap<TaskId, i64>,
        metadata: &super::CheckpointMetadata,
        watermarks: &BTreeMap<TaskId, i64>,
    ) -> Result<(), KafkaError> {
        self.consumer.commit(&Self::offset_list(offsets, metadata, watermarks)?, rdkafka::consumer::CommitMode::Sync)
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

impl Drop for Source {
    /// Closing the consumer waits for the rebalance in progress and serves the group's last
    /// revocation: an event the runner did not apply (it failed first) is applied now, and
    /// later ones at once.
    fn drop(&mut self) {
        let context = self.consumer.context();
        context.defer.store(false, Ordering::Release);
        let unapplied = context.unapplied.lock().unwrap_or_else(|e| e.into_inner()).take();
        let pending = std::mem::take(&mut *context.pending.lock().unwrap_or_else(|e| e.into_inner()));
        for event in unapplied.into_iter().chain(pending) {
            let tasks = match &event {
                Rebalance::Assign(tasks) | Rebalance::Revoke { tasks, .. } => tasks,
            };
            apply(&self.consumer, &event, &partition_list(tasks));
        }
        // SAFETY: taken once, here, and not used afterwards: the source is being dropped.
        close(unsafe { ManuallyDrop::take(&mut self.consumer) });
    }
}

/// How long dropping a [`Source`] waits for its consumer to close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Closes `consumer` (its drop: `rd_kafka_consumer_close`) on a thread of its own, waiting for
/// it at most [`CLOSE_WAIT`]. A consumer closed while its group rebalances waits for the
/// rebalance to end (librdkafka before 2.14, confluentinc/librdkafka#4527 and #4792), which can
/// take the group's rebalance timeout (`max.poll.interval.ms`, 5 min by default); the pipeline is
/// done with it by then (a static member's close does not even leave the group), so a stop or a
/// recovery does not wait for that.
fn close(consumer: BaseConsumer<GroupContext>) {
    let (closed_tx, closed) = mpsc::channel();
    // Should the thread not start, the closure, consumer included, is dropped here instead.
    let spawned = std::thread::Builder::new().name("weir-consumer-close".into()).spawn(move || {
        drop(consumer);
        let _ = closed_tx.send(());
    });
    if spawned.is_ok() && closed.recv_timeout(CLOSE_WAIT).is_err() {
        tracing::warn!(
            waited_ms = CLOSE_WAIT.as_millis() as u64,
            "the source consumer is still closing (its group is rebalancing); it goes on closing in the background"
        );
    }
}
