//! The resolved pipeline configuration: what the engine runs, with every default filled in and
//! every relative path resolved.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::Deserialize;

use super::cluster::ClusterConfig;
use super::error::ConfigError;
use super::raw;

const MIB: usize = 1 << 20;

/// Longest pipeline name (and `sink.transactional_id_prefix`): 200 characters, so that group and
/// transactional ids derived from it stay well within Kafka's limits.
pub const MAX_NAME_LEN: usize = 200;
/// Longest Kafka topic name: 249 characters (Kafka's `Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_LEN: usize = 249;

/// Default `source.batch_size`: 256 records per `process` call.
pub const DEFAULT_BATCH_SIZE: usize = 256;
/// Largest `source.batch_size`: 65536 records.
pub const MAX_BATCH_SIZE: usize = 65_536;

/// Default `source.tables[].max_mb`: 256 MiB, in bytes.
pub const DEFAULT_TABLE_MAX_BYTES: usize = 256 * MIB;

/// Default `transforms[].memory_limit_mb`: 64 MiB, in bytes.
pub const DEFAULT_MEMORY_LIMIT_BYTES: usize = 64 * MIB;
/// Largest `transforms[].memory_limit_mb`: 4096 MiB (a 32-bit linear memory), in bytes.
pub const MAX_MEMORY_LIMIT_BYTES: usize = 4096 * MIB;
/// Default `transforms[].deadline_ms`: 1 s.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(1000);
/// Longest `transforms[].deadline_ms`: 10 min.
pub const MAX_DEADLINE: Duration = Duration::from_millis(600_000);

/// Largest record a producer takes unless `sink.producer` sets `message.max.bytes`: 1,000,000
/// bytes, librdkafka's default `message.max.bytes`.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 1_000_000;

/// The producer's `message.max.bytes`: from `producer` (`sink.producer`), else librdkafka's
/// default, [`DEFAULT_MAX_RECORD_BYTES`].
pub(crate) fn producer_message_max_bytes(producer: &BTreeMap<String, String>) -> u64 {
    producer.get("message.max.bytes").and_then(|v| v.parse().ok()).unwrap_or(DEFAULT_MAX_RECORD_BYTES as u64)
}

/// Default `sink.producer_slots`: 2 (one epoch awaits its commit while the next one runs).
pub const DEFAULT_PRODUCER_SLOTS: usize = 2;
/// Largest `sink.producer_slots`: 16.
pub const MAX_PRODUCER_SLOTS: usize = 16;
/// Default `sink.transaction_timeout_ms`: 60 s.
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_millis(60_000);
/// Shortest `sink.transaction_timeout_ms`: 1 s.
pub const MIN_TRANSACTION_TIMEOUT: Duration = Duration::from_millis(1000);
/// Longest `sink.transaction_timeout_ms`: 1 h. The broker's `transaction.max.timeout.ms` must be
/// at least as long; see [`BROKER_DEFAULT_MAX_TRANSACTION_TIMEOUT`].
pub const MAX_TRANSACTION_TIMEOUT: Duration = Duration::from_millis(3_600_000);
/// Default of the broker's `transaction.max.timeout.ms`: 15 min. A producer asking for a longer
/// `transaction.timeout.ms` is refused by the broker.
pub const BROKER_DEFAULT_MAX_TRANSACTION_TIMEOUT: Duration = Duration::from_millis(900_000);

/// Default `checkpoint.interval_ms`: 1 s.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(1000);
/// Shortest `checkpoint.interval_ms`: 10 ms.
pub const MIN_CHECKPOINT_INTERVAL: Duration = Duration::from_millis(10);
/// Default `checkpoint.timeout_ms`: 30 s.
pub const DEFAULT_CHECKPOINT_TIMEOUT: Duration = Duration::from_millis(30_000);
/// Shortest `checkpoint.timeout_ms`: 100 ms.
pub const MIN_CHECKPOINT_TIMEOUT: Duration = Duration::from_millis(100);
/// Default `checkpoint.max_epoch_bytes`: 64 MiB.
pub const DEFAULT_MAX_EPOCH_BYTES: usize = 64 * MIB;
/// Smallest `checkpoint.max_epoch_bytes`: 1 MiB.
pub const MIN_MAX_EPOCH_BYTES: usize = MIB;

