//! The runner: start-up checks, recovery, the poll → process → send loop, and checkpoints.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};

use super::task::{DeadLetter, Task};
use super::workers::Workers;
use crate::checkpoint::fault::{FaultPoint, inject};
use crate::checkpoint::protocol::{self, RecoverOptions, Recovered};
use crate::checkpoint::restore::{self, LostChangelog};
use crate::checkpoint::savepoint::{self, Savepoint};
use crate::config::{Guarantee, OffsetReset, OnError, PipelineConfig, SinkConfig, StartPosition, TransformConfig};
use crate::error::PipelineError;
use crate::failure::Disposition;
use crate::kafka::{
    Admin, Changelog, ChangelogProblem, ChangelogReader, ChangelogWatch, ErrorClass, GroupOffset, Lineage, Membership,
    ProducerError, ProducerSlot, Rebalance, Source, TopicCheck, changelog_record_limit, classify, describe_unsafe,
    record_headers, sink_topics,
};
use crate::metrics::{BatchFigures, CheckpointFigures, Metrics, PipelineMetrics, PipelineState};
use crate::postgres::{self, PendingRows, PostgresSink, Refusal, Resolution, TableShape, Xid};
use crate::state::{Committed, Owner, StateDb, TaskOverlays};
use crate::table::Tables;
use crate::types::{CheckpointId, TaskId};
use crate::wasm::{
    Fields, Header, OperatorLimits, OutputRecord, Outputs, RecordBatch, ResourcePool, TopicRules, TransformComponent,
    WasmEngine,
};

/// Longest pause between two recovery attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest time without a committed checkpoint while positions stand still: an idle pipeline
/// commits its offsets again so that the group's offsets, recovery's evidence, never expire
/// (the broker's `offsets.retention.minutes`, 7 days by default, counts from the last commit of
/// a group without members, which Weir's group is while the pipeline is stopped).
const OFFSET_KEEP_ALIVE: Duration = Duration::from_secs(24 * 3600);
/// How long one poll waits for the first record.
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// Most timers counted per operator and task at a checkpoint (`weir_open_timers`): counting
/// reads their keys, and a count beyond this says enough.
const OPEN_TIMERS_CAP: usize = 1000;
/// Batches per worker thread the runner may hold polled and not yet processed
/// ([`Runner::stream`]): enough to read past the records of one partition that librdkafka hands
/// out together (one fetch's worth: a few thousand flights with the default
/// `max.partition.fetch.bytes`) to other partitions' records, for the other workers.
const READ_AHEAD_BATCHES: usize = 16;
/// How long the runner waits for a task to come back after a poll found the consumer's queue
/// dry while tasks are out, before it polls again ([`Runner::stream`]).
const DRY_POLL_WAIT: Duration = Duration::from_millis(1);
/// Longest stretch the runner streams records to the workers before it has every task back,
/// for rebalances, timers and checkpoints ([`Runner::stream`]).
const STREAM_WINDOW: Duration = Duration::from_millis(200);
/// Shortest such stretch, even when a checkpoint is due.
const MIN_STREAM_WINDOW: Duration = Duration::from_millis(10);

/// Options of `weir run` beyond the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Start even when the consumer group's offsets disagree with the changelog (someone reset
    /// them by hand); the changelog wins.
    pub ignore_group_offsets: bool,
    /// Start from this savepoint (`weir run --from-savepoint`): its state and positions replace
    /// the pipeline's, and its first checkpoint rewrites the changelog and the group's offsets. A
    /// pipeline whose lineage is already the savepoint's id started from it before and ignores it.
    /// Only a process that is given every partition of the pipeline loads it.
    pub from_savepoint: Option<Savepoint>,
    /// Start from `from_savepoint` even when it holds state the pipeline would not restore (an
    /// operator it lacks, a partition it does not read), dropping that state with a warning
    /// (`weir run --allow-non-restored-state`, Flink's flag); otherwise such a start is refused.
    pub allow_non_restored_state: bool,
    /// When the changelog topic lost state that the state directory still holds (it was deleted
    /// and created again), write that state into it with the next checkpoint, once it agrees
    /// with the consumer group's offsets (`weir run --reseed-changelog`); otherwise such a start
    /// is refused and the state directory kept.
    pub reseed_changelog: bool,
    /// Where the pipeline reports its metrics and state (see [`crate::metrics`]).
    pub metrics: Arc<Metrics>,
    /// This process's instance id (`weir run --instance`; [`default_instance`] when `None`): its
    /// `group.instance.id`, its transactional ids `<prefix>-<instance>-<slot>` and its state
    /// directory `<state.dir>/<instance>`.
    pub instance: Option<String>,
    /// Give up (return the error) after this many consecutive retriable failures with the same
    /// message, instead of recovering for ever; errors that heal themselves (a broker outage,
    /// [`Disposition::Retry`]'s `heals_itself`) are not counted. `None` retries for ever (`weir run`),
    /// `weir serve` sets its `max_identical_failures`.
    pub max_identical_failures: Option<u32>,
    /// Memory and CPU the pipeline's operators share with other pipelines' (`weir serve`: the
    /// tenant's); `None` for none.
    pub pool: Option<Arc<ResourcePool>>,
}

/// The instance id of a process started without `--instance`: the host name (from
/// `/proc/sys/kernel/hostname`, else `$HOSTNAME`), else `weir`. Stable across restarts on one
/// machine; two processes of one pipeline on one machine need an `--instance` each.
pub fn default_instance() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "weir".to_owned())
}

/// Checks an instance id: 1 to 100 characters of `A-Z a-z 0-9 . _ -` (it goes into
/// transactional ids, `group.instance.id` and a directory name).
///
/// # Errors
/// A message naming the rule.
pub fn check_instance(instance: &str) -> Result<(), String> {
    let valid = !instance.is_empty()
        && instance.len() <= 100
        && instance.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && instance != "."
        && instance != "..";
    if valid {
        Ok(())
    } else {
        Err(format!("instance id {instance:?} must be 1 to 100 characters of A-Z, a-z, 0-9, '.', '_' and '-'"))
    }
}

