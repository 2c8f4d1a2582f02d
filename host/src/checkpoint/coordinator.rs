//! The checkpoint coordinator: the epochs of one incarnation of a pipeline's process, and the
//! sink's delivery guarantee.
//!
//! It owns what an epoch needs besides the tasks: its id (ids never go back, and start above
//! every checkpoint recovery saw), the producers ([`Delivery`]: under exactly-once, epoch N
//! writes through slot N mod k inside a transaction), the offsets the last committed checkpoint
//! recorded, the PostgreSQL sink's rows, and the figures of the open epoch. The runner hands it
//! every task's barrier; [`Coordinator::checkpoint`] runs the phases of
//! [`super::protocol`] that the guarantee asks for, then opens the next epoch. Under
//! exactly-once the epoch's commit runs on a thread of its own ([`super::commit`]) while the next
//! epoch processes; it is settled before the next barrier, an assignment, a stop, or when the
//! runner asks ([`Coordinator::tick`], [`Coordinator::settle`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::commit::{Commit, InFlight, Report};
use super::fault::{FaultPoint, inject};
use super::protocol::{self, TaskBarrier};
use crate::config::SinkConfig;
use crate::error::PipelineError;
use crate::kafka::{Changelog, Fenced, GroupOffset, Lineage, ProducerError, ProducerSlot, Source};
use crate::metrics::PipelineMetrics;
use crate::postgres::{self, PendingRows, PostgresSink, TableShape, Xid};
use crate::state::{StateDb, TaskOverlays};
use crate::types::{CheckpointId, TaskId};

/// Longest time without a committed checkpoint while positions stand still: an idle pipeline
/// commits its offsets again so that the group's offsets, recovery's evidence, never expire
/// (the broker's `offsets.retention.minutes`, 7 days by default, counts from the last commit of
/// a group without members, which Weir's group is while the pipeline is stopped).
const OFFSET_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);

/// How the sink delivers (`sink.guarantee`), with the producers each guarantee needs.
pub enum Delivery {
    /// `exactly-once`: epoch N is the transaction of producer slot N mod k
    /// (k = `sink.producer_slots`, transactional ids `<prefix>-<instance>-<slot>`); its output,
    /// changelog records and source offsets commit together.
    ExactlyOnce {
        /// The k transactional producers, fenced by recovery.
        slots: Vec<Arc<ProducerSlot>>,
    },
    /// `at-least-once`: one idempotent producer, flushed at each barrier before the checkpoint
    /// is applied; a crash replays at most the epochs since the last one.
    AtLeastOnce {
        /// The producer.
        producer: Arc<ProducerSlot>,
    },
    /// `none`: one producer that nothing waits for; a crash may lose output.
    None {
        /// The producer.
        producer: Arc<ProducerSlot>,
    },
}

impl Delivery {
    /// The producer epoch `id` writes through.
    fn producer(&self, id: CheckpointId) -> &Arc<ProducerSlot> {
        match self {
            Delivery::ExactlyOnce { slots } => &slots[slot_of(id, slots.len())],
            Delivery::AtLeastOnce { producer } | Delivery::None { producer } => producer,
        }
    }
}

/// The slot of epoch `id` among `k` slots: N mod k (DESIGN.md, "Exactly-once protocol", step 1).
fn slot_of(id: CheckpointId, k: usize) -> usize {
    (id.0 % k as u64) as usize
}

/// The open epoch and what it did so far.
#[derive(Debug)]
pub struct Epoch {
    /// Its id: the checkpoint that commits it.
    pub id: CheckpointId,
    /// Input records processed.
    pub records: u64,
    /// Rounds of timers fired: their outputs and state writes need a checkpoint like input's.
    pub timer_rounds: u64,
    /// Key and value bytes of its output.
    pub output_bytes: u64,
    /// When it began.
    pub started: Instant,
}

impl Epoch {
    fn new(id: CheckpointId) -> Self {
        Self { id, records: 0, timer_rounds: 0, output_bytes: 0, started: Instant::now() }
    }
}