/// Directory under which the default `state.dir` (`weir-state/<name>`) lives, relative to the
/// pipeline file's directory.
pub const DEFAULT_STATE_PARENT: &str = "weir-state";

/// librdkafka properties that Weir alone sets, for exactly-once to hold. Any of them in
/// `source.consumer` or `sink.producer` is an error.
pub const RESERVED_RDKAFKA_KEYS: &[&str] = &[
    "transactional.id",
    "enable.idempotence",
    "isolation.level",
    "enable.auto.commit",
    "group.id",
    "transaction.timeout.ms",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "group.instance.id",
    "partition.assignment.strategy",
    "topic.metadata.refresh.interval.ms",
];

/// Default `source.partition_discovery_interval_ms`: 10 s.
pub const DEFAULT_PARTITION_DISCOVERY_INTERVAL: Duration = Duration::from_millis(10_000);
/// Shortest `source.partition_discovery_interval_ms`: 100 ms.
pub const MIN_PARTITION_DISCOVERY_INTERVAL: Duration = Duration::from_millis(100);

/// A pipeline file (`weir run <pipeline.toml>`): source topics → chain of transforms → sink
/// topic(s), with checkpointing and state settings. See `docs/configuration.md`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineConfig {
    /// `name`: name of the pipeline; required. 1 to 200 ASCII letters, digits, `.`, `_` or `-`
    /// (not `.` or `..`). It is part of the default consumer group (`weir-<name>`), transactional
    /// ids (`<name>-<slot>`) and state directory (`weir-state/<name>`), so it must be unique on
    /// the cluster and must not change over the pipeline's life.
    pub name: String,
    /// `[source]`: the Kafka topics read.
    pub source: SourceConfig,
    /// `[[transforms]]`: the chain of transforms, applied in file order; at least one.
    pub transforms: Vec<TransformConfig>,
    /// `[sink]`: where output records go.
    pub sink: SinkConfig,
    /// `[checkpoint]`: when barriers are injected and how long a checkpoint may take; optional.
    pub checkpoint: CheckpointConfig,
    /// `[state]`: where the pipeline's RocksDB database lives; optional.
    pub state: StateConfig,
    /// `[runtime]`: how a process runs its tasks; optional.
    pub runtime: RuntimeConfig,
}

