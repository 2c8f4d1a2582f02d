//! The runner: start-up checks, recovery, the poll → process → send loop, and checkpoints.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};

use super::task::{DeadLetter, Task};
use crate::checkpoint::fault::{FaultPoint, inject};
use crate::checkpoint::protocol::{self, RecoverOptions, Recovered};
use crate::checkpoint::savepoint::{self, Savepoint};
use crate::config::{Guarantee, OffsetReset, PipelineConfig, StartPosition, TransformConfig};
use crate::error::PipelineError;
use crate::kafka::{
    Admin, Changelog, ChangelogProblem, ChangelogReader, ErrorClass, GroupOffset, Lineage, ProducerSlot, Source,
    TopicCheck, classify, record_headers, sink_record_limit,
};
use crate::metrics::{BatchFigures, CheckpointFigures, Metrics, PipelineMetrics, PipelineState};
use crate::state::{Committed, Owner, StateDb, TaskOverlays, Writes, state_prefix};
use crate::table::Tables;
use crate::types::{CheckpointId, TaskId};
use crate::wasm::{Header, InputRecord, OutputRecord, RecordLimit, TransformComponent, WasmEngine};

/// Longest pause between two recovery attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest time without a committed checkpoint while positions stand still: an idle pipeline
/// commits its offsets again so that the group's offsets, recovery's evidence, never expire
/// (the broker's `offsets.retention.minutes`, 7 days by default, counts from the last commit of
/// a group without members, which Weir's group always is).
const OFFSET_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);
/// How long one poll waits for the first record.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);

/// Options of `weir run` beyond the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Start even when the consumer group's offsets disagree with the changelog (someone reset
    /// them by hand); the changelog wins.
    pub ignore_group_offsets: bool,
    /// Start from this savepoint (`weir run --from-savepoint`): its state and positions replace
    /// the pipeline's, and its first checkpoint rewrites the changelog and the group's offsets. A
    /// pipeline whose lineage is already the savepoint's id started from it before and ignores it.
    pub from_savepoint: Option<Savepoint>,
    /// Where the pipeline reports its metrics and state (see [`crate::metrics`]).
    pub metrics: Arc<Metrics>,
}