/// The sequence of epochs, without the producers: which id comes next, and whether the open
/// epoch has anything to commit.
#[derive(Debug)]
struct Epochs {
    open: Epoch,
    /// The lowest id the next epoch may have: above every checkpoint that the restored tasks'
    /// state or the group's offsets named.
    floor: CheckpointId,
    /// The offsets of the last committed checkpoint: an epoch that moves none of them and has
    /// no input has nothing to commit.
    recorded: BTreeMap<TaskId, i64>,
    last_commit: Instant,
}

impl Epochs {
    fn new(first: CheckpointId) -> Self {
        Self { open: Epoch::new(first), floor: first, recorded: BTreeMap::new(), last_commit: Instant::now() }
    }

    /// The id of the epoch after the open one, once that committed.
    fn next(&self) -> CheckpointId {
        self.open.id.next().max(self.floor)
    }

    /// Whether the open epoch has input, fired timers, a task whose next offset moved since the
    /// last checkpoint (`next_offsets`: every task's), or is due to keep the group's offsets
    /// alive.
    fn has_work<'a>(&self, mut next_offsets: impl Iterator<Item = (&'a TaskId, Option<i64>)>) -> bool {
        self.open.records > 0
            || self.open.timer_rounds > 0
            || next_offsets.any(|(task, next)| next != self.recorded.get(task).copied())
            || self.last_commit.elapsed() >= OFFSET_KEEP_ALIVE
    }
}

/// What a checkpoint reads and writes besides the coordinator's own: the pipeline's parts the
/// runner holds.
pub struct Parts<'a> {
    /// The source consumer: its group metadata goes with the offsets (KIP-447).
    pub source: &'a Source,
    /// The changelog topic.
    pub changelog: &'a Changelog,
    /// The state database the checkpoint is applied to.
    pub db: &'a Arc<StateDb>,
    /// Every task's overlays, which drop the sealed epoch once it is applied.
    pub overlays: &'a [Arc<Mutex<TaskOverlays>>],
    /// The pipeline's lineage, in the changelog's positions and the offsets' metadata.
    pub lineage: &'a Lineage,
    /// Each source topic's id (KIP-516), recorded with its offsets.
    pub topic_ids: &'a BTreeMap<String, String>,
    /// The sink: where the PostgreSQL table's refused rows go.
    pub sink: &'a SinkConfig,
}

/// The PostgreSQL sink (`[sink.postgres]`).
struct Postgres {
    /// The connection: `None` while the commit thread of an epoch with rows holds it.
    sink: Option<PostgresSink>,
    /// The table's columns.
    shape: Arc<TableShape>,
    /// The open epoch's rows, shared with the workers, which add to them.
    rows: Arc<PendingRows>,
}

impl Postgres {
    fn sink(&mut self) -> Result<&mut PostgresSink, PipelineError> {
        self.sink
            .as_mut()
            .ok_or_else(|| PipelineError::Bug("the PostgreSQL connection is with a commit not settled".into()))
    }
}

/// The checkpoint coordinator of one incarnation of a pipeline's process.
pub struct Coordinator {
    delivery: Delivery,
    epochs: Epochs,
    postgres: Option<Postgres>,
    /// The epoch committing on its thread, under exactly-once.
    in_flight: Option<InFlight>,
    /// Bound of each Kafka call of a checkpoint (`checkpoint.timeout_ms`).
    timeout: Duration,
    /// This process's instance id, in the PostgreSQL sink's transaction ids.
    instance: String,
    metrics: Arc<PipelineMetrics>,
}

impl Coordinator {
    /// A coordinator whose first epoch is `first`, begun at once (under exactly-once, its
    /// transaction on slot `first` mod k).
    ///
    /// # Errors
    /// [`PipelineError::Kafka`] when `begin_transaction` fails.
    pub fn start(
        delivery: Delivery,
        first: CheckpointId,
        postgres: Option<PostgresSink>,
        timeout: Duration,
        instance: &str,
        metrics: Arc<PipelineMetrics>,
    ) -> Result<Self, PipelineError> {
        let mut coordinator = Self {
            delivery,
            epochs: Epochs::new(first),
            postgres: postgres.map(|sink| Postgres {
                shape: sink.shape().clone(),
                sink: Some(sink),
                rows: Arc::new(PendingRows::default()),
            }),
            in_flight: None,
            timeout,
            instance: instance.to_owned(),
            metrics,
        };
        coordinator.begin()?;
        Ok(coordinator)
    }