/// `[source]`: the Kafka topics a pipeline reads, always with `isolation.level=read_committed`
/// and offsets managed by Weir's checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceConfig {
    /// The source's cluster: the top-level `[kafka]` table (`bootstrap.servers` and the
    /// client-security properties, docs/configuration.md "Secured clusters"), or `source.brokers`,
    /// its shorthand for `bootstrap.servers` alone; one of them is required. Every client of the
    /// pipeline but the sink's uses it: the source consumer, table and changelog readers, admin
    /// clients.
    pub cluster: ClusterConfig,
    /// `source.topics`: topics to read, every partition of each; at least one, no duplicates.
    pub topics: Vec<String>,
    /// `source.start`: where a pipeline with no checkpoint starts reading: `"earliest"`,
    /// `"latest"`, `"group"` (the consumer group's committed offsets) or
    /// `"timestamp:<ms>"` (first record at or after that time, in milliseconds since the Unix
    /// epoch); by default `"earliest"`. It is resolved to an offset per partition once, at the
    /// pipeline's first start, and that offset is committed with the first checkpoint even when
    /// no record arrives; afterwards it is ignored (partitions added later start at their
    /// earliest offset).
    pub start: StartPosition,
    /// `source.offset_reset`: what a start does when a partition's checkpoint offset is no longer
    /// in the log (retention, `delete_records`, a recreated topic): `"fail"` refuses to start,
    /// naming the partition, the checkpoint offset and the log's start and end offsets;
    /// `"earliest"` goes on from the log's start offset and logs the skipped offsets. By default
    /// `"fail"`. (Weir sets librdkafka's `auto.offset.reset` to `error` itself, so that no
    /// position ever jumps silently.)
    pub offset_reset: OffsetReset,
    /// `source.partition_discovery_interval_ms`: how often a running pipeline looks for
    /// partitions added to its source topics, in milliseconds, at least 100; by default 10000.
    /// A new partition gets a task at once and is read from its earliest offset.
    pub partition_discovery_interval: Duration,
    /// `source.group_id`: Kafka consumer group that holds the pipeline's committed offsets
    /// (written inside its transactions); by default `weir-<name>`. See
    /// [`PipelineConfig::group_id`].
    pub group_id: Option<String>,
    /// `source.consumer`: extra librdkafka consumer properties, e.g.
    /// `{ "fetch.min.bytes" = "1024" }`; values may be TOML strings, integers, floats or booleans;
    /// by default none. Keys Weir sets itself ([`RESERVED_RDKAFKA_KEYS`]) are refused; these
    /// override Weir's defaults (the Kafka connector's `CONSUMER_DEFAULTS`, a bounded prefetch).
    pub consumer: BTreeMap<String, String>,
    /// `source.batch_size`: most records per `process` call of a transform, 1 to 65536; by
    /// default 256. Larger batches amortise the WebAssembly boundary; smaller ones lower latency.
    pub batch_size: usize,
    /// `[source.watermark]`: how records get their event time and tasks their watermark
    /// (docs/event-time.md); by default none: event time is the record timestamp and tasks have
    /// no watermark, so event-time timers never fire.
    pub watermark: Option<WatermarkConfig>,
    /// `[[source.tables]]`: keyed tables joined with every source record (docs/event-time.md,
    /// "Tables"); by default none.
    pub tables: Vec<TableConfig>,
}

/// `[[source.tables]]`: a topic read as a keyed table (the latest value per key, a null value
/// deleting its key) and joined with every source record: a record whose lookup key the table
/// holds gets the table's value in the header `weir.table.<name>`.
///
/// The table is read to its last stable offset before the pipeline processes a record, at every
/// start, and followed while it runs (read_committed, from the source's cluster).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableConfig {
    /// `source.tables[].name`: names the header a joined record gets (`weir.table.<name>`);
    /// ASCII letters, digits, `.`, `_` and `-`, unique among the tables.
    pub name: String,
    /// `source.tables[].topic`: the table's topic, keyed by the lookup key; best compacted
    /// (`cleanup.policy=compact`). Not a source, sink, output, dead-letter or changelog topic.
    pub topic: String,
    /// `source.tables[].key_fields`: top-level fields of a source record's JSON value whose
    /// values, joined by `|`, form the key looked up (as `weir produce --key` forms keys): a
    /// string as its text, any other value as its JSON text. A record without one of them, or
    /// whose value is not a JSON object, joins nothing.
    pub key_fields: Vec<String>,
    /// `source.tables[].max_mb`: most bytes of keys and values the table may hold in memory, in
    /// bytes (the file gives MiB, 1 to 4096); by default 256 MiB. A larger table stops the
    /// pipeline, naming the table and the key.
    pub max_bytes: usize,
}

