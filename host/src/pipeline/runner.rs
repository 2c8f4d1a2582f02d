//! The runner: one incarnation of a pipeline's process, from start-up to a failure or
//! shutdown. [`Runner::start`] runs the pre-flight checks and recovery; [`Runner::run`] polls,
//! processes and checkpoints, in rounds: [`stream`] moves records through the tasks,
//! [`assignment`] follows the consumer group, and the checkpoint coordinator
//! ([`crate::checkpoint::Coordinator`]) commits epochs.

mod assignment;
mod stream;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::RunOptions;
use super::output::{Input, Out};
use super::task::Task;
use super::workers::Workers;
use crate::checkpoint::fault::{FaultPoint, inject};
use crate::checkpoint::{Coordinator, Parts, recovery};
use crate::config::{PipelineConfig, SinkConfig, TransformConfig};
use crate::error::PipelineError;
use crate::kafka::{
    Changelog, ChangelogReader, ChangelogWatch, Cleared, Lineage, Membership, Preflight, Source, block_on,
    describe_unsafe,
};
use crate::metrics::PipelineMetrics;
use crate::postgres::PostgresSink;
use crate::record::TopicRules;
use crate::state::{Owner, StateDb, TaskOverlays};
use crate::table::Tables;
use crate::types::TaskId;
use crate::wasm::{OperatorLimits, TransformComponent};

/// Most timers counted per operator and task at a checkpoint (`weir_open_timers`): counting
/// reads their keys, and a count beyond this says enough.
const OPEN_TIMERS_CAP: usize = 1000;

/// How long a pipeline under a resource pool may process nothing before its guests' instances
/// are dropped ([`Task::recycle_instances`]), giving their linear memory back to the pool and the
/// node: sooner, at its next checkpoint interval, when the pool refused one of its pipelines
/// memory since the last look.
const IDLE_INSTANCES_KEPT: Duration = Duration::from_secs(30);

/// The chain of operators: each transform's component and configuration.
pub(super) type Chain = [(Arc<TransformComponent>, TransformConfig)];

/// One incarnation of a pipeline's process, from recovery to a failure or shutdown. It runs the
/// tasks of the partitions the consumer group gives it; [`Runner::rebalance`] adds and drops them.
pub(super) struct Runner<'a> {
    config: &'a PipelineConfig,
    chain: &'a Chain,
    options: &'a RunOptions,
    outputs: Vec<String>,
    /// What the dead-letter topic refuses ([`Out::dead_letter_rules`]).
    dead_letter_rules: Arc<TopicRules>,
    /// What every operator shares: the largest output record the sink can write, the pool.
    limits: OperatorLimits,
    /// Each source topic's id (KIP-516) at start: recorded with the offsets, and compared with
    /// the recorded ones, since a recreated topic's offsets mean nothing in the old one's.
    topic_ids: BTreeMap<String, String>,
    lineage: Lineage,
    /// Whether the lineage was read from the group's offsets (else from the state directory or
    /// the changelog topic's id, and a changelog naming another one is adopted).
    lineage_from_group: bool,
    owner: Owner,
    db: Arc<StateDb>,
    changelog: Changelog,
    /// Checks the changelog topic's configs while the pipeline runs.
    changelog_watch: ChangelogWatch,
    reader: ChangelogReader,
    source: Source,
    /// The admin clients of the clusters, for checks while running.
    preflight: Preflight,
    /// The epochs, the sink's producers and the PostgreSQL table's rows.
    coordinator: Coordinator,
    /// `config.sink`, shared with the workers.
    sink: Arc<SinkConfig>,
    tasks: Vec<Task>,
    /// Index of each task in `tasks`, by topic, then partition: found per record without
    /// allocating.
    task_index: HashMap<String, HashMap<i32, usize>>,
    /// The worker threads, and the one each task runs on while assigned.
    workers: Workers,
    lanes: HashMap<TaskId, usize>,
    overlays: Vec<Arc<Mutex<TaskOverlays>>>,
    /// A savepoint being loaded: the database is released from its owner until the first
    /// checkpoint writes the savepoint to the changelog.
    loading_savepoint: bool,
    /// The id of a changelog topic that lost state being written into it from the state
    /// directory (`--reseed-changelog`): recorded in the state directory once that commits.
    reseeding: Option<String>,
    /// When tasks were last checked for idleness (it asks the broker for end offsets).
    last_idle_check: Instant,
    /// The pool's [`refusals`](crate::wasm::ResourcePool::refusals) when this pipeline last
    /// looked, idle.
    refusals_seen: u64,
    /// When the group's ownership of the source partitions was last checked.
    last_ownership_check: Instant,
    /// The source partitions no member owned at that check.
    unowned: Vec<TaskId>,
    /// The tables joined with every source record (`[[source.tables]]`).
    tables: Tables,
    metrics: Arc<PipelineMetrics>,
}