    /// The open epoch.
    pub fn epoch(&self) -> &Epoch {
        &self.epochs.open
    }

    /// Counts `records` processed with `output_bytes` of output in the open epoch.
    pub fn processed(&mut self, records: u64, output_bytes: u64) {
        self.epochs.open.records += records;
        self.epochs.open.output_bytes += output_bytes;
    }

    /// Counts a round of timers fired with `output_bytes` of output in the open epoch.
    pub fn fired(&mut self, output_bytes: u64) {
        self.epochs.open.timer_rounds += 1;
        self.epochs.open.output_bytes += output_bytes;
    }

    /// The producer the open epoch's output goes through.
    pub fn producer(&self) -> &Arc<ProducerSlot> {
        self.delivery.producer(self.epochs.open.id)
    }

    /// With `[sink.postgres]`: the table's columns, and the open epoch's rows, for the workers.
    pub fn rows(&self) -> Option<(Arc<TableShape>, Arc<PendingRows>)> {
        self.postgres.as_ref().map(|pg| (pg.shape.clone(), pg.rows.clone()))
    }

    /// Bytes of the open epoch's rows for the PostgreSQL table (0 without one).
    pub fn rows_bytes(&self) -> usize {
        self.postgres.as_ref().map_or(0, |pg| pg.rows.bytes())
    }

    /// Whether the group's committed offsets are recovery's evidence: only under exactly-once
    /// are they committed in the checkpoint's transaction (the other guarantees commit them
    /// afterwards, for other tools' information).
    pub fn offsets_are_evidence(&self) -> bool {
        matches!(self.delivery, Delivery::ExactlyOnce { .. })
    }

    /// The offsets of the last committed checkpoint.
    pub fn recorded(&self) -> &BTreeMap<TaskId, i64> {
        &self.epochs.recorded
    }

    /// Adds restored tasks' committed offsets to the recorded ones.
    pub fn record(&mut self, offsets: impl IntoIterator<Item = (TaskId, i64)>) {
        self.epochs.recorded.extend(offsets);
    }

    /// Forgets the recorded offsets of tasks given up.
    pub fn forget(&mut self, revoked: &[TaskId]) {
        self.epochs.recorded.retain(|t, _| !revoked.contains(t));
    }

    /// Raises the lowest id the next epoch may have to `floor` (recovery saw a checkpoint
    /// below it).
    pub fn raise_floor(&mut self, floor: CheckpointId) {
        self.epochs.floor = self.epochs.floor.max(floor);
    }