/// `[source.watermark]`: the watermark strategy of every topic of the source.
///
/// Each task's watermark is the largest event time it has read, less
/// `max_out_of_orderness_ms`, less 1 ms: a record with an event time at or below it is late.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatermarkConfig {
    /// `source.watermark.field`: name of the top-level field of the record's JSON value that
    /// holds its event time (e.g. `"time_hour"`); by default none: the record timestamp is the
    /// event time. A record whose value lacks the field, or whose field does not parse in
    /// `format`, fails like a record a transform fails on (see `on_error` of the first
    /// transform).
    pub field: Option<String>,
    /// `source.watermark.format`: how `field` is written: `"rfc3339"` (a string such as
    /// `"2013-01-01T10:00:00Z"` or `"2013-01-01T05:00:00-05:00"`), `"epoch_ms"` or `"epoch_s"`
    /// (a number, or a string of one); by default `"rfc3339"`. Only with `field`.
    pub format: TimeFormat,
    /// `source.watermark.max_out_of_orderness_ms`: how far, in milliseconds, a record's event
    /// time may lag behind the largest event time read before it without being late; by default 0.
    pub max_out_of_orderness: Duration,
    /// `source.watermark.idle_timeout_ms`: after how many milliseconds without a record a task
    /// that has read its partition to the end is idle; by default none (never). An idle task's
    /// watermark follows the wall clock: it moves up to now less `idle_timeout_ms` less
    /// `max_out_of_orderness_ms`, so that a silent partition does not hold back its windows.
    pub idle_timeout: Option<Duration>,
    /// `source.watermark.max_future_ms`: how far, in milliseconds, a record's event time may lie
    /// ahead of the wall clock; by default none (any). A record further ahead (a clock gone wrong,
    /// a typo'd year) fails like a record whose event time cannot be read — dead-lettered under
    /// the first transform's `on_error = "dead-letter"` — instead of moving the watermark so far
    /// that every window before it closes at once.
    pub max_future: Option<Duration>,
}

/// `source.watermark.format`: how an event-time field is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeFormat {
    /// RFC 3339 date-time with a `Z` or `±hh:mm` offset, optional fraction of a second.
    #[default]
    Rfc3339,
    /// Milliseconds since the Unix epoch.
    EpochMs,
    /// Seconds since the Unix epoch (a fraction is kept to the millisecond).
    EpochS,
}

/// `source.start`: where a pipeline with no checkpoint starts reading each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StartPosition {
    /// `"earliest"`: the first offset still in the log.
    #[default]
    Earliest,
    /// `"latest"`: the end of the log; only records produced after start-up are read.
    Latest,
    /// `"group"`: the consumer group's committed offsets (written by another tool); the
    /// earliest offset where the group has none.
    Group,
    /// `"timestamp:<ms>"`: the first record whose timestamp is at or after this time, in
    /// milliseconds since the Unix epoch; the end of the log where there is none.
    Timestamp(i64),
}

/// `source.offset_reset`: what to do with a checkpoint offset that is out of the log's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffsetReset {
    /// `"fail"`: refuse to start; the message says where the log starts and how to go on.
    #[default]
    Fail,
    /// `"earliest"`: continue from the log's start offset; the gap is logged.
    Earliest,
}

/// `[[transforms]]`: one operator of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformConfig {
    /// `transforms[].name`: name of the operator, unique in the pipeline; required. ASCII
    /// letters, digits, `.`, `_` or `-` (not `.` or `..`). State is keyed by it, so renaming an
    /// operator drops its state.
    pub name: String,
    /// `transforms[].wasm`: path of the `weir:transform` WebAssembly component, with a `.wasm`
    /// extension; required. Relative paths are resolved against the pipeline file's directory.
    /// Whether the file exists is checked when the pipeline starts.
    pub wasm: PathBuf,
    /// `transforms[].config`: table passed to the transform's `init`, e.g.
    /// `{ threshold_minutes = 15 }`; values may be TOML strings, integers, floats or booleans and
    /// reach the transform as strings; by default empty. Entries are sorted by key.
    pub config: Vec<(String, String)>,
    /// `transforms[].memory_limit_mb`: upper bound of the instance's linear memory, in MiB in the
    /// file (1 to 4096) and in bytes here; by default 64 MiB. Growing past it fails the call.
    pub memory_limit_bytes: usize,
    /// `transforms[].deadline_ms`: longest wall-clock time of one call into the transform
    /// (including the host calls it makes), in milliseconds, 1 to 600000; by default 1000.
    pub deadline: Duration,
    /// `transforms[].on_error`: what a failing record does: `"fail"` (the pipeline recovers from
    /// its last checkpoint, with back-off) or `"dead-letter"` (the record goes to
    /// `sink.dead_letter_topic` with the error in its headers); by default `"fail"`.
    pub on_error: OnError,
}