impl<'a> Runner<'a> {
    /// Start-up checks, fencing, the lineage, the first epoch's transaction, and the subscription:
    /// tasks come with the group's first assignment ([`Runner::rebalance`]).
    pub(super) fn start(
        config: &'a PipelineConfig,
        chain: &'a Chain,
        options: &'a RunOptions,
        instance: &str,
        shutdown: &Arc<AtomicBool>,
        metrics: &Arc<PipelineMetrics>,
    ) -> Result<Self, PipelineError> {
        let preflight = Preflight::new(config)?;
        let changelog = Changelog::new(&config.state.changelog_topic, &config.source.topics);
        let Cleared { tasks: task_ids, topic_ids, sink_topics, max_state_record } =
            preflight.check(config, &changelog)?;
        let db = Arc::new(StateDb::open(&config.state.dir.join(instance))?.with_quota(config.state.max_bytes));
        let owner = Owner { pipeline: config.name.clone(), changelog_topic: changelog.topic.clone() };
        let membership = Membership { instance, discovery_interval: config.source.partition_discovery_interval };
        let source = Source::member(&config.source.cluster, &config.source.consumer, &config.group_id(), &membership)
            .map_err(PipelineError::kafka("creating the source consumer"))?;
        let reader =
            ChangelogReader::new(&config.sink.cluster, &config.sink.producer, changelog.clone(), &config.group_id())
                .map_err(PipelineError::kafka("creating the changelog reader"))?;
        let changelog_watch = ChangelogWatch::new(changelog.clone());
        let delivery = recovery::producers(config, &db, instance)?;
        let group = source.group_offsets(&task_ids, config.checkpoint.timeout).map_err(PipelineError::kafka(
            format!("fetching consumer group {}'s committed offsets", source.group_id()),
        ))?;
        let (lineage, lineage_from_group) = recovery::lineage(&db, &owner, &group, &preflight, &changelog)?;
        log_upgrades(&db, chain)?;
        let postgres = match &config.sink.postgres {
            Some(pg) => {
                let mut sink = PostgresSink::connect(pg, config.checkpoint.timeout)?;
                recovery::resolve_prepared(config, &mut sink, instance, &lineage.lineage, &group)?;
                Some(sink)
            }
            None => None,
        };
        let next = db.epoch_floor()?.max(db.committed()?.id).next();
        tracing::info!(pipeline = %config.name, instance, lineage = %lineage.lineage, next_epoch = %next, "recovered; joining the consumer group {}", config.group_id());
        metrics.restored(db.committed()?.id);
        let tables =
            Tables::load(&config.source, &config.group_id(), config.checkpoint.timeout, options.pool.as_ref())?;
        let workers = Workers::start(config.runtime.workers_for(task_ids.len()), options.pool.clone(), shutdown)
            .map_err(|e| PipelineError::Refused(format!("cannot start the worker threads (runtime.workers): {e}")))?;
        tracing::info!(workers = workers.len(), "worker threads started");
        let coordinator =
            Coordinator::start(delivery, next, postgres, config.checkpoint.timeout, instance, metrics.clone())?;
        let runner = Self {
            config,
            chain,
            options,
            // The named outputs: the topics', and the PostgreSQL table's.
            outputs: config
                .sink
                .outputs
                .keys()
                .chain(config.sink.postgres.as_ref().and_then(|pg| pg.output.as_ref()))
                .cloned()
                .collect(),
            dead_letter_rules: Arc::new(sink_topics.dead_letters),
            topic_ids,
            limits: OperatorLimits {
                max_record: sink_topics.max_record,
                max_state_record,
                sink_rules: Arc::new(sink_topics.rules),
                pool: options.pool.clone(),
                stop: Some(shutdown.clone()),
                ..OperatorLimits::default()
            },
            lineage,
            lineage_from_group,
            owner,
            db,
            changelog,
            changelog_watch,
            reader,
            source,
            preflight,
            coordinator,
            sink: Arc::new(config.sink.clone()),
            tasks: Vec::new(),
            task_index: HashMap::new(),
            workers,
            lanes: HashMap::new(),
            overlays: Vec::new(),
            loading_savepoint: false,
            reseeding: None,
            last_idle_check: Instant::now(),
            refusals_seen: options.pool.as_ref().map_or(0, |pool| pool.refusals()),
            last_ownership_check: Instant::now(),
            unowned: Vec::new(),
            metrics: metrics.clone(),
            tables,
        };
        if shutdown.load(Ordering::Relaxed) {
            // Not joining: closing a consumer whose join is in flight waits for the group.
            tracing::info!("shutdown requested during start-up");
        } else {
            runner
                .source
                .subscribe(&config.source.topics)
                .map_err(PipelineError::kafka("subscribing to source.topics"))?;
        }
        Ok(runner)
    }