    /// Whether the open epoch has anything to commit (see [`Epochs::has_work`]); `next_offsets`
    /// are every task's next offset, moved up to the consumer's position.
    pub fn has_work<'a>(&self, next_offsets: impl Iterator<Item = (&'a TaskId, Option<i64>)>) -> bool {
        self.epochs.has_work(next_offsets)
    }

    /// Moves the open epoch, which has no work, up to the floor: its (empty) transaction is
    /// aborted and the epoch begun again under the new id.
    ///
    /// # Errors
    /// [`PipelineError::Kafka`] when the abort or the begin fails.
    pub fn renumber(&mut self) -> Result<(), PipelineError> {
        self.settle()?;
        if self.epochs.open.id >= self.epochs.floor {
            return Ok(());
        }
        self.abort("empty epoch")?;
        self.epochs.open = Epoch::new(self.epochs.floor);
        self.begin()
    }

    /// Aborts the open epoch's transaction, so its output never becomes visible and
    /// read_committed readers of the sink need not wait for `transaction.timeout.ms` (a stop in
    /// the middle of a round, or a changelog put at risk). Its state writes are dropped with the
    /// tasks. The epoch before it, committing, is let finish first.
    ///
    /// # Errors
    /// [`PipelineError::Kafka`] when the abort fails.
    pub fn abort_epoch(&mut self) -> Result<(), PipelineError> {
        if let Err(error) = self.settle() {
            tracing::warn!(%error, "the checkpoint committing before the aborted epoch failed too");
        }
        self.abort("epoch")
    }

    /// Shutdown, once the open epoch was checkpointed if it had work: waits for its commit,
    /// then aborts the next one's (empty) transaction.
    ///
    /// # Errors
    /// The commit's; [`PipelineError::Kafka`] when the abort fails.
    pub fn finish(&mut self) -> Result<(), PipelineError> {
        self.settle()?;
        self.abort("empty epoch")
    }

    /// Waits for the epoch committing on its thread, if any (a no-op otherwise).
    ///
    /// # Errors
    /// That commit's: the pipeline then recovers from what Kafka holds.
    pub fn settle(&mut self) -> Result<(), PipelineError> {
        let Some(in_flight) = self.in_flight.take() else { return Ok(()) };
        let (sink, result) = in_flight.settle();
        if let (Some(pg), Some(sink)) = (&mut self.postgres, sink) {
            pg.sink = Some(sink);
        }
        result
    }

    /// Settles the committing epoch if its thread is done: a failed commit is reported in the
    /// round it failed, not at the next barrier.
    ///
    /// # Errors
    /// That commit's.
    pub fn tick(&mut self) -> Result<(), PipelineError> {
        match &self.in_flight {
            Some(in_flight) if in_flight.is_finished() => self.settle(),
            _ => Ok(()),
        }
    }

    /// Under exactly-once, `abort_transaction` of the open epoch (`what`, for the error).
    fn abort(&self, what: &str) -> Result<(), PipelineError> {
        if let Delivery::ExactlyOnce { .. } = self.delivery {
            let id = self.epochs.open.id;
            self.producer()
                .abort(self.timeout)
                .map_err(PipelineError::kafka(format!("abort_transaction of {what} {id}")))?;
        }
        Ok(())
    }

    /// Under exactly-once, `begin_transaction` of the open epoch, once the epoch committing on
    /// the same slot settled (epoch N+k reuses T_N's producer; with k = 1 nothing overlaps).
    fn begin(&mut self) -> Result<(), PipelineError> {
        let Delivery::ExactlyOnce { slots } = &self.delivery else { return Ok(()) };
        let id = self.epochs.open.id;
        let slot = slot_of(id, slots.len());
        if self.in_flight.as_ref().is_some_and(|in_flight| in_flight.slot == slot) {
            self.settle()?;
        }
        self.producer().begin().map_err(PipelineError::kafka(format!("begin_transaction for epoch {id}")))
    }

    /// Checkpoints the open epoch from every task's barrier (`barriers`), then begins the next.
    /// Under exactly-once: waits for the previous epoch's commit, seals this one (a PostgreSQL
    /// table's rows are written and prepared), and starts its pre-commit → commit → apply on a
    /// thread ([`super::commit`]) while the next epoch processes. Otherwise, before returning:
    /// the changelog is written (and flushed under at-least-once), the rows committed, the
    /// checkpoint applied and the group's offsets committed for other tools. The phases'
    /// durations are logged and reported to the metrics when the commit ends.
    ///
    /// # Errors
    /// The previous commit's, or any phase's run here: the pipeline then recovers from what
    /// Kafka holds.
    pub fn checkpoint(&mut self, barriers: Vec<TaskBarrier>, parts: &Parts<'_>) -> Result<CheckpointId, PipelineError> {
        let entered = Instant::now();
        self.settle()?;
        let id = self.epochs.open.id;
        let barrier_at = Instant::now();
        let sealed = protocol::barrier(id, barriers, &self.epochs.recorded, parts.lineage, parts.topic_ids);
        let epoch = &self.epochs.open;
        let mut report = Report {
            id,
            records: epoch.records,
            output_bytes: epoch.output_bytes,
            state_bytes: sealed.checkpoint.writes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum(),
            changelog_records: sealed.changelog.len(),
            epoch_started: epoch.started,
            barrier_at,
            wait: barrier_at - entered,
            barrier: Duration::ZERO,
            stall: Duration::ZERO,
        };
        let rows = self.write_rows(parts.sink)?;
        let offsets = sealed.checkpoint.offsets.clone();
        match &self.delivery {
            Delivery::ExactlyOnce { slots } => {
                let slot = slot_of(id, slots.len());
                let prepared = match (&mut self.postgres, rows) {
                    (Some(pg), true) => {
                        let xid = Xid {
                            pipeline: parts.lineage.pipeline.clone(),
                            instance: self.instance.clone(),
                            epoch: id,
                            lineage: parts.lineage.lineage.clone(),
                        };
                        inject(FaultPoint::BeforePrepare, id);
                        pg.sink()?.prepare(&xid.gid())?;
                        inject(FaultPoint::AfterPrepare, id);
                        let sink = pg.sink.take().expect("the connection was just used");
                        Some((sink, xid.gid()))
                    }
                    _ => None,
                };
                // Epoch N's output must precede N+1's in every partition (the two transactions
                // write the same partitions, and read_committed consumers read in offset order),
                // so it is delivered before the next epoch sends any; the changelog flush, the
                // offsets and the commit run beside the next epoch.
                let producer = self.producer().clone();
                producer.flush(self.timeout).map_err(PipelineError::kafka(format!("flush of epoch {id}'s output")))?;
                let group =
                    parts.source.group_metadata().map_err(PipelineError::kafka("reading the group metadata"))?;
                report.barrier = barrier_at.elapsed();
                report.stall = entered.elapsed();
                let commit = Commit {
                    sealed,
                    producer,
                    group,
                    changelog: parts.changelog.clone(),
                    lineage: parts.lineage.clone(),
                    db: parts.db.clone(),
                    overlays: parts.overlays.to_vec(),
                    prepared,
                    timeout: self.timeout,
                    report,
                    metrics: self.metrics.clone(),
                };
                self.in_flight = Some(InFlight::start(commit, slot)?);
            }
            delivery => {
                let mut sealed = sealed;
                let producer = self.producer().clone();
                report.barrier = barrier_at.elapsed();
                protocol::write_changelog(&producer, parts.changelog, &sealed)?;
                if let Delivery::AtLeastOnce { .. } = delivery {
                    protocol::flush(&producer, parts.changelog, &mut sealed, self.timeout)?;
                }
                let pre_committed = Instant::now();
                if let (Some(pg), true) = (&mut self.postgres, rows) {
                    pg.sink()?.commit()?;
                }
                let committed = Instant::now();
                protocol::apply(parts.db, parts.overlays, &sealed.checkpoint)?;
                // The group's offsets only inform other tools here; the changelog is the truth.
                let metadata = protocol::metadata(id, parts.lineage, None);
                let checkpoint = &sealed.checkpoint;
                if let Err(error) = parts.source.commit(&checkpoint.offsets, &metadata, &checkpoint.watermarks) {
                    tracing::warn!(%error, checkpoint = %id, "could not commit the group's offsets");
                }
                report.stall = entered.elapsed();
                let pre_commit = (pre_committed - barrier_at).saturating_sub(report.barrier);
                report.committed(&self.metrics, pre_commit, committed - pre_committed, committed.elapsed());
            }
        }
        self.epochs.recorded = offsets;
        self.epochs.last_commit = Instant::now();
        self.epochs.open = Epoch::new(self.epochs.next());
        self.begin()?;
        Ok(id)
    }

    /// PostgreSQL sink: opens the epoch's transaction and writes the epoch's rows in it; rows the
    /// table refused go to the dead-letter topic in the epoch's Kafka transaction, or fail the
    /// checkpoint (`sink.postgres.on_error`). Whether a transaction was opened (there were rows).
    fn write_rows(&mut self, config: &SinkConfig) -> Result<bool, PipelineError> {
        let producer = self.delivery.producer(self.epochs.open.id).clone();
        let Some(pg) = &mut self.postgres else { return Ok(false) };
        let rows = pg.rows.take();
        if rows.is_empty() {
            return Ok(false);
        }
        let refused = pg.sink()?.write(rows)?;
        let refused = refused.into_iter().map(|(row, reason)| row.refused(reason)).collect();
        postgres::refuse(&producer, config, refused)?;
        Ok(true)
    }

    /// Under exactly-once, whether another process took over this instance's transactional ids
    /// (it was started twice): the open epoch's producer sends offsets to its transaction, which
    /// the transaction coordinator refuses for a producer whose epoch another one bumped
    /// (AddOffsetsToTxn) before any offset is staged. One that was not taken over passes that
    /// step, and the group coordinator then refuses the offsets of a member it fenced or expired
    /// (TxnOffsetCommit: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, KIP-447).
    /// So the offsets never count, and any will do: the last checkpoint's, or, for an instance
    /// that owns no partition, offset 0 of `first_topic`'s partition 0. The transaction is never
    /// committed; recovery's `init_transactions` (or a stop's) aborts it.
    ///
    /// `None` when not taken over, not transactional, or when it cannot tell.
    pub fn taken_over(&self, source: &Source, lineage: &Lineage, first_topic: Option<&String>) -> Option<Fenced> {
        let Delivery::ExactlyOnce { .. } = self.delivery else { return None };
        let group = source.held_group_metadata()?;
        let mut offsets = self.epochs.recorded.clone();
        if let (true, Some(topic)) = (offsets.is_empty(), first_topic) {
            offsets.insert(TaskId::new(topic.clone(), 0), 0);
        }
        let metadata = protocol::metadata(self.epochs.open.id, lineage, None);
        let offsets = Source::offset_list(&offsets, &metadata, &BTreeMap::new()).ok()?;
        match self.producer().send_offsets(&offsets, &group, self.timeout) {
            Err(ProducerError::Fenced(fenced)) => Some(fenced),
            _ => None,
        }
    }

    /// PostgreSQL sink under exactly-once: decides the prepared transactions of `pipeline` that `group` (the
    /// group's stable offsets of every source partition, fetched after an assignment) shows
    /// committed, and rolls back those of instances that are no member of the group any more
    /// (their Kafka transactions can no longer commit: the group refuses a departed member's
    /// offsets, KIP-447). Runs before any checkpoint of the assigned partitions, which would
    /// overwrite the evidence.
    ///
    /// # Errors
    /// [`PipelineError::Postgres`].
    pub fn resolve_departed(
        &mut self,
        source: &Source,
        group: &BTreeMap<TaskId, GroupOffset>,
        pipeline: &str,
        txn_prefix: &str,
    ) -> Result<(), PipelineError> {
        let Delivery::ExactlyOnce { .. } = self.delivery else { return Ok(()) };
        self.settle()?;
        let Some(pg) = self.postgres.as_mut() else { return Ok(()) };
        let sink = pg.sink()?;
        let members: Option<Vec<String>> = match source.owners(self.timeout) {
            Ok(owners) => owners.map(|owners| owners.into_values().collect()),
            Err(error) => {
                tracing::debug!(%error, "cannot describe the consumer group; prepared transactions of other instances are left");
                None
            }
        };
        let ours = self.instance.as_str();
        let departed =
            |instance: &str| instance == ours || members.as_ref().is_some_and(|m| !m.iter().any(|i| i == instance));
        sink.db().resolve(pipeline, group, txn_prefix, departed)?;
        Ok(())
    }
}