/// Runs the pipeline until `shutdown` is set, then commits the open epoch and returns (a
/// stop that comes while a failed batch is replayed record by record aborts the epoch instead,
/// see [`OperatorLimits::stop`]).
///
/// Retriable failures ([`Disposition::Retry`]) run recovery again after an
/// exponential back-off (1 s doubling to 30 s), logging each attempt. A retriable failure once
/// `shutdown` is set ends the run instead, with `Ok`, after aborting the failed epoch's open
/// transaction (`init_transactions` on the instance's transactional ids, as recovery does): its
/// records are processed again at the next start, or by the partitions' next owner.
///
/// # Errors
/// A failure that needs a human: invalid configuration, a missing topic, a refused start-up
/// check, inconsistent offsets, a state database error, or a transform that cannot load; and
/// any failure of that abort (a broker that is down).
pub fn run(
    config: &PipelineConfig,
    engine: &WasmEngine,
    options: &RunOptions,
    shutdown: &Arc<AtomicBool>,
) -> Result<(), PipelineError> {
    let metrics = options.metrics.pipeline(config);
    let instance = options.instance.clone().unwrap_or_else(default_instance);
    check_instance(&instance)
        .map_err(|why| PipelineError::Refused(format!("{why} (weir run --instance)")))
        .inspect_err(|error| metrics.failed(error, false))?;
    let chain: Vec<(Arc<TransformComponent>, TransformConfig)> = config
        .transforms
        .iter()
        .map(|t| Ok((Arc::new(engine.load(&t.wasm)?), t.clone())))
        .collect::<Result<_, PipelineError>>()
        .inspect_err(|error| metrics.failed(error, false))?;
    let mut backoff = Duration::from_secs(1);
    let mut repeated: Option<(String, u32)> = None;
    loop {
        let attempt = Instant::now();
        metrics.set_state(PipelineState::Starting);
        // A savepoint applies until its first checkpoint commits: from then on the pipeline's
        // lineage is the savepoint's id, and every start ignores it.
        let result = Runner::start(config, &chain, options, &instance, shutdown, &metrics).and_then(|mut runner| {
            metrics.set_state(PipelineState::Running);
            runner.run(shutdown)
        });
        // Read once: a stop that lands between two reads must not skip both arms below.
        let stopping = shutdown.load(Ordering::Relaxed);
        match result {
            Ok(()) => {
                metrics.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) if error.disposition() == Disposition::Stopped => {
                tracing::info!(pipeline = %config.name, "stopped during a record-by-record replay; the open epoch was aborted and is processed again at the next start");
                metrics.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) if error.disposition().retries() && stopping => {
                // A stop that meets a failure (a commit the broker aborted, a rebalance that
                // fenced it) still ends cleanly once the failed epoch's transaction is aborted:
                // now, rather than at the broker's `transaction.timeout.ms`, so that the
                // partitions' next owner is not held up by it.
                tracing::warn!(pipeline = %config.name, %error, "failed while stopping; the open epoch is not committed, and the next start processes it again");
                metrics.error_seen(&error);
                let aborted = match config.sink.guarantee {
                    Guarantee::ExactlyOnce => abort_open_transactions(config, &instance),
                    Guarantee::AtLeastOnce | Guarantee::None => Ok(()),
                };
                return match aborted {
                    Ok(()) => {
                        tracing::info!(pipeline = %config.name, "stopped after the failure (with exactly-once, after aborting the epoch's transaction, or completing it if its commit had reached the broker)");
                        metrics.set_state(PipelineState::Stopped);
                        Ok(())
                    }
                    Err(abort) => {
                        metrics.failed(&abort, false);
                        Err(abort)
                    }
                };
            }
            Err(error) if error.disposition().retries() && !stopping && !gives_up(&mut repeated, &error, options) => {
                metrics.failed(&error, true);
                if attempt.elapsed() > MAX_BACKOFF {
                    backoff = Duration::from_secs(1);
                }
                tracing::error!(pipeline = %config.name, %error, retry_in = ?backoff, "pipeline failed; recovering after back-off");
                sleep_unless(shutdown, backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            // Disposition::StopPipeline or Bug, or a retry past max_identical_failures.
            Err(error) => {
                metrics.failed(&error, false);
                return Err(error);
            }
        }
    }
}

/// Counts `error` in `repeated` (its message and how many times in a row) and tells whether it
/// reached `options.max_identical_failures`.
fn gives_up(repeated: &mut Option<(String, u32)>, error: &PipelineError, options: &RunOptions) -> bool {
    if error.disposition() == (Disposition::Retry { heals_itself: true }) {
        // A broker outage must not turn every pipeline to failed: recovery waits it out.
        *repeated = None;
        return false;
    }
    let message = error.to_string();
    let count = match repeated.take() {
        Some((last, count)) if last == message => count + 1,
        _ => 1,
    };
    *repeated = Some((message, count));
    let give_up = options.max_identical_failures.is_some_and(|max| count >= max);
    if give_up {
        tracing::error!(%error, failures = count, "the pipeline failed the same way {count} times in a row; giving up");
    }
    give_up
}

fn sleep_unless(shutdown: &AtomicBool, duration: Duration) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !shutdown.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where a task's output goes: the open epoch's producer slot and the sink's topics; a worker
/// sends its tasks' output itself.
#[derive(Clone)]
struct Out {
    slot: Arc<ProducerSlot>,
    sink: Arc<SinkConfig>,
    /// What the dead-letter topic refuses: a dead letter keeps its record's timestamp only
    /// where the topic takes it.
    dead_letter_rules: Arc<TopicRules>,
    metrics: Arc<PipelineMetrics>,
    /// With `[sink.postgres]`: the table's columns, and the open epoch's rows.
    rows: Option<(Arc<TableShape>, Arc<PendingRows>)>,
}

impl Out {
    /// Sends a task's output and dead letters (each output carries its timestamp: the operator
    /// gave those without one their batch's last record's, or their timer's). `input` is what
    /// made them (no records for timers), for the task's metrics.
    /// Returns the output's key and value bytes.
    fn send(
        &self,
        task: &Task,
        outputs: &Outputs,
        dead_letters: &[DeadLetter],
        input: &Input,
    ) -> Result<u64, PipelineError> {
        let sending = Instant::now();
        let (mut rows, mut refused) = (Vec::new(), Vec::new());
        for output in outputs.iter() {
            if let Some((table, _)) = self.rows.as_ref().filter(|_| self.sink.to_postgres(output.output)) {
                match table.row(task.id(), output.key, output.value) {
                    Ok(row) => rows.push(row),
                    Err(reason) => refused.push(Refusal::of(task.id(), output.key, output.value, reason)),
                }
                continue;
            }
            // Validation gives the default output a topic unless the table takes it.
            let topic = match output.output {
                Some(name) => &self.sink.outputs[name],
                None => self.sink.topic.as_deref().unwrap_or_default(),
            };
            self.slot.send(topic, output).map_err(PipelineError::kafka_with(|| format!("producing to {topic}")))?;
        }
        refuse_rows(&self.slot, &self.sink, refused)?;
        if let Some((_, pending)) = self.rows.as_ref().filter(|_| !rows.is_empty()) {
            pending.push(rows);
        }
        if let Some(topic) = &self.sink.dead_letter_topic {
            let now_ms = crate::time::now_ms();
            let records: Vec<_> =
                dead_letters.iter().map(|d| d.to_output(task.max_record(), &self.dead_letter_rules, now_ms)).collect();
            for dead_letter in Outputs::from_records(&records).iter() {
                self.slot
                    .send(topic, dead_letter)
                    .map_err(PipelineError::kafka_with(|| format!("producing to {topic}")))?;
            }
        }
        task.metrics().producer(sending.elapsed());
        let output_bytes = outputs.bytes();
        for dead_letter in dead_letters {
            self.metrics.guest_error(&dead_letter.error);
            let record = &dead_letter.record;
            self.metrics.dead_letter(&dead_letter.error, &record.topic, record.partition, record.offset);
        }
        task.metrics().batch(&BatchFigures {
            records_in: input.records,
            bytes_in: input.bytes,
            records_out: outputs.len() as u64,
            bytes_out: output_bytes,
            dead_letters: dead_letters.len() as u64,
            duration: input.took,
        });
        task.metrics().position(task.next_offset());
        Ok(output_bytes)
    }
}

/// What a task's output was made from, for its metrics.
struct Input {
    /// Input records (none for fired timers) and their key and value bytes.
    records: u64,
    bytes: u64,
    /// How long the task worked on it.
    took: Duration,
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

/// One incarnation of a pipeline's process, from recovery to a failure or shutdown. It runs the
/// tasks of the partitions the consumer group gives it; [`Runner::rebalance`] adds and drops them.
struct Runner<'a> {
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
    slots: Vec<Arc<ProducerSlot>>,
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
    epoch: Epoch,
    /// The lowest id the next epoch may have: above every checkpoint the restored tasks' state
    /// or the group's offsets named.
    floor: CheckpointId,
    /// The offsets of the last committed checkpoint: an epoch that moves none of them and has
    /// no input has nothing to commit.
    recorded: BTreeMap<TaskId, i64>,
    /// A savepoint being loaded: the database is released from its owner until the first
    /// checkpoint writes the savepoint to the changelog.
    loading_savepoint: bool,
    /// The id of a changelog topic that lost state being written into it from the state
    /// directory (`--reseed-changelog`): recorded in the state directory once that commits.
    reseeding: Option<String>,
    last_commit: Instant,
    /// When tasks were last checked for idleness (it asks the broker for end offsets).
    last_idle_check: Instant,
    /// When the group's ownership of the source partitions was last checked.
    last_ownership_check: Instant,
    /// The source partitions no member owned at that check.
    unowned: Vec<TaskId>,
    /// The tables joined with every source record (`[[source.tables]]`).
    tables: Tables,
    /// With `[sink.postgres]`: the connection, and the open epoch's rows (shared with [`Out`]).
    postgres: Option<(PostgresSink, Arc<PendingRows>)>,
    instance: String,
    metrics: Arc<PipelineMetrics>,
}

impl<'a> Runner<'a> {
    /// Start-up checks, fencing, the lineage, the first epoch's transaction, and the subscription:
    /// tasks come with the group's first assignment ([`Runner::rebalance`]).
    fn start(
        config: &'a PipelineConfig,
        chain: &'a Chain,
        options: &'a RunOptions,
        instance: &str,
        shutdown: &Arc<AtomicBool>,
        metrics: &Arc<PipelineMetrics>,
    ) -> Result<Self, PipelineError> {
        let (task_ids, topic_ids) = check_cluster(config)?;
        let changelog = Changelog::new(&config.state.changelog_topic, &config.source.topics);
        ensure_changelog(config, &changelog, &task_ids)?;
        let sink_topics = block_on(sink_topics(&config.sink)).map_err(PipelineError::kafka_with(|| {
            let topics: Vec<&str> = config.sink.topics().collect();
            format!(
                "reading the configs of sink topics {} (max.message.bytes, message.timestamp.*, cleanup.policy)",
                topics.join(", ")
            )
        }))?;
        let max_state_record = block_on(changelog_record_limit(&config.sink, &changelog.topic))
            .map_err(PipelineError::kafka("reading the changelog topic's max.message.bytes"))?;
        let db = Arc::new(StateDb::open(&config.state.dir.join(instance))?.with_quota(config.state.max_bytes));
        let owner = Owner { pipeline: config.name.clone(), changelog_topic: changelog.topic.clone() };
        let membership = Membership { instance, discovery_interval: config.source.partition_discovery_interval };
        let source = Source::member(&config.source.cluster, &config.source.consumer, &config.group_id(), &membership)
            .map_err(PipelineError::kafka("creating the source consumer"))?;
        let reader =
            ChangelogReader::new(&config.sink.cluster, &config.sink.producer, changelog.clone(), &config.group_id())
                .map_err(PipelineError::kafka("creating the changelog reader"))?;
        let changelog_watch = ChangelogWatch::new(sink_admin(config)?, changelog.clone());
        let slots = fenced_slots(config, &db, instance)?;

        // The pipeline's lineage, which every instance must agree on: the group's offsets name
        // it once a checkpoint committed; before, the state directory's, else the changelog
        // topic's id (the same for every instance, and new when the topic is recreated).
        let group = source.group_offsets(&task_ids, config.checkpoint.timeout).map_err(PipelineError::kafka(
            format!("fetching consumer group {}'s committed offsets", source.group_id()),
        ))?;
        let from_group = protocol::group_lineage(&group, &config.name);
        let lineage_from_group = from_group.is_some();
        let lineage = match from_group {
            Some(lineage) => lineage,
            None if db.owner()?.is_some() => db.lineage()?.unwrap_or_default(),
            None => changelog_lineage(config, &changelog)?,
        };
        restore::claim(&db, &owner, &lineage)?;
        log_upgrades(&db, chain)?;
        let postgres = match &config.sink.postgres {
            Some(pg) => {
                let mut sink = PostgresSink::connect(pg, config.checkpoint.timeout)?;
                if config.sink.guarantee == Guarantee::ExactlyOnce {
                    start_postgres(config, &mut sink, instance, &lineage, &group)?;
                }
                Some((sink, Arc::new(PendingRows::default())))
            }
            None => None,
        };
        let lineage = Lineage { pipeline: config.name.clone(), lineage };
        let next = db.epoch_floor()?.max(db.committed()?.id).next();
        tracing::info!(pipeline = %config.name, instance, lineage = %lineage.lineage, next_epoch = %next, "recovered; joining the consumer group {}", config.group_id());
        metrics.restored(db.committed()?.id);
        let tables = Tables::load(&config.source, &config.group_id(), config.checkpoint.timeout)?;
        let workers = Workers::start(config.runtime.workers_for(task_ids.len()))
            .map_err(|e| PipelineError::Refused(format!("cannot start the worker threads (runtime.workers): {e}")))?;
        tracing::info!(workers = workers.len(), "worker threads started");
        let mut runner = Self {
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
            slots: slots.into_iter().map(Arc::new).collect(),
            sink: Arc::new(config.sink.clone()),
            tasks: Vec::new(),
            task_index: HashMap::new(),
            workers,
            lanes: HashMap::new(),
            overlays: Vec::new(),
            epoch: Epoch { id: next, records: 0, timer_rounds: 0, output_bytes: 0, started: Instant::now() },
            floor: next,
            recorded: BTreeMap::new(),
            loading_savepoint: false,
            reseeding: None,
            last_commit: Instant::now(),
            last_idle_check: Instant::now(),
            last_ownership_check: Instant::now(),
            unowned: Vec::new(),
            metrics: metrics.clone(),
            tables,
            postgres,
            instance: instance.to_owned(),
        };
        runner.begin_epoch(next)?;
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
    fn run(&mut self, shutdown: &AtomicBool) -> Result<(), PipelineError> {
        while !shutdown.load(Ordering::Relaxed) {
            // The round's work on this thread counts in the pool's CPU share (guest calls on the
            // workers meter themselves).
            let _meter = self.options.pool.as_ref().map(|pool| pool.meter(Some(shutdown)));
            self.tables.poll()?;
            if let Err(error) = self.stream(shutdown) {
                if error.is_stop() {
                    self.abort_epoch()?;
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
            if self.epoch.records > 0 {
                inject(FaultPoint::MidEpoch, self.epoch.id);
            }
            let max_bytes = self.config.checkpoint.max_epoch_bytes;
            let rows_full = self.postgres.as_ref().is_some_and(|(_, rows)| rows.bytes() >= max_bytes);
            let overlay_full = rows_full || self.tasks.iter().any(|t| t.epoch_bytes() >= max_bytes);
            if overlay_full || self.epoch.started.elapsed() >= self.config.checkpoint.interval {
                if self.has_work()? {
                    self.checkpoint()?;
                } else {
                    self.metrics.caught_up();
                }
            }
        }
        self.finish()
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
    /// tells them apart: `send_offsets_to_transaction` goes to the transaction coordinator,
    /// which refuses a producer whose epoch another one bumped (AddOffsetsToTxn), before any
    /// offset is staged. One that was not taken over passes that step, and the group
    /// coordinator then refuses the offsets of a member it fenced or expired (TxnOffsetCommit:
    /// FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION, KIP-447). So the offsets
    /// never count, and any will do: the last checkpoint's, or, for an instance that owns no
    /// partition, offset 0 of the first source topic's partition 0. The transaction is never
    /// committed; recovery's `init_transactions` (or a stop's) aborts it.
    fn unless_taken_over(&self, error: PipelineError) -> PipelineError {
        let evicted = match &error {
            PipelineError::Kafka {
                source: KafkaError::MessageConsumptionFatal(code @ RDKafkaErrorCode::FencedInstanceId),
                ..
            } => format!("the source consumer was fenced ({code})"),
            PipelineError::AssignmentLost(_) => "the consumer group took this process's partitions".to_owned(),
            _ => return error,
        };
        if self.config.sink.guarantee != Guarantee::ExactlyOnce {
            return error;
        }
        let Some(group) = self.source.held_group_metadata() else { return error };
        let mut offsets = self.recorded.clone();
        if let (true, Some(topic)) = (offsets.is_empty(), self.config.source.topics.first()) {
            offsets.insert(TaskId { topic: topic.clone(), partition: 0 }, 0);
        }
        let metadata = protocol::metadata(self.epoch.id, &self.lineage, None);
        let Ok(offsets) = Source::offset_list(&offsets, &metadata, &BTreeMap::new()) else { return error };
        match self.slot().send_offsets(&offsets, &group, self.config.checkpoint.timeout) {
            Err(ProducerError::Fenced(fenced)) => {
                PipelineError::Fenced { operation: format!("checking the transactional ids after {evicted}"), fenced }
            }
            _ => {
                tracing::info!("{evicted}, but the transactional ids are still this process's: recovering");
                error
            }
        }
    }

    /// Applies a change of the group's assignment (see [`crate::kafka::Rebalance`]).
    ///
    /// Revoked partitions: the open epoch commits first (the group's generation still names
    /// this process as their owner, and the next owner's stable offset fetch waits for the
    /// commit), then their tasks are dropped and the partitions given up, so no later
    /// transaction carries them. Lost partitions: the group already gave them to another member,
    /// and the open epoch holds their work, so nothing may commit: the runner fails into
    /// recovery, which aborts the epoch and rejoins.
    ///
    /// Assigned partitions: recovered ([`protocol::recover_tasks`]), given tasks, and read from
    /// their restored positions; positions that are new are committed at once.
    ///
    /// # Errors
    /// [`PipelineError::AssignmentLost`] for lost partitions; any error of a checkpoint or of
    /// recovery.
    fn rebalance(&mut self, event: Rebalance) -> Result<(), PipelineError> {
        match event {
            Rebalance::Revoke { tasks, lost: true } => {
                tracing::warn!(
                    partitions = tasks.len(),
                    "the consumer group gave this process's partitions to another member; aborting the open epoch"
                );
                Err(PipelineError::AssignmentLost(tasks.len()))
            }
            Rebalance::Revoke { tasks, lost: false } => self.revoke(&tasks),
            Rebalance::Assign(tasks) => self.assign(tasks),
        }
    }

    /// Rejoins the group when source partitions have no owner at two checks in a row (one
    /// `source.partition_discovery_interval_ms` apart): a static member that came back kept its
    /// old assignment, so partitions added meanwhile were never assigned ([`Source::rejoin`]).
    /// Partitions added while the group runs are found by the members' own metadata refreshes,
    /// which rebalance the group before the second check.
    fn check_ownership(&mut self) -> Result<(), PipelineError> {
        self.last_ownership_check = Instant::now();
        if self.source.generation() < 0 {
            return Ok(()); // not a member yet (or between two generations): nothing to compare
        }
        let all = self.source_tasks()?;
        let unowned = match self.source.owners(self.config.checkpoint.timeout) {
            Ok(owners) => {
                owners.map_or_else(Vec::new, |owners| all.into_iter().filter(|t| !owners.contains_key(t)).collect())
            }
            Err(error) => {
                tracing::debug!(%error, "cannot describe the consumer group; its ownership is checked again later");
                Vec::new()
            }
        };
        if unowned.iter().any(|t| self.unowned.contains(t)) {
            tracing::info!(partitions = ?unowned.iter().map(ToString::to_string).collect::<Vec<_>>(), "source partitions without an owner in the consumer group (added while a static member was away); rejoining the group so that they are assigned");
            self.unowned.clear();
            return self
                .source
                .rejoin(&self.config.source.topics)
                .map_err(PipelineError::kafka("rejoining the consumer group"));
        }
        self.unowned = unowned;
        Ok(())
    }

    /// Stops the pipeline when the changelog topic's configs now let the broker delete state
    /// (they changed since the start, see [`ChangelogWatch`]): the open epoch is aborted, and
    /// the error, which is not retried, names the settings and the fix.
    fn check_changelog(&mut self) -> Result<(), PipelineError> {
        let settings = block_on(self.changelog_watch.check());
        if settings.is_empty() {
            return Ok(());
        }
        if let Err(error) = self.abort_epoch() {
            tracing::warn!(%error, "could not abort the open epoch; the next start aborts it");
        }
        let brokers = self.config.sink.cluster.bootstrap_servers();
        Err(PipelineError::StateAtRisk(describe_unsafe(&self.changelog.topic, brokers, &settings)))
    }

    /// Commits the open epoch if it has work, then drops the tasks of `revoked` and gives up
    /// their partitions.
    fn revoke(&mut self, revoked: &[TaskId]) -> Result<(), PipelineError> {
        if self.has_work()? {
            self.checkpoint()?;
        }
        self.tasks.retain(|t| !revoked.contains(t.id()));
        self.lanes.retain(|t, _| !revoked.contains(t));
        self.recorded.retain(|t, _| !revoked.contains(t));
        self.reindex();
        self.source.unassign(revoked).map_err(PipelineError::kafka("giving up revoked source partitions"))?;
        self.metrics.assigned(self.tasks.len());
        tracing::info!(partitions = ?revoked.iter().map(ToString::to_string).collect::<Vec<_>>(), kept = self.tasks.len(), "partitions revoked by the consumer group; their open epoch committed");
        Ok(())
    }

    /// Recovers the tasks of `assigned`, creates them, and starts reading their partitions.
    fn assign(&mut self, assigned: Vec<TaskId>) -> Result<(), PipelineError> {
        // A static member that comes back within `session.timeout.ms` gets its old assignment
        // without a rebalance (KIP-345), also when the pipeline's `source.topics` changed
        // meanwhile (or another pipeline used the group id): only a new join reassigns.
        let foreign: Vec<String> = assigned
            .iter()
            .filter(|t| !self.config.source.topics.contains(&t.topic))
            .map(ToString::to_string)
            .collect();
        if !foreign.is_empty() {
            tracing::warn!(partitions = ?foreign, "the consumer group assigned partitions of topics this pipeline does not read (an assignment kept from before source.topics changed); rejoining the group so that it assigns anew");
            // The assignment is taken (paused: nothing is read) so that librdkafka's rebalance
            // completes and the unsubscribe revokes it and leaves the group.
            self.source.hold(&assigned).map_err(PipelineError::kafka("acknowledging an assignment"))?;
            return self
                .source
                .rejoin(&self.config.source.topics)
                .map_err(PipelineError::kafka("rejoining the consumer group"));
        }
        let assigned: Vec<TaskId> =
            assigned.into_iter().filter(|t| self.index_of(&t.topic, t.partition).is_none()).collect();
        if assigned.is_empty() {
            self.source
                .assign_more(&BTreeMap::new())
                .map_err(PipelineError::kafka("acknowledging an empty assignment"))?;
            self.metrics.assigned(self.tasks.len());
            return Ok(());
        }
        let config = self.config;
        // Partitions added to a source topic while running need changelog partitions.
        let all = self.source_tasks()?;
        let known = all.iter().chain(assigned.iter());
        ensure_changelog(config, &self.changelog, &known.cloned().collect::<Vec<_>>())?;
        let from_savepoint = self.savepoint().is_some();
        let recover = RecoverOptions {
            timeout: config.checkpoint.timeout,
            check_group: config.sink.guarantee == Guarantee::ExactlyOnce,
            // A savepoint's positions replace the group's offsets, and its state the local one.
            ignore_group_offsets: self.options.ignore_group_offsets || from_savepoint,
            start_from_group: config.source.start == StartPosition::Group,
            lost: match (from_savepoint, self.options.reseed_changelog) {
                (true, _) => LostChangelog::Discard,
                (false, true) => LostChangelog::Reseed,
                (false, false) => LostChangelog::Refuse,
            },
        };
        let adoptable = self.tasks.is_empty() && (!self.lineage_from_group || recover.ignore_group_offsets);
        self.metrics.restoring(assigned.len());
        let Recovered { mut committed, next, group, reseed, changelog_topic_id } = protocol::recover_tasks(
            &self.db,
            &self.source,
            &self.reader,
            &assigned,
            &self.owner,
            &mut self.lineage,
            adoptable,
            &recover,
        )?;
        self.floor = self.floor.max(next);
        if self.tasks.is_empty() {
            self.renumber()?;
        }
        // Whether the pipeline ever committed a checkpoint, on any instance: a partition without
        // an offset then was added since, and starts at its earliest offset.
        let pipeline_group = self.source.group_offsets(&all, config.checkpoint.timeout).map_err(
            PipelineError::kafka(format!("fetching consumer group {}'s committed offsets", self.source.group_id())),
        )?;
        let first_start =
            committed.offsets.is_empty() && protocol::group_lineage(&pipeline_group, &config.name).is_none();
        self.resolve_departed(&pipeline_group)?;

        let mut seeds = BTreeMap::new();
        for task in &reseed {
            seeds.insert(task.clone(), restore::reseed_writes(&self.db, task)?);
        }
        if !reseed.is_empty() {
            self.reseeding = Some(changelog_topic_id);
        }
        if let Some(savepoint) = self.savepoint() {
            if !self.tasks.is_empty() || all.iter().any(|t| !assigned.contains(t)) {
                return Err(PipelineError::Refused(format!(
                    "--from-savepoint loads the savepoint into every partition of the pipeline at once, but this process was given {} of the {} partitions; start the pipeline from the savepoint with one instance, then add the others",
                    assigned.len(),
                    all.len()
                )));
            }
            let operators: Vec<&str> = self.chain.iter().map(|(_, transform)| transform.name.as_str()).collect();
            let restorable = savepoint::Restorable {
                tasks: &all,
                operators: &operators,
                allow_non_restored_state: self.options.allow_non_restored_state,
            };
            seeds = savepoint::load(&self.db, savepoint, &restorable)?;
            self.lineage.lineage = savepoint.manifest.id.clone();
            let restored = self.db.committed()?;
            committed.offsets = restored.offsets;
            committed.snapshots = restored.snapshots;
            self.floor = self.floor.max(self.db.epoch_floor()?.next());
            self.loading_savepoint = true;
            self.renumber()?;
            tracing::info!(savepoint = %savepoint.manifest.id, of = %savepoint.manifest.pipeline, checkpoint = %savepoint::checkpoint(savepoint), tasks = savepoint.tasks.len(), "starting from a savepoint; the first checkpoint writes it to the changelog and the group");
        }
        let positions =
            start_positions(config, &self.source, &assigned, &committed, &self.topic_ids, &group, first_start)?;
        for id in &assigned {
            let snapshot = |operator: &str| committed.snapshots.get(&(operator.to_owned(), id.clone())).cloned();
            let mut task = Task::new(
                id.clone(),
                self.chain,
                &self.outputs,
                &self.limits,
                self.db.clone(),
                snapshot,
                positions.get(id).copied(),
                config.source.watermark.as_ref(),
                &self.metrics,
            )?;
            if let Some(writes) = seeds.remove(id) {
                task.seed_changelog(writes);
            }
            // The least busy worker takes the task for as long as it is assigned.
            let lane = (0..self.workers.len()).min_by_key(|lane| self.lanes.values().filter(|l| *l == lane).count());
            self.lanes.insert(id.clone(), lane.unwrap_or(0));
            self.tasks.push(task);
        }
        if !self.loading_savepoint {
            // A reseeded task's position is written with its state, as on a first start.
            let kept = |t: &TaskId| assigned.contains(t) && !reseed.contains(t);
            self.recorded.extend(committed.offsets.iter().filter(|(t, _)| kept(t)).map(|(t, o)| (t.clone(), *o)));
        }
        self.reindex();
        self.source.assign_more(&positions).map_err(PipelineError::kafka("assigning the source partitions"))?;
        tracing::info!(partitions = ?assigned.iter().map(ToString::to_string).collect::<Vec<_>>(), tasks = self.tasks.len(), checkpoint = %committed.id, "partitions assigned by the consumer group; their state is restored");
        self.metrics.restored(committed.id);
        self.metrics.assigned(self.tasks.len());
        // Commit at once positions that are new or moved, and offsets the group lost (deleted,
        // expired): they are the next recovery's evidence.
        let moved = assigned.iter().any(|t| positions.get(t) != self.recorded.get(t));
        let lost = recover.check_group && assigned.iter().any(|t| !group.contains_key(t));
        if moved || lost || self.loading_savepoint || self.reseeding.is_some() {
            self.checkpoint()?;
        }
        Ok(())
    }

    /// PostgreSQL sink: decides the prepared transactions that `group` (the group's stable
    /// offsets of every source partition, fetched after this assignment) shows committed, and
    /// rolls back those of instances that are no member of the group any more (their Kafka
    /// transactions can no longer commit: the group refuses a departed member's offsets,
    /// KIP-447). Runs before any checkpoint of the assigned partitions, which would overwrite the
    /// evidence.
    fn resolve_departed(&mut self, group: &BTreeMap<TaskId, GroupOffset>) -> Result<(), PipelineError> {
        let Some((sink, _)) = self.postgres.as_mut().filter(|_| self.config.sink.guarantee == Guarantee::ExactlyOnce)
        else {
            return Ok(());
        };
        let members: Option<Vec<String>> = match self.source.owners(self.config.checkpoint.timeout) {
            Ok(owners) => owners.map(|owners| owners.into_values().collect()),
            Err(error) => {
                tracing::debug!(%error, "cannot describe the consumer group; prepared transactions of other instances are left");
                None
            }
        };
        let ours = self.instance.clone();
        let departed =
            |instance: &str| instance == ours || members.as_ref().is_some_and(|m| !m.iter().any(|i| i == instance));
        sink.db().resolve(&self.config.name, group, &self.config.sink.transactional_id_prefix, departed)?;
        Ok(())
    }

    /// The savepoint to load, unless the pipeline already started from it.
    fn savepoint(&self) -> Option<&'a Savepoint> {
        self.options.from_savepoint.as_ref().filter(|s| {
            let applied = s.manifest.id == self.lineage.lineage;
            if applied && !self.loading_savepoint {
                tracing::info!(savepoint = %s.manifest.id, "the pipeline started from this savepoint before; --from-savepoint is ignored");
            }
            !applied
        })
    }

    /// Every partition of the source topics, from the cluster's metadata.
    fn source_tasks(&self) -> Result<Vec<TaskId>, PipelineError> {
        let counts = self
            .source
            .partition_counts(&self.config.source.topics, self.config.checkpoint.timeout)
            .map_err(PipelineError::kafka("reading the source topics' metadata"))?;
        Ok(counts
            .into_iter()
            .flat_map(|(topic, n)| (0..n).map(move |partition| TaskId { topic: topic.clone(), partition }))
            .collect())
    }

    /// Rebuilds the index of tasks by partition and the list of their overlays.
    fn reindex(&mut self) {
        self.task_index.clear();
        for (index, task) in self.tasks.iter().enumerate() {
            self.task_index.entry(task.id().topic.clone()).or_default().insert(task.id().partition, index);
        }
        self.overlays = self.tasks.iter().map(|t| t.overlays().clone()).collect();
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

    /// Index of the task of `topic`'s `partition`, if one is assigned.
    fn index_of(&self, topic: &str, partition: i32) -> Option<usize> {
        self.task_index.get(topic)?.get(&partition).copied()
    }

    /// Index of the task owning `message`'s partition; `last` remembers the last answer.
    fn task_of(&self, message: &BorrowedMessage<'_>, last: &mut LastTask) -> Result<usize, PipelineError> {
        let (topic, partition) = (message.topic(), message.partition());
        if let Some(index) = last.index.filter(|_| last.partition == partition && last.topic == topic) {
            return Ok(index);
        }
        let index = self.index_of(topic, partition).ok_or_else(|| {
            PipelineError::Bug(format!("a record of {topic}[{partition}] arrived, which no task owns"))
        })?;
        last.topic.clear();
        last.topic.push_str(topic);
        (last.partition, last.index) = (partition, Some(index));
        Ok(index)
    }

    /// Polls the source and runs what arrives through the tasks, each on its worker thread
    /// (which also sends the task's output to the epoch's slot), until a poll comes back empty
    /// with every task back (caught up) or with a rebalance event, [`STREAM_WINDOW`] or the
    /// checkpoint interval has passed, a stop is asked or a task failed; returns once every
    /// task is back.
    ///
    /// A task goes to its worker as soon as a batch of it is full while the poll goes on, so the
    /// workers run apart: librdkafka hands out a partition's fetched records together, so a
    /// stretch of the input often feeds one or two tasks, and workers that waited for each
    /// other's rounds took turns. A task has one job out at a time, so its batches run in poll
    /// order (what arrives meanwhile waits for it); a task's output, and its order, do not
    /// depend on the number of workers. At most [`READ_AHEAD_BATCHES`] × `batch_size` × workers
    /// records are out at once, which bounds both the memory they hold and how long the tasks
    /// take to come back once the poll is over.
    fn stream(&mut self, shutdown: &AtomicBool) -> Result<(), PipelineError> {
        let batch_size = self.config.source.batch_size;
        let most = READ_AHEAD_BATCHES * batch_size * self.workers.len();
        // Up to the checkpoint that is due, but long enough to take what the consumer holds.
        let until = Instant::now()
            + STREAM_WINDOW
                .min(self.config.checkpoint.interval.saturating_sub(self.epoch.started.elapsed()))
                .max(MIN_STREAM_WINDOW);
        let out = self.out();
        let mut flow = Flow::new(std::mem::take(&mut self.tasks));
        let (done_tx, done) = mpsc::channel::<Finished>();
        let (mut polling, mut polls) = (true, 0usize);
        let mut timeout = POLL_TIMEOUT;
        // A task that came back while the runner waited for one, at the end of the last pass.
        let mut settled = false;
        let mut last = LastTask::default();
        loop {
            let (mut returned, mut dry) = (std::mem::take(&mut settled), false);
            while let Ok(finished) = done.try_recv() {
                flow.settle(finished);
                returned = true;
            }
            if polling && flow.failed.is_none() && flow.out_records < most {
                // Only a poll that may wait is timed: the rest take what the consumer holds.
                let waiting = (!timeout.is_zero()).then(Instant::now);
                let polled = self.source.consumer().poll(timeout);
                if let Some(started) = waiting {
                    self.metrics.poll_wait(started.elapsed());
                }
                timeout = Duration::ZERO;
                // The clock is read once per batch's worth of polls, not per record, and at
                // every empty poll.
                polls += 1;
                dry = polled.is_none();
                let on_time = (!dry && polls % batch_size != 0) || Instant::now() < until;
                // The queue running dry (fetches in flight) ends the stretch only once every
                // task is back: ending it at once had the runner wait for all the workers before
                // its next poll, so a worker that was done sat idle. A rebalance event also
                // comes back as an empty poll, and ends it.
                let streaming = !dry || (flow.away > 0 && !self.source.rebalance_pending());
                polling = streaming && on_time && !shutdown.load(Ordering::Relaxed);
                // Every broker connection down (one lost connection alone is no outage):
                // readiness reports the broker unreachable until the metrics sampler reaches the
                // cluster again.
                if let Some(Err(error)) = &polled
                    && error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown)
                {
                    self.metrics.broker_unreachable(error);
                }
                match polled {
                    Some(Ok(message)) => match self.task_of(&message, &mut last) {
                        Ok(index) => {
                            flow.out_records += 1;
                            let batches = &mut flow.waiting[index];
                            if batches.last().is_none_or(|batch| batch.len() >= batch_size) {
                                batches.push(RecordBatch::default());
                            }
                            let batch = batches.last_mut().expect("a batch was pushed");
                            push_message(batch, &message);
                            let full = batch.len() >= batch_size && flow.home[index].is_some();
                            if polling && !full && !returned {
                                continue;
                            }
                        }
                        Err(error) => flow.failed = Some(error),
                    },
                    // librdkafka recovers from transient errors itself, but not from a fatal
                    // one (a static member fenced by another with its `group.instance.id`,
                    // KIP-345): that consumer is finished, and recovery builds a new one. A
                    // topic that vanished does not come back by polling: recovery checks the
                    // topics again and refuses to start without one. Configuration and
                    // authorisation errors stop the pipeline ([`crate::failure::disposition`]).
                    Some(Err(error))
                        if classify(&error) == ErrorClass::Transient
                            && !matches!(error, KafkaError::MessageConsumptionFatal(_)) =>
                    {
                        // librdkafka retries; the consumer's context logged the error (once per
                        // kind and interval: a broker outage raises one per poll).
                    }
                    Some(Err(error)) => {
                        // Named in full: a refusal may be of any of them.
                        let operation = format!(
                            "reading the source topics {} as consumer group {}",
                            self.config.source.topics.join(", "),
                            self.source.group_id()
                        );
                        flow.failed = Some(PipelineError::kafka(operation)(error));
                    }
                    None => {}
                }
            }
            // Each task at home takes what waits for it: at once when a batch is full, the
            // rest once the poll is over, the queue is dry or too much is out.
            let flush = !polling || dry || flow.out_records >= most;
            for index in 0..flow.home.len() {
                let Some(mut batches) = flow.ready(index, flush, batch_size) else { continue };
                let mut task = flow.home[index].take().expect("a ready task is home");
                for batch in &mut batches {
                    self.tables.join(batch);
                }
                let records = batches.iter().map(RecordBatch::len).sum();
                let (done_tx, out) = (done_tx.clone(), out.clone());
                self.workers.spawn(self.lanes[task.id()], move || {
                    let result = run_batches(&mut task, batches, &out);
                    // The receiver outlives the job: a failed send means the runner is gone.
                    let _ = done_tx.send((index, task, records, result));
                });
                flow.away += 1;
            }
            if flow.away == 0 && (!polling || flow.failed.is_some()) {
                break;
            }
            if flow.away > 0 && polling && dry && flow.failed.is_none() {
                // Poll again soon, or as soon as a task is back.
                if let Some(finished) = self.workers.wait_timeout(&done, DRY_POLL_WAIT) {
                    flow.settle(finished);
                    settled = true;
                }
            } else if flow.away > 0 && (flush || flow.failed.is_some()) {
                flow.settle(self.workers.wait(&done));
                settled = true;
            }
        }
        self.epoch.records += flow.records;
        self.epoch.output_bytes += flow.output_bytes;
        self.tasks = flow.home.into_iter().map(|t| t.expect("every task comes back from its worker")).collect();
        flow.failed.map_or(Ok(()), Err)
    }

    /// Runs `work` on each task named in `inputs` (task index, input) on the task's worker
    /// thread, all at once; the tasks come back to the runner. Results are in `inputs`' order.
    fn on_workers<I, R>(&mut self, inputs: Vec<(usize, I)>, work: fn(&mut Task, I) -> R) -> Vec<(usize, R)>
    where
        I: Send + 'static,
        R: Send + 'static,
    {
        let mut tasks: Vec<Option<Task>> = std::mem::take(&mut self.tasks).into_iter().map(Some).collect();
        let items = inputs
            .into_iter()
            .map(|(index, input)| {
                let task = tasks[index].take().expect("one input per task");
                (self.lanes[task.id()], (index, task, input))
            })
            .collect();
        let done = self.workers.run(items, move |(index, mut task, input)| {
            let result = work(&mut task, input);
            (index, task, result)
        });
        let results = done
            .into_iter()
            .map(|(index, task, result)| {
                tasks[index] = Some(task);
                (index, result)
            })
            .collect();
        self.tasks = tasks.into_iter().map(|t| t.expect("every task comes back from its worker")).collect();
        results
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
                self.epoch.output_bytes += output_bytes;
                self.epoch.timer_rounds += 1;
            }
        }
        Ok(())
    }

    /// Where the open epoch's output goes, for the workers.
    fn out(&self) -> Out {
        Out {
            slot: self.slot().clone(),
            sink: self.sink.clone(),
            dead_letter_rules: self.dead_letter_rules.clone(),
            metrics: self.metrics.clone(),
            rows: self.postgres.as_ref().map(|(sink, rows)| (sink.shape().clone(), rows.clone())),
        }
    }

    /// The producer the open epoch writes through: slot N mod k (the only one when not
    /// transactional).
    fn slot(&self) -> &Arc<ProducerSlot> {
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
        let work = (0..self.tasks.len()).map(|index| (index, id)).collect();
        let barriers = self
            .on_workers(work, Task::barrier)
            .into_iter()
            .map(|(_, barrier)| barrier)
            .collect::<Result<Vec<_>, _>>()?;
        let mut sealed = protocol::barrier(id, barriers, &self.recorded, &self.lineage, &self.topic_ids);
        let state_bytes: usize =
            sealed.checkpoint.writes.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len)).sum();
        let changelog_records = sealed.changelog.len();
        let rows = self.write_rows()?;
        let barrier_us = lap();
        let slot = self.slot().clone();
        let slot = &slot;
        match self.config.sink.guarantee {
            Guarantee::ExactlyOnce => {
                let prepared = match (&mut self.postgres, rows) {
                    (Some((sink, _)), true) => {
                        let xid = xid(&self.lineage, &self.instance, id);
                        inject(FaultPoint::BeforePrepare, id);
                        sink.prepare(&xid.gid())?;
                        inject(FaultPoint::AfterPrepare, id);
                        Some(xid.gid())
                    }
                    _ => None,
                };
                protocol::pre_commit(slot, &self.source, &self.changelog, &mut sealed, &self.lineage, timeout)?;
                pre_commit_us = lap();
                protocol::commit(slot, id, timeout)?;
                if let (Some((sink, _)), Some(gid)) = (&mut self.postgres, prepared) {
                    // Kafka decided: a failure here leaves the decision to the next start.
                    sink.db().finish_prepared(&gid, true)?;
                    inject(FaultPoint::AfterCommitPrepared, id);
                }
                commit_us = lap();
                protocol::apply(&self.db, &self.overlays, &sealed.checkpoint)?;
            }
            guarantee => {
                protocol::write_changelog(slot, &self.changelog, &sealed)?;
                if guarantee == Guarantee::AtLeastOnce {
                    protocol::flush(slot, &self.changelog, &mut sealed, timeout)?;
                }
                pre_commit_us = lap();
                if let (Some((sink, _)), true) = (&mut self.postgres, rows) {
                    sink.commit()?;
                }
                commit_us = 0;
                protocol::apply(&self.db, &self.overlays, &sealed.checkpoint)?;
                // The group's offsets only inform other tools here; the changelog is the truth.
                let metadata = protocol::metadata(id, &self.lineage, None);
                let checkpoint = &sealed.checkpoint;
                if let Err(error) = self.source.commit(&checkpoint.offsets, &metadata, &checkpoint.watermarks) {
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
        self.count_open_timers()?;
        self.recorded = sealed.checkpoint.offsets;
        self.last_commit = Instant::now();
        if self.loading_savepoint {
            // The changelog now holds the savepoint: the state directory mirrors it again.
            self.db.set_owner(Some(&self.owner), &self.lineage.lineage)?;
            self.loading_savepoint = false;
        }
        if let Some(topic_id) = self.reseeding.take() {
            self.db.set_changelog_topic_id(&topic_id)?;
            tracing::info!(changelog = %self.changelog.topic, checkpoint = %id, "the state directory's state is in the changelog again (--reseed-changelog)");
        }
        self.begin_epoch(id.next().max(self.floor))
    }

    /// PostgreSQL sink: opens the epoch's transaction and writes the epoch's rows in it; rows the
    /// table refused go to the dead-letter topic in the epoch's Kafka transaction, or fail the
    /// checkpoint (`sink.postgres.on_error`). Whether a transaction was opened (there were rows).
    fn write_rows(&mut self) -> Result<bool, PipelineError> {
        let Some((sink, pending)) = &mut self.postgres else { return Ok(false) };
        let rows = pending.take();
        if rows.is_empty() {
            return Ok(false);
        }
        let refused = sink.write(rows)?;
        let refused = refused.into_iter().map(|(row, reason)| row.refused(reason)).collect();
        refuse_rows(self.slot(), &self.sink, refused)?;
        Ok(true)
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

    /// Moves the open epoch, which has no work, up to the floor: its (empty) transaction is
    /// aborted and the epoch begun again under the new id.
    fn renumber(&mut self) -> Result<(), PipelineError> {
        if self.epoch.id >= self.floor {
            return Ok(());
        }
        if self.config.sink.guarantee == Guarantee::ExactlyOnce {
            let id = self.epoch.id;
            self.slot()
                .abort(self.config.checkpoint.timeout)
                .map_err(PipelineError::kafka(format!("abort_transaction of empty epoch {id}")))?;
        }
        self.begin_epoch(self.floor)
    }

    /// A stop in the middle of a round: aborts the open epoch's transaction, so its outputs
    /// never become visible and read_committed readers of the sink need not wait for
    /// `transaction.timeout.ms`. Its state writes are dropped with the tasks.
    fn abort_epoch(&mut self) -> Result<(), PipelineError> {
        if self.config.sink.guarantee == Guarantee::ExactlyOnce {
            let id = self.epoch.id;
            self.slot()
                .abort(self.config.checkpoint.timeout)
                .map_err(PipelineError::kafka(format!("abort_transaction of epoch {id}")))?;
        }
        Ok(())
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

/// The PostgreSQL sink's prepared transaction of epoch `id` of `instance`.
fn xid(lineage: &Lineage, instance: &str, id: CheckpointId) -> Xid {
    Xid {
        pipeline: lineage.pipeline.clone(),
        instance: instance.to_owned(),
        epoch: id,
        lineage: lineage.lineage.clone(),
    }
}

/// The PostgreSQL sink's part of a start under exactly-once, after the instance's transactional
/// ids were fenced: room for a prepared transaction, global ids that fit, and each prepared
/// transaction of this instance decided by the group's offsets (`group`, fetched stable after
/// the fence): committed when they show its epoch committed, else rolled back. Those of other
/// instances are committed on the same evidence, and otherwise left to them (or to whoever
/// takes over their partitions, [`Runner::resolve_departed`]).
fn start_postgres(
    config: &PipelineConfig,
    sink: &mut PostgresSink,
    instance: &str,
    lineage: &str,
    group: &BTreeMap<TaskId, GroupOffset>,
) -> Result<(), PipelineError> {
    let longest = Xid {
        pipeline: config.name.clone(),
        instance: instance.to_owned(),
        epoch: CheckpointId(u64::MAX),
        lineage: lineage.to_owned(),
    };
    if longest.gid().len() > postgres::MAX_GID_LEN {
        return Err(PipelineError::Refused(format!(
            "the PostgreSQL sink's transaction ids (`{}`) would exceed PostgreSQL's {} bytes: shorten the pipeline's name or the instance id",
            longest.gid(),
            postgres::MAX_GID_LEN
        )));
    }
    sink.db().check_prepared_capacity()?;
    let resolved = sink.db().resolve(&config.name, group, &config.sink.transactional_id_prefix, |i| i == instance)?;
    for (xid, resolution) in resolved {
        if resolution == Resolution::Undecided {
            tracing::info!(gid = %xid.gid(), "a prepared transaction of instance {} is left to it", xid.instance);
        }
    }
    Ok(())
}

/// Rows the PostgreSQL table refused: each goes to the dead-letter topic through `slot` (in the
/// open epoch's transaction) with the reason in `weir.error`, or, under `on_error = "fail"`, the
/// first stops the pipeline ([`PipelineError::RowRefused`]).
fn refuse_rows(slot: &ProducerSlot, sink: &SinkConfig, refused: Vec<Refusal>) -> Result<(), PipelineError> {
    let (Some(first), Some(pg)) = (refused.first(), &sink.postgres) else { return Ok(()) };
    let topic = match (&sink.dead_letter_topic, pg.on_error) {
        (Some(topic), OnError::DeadLetter) => topic,
        _ => {
            return Err(PipelineError::RowRefused {
                table: pg.table.clone(),
                task: first.task.to_string(),
                reason: first.reason.clone(),
            });
        }
    };
    let header = |key: &str, value: String| Header { key: key.into(), value: Some(value.into_bytes()) };
    let records: Vec<OutputRecord> = refused
        .into_iter()
        .map(|refusal| OutputRecord {
            headers: vec![
                header("weir.error", refusal.reason),
                header("weir.sink", format!("postgres:{}", pg.table)),
                header("weir.topic", refusal.task.topic.clone()),
                header("weir.partition", refusal.task.partition.to_string()),
            ],
            key: refusal.key,
            value: refusal.value,
            output: None,
            timestamp: None,
        })
        .collect();
    for record in Outputs::from_records(&records).iter() {
        slot.send(topic, record).map_err(PipelineError::kafka_with(|| format!("producing to {topic}")))?;
    }
    Ok(())
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
fn check_cluster(config: &PipelineConfig) -> Result<(Vec<TaskId>, BTreeMap<String, String>), PipelineError> {
    let brokers = &config.source.cluster;
    let admin = Admin::new(brokers, &config.source.consumer)
        .map_err(PipelineError::kafka("creating a client with the properties of source.consumer"))?;
    let names: Vec<&str> = config.source.topics.iter().map(String::as_str).collect();
    let found = admin
        .topics(&names)
        .map_err(PipelineError::kafka(format!("reading the topic metadata of {brokers} (is the broker up?)")))?;
    let mut tasks = Vec::new();
    let mut topic_ids = BTreeMap::new();
    for (topic, check) in &found {
        match check {
            TopicCheck::Exists(partitions) => {
                tasks.extend((0..*partitions).map(|partition| TaskId { topic: topic.clone(), partition }));
                let id =
                    admin.topic_id(topic).map_err(PipelineError::kafka(format!("reading the topic id of {topic}")))?;
                topic_ids.insert(topic.clone(), id);
            }
            TopicCheck::Missing => {
                return Err(PipelineError::Refused(format!(
                    "source topic `{topic}` (source.topics) does not exist on {brokers} (never created, or deleted); \
                     create it first, e.g. with `weir produce`, or remove it from source.topics"
                )));
            }
        }
    }
    let sink_admin = sink_admin(config)?;
    if config.sink.guarantee == Guarantee::ExactlyOnce {
        check_same_cluster(&admin, &sink_admin)?;
    }
    let mut sink_topics: Vec<(&str, String)> =
        config.sink.topic.iter().map(|t| (t.as_str(), "sink.topic".to_owned())).collect();
    sink_topics
        .extend(config.sink.outputs.iter().map(|(name, topic)| (topic.as_str(), format!("sink.outputs.{name}"))));
    sink_topics.extend(config.sink.dead_letter_topic.iter().map(|t| (t.as_str(), "sink.dead_letter_topic".to_owned())));
    let names: Vec<&str> = sink_topics.iter().map(|(t, _)| *t).collect();
    let found = sink_admin
        .topics(&names)
        .map_err(PipelineError::kafka(format!("reading the topic metadata of {}", config.sink.cluster)))?;
    let source_partitions = tasks.iter().filter(|t| t.topic == config.source.topics[0]).count() as i32;
    for (topic, key) in &sink_topics {
        if found.get(*topic) != Some(&TopicCheck::Missing) {
            continue;
        }
        if !config.sink.create_topics {
            return Err(PipelineError::Refused(format!(
                "sink topic `{topic}` ({key}) does not exist on {}; create it, or set sink.create_topics = true",
                config.sink.cluster
            )));
        }
        let partitions = config.sink.partitions.unwrap_or(source_partitions.max(1));
        block_on(sink_admin.create_topic(topic, partitions)).map_err(|error| match error {
            // The broker's own limits refuse the topic: no retry would change its answer.
            KafkaError::AdminOp(code @ (RDKafkaErrorCode::PolicyViolation | RDKafkaErrorCode::InvalidPartitions)) => {
                PipelineError::Refused(format!(
                    "the broker refused to create sink topic `{topic}` ({key}) with {partitions} partitions: {code}; \
                 set sink.partitions within the broker's limits, or create the topic yourself"
                ))
            }
            error => PipelineError::kafka(format!("creating sink topic {topic}"))(error),
        })?;
        tracing::info!(topic, partitions, "created sink topic");
    }
    if config.sink.guarantee == Guarantee::ExactlyOnce {
        let max = match block_on(sink_admin.transaction_max_timeout()) {
            // A principal without DescribeConfigs on the cluster may still run the pipeline:
            // the broker refuses a longer timeout at `init_transactions` (protocol::fence).
            Err(KafkaError::AdminOp(RDKafkaErrorCode::ClusterAuthorizationFailed)) => {
                tracing::info!(
                    "cannot read the broker's transaction.max.timeout.ms (no DescribeConfigs right on the cluster); \
                     init_transactions checks sink.transaction_timeout_ms against it instead"
                );
                None
            }
            read => Some(read.map_err(PipelineError::kafka("reading the broker's transaction.max.timeout.ms"))?),
        };
        let wanted = config.sink.transaction_timeout;
        if let Some(max) = max.filter(|max| wanted > *max) {
            return Err(PipelineError::Refused(format!(
                "sink.transaction_timeout_ms = {} exceeds the broker's transaction.max.timeout.ms = {}; lower sink.transaction_timeout_ms (keeping checkpoint.interval_ms + checkpoint.timeout_ms below it) or raise the broker's limit",
                wanted.as_millis(),
                max.as_millis()
            )));
        }
    }
    Ok((tasks, topic_ids))
}

/// Creates the changelog topic with a partition for every task of `tasks` (the source
/// partitions), or grows or checks it.
fn ensure_changelog(config: &PipelineConfig, changelog: &Changelog, tasks: &[TaskId]) -> Result<(), PipelineError> {
    let topic = &changelog.topic;
    let problem = block_on(changelog.ensure(&sink_admin(config)?, changelog.partitions_needed(tasks)))
        .map_err(PipelineError::kafka(format!("creating or checking changelog topic {topic}")))?;
    match problem {
        Ok(()) => Ok(()),
        Err(ChangelogProblem::LosesState(settings)) => {
            Err(PipelineError::Refused(describe_unsafe(topic, config.sink.cluster.bootstrap_servers(), &settings)))
        }
        Err(ChangelogProblem::TooManyPartitions { found, needed }) => {
            // The source partitions the changelog's extra partitions hold the state of.
            let vanished: Vec<String> =
                (0..found).map(|p| changelog.task(p)).filter(|t| !tasks.contains(t)).map(|t| t.to_string()).collect();
            Err(PipelineError::Refused(format!(
                "changelog topic {topic} (state.changelog_topic) has {found} partitions, but this pipeline's source \
                 partitions use {needed}: it holds the state of source partitions {} that the source topics no longer \
                 have (a source topic was deleted and created again with fewer partitions, or source.topics changed), \
                 and starting would drop that state. Kafka cannot remove partitions: give the source topic its partitions \
                 back (kafka-topics.sh --alter --partitions), or, to start afresh without that state, name a new topic \
                 in state.changelog_topic and a new state.dir. (A changelog of another pipeline looks the same.)",
                vanished.join(", ")
            )))
        }
    }
}

/// An admin client of the sink's cluster (the changelog topic's), with `sink.producer`'s
/// properties.
fn sink_admin(config: &PipelineConfig) -> Result<Admin, PipelineError> {
    Admin::new(&config.sink.cluster, &config.sink.producer)
        .map_err(PipelineError::kafka("creating a client with the properties of sink.producer"))
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
             committed in the sink's transactions), but the sink's cluster {} ([sink.kafka] or sink.brokers) is \
             cluster {sink_id} and the source's {} ([kafka] or source.brokers) is cluster {source_id}; point the \
             sink at the source's cluster (or leave out [sink.kafka] and sink.brokers), or set \
             sink.guarantee = \"at-least-once\"",
            sink.brokers(),
            source.brokers()
        )));
    }
    Ok(())
}

/// The lineage of a pipeline that no instance committed a checkpoint of yet: the changelog
/// topic's id, which every instance reads alike and which a recreated topic changes.
fn changelog_lineage(config: &PipelineConfig, changelog: &Changelog) -> Result<String, PipelineError> {
    sink_admin(config)?
        .topic_id(&changelog.topic)
        .map_err(PipelineError::kafka(format!("reading the topic id of {}", changelog.topic)))
}

/// The transactional id of producer `slot` of `instance`: `<prefix>-<instance>-<slot>`.
pub fn transactional_id(prefix: &str, instance: &str, slot: usize) -> String {
    format!("{prefix}-{instance}-{slot}")
}

/// The producers of the sink: k transactional slots `<prefix>-<instance>-<slot>`, or one plain
/// producer.
fn producer_slots(config: &PipelineConfig, instance: &str) -> Result<Vec<ProducerSlot>, PipelineError> {
    let sink = &config.sink;
    match sink.guarantee {
        Guarantee::ExactlyOnce => (0..sink.producer_slots)
            .map(|slot| {
                let id = transactional_id(&sink.transactional_id_prefix, instance, slot);
                ProducerSlot::transactional(&sink.cluster, &sink.producer, slot, &id, sink.transaction_timeout)
                    .map(|producer| producer.with_prefix(&sink.transactional_id_prefix))
                    .map_err(PipelineError::kafka(format!("creating producer slot {id}")))
            })
            .collect(),
        Guarantee::AtLeastOnce | Guarantee::None => Ok(vec![
            ProducerSlot::plain(&sink.cluster, &sink.producer, sink.guarantee == Guarantee::AtLeastOnce)
                .map_err(PipelineError::kafka("creating the sink producer"))?,
        ]),
    }
}

/// The instance's producer slots, fenced together with the transactional ids earlier runs used
/// ([`protocol::fence`]: `init_transactions`, KIP-98): the transactions they left open are
/// aborted, or completed when their commit had reached the broker. Records the slots' ids as
/// the ones to fence next time.
fn fenced_slots(config: &PipelineConfig, db: &StateDb, instance: &str) -> Result<Vec<ProducerSlot>, PipelineError> {
    let slots = producer_slots(config, instance)?;
    let current: Vec<String> = slots.iter().filter_map(|s| s.transactional_id.clone()).collect();
    let earlier = earlier_producers(config, db, &current)?;
    let fence: Vec<&ProducerSlot> =
        slots.iter().filter(|s| s.transactional_id.is_some()).chain(earlier.iter()).collect();
    protocol::fence(&fence, config.checkpoint.timeout)?;
    db.set_transactional_ids(&current)?;
    Ok(slots)
}

/// Aborts the open transactions of the instance's producers without the rest of recovery (no
/// topic checks, no restore, no group join): a stop's way out of a failed epoch.
fn abort_open_transactions(config: &PipelineConfig, instance: &str) -> Result<(), PipelineError> {
    let db = StateDb::open(&config.state.dir.join(instance))?;
    fenced_slots(config, &db, instance).map(drop)
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
            ProducerSlot::transactional(&sink.cluster, &sink.producer, 0, id, sink.transaction_timeout)
                .map_err(PipelineError::kafka(format!("creating a producer to fence transactional id {id}")))
        })
        .collect()
}

/// Where each task starts: its committed offset (checked against the log's range and its topic's
/// id, see [`in_range`]), else — for a partition without one — the configured `source.start` on the
/// pipeline's `first_start` (no instance ever committed a checkpoint) and the earliest offset
/// afterwards (the partition was added since).
fn start_positions(
    config: &PipelineConfig,
    source: &Source,
    tasks: &[TaskId],
    committed: &Committed,
    topic_ids: &BTreeMap<String, String>,
    group: &BTreeMap<TaskId, GroupOffset>,
    first_start: bool,
) -> Result<BTreeMap<TaskId, i64>, PipelineError> {
    let timeout = config.checkpoint.timeout;
    let mut positions = BTreeMap::new();
    let mut fresh = Vec::new();
    for task in tasks {
        match committed.offsets.get(task) {
            Some(offset) => {
                // A topic id recorded with the offset and another now: the topic was recreated.
                let recreated = match (committed.topic_ids.get(task), topic_ids.get(&task.topic)) {
                    (Some(then), Some(now)) if then != now => Some((then.as_str(), now.as_str())),
                    _ => None,
                };
                positions.insert(task.clone(), in_range(config, source, task, *offset, "checkpoint", recreated)?);
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
                offsets
                    .insert(task.clone(), in_range(config, source, task, group[task].offset, "consumer group", None)?);
            }
            offsets.extend(earliest_offsets(source, &without, timeout)?);
            offsets
        }
    };
    for (task, offset) in resolved {
        if first_start {
            tracing::info!(partition = %task, offset, "source.start = {start}: the partition starts here; its position is fixed by the next checkpoint");
        } else {
            tracing::info!(partition = %task, offset, "source partition added while running or stopped (no checkpoint has its offset): reading it from its earliest offset");
        }
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

/// `offset` (from the `what`) if the log of `task` still holds it and its topic is the one it
/// was read from (`recreated`: the topic ids then and now, when they differ), else what
/// `source.offset_reset` says: refuse, or go on from the log's start offset with a warning.
fn in_range(
    config: &PipelineConfig,
    source: &Source,
    task: &TaskId,
    offset: i64,
    what: &str,
    recreated: Option<(&str, &str)>,
) -> Result<i64, PipelineError> {
    let (low, high) = source
        .watermarks(task, config.checkpoint.timeout)
        .map_err(PipelineError::kafka(format!("reading the offsets of {task}")))?;
    let why = match recreated {
        // Reading the new topic from its start offset is what offset_reset would do anyway.
        Some((then, now)) if offset != low => format!(
            "the topic was deleted and created again since (topic id {then}, now {now}): the offset belongs to \
             the old topic, and reading the new one from it would skip or misplace its records"
        ),
        Some(_) => return Ok(offset),
        None if (low..=high).contains(&offset) => return Ok(offset),
        None if offset < low => "records were deleted (retention or delete_records) before they were read".to_owned(),
        None => "the log is shorter than that (the topic was recreated or truncated)".to_owned(),
    };
    match config.source.offset_reset {
        OffsetReset::Fail => Err(PipelineError::Refused(format!(
            "the {what} offset of {task} is {offset}, but the log now holds offsets {low} to {high}: {why}. Nothing was skipped. \
             To skip to the log's start offset {low} and go on, set source.offset_reset = \"earliest\" in the pipeline file"
        ))),
        OffsetReset::Earliest if recreated.is_some() => {
            tracing::warn!(partition = %task, offset, log_start = low, log_end = high, "{why}: reading the new topic from its start offset (source.offset_reset = earliest)");
            Ok(low)
        }
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

/// A task back from its worker ([`Runner::stream`]): its index, itself, the records it was
/// given, and the records and output bytes it processed (or why it failed).
type Finished = (usize, Task, usize, Result<(u64, u64), PipelineError>);

/// The task of the partition the last record came from, within one [`Runner::stream`] (the
/// tasks do not change during it). librdkafka hands out a partition's fetched records together,
/// so most records skip [`Runner::index_of`]'s two hash lookups, which hash the topic name and
/// cost ~2 % of passthrough's CPU.
#[derive(Default)]
struct LastTask {
    topic: String,
    partition: i32,
    /// `None` before the first record.
    index: Option<usize>,
}

/// The tasks while [`Runner::stream`] runs: at home (`Some`) or out on a worker.
struct Flow {
    home: Vec<Option<Task>>,
    /// Per task: batches polled and not yet handed to it, full ones then the one filling.
    waiting: Vec<Vec<RecordBatch>>,
    /// Tasks out, and records polled and not yet processed.
    away: usize,
    out_records: usize,
    /// Records and output bytes processed, for the epoch.
    records: u64,
    output_bytes: u64,
    failed: Option<PipelineError>,
}

impl Flow {
    fn new(tasks: Vec<Task>) -> Self {
        let waiting = tasks.iter().map(|_| Vec::new()).collect();
        let home = tasks.into_iter().map(Some).collect();
        Self { home, waiting, away: 0, out_records: 0, records: 0, output_bytes: 0, failed: None }
    }

    /// Takes the batches waiting for task `index` if it is home: the full ones, and the one
    /// filling too when `flush`; none once a task failed.
    fn ready(&mut self, index: usize, flush: bool, batch_size: usize) -> Option<Vec<RecordBatch>> {
        if self.failed.is_some() || self.home[index].is_none() {
            return None;
        }
        let waiting = &mut self.waiting[index];
        let filling = waiting.last().is_some_and(|batch| batch.len() < batch_size) && !flush;
        let ready = waiting.len() - usize::from(filling);
        (ready > 0).then(|| waiting.drain(..ready).collect())
    }

    fn settle(&mut self, (index, task, given, result): Finished) {
        self.home[index] = Some(task);
        self.away -= 1;
        self.out_records -= given;
        match result {
            Ok((records, output_bytes)) => {
                self.records += records;
                self.output_bytes += output_bytes;
            }
            Err(error) => {
                self.failed.get_or_insert(error);
            }
        }
    }
}

/// Runs `batches` through `task` in order and sends each one's output to the epoch's slot;
/// returns the records and output bytes.
fn run_batches(task: &mut Task, batches: Vec<RecordBatch>, out: &Out) -> Result<(u64, u64), PipelineError> {
    let (mut records, mut output_bytes) = (0, 0);
    for batch in batches {
        let started = Instant::now();
        let input = Input { records: batch.len() as u64, bytes: batch.bytes(), took: Duration::ZERO };
        let (outputs, dead_letters) = task.process(batch)?;
        let input = Input { took: started.elapsed(), ..input };
        output_bytes += out.send(task, &outputs, &dead_letters, &input)?;
        records += input.records;
    }
    Ok((records, output_bytes))
}

/// Adds `message` to `batch`, copying its bytes once (its buffer is librdkafka's).
fn push_message(batch: &mut RecordBatch, message: &BorrowedMessage<'_>) {
    let timestamp = message.timestamp().to_millis().unwrap_or(0);
    let fields = Fields {
        topic: message.topic(),
        partition: message.partition(),
        offset: message.offset(),
        timestamp,
        // The task sets event time and watermark per the source's watermark strategy.
        event_time: timestamp,
        watermark: None,
        key: message.key(),
        value: message.payload(),
    };
    // Null header values stay null.
    batch.push(fields, record_headers(message).into_iter().map(|h| (h.key, h.value)));
}

/// Runs an admin future to completion from this synchronous runner.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a current-thread tokio runtime")
        .block_on(future)
}