/// Runs the pipeline until `shutdown` is set, then commits the open epoch and returns.
///
/// Retriable failures ([`PipelineError::is_retriable`]) run recovery again after an
/// exponential back-off (1 s doubling to 30 s), logging each attempt.
///
/// # Errors
/// A failure that needs a human: invalid configuration, a missing topic, a refused start-up
/// check, inconsistent offsets, a state database error, or a transform that cannot load.
pub fn run(
    config: &PipelineConfig,
    engine: &WasmEngine,
    options: &RunOptions,
    shutdown: &AtomicBool,
) -> Result<(), PipelineError> {
    let metrics = options.metrics.pipeline(config);
    let chain: Vec<(Arc<TransformComponent>, TransformConfig)> = config
        .transforms
        .iter()
        .map(|t| Ok((Arc::new(engine.load(&t.wasm)?), t.clone())))
        .collect::<Result<_, PipelineError>>()
        .inspect_err(|error| metrics.failed(error, false))?;
    let mut backoff = Duration::from_secs(1);
    // The savepoint applies until a start commits its first checkpoint; a recovery after that
    // resumes from the changelog.
    let mut savepoint = options.from_savepoint.as_ref();
    loop {
        let attempt = Instant::now();
        metrics.set_state(PipelineState::Starting);
        let result = Runner::start(config, &chain, options, savepoint, shutdown, &metrics).and_then(|mut runner| {
            savepoint = None;
            metrics.set_state(PipelineState::Running);
            runner.run(shutdown)
        });
        match result {
            Ok(()) => {
                metrics.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) if error.is_retriable() && !shutdown.load(Ordering::Relaxed) => {
                metrics.failed(&error, true);
                if attempt.elapsed() > MAX_BACKOFF {
                    backoff = Duration::from_secs(1);
                }
                tracing::error!(pipeline = %config.name, %error, retry_in = ?backoff, "pipeline failed; recovering after back-off");
                sleep_unless(shutdown, backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(error) => {
                metrics.failed(&error, false);
                return Err(error);
            }
        }
    }
}

fn sleep_unless(shutdown: &AtomicBool, duration: Duration) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !shutdown.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The records, bytes and start of the open epoch.
struct Epoch {
    id: CheckpointId,
    records: u64,
    /// Rounds of timers fired: their outputs and state writes need a checkpoint like input's.
    timer_rounds: u64,
    output_bytes: u64,
    started: Instant,
}

/// The chain of operators: each transform's component and configuration.
type Chain = [(Arc<TransformComponent>, TransformConfig)];

/// One incarnation of a pipeline, from recovery to a failure or shutdown.
struct Runner<'a> {
    config: &'a PipelineConfig,
    chain: &'a Chain,
    outputs: Vec<String>,
    /// The largest output record the sink can write.
    max_record: RecordLimit,
    lineage: Lineage,
    db: Arc<StateDb>,
    changelog: Changelog,
    source: Source,
    slots: Vec<ProducerSlot>,
    tasks: Vec<Task>,
    task_index: HashMap<(String, i32), usize>,
    overlays: Vec<Arc<Mutex<TaskOverlays>>>,
    epoch: Epoch,
    /// The offsets of the last committed checkpoint: an epoch that moves none of them and has
    /// no input has nothing to commit.
    recorded: BTreeMap<TaskId, i64>,
    last_commit: Instant,
    last_discovery: Instant,
    /// When tasks were last checked for idleness (it asks the broker for end offsets).
    last_idle_check: Instant,
    /// The tables joined with every source record (`[[source.tables]]`).
    tables: Tables,
    metrics: Arc<PipelineMetrics>,
}

impl<'a> Runner<'a> {
    /// Start-up checks, recovery, tasks, assignment, and the first epoch's transaction. A
    /// partition that starts without a committed offset has its position committed at once, so
    /// that it is fixed whatever happens next.
    fn start(
        config: &'a PipelineConfig,
        chain: &'a Chain,
        options: &RunOptions,
        savepoint: Option<&Savepoint>,
        shutdown: &AtomicBool,
        metrics: &Arc<PipelineMetrics>,
    ) -> Result<Self, PipelineError> {
        let task_ids = check_cluster(config)?;
        let changelog = Changelog::new(&config.state.changelog_topic, &config.source.topics);
        ensure_changelog(config, &changelog, &task_ids)?;
        let max_record = block_on(sink_record_limit(&config.sink))
            .map_err(PipelineError::kafka("reading the sink topics' max.message.bytes"))?;
        let db = Arc::new(StateDb::open(&config.state.dir)?);
        let owner = Owner { pipeline: config.name.clone(), changelog_topic: changelog.topic.clone() };
        let source = Source::new(&config.source.brokers, &config.source.consumer, &config.group_id())
            .map_err(PipelineError::kafka("creating the source consumer"))?;
        let reader = ChangelogReader::new(&config.sink.brokers, &config.sink.producer, changelog.clone())
            .map_err(PipelineError::kafka("creating the changelog reader"))?;
        let slots = producer_slots(config)?;
        let current: Vec<String> = slots.iter().filter_map(|s| s.transactional_id.clone()).collect();
        let earlier = earlier_producers(config, &db, &current)?;
        let fence: Vec<&ProducerSlot> =
            slots.iter().filter(|s| s.transactional_id.is_some()).chain(earlier.iter()).collect();
        let recover = RecoverOptions {
            timeout: config.checkpoint.timeout,
            check_group: config.sink.guarantee == Guarantee::ExactlyOnce,
            // A savepoint's positions replace the group's offsets.
            ignore_group_offsets: options.ignore_group_offsets || savepoint.is_some(),
            start_from_group: config.source.start == StartPosition::Group,
        };
        let Recovered { mut committed, mut next, group, mut lineage, seed } =
            protocol::recover(&db, &fence, &source, &reader, &task_ids, &owner, &recover)?;
        drop(fence);
        drop((earlier, reader));
        db.set_transactional_ids(&current)?;
        log_upgrades(&db, chain)?;
        let mut seeds = BTreeMap::new();
        if seed {
            for task in &task_ids {
                seeds.insert(task.clone(), committed_state(&db, chain, task)?);
            }
        }
        let loaded = savepoint.filter(|s| {
            let applied = s.manifest.id == lineage.lineage;
            if applied {
                tracing::info!(savepoint = %s.manifest.id, "the pipeline started from this savepoint before; --from-savepoint is ignored");
            }
            !applied
        });
        if let Some(savepoint) = loaded {
            seeds = savepoint::load(&db, savepoint, &config.source.topics)?;
            lineage.lineage = savepoint.manifest.id.clone();
            committed = db.committed()?;
            next = next.max(db.epoch_floor()?.next());
            tracing::info!(savepoint = %savepoint.manifest.id, of = %savepoint.manifest.pipeline, checkpoint = %savepoint::checkpoint(savepoint), tasks = savepoint.tasks.len(), "starting from a savepoint; the first checkpoint writes it to the changelog and the group");
        }
        tracing::info!(pipeline = %config.name, checkpoint = %committed.id, next_epoch = %next, "recovered");
        metrics.restored(committed.id);

        let tables = Tables::load(&config.source, config.checkpoint.timeout)?;
        let positions = start_positions(config, &source, &task_ids, &committed, &group)?;
        let outputs: Vec<String> = config.sink.outputs.keys().cloned().collect();
        let mut tasks = Vec::with_capacity(task_ids.len());
        for id in &task_ids {
            let snapshot = |operator: &str| committed.snapshots.get(&(operator.to_owned(), id.clone())).cloned();
            let mut task = Task::new(
                id.clone(),
                chain,
                &outputs,
                &max_record,
                db.clone(),
                snapshot,
                positions.get(id).copied(),
                config.source.watermark.as_ref(),
                metrics,
            )?;
            if let Some(writes) = seeds.remove(id) {
                task.seed_changelog(writes);
            }
            tasks.push(task);
        }
        source.assign(&positions).map_err(PipelineError::kafka("assigning the source partitions"))?;
        if shutdown.load(Ordering::Relaxed) {
            tracing::info!("shutdown requested during start-up");
        }

        let task_index = task_ids.iter().enumerate().map(|(i, t)| ((t.topic.clone(), t.partition), i)).collect();
        let overlays = tasks.iter().map(|t| t.overlays().clone()).collect();
        // A changelog being seeded lacks every task's position: the first checkpoint writes all.
        let seeding = seed || loaded.is_some();
        let recorded = if seeding { BTreeMap::new() } else { committed.offsets };
        let mut runner = Self {
            config,
            chain,
            outputs,
            max_record,
            lineage,
            db,
            changelog,
            source,
            slots,
            tasks,
            task_index,
            overlays,
            epoch: Epoch { id: next, records: 0, timer_rounds: 0, output_bytes: 0, started: Instant::now() },
            recorded,
            last_commit: Instant::now(),
            last_discovery: Instant::now(),
            last_idle_check: Instant::now(),
            metrics: metrics.clone(),
            tables,
        };
        runner.begin_epoch(next)?;
        // Commit at once positions that are new or moved, and offsets the group lost (deleted,
        // expired): they are the next recovery's evidence.
        let moved = runner.tasks.iter().any(|t| t.next_offset() != runner.recorded.get(t.id()).copied());
        let lost = recover.check_group && runner.tasks.iter().any(|t| !group.contains_key(t.id()));
        if moved || lost || seeding {
            runner.checkpoint()?;
        }
        if loaded.is_some() {
            // The changelog now holds the savepoint: the state directory mirrors it again.
            runner.db.set_owner(Some(&owner), &runner.lineage.lineage)?;
        }
        Ok(runner)
    }

    /// Polls, processes and checkpoints until shutdown; then commits the open epoch.
    fn run(&mut self, shutdown: &AtomicBool) -> Result<(), PipelineError> {
        let batch_size = self.config.source.batch_size;
        let mut batches: Vec<Vec<InputRecord>> = vec![Vec::new(); self.tasks.len()];
        while !shutdown.load(Ordering::Relaxed) {
            if self.last_discovery.elapsed() >= self.config.source.partition_discovery_interval {
                self.discover_partitions()?;
                batches.resize_with(self.tasks.len(), Vec::new);
            }
            self.tables.poll()?;
            let mut timeout = POLL_TIMEOUT;
            let mut polled = 0;
            while polled < batch_size * self.tasks.len() {
                let Some(message) = self.source.consumer().poll(timeout) else { break };
                timeout = Duration::ZERO;
                match message {
                    Ok(message) => {
                        polled += 1;
                        let index = self.task_of(&message)?;
                        batches[index].push(input_record(&message));
                        if batches[index].len() >= batch_size {
                            self.process(index, std::mem::take(&mut batches[index]))?;
                        }
                    }
                    // librdkafka recovers from transient errors itself. A topic that vanished
                    // does not come back by polling: recovery checks the topics again and
                    // refuses to start without one. Configuration and authorisation errors stop
                    // the pipeline ([`PipelineError::is_retriable`]).
                    Err(error) if classify(&error) == ErrorClass::Transient => {
                        tracing::warn!(%error, "source consumer error; librdkafka retries")
                    }
                    Err(error) => return Err(PipelineError::kafka("reading the source")(error)),
                }
            }
            for (index, batch) in batches.iter_mut().enumerate() {
                if !batch.is_empty() {
                    self.process(index, std::mem::take(batch))?;
                }
            }
            self.fire_timers()?;
            if self.epoch.records > 0 {
                inject(FaultPoint::MidEpoch, self.epoch.id);
            }
            let max_bytes = self.config.checkpoint.max_epoch_bytes;
            let overlay_full = self.tasks.iter().any(|t| t.epoch_bytes() >= max_bytes);
            if (overlay_full || self.epoch.started.elapsed() >= self.config.checkpoint.interval) && self.has_work()? {
                self.checkpoint()?;
            }
        }
        self.finish()
    }

    /// Whether the open epoch has anything to commit: input, fired timers, or a partition position that moved
    /// without input (librdkafka stepped over transaction markers or aborted records). Moves
    /// every task's next offset up to the consumer's position first; every record polled so far
    /// has been processed when this runs.
    fn has_work(&mut self) -> Result<bool, PipelineError> {
        let positions = self.source.positions().map_err(PipelineError::kafka("reading the consumer's positions"))?;
        for task in &mut self.tasks {
            if let Some(position) = positions.get(task.id()) {
                task.advance_to(*position);
                task.metrics().position(task.next_offset());
            }
        }
        Ok(self.epoch.records > 0
            || self.epoch.timer_rounds > 0
            || self.tasks.iter().any(|t| t.next_offset() != self.recorded.get(t.id()).copied())
            || self.last_commit.elapsed() >= OFFSET_KEEP_ALIVE)
    }

    /// Looks for partitions added to the source topics; gives each a task that reads it from its
    /// earliest offset (its position is committed with the next checkpoint).
    fn discover_partitions(&mut self) -> Result<(), PipelineError> {
        self.last_discovery = Instant::now();
        let timeout = self.config.checkpoint.timeout;
        let counts = self
            .source
            .partition_counts(&self.config.source.topics, timeout)
            .map_err(PipelineError::kafka("reading the source topics' metadata"))?;
        let mut added = Vec::new();
        for (topic, count) in counts {
            let known = self.task_index.keys().filter(|(t, _)| *t == topic).count() as i32;
            added.extend((known..count).map(|partition| TaskId { topic: topic.clone(), partition }));
        }
        if added.is_empty() {
            return Ok(());
        }
        // A partition just added may have no leader yet: try again at the next discovery.
        let positions = match earliest_offsets(&self.source, &added, timeout) {
            Ok(positions) => positions,
            Err(error) => {
                tracing::warn!(%error, "source partitions were added; reading their offsets failed, trying again at the next discovery");
                return Ok(());
            }
        };
        let all = self.tasks.iter().map(Task::id).chain(added.iter());
        let needed = self.changelog.partitions_needed(all);
        ensure_changelog_partitions(self.config, &self.changelog, needed)?;
        for id in added {
            let offset = positions[&id];
            tracing::info!(partition = %id, offset, "source partition added while running; reading it from its earliest offset");
            let task = Task::new(
                id.clone(),
                self.chain,
                &self.outputs,
                &self.max_record,
                self.db.clone(),
                |_| None,
                Some(offset),
                self.config.source.watermark.as_ref(),
                &self.metrics,
            )?;
            self.task_index.insert((id.topic.clone(), id.partition), self.tasks.len());
            self.overlays.push(task.overlays().clone());
            self.tasks.push(task);
        }
        self.source.assign_more(&positions).map_err(PipelineError::kafka("assigning the added source partitions"))
    }

    /// Index of the task owning `message`'s partition.
    fn task_of(&self, message: &BorrowedMessage<'_>) -> Result<usize, PipelineError> {
        self.task_index.get(&(message.topic().to_owned(), message.partition())).copied().ok_or_else(|| {
            PipelineError::Inconsistent(format!(
                "a record of {}[{}] arrived, which no task owns (partitions added while running?)",
                message.topic(),
                message.partition()
            ))
        })
    }

    /// Runs one batch through its task and sends the output to the epoch's slot.
    fn process(&mut self, index: usize, mut batch: Vec<InputRecord>) -> Result<(), PipelineError> {
        let started = Instant::now();
        self.tables.join(&mut batch);
        let count = batch.len() as u64;
        let bytes_in = batch.iter().map(|r| record_bytes(&r.key, &r.value)).sum();
        let last_timestamp = batch.last().map(|r| r.timestamp);
        let (outputs, dead_letters) = self.tasks[index].process(batch)?;
        self.send(index, &outputs, &dead_letters, last_timestamp, (count, bytes_in, started))?;
        self.epoch.records += count;
        Ok(())
    }

    /// Fires every task's due timers ([`Task::fire_timers`]) and sends their output to the
    /// epoch's slot. Tasks that may be idle are checked first, at most once per idle timeout:
    /// once one has read its partition to the end, its watermark follows the wall clock.
    fn fire_timers(&mut self) -> Result<(), PipelineError> {
        let now_ms = crate::time::now_ms();
        let idle_timeout = self.config.source.watermark.as_ref().and_then(|w| w.idle_timeout);
        if idle_timeout.is_some_and(|idle| self.last_idle_check.elapsed() >= idle)
            && self.tasks.iter().any(Task::may_be_idle)
        {
            self.last_idle_check = Instant::now();
            let positions =
                self.source.positions().map_err(PipelineError::kafka("reading the consumer's positions"))?;
            for task in self.tasks.iter_mut().filter(|t| t.may_be_idle()) {
                let (_, end) = self
                    .source
                    .watermarks(task.id(), self.config.checkpoint.timeout)
                    .map_err(PipelineError::kafka(format!("reading the end offset of {}", task.id())))?;
                // librdkafka reports no position for a partition it has handed no record since the
                // assignment (all of it was read before a restart): the task's next offset, where
                // it was assigned, stands for it then.
                let position = positions.get(task.id()).copied().max(task.next_offset());
                if position.is_some_and(|position| position >= end) {
                    task.idle(now_ms);
                }
            }
        }
        for index in 0..self.tasks.len() {
            let started = Instant::now();
            if let Some((outputs, dead_letters)) = self.tasks[index].fire_timers(now_ms)? {
                self.send(index, &outputs, &dead_letters, None, (0, 0, started))?;
                self.epoch.timer_rounds += 1;
            }
        }
        Ok(())
    }

    /// Sends a task's output and dead letters to the epoch's slot; `last_timestamp` applies to
    /// outputs without one. `input` is the records and bytes that made them (none for timers)
    /// and when their work started, for the task's metrics.
    fn send(
        &mut self,
        index: usize,
        outputs: &[OutputRecord],
        dead_letters: &[DeadLetter],
        last_timestamp: Option<i64>,
        (records_in, bytes_in, started): (u64, u64, Instant),
    ) -> Result<(), PipelineError> {
        let slot = self.slot();
        let sink = &self.config.sink;
        let mut output_bytes = 0;
        for output in outputs {
            let topic = match &output.output {
                Some(name) => &sink.outputs[name],
                None => &sink.topic,
            };
            slot.send(topic, output, last_timestamp).map_err(PipelineError::kafka(format!("producing to {topic}")))?;
            output_bytes += record_bytes(&output.key, &output.value);
        }
        if let Some(topic) = &sink.dead_letter_topic {
            for dead_letter in dead_letters {
                slot.send(topic, &dead_letter.to_output(self.tasks[index].max_record()), None)
                    .map_err(PipelineError::kafka(format!("producing to {topic}")))?;
            }
        }
        self.epoch.output_bytes += output_bytes;
        for dead_letter in dead_letters {
            self.metrics.guest_error(&dead_letter.error);
        }
        let task = &self.tasks[index];
        task.metrics().batch(&BatchFigures {
            records_in,
            bytes_in,
            records_out: outputs.len() as u64,
            bytes_out: output_bytes,
            dead_letters: dead_letters.len() as u64,
            duration: started.elapsed(),
        });
        task.metrics().position(task.next_offset());
        Ok(())
    }

    /// The producer the open epoch writes through: slot N mod k (the only one when not
    /// transactional).
    fn slot(&self) -> &ProducerSlot {
        &self.slots[self.epoch.id.0 as usize % self.slots.len()]
    }

    fn begin_epoch(&mut self, id: CheckpointId) -> Result<(), PipelineError> {
        self.epoch = Epoch { id, records: 0, timer_rounds: 0, output_bytes: 0, started: Instant::now() };
        if self.config.sink.guarantee == Guarantee::ExactlyOnce {
            self.slot().begin().map_err(PipelineError::kafka(format!("begin_transaction for epoch {id}")))?;
        }
        Ok(())
    }

    /// Barrier → pre-commit → commit → apply for the open epoch; opens the next.
    fn checkpoint(&mut self) -> Result<(), PipelineError> {
        let id = self.epoch.id;
        let timeout = self.config.checkpoint.timeout;
        let barrier_at = Instant::now();
        // Microseconds since the previous lap: each phase's share of the checkpoint, logged below.
        let mut lap_start = barrier_at;
        let mut lap = || {
            let now = Instant::now();
            let us = (now - lap_start).as_micros() as u64;
            lap_start = now;
            us
        };
        let (pre_commit_us, commit_us);
        let barriers = self.tasks.iter_mut().map(|t| t.barrier(id)).collect::<Result<Vec<_>, _>>()?;
        let mut sealed = protocol::barrier(id, barriers, &self.recorded, &self.lineage);
        let state_bytes: usize =
            sealed.checkpoint.writes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        let changelog_records = sealed.changelog.len();
        let barrier_us = lap();
        let slot = self.slot();
        match self.config.sink.guarantee {
            Guarantee::ExactlyOnce => {
                protocol::pre_commit(slot, &self.source, &self.changelog, &mut sealed, &self.lineage, timeout)?;
                pre_commit_us = lap();
                protocol::commit(slot, id, timeout)?;
                commit_us = lap();
                protocol::apply(&self.db, &self.overlays, &sealed.checkpoint)?;
            }
            guarantee => {
                protocol::write_changelog(slot, &self.changelog, &sealed)?;
                if guarantee == Guarantee::AtLeastOnce {
                    protocol::flush(slot, &self.changelog, &mut sealed, timeout)?;
                }
                pre_commit_us = lap();
                commit_us = 0;
                protocol::apply(&self.db, &self.overlays, &sealed.checkpoint)?;
                // The group's offsets only inform other tools here; the changelog is the truth.
                let metadata = protocol::metadata(id, &self.lineage, None);
                if let Err(error) = self.source.commit(&sealed.checkpoint.offsets, &metadata) {
                    tracing::warn!(%error, checkpoint = %id, "could not commit the group's offsets");
                }
            }
        }
        let apply_us = lap();
        tracing::info!(
            checkpoint = %id,
            records = self.epoch.records,
            output_bytes = self.epoch.output_bytes,
            state_bytes,
            changelog_records,
            epoch_ms = self.epoch.started.elapsed().as_millis() as u64,
            // Barrier to apply: how long the checkpoint itself took, then its phases.
            checkpoint_us = barrier_at.elapsed().as_micros() as u64,
            barrier_us,
            pre_commit_us,
            commit_us,
            apply_us,
            "checkpoint committed"
        );
        let us = Duration::from_micros;
        self.metrics.checkpoint(&CheckpointFigures {
            id,
            total: barrier_at.elapsed(),
            barrier: us(barrier_us),
            pre_commit: us(pre_commit_us),
            commit: us(commit_us),
            apply: us(apply_us),
            records: self.epoch.records,
            output_bytes: self.epoch.output_bytes,
            state_bytes: state_bytes as u64,
        });
        self.recorded = sealed.checkpoint.offsets;
        self.last_commit = Instant::now();
        self.begin_epoch(id.next())
    }

    /// Shutdown: commits the open epoch, or aborts its (empty) transaction.
    fn finish(&mut self) -> Result<(), PipelineError> {
        let committed = if self.has_work()? { Some(self.epoch.id) } else { None };
        if committed.is_some() {
            self.checkpoint()?;
        }
        if self.config.sink.guarantee == Guarantee::ExactlyOnce {
            let id = self.epoch.id;
            self.slot()
                .abort(self.config.checkpoint.timeout)
                .map_err(PipelineError::kafka(format!("abort_transaction of empty epoch {id}")))?;
        }
        match committed {
            Some(id) => {
                tracing::info!(pipeline = %self.config.name, checkpoint = %id, "stopped after committing the open epoch")
            }
            None => {
                tracing::info!(pipeline = %self.config.name, "stopped; the open epoch had no records and moved no offset, so there was nothing to commit")
            }
        }
        Ok(())
    }
}

/// The committed state of `task` for every operator of the chain, as writes.
fn committed_state(db: &StateDb, chain: &Chain, task: &TaskId) -> Result<Writes, PipelineError> {
    let mut writes = Vec::new();
    for (_, config) in chain {
        let entries = db.scan_prefix(&state_prefix(&config.name, task), usize::MAX)?;
        writes.extend(entries.into_iter().map(|(key, value)| (key, Some(value))));
    }
    Ok(writes)
}

/// Logs each operator whose component changed since the last start (an upgrade: its state and
/// last snapshot carry over, keyed by the operator's name), and records the components now run.
fn log_upgrades(db: &StateDb, chain: &Chain) -> Result<(), PipelineError> {
    let before = db.components()?;
    let now: BTreeMap<String, String> =
        chain.iter().map(|(component, config)| (config.name.clone(), component.sha256().to_owned())).collect();
    for (operator, sha256) in &now {
        match before.get(operator) {
            Some(old) if old != sha256 => tracing::info!(
                operator,
                old_component = %old,
                new_component = %sha256,
                "transform upgraded: the operator keeps its state and last snapshot"
            ),
            Some(_) => {}
            None => tracing::info!(operator, component = %sha256, "operator runs component"),
        }
    }
    Ok(db.set_components(&now)?)
}

/// Checks topics, the clusters and the transaction timeout; creates sink topics when allowed.
/// Returns the pipeline's tasks, one per source partition.
fn check_cluster(config: &PipelineConfig) -> Result<Vec<TaskId>, PipelineError> {
    let brokers = &config.source.brokers;
    let admin = Admin::new(brokers, &config.source.consumer)
        .map_err(PipelineError::kafka("creating a client with the properties of source.consumer"))?;
    let names: Vec<&str> = config.source.topics.iter().map(String::as_str).collect();
    let found = admin
        .topics(&names)
        .map_err(PipelineError::kafka(format!("reading the topic metadata of {brokers} (is the broker up?)")))?;
    let mut tasks = Vec::new();
    for (topic, check) in &found {
        match check {
            TopicCheck::Exists(partitions) => {
                tasks.extend((0..*partitions).map(|partition| TaskId { topic: topic.clone(), partition }))
            }
            TopicCheck::Missing => {
                return Err(PipelineError::Refused(format!(
                    "source topic `{topic}` (source.topics) does not exist on {brokers} (never created, or deleted); \
                     create it first, e.g. with `weir produce`, or remove it from source.topics"
                )));
            }
        }
    }
    let sink_admin = Admin::new(&config.sink.brokers, &config.sink.producer)
        .map_err(PipelineError::kafka("creating a client with the properties of sink.producer"))?;
    if config.sink.guarantee == Guarantee::ExactlyOnce {
        check_same_cluster(&admin, &sink_admin)?;
    }
    let mut sink_topics: Vec<(&str, String)> = vec![(config.sink.topic.as_str(), "sink.topic".to_owned())];
    sink_topics
        .extend(config.sink.outputs.iter().map(|(name, topic)| (topic.as_str(), format!("sink.outputs.{name}"))));
    sink_topics.extend(config.sink.dead_letter_topic.iter().map(|t| (t.as_str(), "sink.dead_letter_topic".to_owned())));
    let names: Vec<&str> = sink_topics.iter().map(|(t, _)| *t).collect();
    let found = sink_admin
        .topics(&names)
        .map_err(PipelineError::kafka(format!("reading the topic metadata of {}", config.sink.brokers)))?;
    let source_partitions = tasks.iter().filter(|t| t.topic == config.source.topics[0]).count() as i32;
    for (topic, key) in &sink_topics {
        if found.get(*topic) != Some(&TopicCheck::Missing) {
            continue;
        }
        if !config.sink.create_topics {
            return Err(PipelineError::Refused(format!(
                "sink topic `{topic}` ({key}) does not exist on {}; create it, or set sink.create_topics = true",
                config.sink.brokers
            )));
        }
        let partitions = config.sink.partitions.unwrap_or(source_partitions.max(1));
        block_on(sink_admin.create_topic(topic, partitions))
            .map_err(PipelineError::kafka(format!("creating sink topic {topic}")))?;
        tracing::info!(topic, partitions, "created sink topic");
    }
    if config.sink.guarantee == Guarantee::ExactlyOnce {
        let max = block_on(sink_admin.transaction_max_timeout())
            .map_err(PipelineError::kafka("reading the broker's transaction.max.timeout.ms"))?;
        let wanted = config.sink.transaction_timeout;
        if wanted > max {
            return Err(PipelineError::Refused(format!(
                "sink.transaction_timeout_ms = {} exceeds the broker's transaction.max.timeout.ms = {}; lower sink.transaction_timeout_ms (keeping checkpoint.interval_ms + checkpoint.timeout_ms below it) or raise the broker's limit",
                wanted.as_millis(),
                max.as_millis()
            )));
        }
    }
    Ok(tasks)
}

/// Creates the changelog topic, or checks it, with a partition for every task.
fn ensure_changelog(config: &PipelineConfig, changelog: &Changelog, tasks: &[TaskId]) -> Result<(), PipelineError> {
    ensure_changelog_partitions(config, changelog, changelog.partitions_needed(tasks))
}

/// Creates the changelog topic with `needed` partitions, or grows or checks it.
fn ensure_changelog_partitions(
    config: &PipelineConfig,
    changelog: &Changelog,
    needed: i32,
) -> Result<(), PipelineError> {
    let topic = &changelog.topic;
    let admin = Admin::new(&config.sink.brokers, &config.sink.producer)
        .map_err(PipelineError::kafka("creating a client with the properties of sink.producer"))?;
    let problem = block_on(changelog.ensure(&admin, needed))
        .map_err(PipelineError::kafka(format!("creating or checking changelog topic {topic}")))?;
    match problem {
        Ok(()) => Ok(()),
        Err(ChangelogProblem::NotCompacted(policy)) => Err(PipelineError::Refused(format!(
            "changelog topic {topic} (state.changelog_topic) has cleanup.policy={policy}, so retention would delete state; \
             set it to compact (kafka-configs --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact) \
             or name another topic"
        ))),
        Err(ChangelogProblem::TooManyPartitions { found, needed }) => Err(PipelineError::Refused(format!(
            "changelog topic {topic} (state.changelog_topic) has {found} partitions, but this pipeline's tasks use {needed}: \
             it is another pipeline's changelog, or the source topics changed; name another topic in state.changelog_topic"
        ))),
    }
}

/// Exactly-once commits the source offsets in the sink's transactions, so both must be one
/// cluster: compares the cluster ids (KIP-78), not the bootstrap addresses, which differ for one
/// cluster named by another host or broker.
fn check_same_cluster(source: &Admin, sink: &Admin) -> Result<(), PipelineError> {
    let cluster_id = |admin: &Admin| {
        admin.cluster_id().map_err(PipelineError::kafka(format!("reading the cluster id of {}", admin.brokers())))
    };
    let (source_id, sink_id) = (cluster_id(source)?, cluster_id(sink)?);
    if source_id != sink_id {
        return Err(PipelineError::Refused(format!(
            "sink.guarantee = \"exactly-once\" needs the sink on the source's cluster (the source offsets are \
             committed in the sink's transactions), but sink.brokers = \"{}\" is cluster {sink_id} and \
             source.brokers = \"{}\" is cluster {source_id}; point sink.brokers at the source's cluster, or set \
             sink.guarantee = \"at-least-once\"",
            sink.brokers(),
            source.brokers()
        )));
    }
    Ok(())
}

/// The producers of the sink: k transactional slots `<prefix>-<slot>`, or one plain producer.
fn producer_slots(config: &PipelineConfig) -> Result<Vec<ProducerSlot>, PipelineError> {
    let sink = &config.sink;
    match sink.guarantee {
        Guarantee::ExactlyOnce => (0..sink.producer_slots)
            .map(|slot| {
                let id = format!("{}-{slot}", sink.transactional_id_prefix);
                ProducerSlot::transactional(&sink.brokers, &sink.producer, slot, &id, sink.transaction_timeout)
                    .map_err(PipelineError::kafka(format!("creating producer slot {id}")))
            })
            .collect(),
        Guarantee::AtLeastOnce | Guarantee::None => Ok(vec![
            ProducerSlot::plain(&sink.brokers, &sink.producer, sink.guarantee == Guarantee::AtLeastOnce)
                .map_err(PipelineError::kafka("creating the sink producer"))?,
        ]),
    }
}

/// The transactional ids that earlier runs used and this configuration does not (another
/// `sink.producer_slots` or prefix, or another guarantee), each as a
/// producer to fence: recovery must abort what they left open, or read_committed readers of the
/// sink wait for the transaction timeout.
fn earlier_producers(
    config: &PipelineConfig,
    db: &StateDb,
    current: &[String],
) -> Result<Vec<ProducerSlot>, PipelineError> {
    let mut ids = db.transactional_ids()?;
    ids.sort();
    ids.dedup();
    let sink = &config.sink;
    ids.iter()
        .filter(|id| !current.contains(id))
        .map(|id| {
            tracing::info!(transactional_id = %id, "fencing a producer an earlier run used");
            ProducerSlot::transactional(&sink.brokers, &sink.producer, 0, id, sink.transaction_timeout)
                .map_err(PipelineError::kafka(format!("creating a producer to fence transactional id {id}")))
        })
        .collect()
}

/// Where each task starts: its committed offset (checked against the log's range, see
/// [`in_range`]), else — for a partition without one — the configured `source.start` on the
/// pipeline's first start and the earliest offset afterwards (the partition was added since).
fn start_positions(
    config: &PipelineConfig,
    source: &Source,
    tasks: &[TaskId],
    committed: &Committed,
    group: &BTreeMap<TaskId, GroupOffset>,
) -> Result<BTreeMap<TaskId, i64>, PipelineError> {
    let timeout = config.checkpoint.timeout;
    let first_start = committed.id == CheckpointId(0) && committed.offsets.is_empty();
    let mut positions = BTreeMap::new();
    let mut fresh = Vec::new();
    for task in tasks {
        match committed.offsets.get(task) {
            Some(offset) => {
                positions.insert(task.clone(), in_range(config, source, task, *offset, "checkpoint")?);
            }
            None => fresh.push(task.clone()),
        }
    }
    if fresh.is_empty() {
        return Ok(positions);
    }
    let start = if first_start { config.source.start } else { StartPosition::Earliest };
    let kafka = PipelineError::kafka("looking up the start offsets of source.start");
    let resolved = match start {
        StartPosition::Earliest => earliest_offsets(source, &fresh, timeout)?,
        StartPosition::Latest => fresh
            .iter()
            .map(|t| Ok::<_, KafkaError>((t.clone(), source.watermarks(t, timeout)?.1)))
            .collect::<Result<_, _>>()
            .map_err(kafka)?,
        StartPosition::Timestamp(ms) => source.offsets_for_timestamp(&fresh, ms, timeout).map_err(kafka)?,
        StartPosition::Group => {
            let mut offsets = BTreeMap::new();
            let without: Vec<TaskId> = fresh.iter().filter(|t| !group.contains_key(*t)).cloned().collect();
            for task in fresh.iter().filter(|t| group.contains_key(*t)) {
                offsets.insert(task.clone(), in_range(config, source, task, group[task].offset, "consumer group")?);
            }
            offsets.extend(earliest_offsets(source, &without, timeout)?);
            offsets
        }
    };
    for (task, offset) in resolved {
        let why = if first_start { format!("source.start = {start}") } else { "added since the last run".into() };
        tracing::info!(partition = %task, offset, "{why}: the partition starts here; its position is fixed by the next checkpoint");
        positions.insert(task, offset);
    }
    Ok(positions)
}

/// The earliest offset still in the log of each of `tasks`.
fn earliest_offsets(
    source: &Source,
    tasks: &[TaskId],
    timeout: Duration,
) -> Result<BTreeMap<TaskId, i64>, PipelineError> {
    tasks
        .iter()
        .map(|t| Ok::<_, KafkaError>((t.clone(), source.watermarks(t, timeout)?.0)))
        .collect::<Result<_, _>>()
        .map_err(PipelineError::kafka("looking up the earliest offsets of the source partitions"))
}

/// `offset` (from the `what`) if the log of `task` still holds it, else what
/// `source.offset_reset` says: refuse, or go on from the log's start offset with a warning.
fn in_range(
    config: &PipelineConfig,
    source: &Source,
    task: &TaskId,
    offset: i64,
    what: &str,
) -> Result<i64, PipelineError> {
    let (low, high) = source
        .watermarks(task, config.checkpoint.timeout)
        .map_err(PipelineError::kafka(format!("reading the offsets of {task}")))?;
    if (low..=high).contains(&offset) {
        return Ok(offset);
    }
    let why = if offset < low {
        "records were deleted (retention or delete_records) before they were read"
    } else {
        "the log is shorter than that (the topic was recreated or truncated)"
    };
    match config.source.offset_reset {
        OffsetReset::Fail => Err(PipelineError::Refused(format!(
            "the {what} offset of {task} is {offset}, but the log now holds offsets {low} to {high}: {why}. Nothing was skipped. \
             To skip to the log's start offset {low} and go on, set source.offset_reset = \"earliest\" in the pipeline file"
        ))),
        OffsetReset::Earliest if offset < low => {
            let skipped = low - offset;
            tracing::warn!(partition = %task, offset, log_start = low, log_end = high, skipped, "{why}: going on from the log's start offset (source.offset_reset = earliest); {skipped} offsets were skipped");
            Ok(low)
        }
        OffsetReset::Earliest => {
            let rereads = high - low;
            tracing::warn!(partition = %task, offset, log_start = low, log_end = high, rereads, "{why}: going on from the log's start offset (source.offset_reset = earliest); its {rereads} offsets are read as new records");
            Ok(low)
        }
    }
}

/// Key and value bytes of a record: what `weir_bytes_in_total` and `weir_bytes_out_total` count.
fn record_bytes(key: &Option<Vec<u8>>, value: &Option<Vec<u8>>) -> u64 {
    (key.as_ref().map_or(0, Vec::len) + value.as_ref().map_or(0, Vec::len)) as u64
}

fn input_record(message: &BorrowedMessage<'_>) -> InputRecord {
    // The contract has UTF-8 header names: a name that is not UTF-8 is handed on lossily
    // (docs/configuration.md, "Records"). Null header values stay null.
    let headers = record_headers(message)
        .into_iter()
        .map(|h| Header { key: String::from_utf8_lossy(h.key).into_owned(), value: h.value.map(<[u8]>::to_vec) })
        .collect();
    let timestamp = message.timestamp().to_millis().unwrap_or(0);
    InputRecord {
        key: message.key().map(<[u8]>::to_vec),
        value: message.payload().map(<[u8]>::to_vec),
        headers,
        timestamp,
        topic: message.topic().to_owned(),
        partition: message.partition(),
        offset: message.offset(),
        // The task sets event time and watermark per the source's watermark strategy.
        event_time: timestamp,
        watermark: None,
    }
}

/// Runs an admin future to completion from this synchronous runner.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
        .block_on(future)
}