/// `transforms[].on_error`: the error policy of an operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnError {
    /// `"fail"`: fail the pipeline into recovery from its last checkpoint.
    #[default]
    Fail,
    /// `"dead-letter"`: send the failing record to `sink.dead_letter_topic` and go on.
    DeadLetter,
}

/// `[sink]`: where a pipeline writes its output records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkConfig {
    /// The output cluster: `[sink.kafka]` (like `[kafka]`), or `sink.brokers`, its shorthand for
    /// `bootstrap.servers` alone; by default the source's cluster. With `"exactly-once"` use the
    /// source's cluster: source offsets and the changelog are written inside the sink's
    /// transactions.
    pub cluster: ClusterConfig,
    /// `sink.topic`: the default output topic; required unless `[sink.postgres]` takes the
    /// default output (then it must be left out).
    pub topic: Option<String>,
    /// `sink.outputs`: named outputs for fan-out, output name → topic, e.g.
    /// `{ late = "flights-late" }`; a transform's output record that names an output goes to its
    /// topic; by default none.
    pub outputs: BTreeMap<String, String>,
    /// `sink.guarantee`: delivery guarantee: `"exactly-once"` (Kafka transactions),
    /// `"at-least-once"` (flush at each barrier, no transactions) or `"none"`; by default
    /// `"exactly-once"`.
    pub guarantee: Guarantee,
    /// `sink.transactional_id_prefix`: prefix of the transactional ids
    /// `<prefix>-<instance>-<slot>` (`<instance>`: `weir run --instance`); by default the pipeline
    /// name. Same characters as `name`. It must be unique on the cluster:
    /// two pipelines sharing it fence each other.
    pub transactional_id_prefix: String,
    /// `sink.producer_slots`: number of transactional producers, at most 16; by default 2, at
    /// least 2 with `"exactly-once"`. Epoch N writes through slot N mod k.
    pub producer_slots: usize,
    /// `sink.transaction_timeout_ms`: Kafka's `transaction.timeout.ms` of the sink's producers, in
    /// milliseconds, 1000 to 3600000; by default 60000. With `"exactly-once"` it must exceed
    /// `checkpoint.interval_ms + checkpoint.timeout_ms`, and must not exceed the broker's
    /// `transaction.max.timeout.ms` (900000 by default; checked at start-up).
    pub transaction_timeout: Duration,
    /// `sink.producer`: extra librdkafka producer properties, e.g. `{ "linger.ms" = 5 }`; values
    /// may be TOML strings, integers, floats or booleans; by default none. They override Weir's
    /// default (the Kafka connector's `producer_queue_kbytes`, a bounded queue). Keys Weir sets
    /// itself ([`RESERVED_RDKAFKA_KEYS`]) are refused.
    pub producer: BTreeMap<String, String>,
    /// `sink.dead_letter_topic`: topic of records that failed an operator whose `on_error` is
    /// `"dead-letter"`; required by such an operator, by default none. Must differ from the
    /// source, sink and output topics.
    pub dead_letter_topic: Option<String>,
    /// `sink.create_topics`: create missing output topics (sink, outputs, dead letters) at
    /// start-up; by default `false`.
    pub create_topics: bool,
    /// `sink.partitions`: number of partitions of topics created by `create_topics`, at least 1;
    /// by default as many as the source topic with the most partitions.
    pub partitions: Option<i32>,
    /// `[sink.postgres]`: a PostgreSQL table that takes one output of the chain, exactly once
    /// with `"exactly-once"` (two-phase commit tied to the checkpoint, docs/sinks.md); by
    /// default none.
    pub postgres: Option<PostgresSinkConfig>,
}