    /// Polls, processes and checkpoints until shutdown; then commits the open epoch.
    pub(super) fn run(&mut self, shutdown: &AtomicBool) -> Result<(), PipelineError> {
        while !shutdown.load(Ordering::Relaxed) {
            // The round's work on this thread counts in the pool's CPU share (the workers meter
            // their jobs themselves).
            let _meter = self.options.pool.as_ref().map(|pool| pool.meter(Some(shutdown)));
            self.coordinator.tick()?;
            self.tables.poll()?;
            if let Err(error) = self.stream(shutdown) {
                if error.is_stop() {
                    self.coordinator.abort_epoch()?;
                }
                return Err(self.unless_taken_over(error));
            }
            while let Some(event) = self.source.take_rebalance() {
                if let Err(error) = self.rebalance(event) {
                    return Err(self.unless_taken_over(error));
                }
            }
            if self.last_ownership_check.elapsed() >= self.config.source.partition_discovery_interval {
                self.check_ownership()?;
            }
            if self.changelog_watch.is_due() {
                self.check_changelog()?;
            }
            self.fire_timers()?;
            let epoch = self.coordinator.epoch();
            if epoch.records > 0 {
                inject(FaultPoint::MidEpoch, epoch.id);
            }
            let open_for = epoch.started.elapsed();
            let max_bytes = self.config.checkpoint.max_epoch_bytes;
            let short = self.pool_is_short();
            let full = self.coordinator.rows_bytes() >= max_bytes
                || self.tasks.iter().any(|t| t.epoch_bytes() >= max_bytes)
                || short;
            if full || open_for >= self.config.checkpoint.interval {
                if self.has_work()? {
                    self.checkpoint()?;
                    if short {
                        // Its overlays are freed once it commits: wait for that before the next
                        // epoch grows its own.
                        self.coordinator.settle()?;
                    }
                } else {
                    self.metrics.caught_up();
                    self.recycle_if_idle(open_for);
                }
            }
        }
        self.finish()
    }