impl Drop for Coordinator {
    /// Waits for a commit still running: nothing may write the state database once the runner
    /// is gone (recovery opens it again).
    fn drop(&mut self) {
        if let Err(error) = self.settle() {
            tracing::warn!(%error, "the checkpoint committing when the runner stopped did not commit; its epoch is processed again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(partition: i32) -> TaskId {
        TaskId::new("in", partition)
    }

    #[test]
    fn epochs_alternate_between_the_slots_by_id() {
        let slots: Vec<usize> = (1..=5).map(|n| slot_of(CheckpointId(n), 2)).collect();
        assert_eq!(slots, [1, 0, 1, 0, 1], "epoch N runs on slot N mod k");
        assert_eq!(slot_of(CheckpointId(7), 1), 0, "one slot takes every epoch");
        assert_eq!(slot_of(CheckpointId(u64::MAX), 3), (u64::MAX % 3) as usize);
    }

    #[test]
    fn the_next_epoch_follows_the_open_one_and_never_goes_below_the_floor() {
        let mut epochs = Epochs::new(CheckpointId(4));
        assert_eq!(epochs.next(), CheckpointId(5));
        epochs.floor = CheckpointId(9);
        assert_eq!(epochs.next(), CheckpointId(9), "recovery saw checkpoint 8 elsewhere");
        epochs.open = Epoch::new(CheckpointId(12));
        assert_eq!(epochs.next(), CheckpointId(13), "a floor below the open epoch does not hold it back");
    }

    /// A coordinator under `sink.guarantee = "none"` whose first epoch is `first`: its producer
    /// never connects (nothing here sends), so no broker is needed.
    fn without_transactions(first: u64) -> Coordinator {
        let cluster = crate::config::ClusterConfig::new("127.0.0.1:1");
        let producer = Arc::new(ProducerSlot::plain(&cluster, &BTreeMap::new(), false).expect("producer"));
        let text = "name = \"p\"\n[source]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"in\"]\n\
                    [[transforms]]\nname = \"t\"\nwasm = \"t.wasm\"\n[sink]\ntopic = \"out\"\n";
        let config = crate::config::PipelineConfig::from_toml_str(text, std::path::Path::new("/srv")).expect("config");
        let metrics = crate::metrics::Metrics::default().pipeline(&config);
        let delivery = Delivery::None { producer };
        Coordinator::start(delivery, CheckpointId(first), None, Duration::from_secs(1), "i", metrics).expect("start")
    }

    #[test]
    fn renumbering_moves_an_empty_open_epoch_up_to_the_floor_and_never_down() {
        let mut coordinator = without_transactions(3);
        coordinator.renumber().unwrap();
        assert_eq!(coordinator.epoch().id, CheckpointId(3), "no floor above it: it stays");
        coordinator.raise_floor(CheckpointId(8));
        coordinator.renumber().unwrap();
        assert_eq!(coordinator.epoch().id, CheckpointId(8), "recovery saw checkpoint 7");
        coordinator.raise_floor(CheckpointId(5));
        coordinator.renumber().unwrap();
        assert_eq!(coordinator.epoch().id, CheckpointId(8), "a lower floor moves nothing back");
    }

    #[test]
    fn with_nothing_committing_settle_abort_and_finish_only_touch_the_open_epoch() {
        let mut coordinator = without_transactions(1);
        coordinator.processed(10, 100);
        coordinator.settle().unwrap();
        coordinator.tick().unwrap();
        coordinator.abort_epoch().unwrap();
        assert_eq!((coordinator.epoch().id, coordinator.epoch().records), (CheckpointId(1), 10));
        coordinator.finish().unwrap();
        assert!(!coordinator.offsets_are_evidence(), "only exactly-once commits offsets with the output");
    }

    #[test]
    fn an_epoch_has_work_with_input_timers_a_moved_position_or_an_old_commit() {
        let mut epochs = Epochs::new(CheckpointId(1));
        epochs.recorded = BTreeMap::from([(task(0), 10), (task(1), 5)]);
        let (t0, t1, t2) = (task(0), task(1), task(2));
        let still = [(&t0, Some(10)), (&t1, Some(5))];
        assert!(!epochs.has_work(still.into_iter()), "nothing moved");
        assert!(epochs.has_work([(&t0, Some(11)), (&t1, Some(5))].into_iter()), "a position moved");
        assert!(epochs.has_work([(&t2, Some(0))].into_iter()), "a task without a recorded offset");
        assert!(!epochs.has_work([(&t2, None)].into_iter()), "a task that never read and has none recorded");
        epochs.open.records = 1;
        assert!(epochs.has_work(still.into_iter()), "input");
        epochs.open.records = 0;
        epochs.open.timer_rounds = 1;
        assert!(epochs.has_work(still.into_iter()), "fired timers");
        epochs.open.timer_rounds = 0;
        epochs.last_commit = Instant::now() - OFFSET_KEEP_ALIVE;
        assert!(epochs.has_work(still.into_iter()), "the group's offsets are kept alive");
    }
}