impl SinkConfig {
    /// The topics the sink writes: `topic`, each of `outputs`, and `dead_letter_topic`.
    pub fn topics(&self) -> impl Iterator<Item = &str> {
        self.topic
            .as_deref()
            .into_iter()
            .chain(self.outputs.values().map(String::as_str))
            .chain(self.dead_letter_topic.as_deref())
    }

    /// Whether an output record of the named output (`None`: the default output) goes to the
    /// PostgreSQL table rather than a topic.
    pub fn to_postgres(&self, output: Option<&str>) -> bool {
        self.postgres.as_ref().is_some_and(|pg| pg.output.as_deref() == output)
    }
}

/// `[sink.postgres]`: the PostgreSQL table one output of the chain is written to. Each output
/// record's value is a JSON object whose fields are the row's columns.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresSinkConfig {
    /// `sink.postgres.url`: where to connect, as libpq reads it: a URL
    /// (`postgresql://user@host:port/dbname`) or `key=value` pairs; required. It must not hold
    /// the password.
    pub url: String,
    /// `sink.postgres.password`: the password, as a secret reference (`${env:NAME}` or
    /// `${file:/path}`, resolved at load); by default none (trust or peer authentication).
    pub password: Option<String>,
    /// `sink.postgres.table`: the target table, optionally schema-qualified (`public.delays`);
    /// required. It must exist; its columns' types are checked at start.
    pub table: String,
    /// `sink.postgres.mode`: `"insert"` (every output record is a new row) or `"upsert"`
    /// (`INSERT … ON CONFLICT (key) DO UPDATE`: the last record per key wins); by default
    /// `"insert"`.
    pub mode: WriteMode,
    /// `sink.postgres.key`: with `"upsert"`, the columns of a unique index or primary key of the
    /// table that identify a row; required then, refused otherwise.
    pub key: Vec<String>,
    /// `sink.postgres.output`: the named output of the chain that goes to the table; by
    /// default the default output (`sink.topic` is then left out).
    pub output: Option<String>,
    /// `sink.postgres.on_error`: what a row the table refuses (a constraint, a value that does
    /// not fit its column, a field that is not a column) does: `"fail"` (the pipeline stops, the
    /// epoch is not committed) or `"dead-letter"` (the output record goes to
    /// `sink.dead_letter_topic` with the reason); by default `"fail"`.
    pub on_error: OnError,
}

impl fmt::Debug for PostgresSinkConfig {
    /// Never prints the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresSinkConfig")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| super::secret::REDACTED))
            .field("table", &self.table)
            .field("mode", &self.mode)
            .field("key", &self.key)
            .field("output", &self.output)
            .field("on_error", &self.on_error)
            .finish()
    }
}

/// `sink.postgres.mode`: how output records become rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    /// `"insert"`: one new row per output record.
    #[default]
    Insert,
    /// `"upsert"`: one row per key, inserted or updated (`ON CONFLICT … DO UPDATE`).
    Upsert,
}

/// `sink.guarantee`: the delivery guarantee of a sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Guarantee {
    /// `"exactly-once"`: output and source offsets are committed in one Kafka transaction per
    /// epoch; readers must use `isolation.level=read_committed`.
    #[default]
    ExactlyOnce,
    /// `"at-least-once"`: output is flushed at each barrier before offsets are committed; a
    /// crash replays, and duplicates, the output since the last checkpoint.
    AtLeastOnce,
    /// `"none"`: output is sent without waiting; a crash may lose or duplicate it.
    None,
}

/// `[checkpoint]`: barriers and checkpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointConfig {
    /// `checkpoint.interval_ms`: time between two barriers, in milliseconds, at least 10; by
    /// default 1000. Output becomes visible to `read_committed` readers once per interval.
    pub interval: Duration,
    /// `checkpoint.timeout_ms`: longest time from a barrier to its checkpoint being durable, in
    /// milliseconds, at least 100; by default 30000. Past it the pipeline fails into recovery.
    pub timeout: Duration,
    /// `checkpoint.max_epoch_bytes`: size of an epoch's state overlay (state writes kept in
    /// memory until the checkpoint) past which a barrier is injected early, in bytes, at least
    /// 1048576 (1 MiB); by default 67108864 (64 MiB).
    pub max_epoch_bytes: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        Self {
            interval: DEFAULT_CHECKPOINT_INTERVAL,
            timeout: DEFAULT_CHECKPOINT_TIMEOUT,
            max_epoch_bytes: DEFAULT_MAX_EPOCH_BYTES,
        }
    }
}