    /// Drops the guests' instances of a pipeline under a pool that has processed nothing for
    /// [`IDLE_INSTANCES_KEPT`], or since its last checkpoint when the pool has refused memory
    /// since it last looked: an idle pipeline's guests would otherwise keep their memory from
    /// the tenant's busy ones. Only when the open epoch has no work (so nothing was processed
    /// since the last barrier's snapshots, which fresh instances restore).
    fn recycle_if_idle(&mut self, idle_for: Duration) {
        let Some(pool) = &self.options.pool else { return };
        let refusals = pool.refusals();
        let wanted = std::mem::replace(&mut self.refusals_seen, refusals) != refusals;
        if !wanted && idle_for < IDLE_INSTANCES_KEPT {
            return;
        }
        let dropped: usize = self.tasks.iter_mut().map(Task::recycle_instances).sum();
        if dropped > 0 {
            tracing::info!(
                pipeline = %self.config.name,
                instances = dropped,
                idle_ms = idle_for.as_millis() as u64,
                memory_wanted = wanted,
                "idle: dropped the guests' instances, giving their memory back to the pool; the next record starts fresh ones"
            );
        }
    }

    /// Whether the pool's free memory is less than the current epoch's overlays hold: as much
    /// again would not fit, so the epoch ends now and the next waits for its commit, which
    /// frees its overlays (before a state write is refused, `StateError::PoolMemory`).
    /// Reads every task's overlays, so it holds while the tasks are out on the workers too
    /// (the stream stops polling then).
    pub(super) fn pool_is_short(&self) -> bool {
        let Some(pool) = &self.options.pool else { return false };
        let held: usize = self.overlays.iter().map(|o| o.lock().map_or(0, |o| o.current_bytes())).sum();
        held > 0 && pool.memory_limit().saturating_sub(pool.memory_used()) < held
    }

    /// `error`, or [`PipelineError::Fenced`] when `error` says this process lost its place in
    /// the group and another process took over its transactional ids too.
    ///
    /// A static member is fenced by another consumer with its `group.instance.id` (KIP-345), or
    /// finds its partitions lost (it was frozen past `session.timeout.ms`), in two cases. This
    /// instance was started twice: the other process fenced the transactional ids first
    /// (`init_transactions` at its start-up), then joined the group; this one must stop, as it
    /// would on a fenced commit, or the two fence each other back and forth for ever. Or the
    /// group moved on without this process (a member of its own lingered after a broker stall,
    /// or another instance took its partitions): recovery heals that. The open epoch's producer
    /// tells them apart ([`Coordinator::taken_over`]).
    fn unless_taken_over(&self, error: PipelineError) -> PipelineError {
        let evicted = match &error {
            PipelineError::Kafka {
                source: KafkaError::MessageConsumptionFatal(code @ RDKafkaErrorCode::FencedInstanceId),
                ..
            } => format!("the source consumer was fenced ({code})"),
            PipelineError::AssignmentLost(_) => "the consumer group took this process's partitions".to_owned(),
            _ => return error,
        };
        match self.coordinator.taken_over(&self.source, &self.lineage, self.config.source.topics.first()) {
            Some(fenced) => {
                PipelineError::Fenced { operation: format!("checking the transactional ids after {evicted}"), fenced }
            }
            None => {
                if self.coordinator.offsets_are_evidence() {
                    tracing::info!("{evicted}, but the transactional ids are still this process's: recovering");
                }
                error
            }
        }
    }