/// `[state]`: the pipeline's state: a compacted changelog topic in Kafka (the truth) and a local
/// RocksDB database that caches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    /// `state.dir`: directory of the pipeline's RocksDB database; relative paths are resolved
    /// against the pipeline file's directory; by default `weir-state/<name>` there. A cache:
    /// deleting it costs a restore from the changelog.
    pub dir: PathBuf,
    /// `state.changelog_topic`: the compacted topic holding the pipeline's state, one partition
    /// per task, on the sink's cluster; `<name>-changelog` by default. Created at start when
    /// missing.
    pub changelog_topic: String,
    /// `state.max_bytes`: most bytes of state (keys and values, as stored before compression)
    /// the pipeline's tasks in one process may hold; no limit by default. A transform's batch
    /// that would grow the state past it fails, naming the quota (the pipeline then fails and
    /// retries like on any failure); batches that shrink the state always pass. `weir serve`
    /// sets it from the tenant's `max_state_mb`.
    pub max_bytes: Option<u64>,
}

/// Most `runtime.workers`.
pub const MAX_WORKERS: usize = 1024;

/// Default `runtime.shutdown_grace_ms`: 25 s, within the 30 s a Kubernetes pod is given by
/// default between SIGTERM and SIGKILL (`terminationGracePeriodSeconds`), with room to exit.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_millis(25_000);
/// Shortest `runtime.shutdown_grace_ms`.
pub const MIN_SHUTDOWN_GRACE: Duration = Duration::from_millis(100);
/// Longest `runtime.shutdown_grace_ms`: an hour.
pub const MAX_SHUTDOWN_GRACE: Duration = Duration::from_millis(3_600_000);

/// `[runtime]`: how a `weir run` process runs the tasks the consumer group gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `runtime.workers`: threads that run the tasks' transforms, 1 to [`MAX_WORKERS`]; by
    /// default the machine's available cores (`std::thread::available_parallelism`). A process
    /// never starts more than the source topics have partitions, and a task stays on one thread
    /// while it is assigned. Polling, producing and checkpoints run on the process's own thread.
    pub workers: Option<usize>,
    /// `runtime.shutdown_grace_ms`: how long `weir run` may take to stop after SIGTERM or
    /// SIGINT, in milliseconds, [`MIN_SHUTDOWN_GRACE`] to [`MAX_SHUTDOWN_GRACE`]; by default
    /// [`DEFAULT_SHUTDOWN_GRACE`] (25000). Within it the process commits the open epoch and
    /// exits 0; past it (the broker is down, say) it exits with status 124 at once, committing
    /// nothing more: the open epoch's transaction is aborted by the broker
    /// (`transaction.timeout.ms`) or by the next start, which processes the epoch again.
    pub shutdown_grace: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self { workers: None, shutdown_grace: DEFAULT_SHUTDOWN_GRACE }
    }
}

impl RuntimeConfig {
    /// The threads to start for `tasks` partitions: `workers` (or the available cores), at most
    /// `tasks`, at least 1.
    pub fn workers_for(&self, tasks: usize) -> usize {
        let cores = || std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        self.workers.unwrap_or_else(cores).min(tasks).max(1)
    }
}

impl PipelineConfig {
    /// Reads, parses and validates; relative paths (transforms' wasm, state.dir) resolve against the file's directory.
    ///
    /// # Errors
    /// [`ConfigError::Read`] if the file cannot be read; else every error the file has:
    /// [`ConfigError::Parse`] (naming the file, the key and its line) if it is not a pipeline
    /// file, [`ConfigError::Invalid`] if it breaks a rule of [`validate`], or
    /// [`ConfigError::Several`] holding them all when there are several.
    ///
    /// [`validate`]: PipelineConfig::validate
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        Self::from_file_with_checks(path, |_| Vec::new())
    }

    /// [`from_file`], with more checks: `checks` gets the configuration read and returns what
    /// else is wrong with it, each error naming its key (e.g. a `transforms[0].wasm` that is not
    /// a `weir:transform` component: `weir validate` checks the components so). It runs even on
    /// a file with errors, so that one run reports them all, but what it says about a key that
    /// already has an error, or whose value could not be read, is left out.
    ///
    /// # Errors
    /// As [`from_file`], with the errors of `checks` among the others.
    ///
    /// [`from_file`]: PipelineConfig::from_file
    pub fn from_file_with_checks(
        path: &Path,
        checks: impl FnOnce(&PipelineConfig) -> Vec<ConfigError>,
    ) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        let base_dir = path.parent().unwrap_or(Path::new(""));
        raw::read(&text, Some(path), base_dir)?.finish(checks)
    }

    /// Parses and validates `text`; relative paths resolve against `base_dir`.
    ///
    /// # Errors
    /// Every error `text` has, as [`from_file`] returns them (without a file).
    ///
    /// [`from_file`]: PipelineConfig::from_file
    pub fn from_toml_str(text: &str, base_dir: &Path) -> Result<Self, ConfigError> {
        raw::read(text, None, base_dir)?.finish(|_| Vec::new())
    }

    /// Kafka consumer group of the pipeline: `source.group_id`, else `weir-<name>`.
    pub fn group_id(&self) -> String {
        self.source.group_id.clone().unwrap_or_else(|| format!("weir-{}", self.name))
    }
}

impl StartPosition {
    const EXPECTED: &'static str = "one of \"earliest\", \"latest\", \"group\" or \"timestamp:<ms>\" (milliseconds since the Unix epoch, at least 0)";
}

impl fmt::Display for StartPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartPosition::Earliest => f.write_str("earliest"),
            StartPosition::Latest => f.write_str("latest"),
            StartPosition::Group => f.write_str("group"),
            StartPosition::Timestamp(ms) => write!(f, "timestamp:{ms}"),
        }
    }
}

impl FromStr for StartPosition {
    type Err = String;

    /// Parses the file form: `earliest`, `latest`, `group` or `timestamp:<ms>`.
    fn from_str(s: &str) -> Result<Self, String> {
        let position = match s {
            "earliest" => Some(StartPosition::Earliest),
            "latest" => Some(StartPosition::Latest),
            "group" => Some(StartPosition::Group),
            _ => s
                .strip_prefix("timestamp:")
                .and_then(|ms| ms.parse::<i64>().ok())
                .filter(|ms| *ms >= 0)
                .map(StartPosition::Timestamp),
        };
        position.ok_or_else(|| format!("invalid start position {s:?}, expected {}", Self::EXPECTED))
    }
}

impl<'de> Deserialize<'de> for StartPosition {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StartVisitor;
        impl serde::de::Visitor<'_> for StartVisitor {
            type Value = StartPosition;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(StartPosition::EXPECTED)
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<StartPosition, E> {
                s.parse().map_err(|_| E::invalid_value(serde::de::Unexpected::Str(s), &self))
            }
        }
        deserializer.deserialize_str(StartVisitor)
    }
}

impl OnError {
    /// The file form: `"fail"` or `"dead-letter"`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Fail => "fail",
            OnError::DeadLetter => "dead-letter",
        }
    }
}

impl fmt::Display for OnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Guarantee {
    /// The file form: `"exactly-once"`, `"at-least-once"` or `"none"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Guarantee::ExactlyOnce => "exactly-once",
            Guarantee::AtLeastOnce => "at-least-once",
            Guarantee::None => "none",
        }
    }
}

impl fmt::Display for Guarantee {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