    /// Stops the pipeline when the changelog topic's configs now let the broker delete state
    /// (they changed since the start, see [`ChangelogWatch`]): the open epoch is aborted, and
    /// the error, which is not retried, names the settings and the fix.
    fn check_changelog(&mut self) -> Result<(), PipelineError> {
        let settings = block_on(self.changelog_watch.check(self.preflight.sink()));
        if settings.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.coordinator.abort_epoch() {
            tracing::warn!(%error, "could not abort the open epoch; the next start aborts it");
        }
        let brokers = self.config.sink.cluster.bootstrap_servers();
        Err(PipelineError::StateAtRisk(describe_unsafe(&self.changelog.topic, brokers, &settings)))
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
        Ok(self.coordinator.has_work(self.tasks.iter().map(|t| (t.id(), t.next_offset()))))
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
        let out = self.out();
        let work = (0..self.tasks.len()).map(|index| (index, (now_ms, out.clone()))).collect();
        let fired = self.on_workers(work, |task, (now_ms, out)| {
            let started = Instant::now();
            let Some((outputs, dead_letters)) = task.fire_timers(now_ms)? else { return Ok(None) };
            let input = Input { records: 0, bytes: 0, took: started.elapsed() };
            out.send(task, &outputs, &dead_letters, &input).map(Some)
        });
        for (_, fired) in fired {
            if let Some(output_bytes) = fired? {
                self.coordinator.fired(output_bytes);
            }
        }
        Ok(())
    }

    /// Where the open epoch's output goes, for the workers.
    fn out(&self) -> Out {
        Out {
            slot: self.coordinator.producer().clone(),
            sink: self.sink.clone(),
            dead_letter_rules: self.dead_letter_rules.clone(),
            metrics: self.metrics.clone(),
            rows: self.coordinator.rows(),
        }
    }

    /// Checkpoints the open epoch: every task passes the barrier on its worker, then the
    /// coordinator commits the epoch ([`Coordinator::checkpoint`], beside the next epoch under
    /// exactly-once) and opens the next.
    fn checkpoint(&mut self) -> Result<(), PipelineError> {
        let id = self.coordinator.epoch().id;
        let work = (0..self.tasks.len()).map(|index| (index, id)).collect();
        let barriers = self
            .on_workers(work, Task::barrier)
            .into_iter()
            .map(|(_, barrier)| barrier)
            .collect::<Result<Vec<_>, _>>()?;
        let parts = Parts {
            source: &self.source,
            changelog: &self.changelog,
            db: &self.db,
            overlays: &self.overlays,
            lineage: &self.lineage,
            topic_ids: &self.topic_ids,
            sink: &self.sink,
        };
        self.coordinator.checkpoint(barriers, &parts)?;
        self.count_open_timers()?;
        if self.loading_savepoint || self.reseeding.is_some() {
            // What follows records that the checkpoint committed.
            self.coordinator.settle()?;
        }
        if self.loading_savepoint {
            // The changelog now holds the savepoint: the state directory mirrors it again.
            self.db.set_owner(Some(&self.owner), &self.lineage.lineage)?;
            self.loading_savepoint = false;
        }
        if let Some(topic_id) = self.reseeding.take() {
            self.db.set_changelog_topic_id(&topic_id)?;
            tracing::info!(changelog = %self.changelog.topic, checkpoint = %id, "the state directory's state is in the changelog again (--reseed-changelog)");
        }
        Ok(())
    }

    /// Counts the timers the tasks hold, for the metrics: at most [`OPEN_TIMERS_CAP`] per
    /// operator and task, so that a checkpoint reads a bounded number of keys.
    fn count_open_timers(&mut self) -> Result<(), PipelineError> {
        let (mut count, mut capped) = (0, false);
        for task in &mut self.tasks {
            let (found, more) = task.open_timers(OPEN_TIMERS_CAP)?;
            count += found;
            capped |= more;
        }
        self.metrics.open_timers(count, capped);
        Ok(())
    }

    /// Shutdown: commits the open epoch, or aborts its (empty) transaction.
    fn finish(&mut self) -> Result<(), PipelineError> {
        let committed = if self.has_work()? { Some(self.coordinator.epoch().id) } else { None };
        if committed.is_some() {
            self.checkpoint()?;
        }
        self.coordinator.finish()?;
        // Stopped now: what is left is closing the clients, which loses nothing if cut short.
        self.metrics.set_state(crate::metrics::PipelineState::Stopped);
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
