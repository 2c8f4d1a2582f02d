//! Running `weir run` as a user does, against the test broker, with its output read back.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::{Consumed, Isolation, bootstrap, create_topic, plugin, unique_name, weir_binary};

/// How long a test pipeline may take to commit all its outputs.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Rows as `(key, value)` pairs for [`produce`].
pub fn keyed(rows: &[weir::Row]) -> Vec<(Option<String>, String)> {
    rows.iter().map(|r| (r.key.clone(), String::from_utf8(r.value_bytes()).unwrap())).collect()
}

/// Runs `pipeline` until `expected` output records are committed, then stops it with SIGTERM
/// and checks it exited 0.
pub fn run_to_completion(pipeline: &TestPipeline, reader: &mut Reader, expected: usize, env: &[(&str, &str)]) {
    let mut child = pipeline.spawn(env);
    let read = reader.read_until(expected, RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(read >= expected, "only {read} of {expected} outputs committed; log:\n{}", pipeline.log_text());
    assert!(status.success(), "weir run exited with {status}; log:\n{}", pipeline.log_text());
}

/// Records per wave of [`crash_while_feeding`].
const WAVE: usize = 500;

/// Runs `pipeline` with `WEIR_FAULT=fault` (a fault at checkpoint N) while producing `records`
/// to its source in waves of 500, each wave only once `reader` (a read_committed reader of the
/// sink, for a transform with one output per input) has every output of the waves before: each
/// wave then needs a checkpoint of its own, so checkpoint N comes by wave N (checkpoint 1
/// commits the start positions) however fast the machine runs. Produces the rest of `records`
/// after the abort.
///
/// # Panics
/// When the process did not abort at the fault before `records` ran out or within
/// [`RUN_TIMEOUT`].
pub async fn crash_while_feeding(
    pipeline: &TestPipeline,
    partitions: i32,
    records: &[(Option<String>, String)],
    fault: &str,
    reader: &mut Reader,
) {
    create_topic(&pipeline.source, partitions).await;
    let mut produced = 0;
    let mut child = pipeline.spawn(&[("WEIR_FAULT", fault)]);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(started.elapsed() < RUN_TIMEOUT, "no crash at {fault}; log:\n{}", pipeline.log_text());
        if reader.records.len() >= produced {
            assert!(produced < records.len(), "no crash at {fault} by the last record; log:\n{}", pipeline.log_text());
            let wave = &records[produced..records.len().min(produced + WAVE)];
            produce(&pipeline.source, partitions, wave).await;
            produced += wave.len();
        }
        reader.read_until(produced, Duration::from_millis(100));
    };
    assert!(!status.success() && pipeline.log_text().contains("WEIR_FAULT: aborting"), "{}", pipeline.log_text());
    if produced < records.len() {
        produce(&pipeline.source, partitions, &records[produced..]).await;
    }
}

/// A pipeline file in its own temporary directory, with fresh topics and state.
pub struct TestPipeline {
    /// Pipeline name (also the transactional id prefix).
    pub name: String,
    /// The source topic.
    pub source: String,
    /// The sink topic.
    pub sink: String,
    /// The dead-letter topic.
    pub dead_letters: String,
    /// The pipeline file.
    pub file: PathBuf,
    /// Where `weir run` writes its log.
    pub log: PathBuf,
    dir: tempfile::TempDir,
    /// Process ids of the `weir run`s started, killed on drop if still running: a test that
    /// fails midway must not leave a pipeline running, busying the machine for later tests.
    spawned: std::sync::Mutex<Vec<u32>>,
}

/// What goes into the pipeline file besides topics and state.
#[derive(Debug, Clone)]
pub struct Spec {
    /// Plugin built by scripts/build-plugins.sh.
    pub plugin: &'static str,
    /// The `[source]` table's lines besides brokers and topics.
    pub source: String,
    /// Extra lines of the `[[transforms]]` table.
    pub transform: String,
    /// Extra lines of the `[sink]` table (sub-tables such as `[sink.postgres]` may follow them).
    pub sink: String,
    /// Whether `[sink]` names the sink topic (`false`: `[sink.postgres]` takes the default output).
    pub sink_topic: bool,
    /// The `[checkpoint]` table's lines.
    pub checkpoint: String,
}

impl Spec {
    /// `plugin` with defaults: exactly-once, a checkpoint every 20 ms (many epochs, so faults
    /// can be injected at later checkpoints).
    pub fn new(plugin: &'static str) -> Self {
        Self {
            plugin,
            source: "batch_size = 64".into(),
            transform: String::new(),
            sink: String::new(),
            sink_topic: true,
            checkpoint: "interval_ms = 20\ntimeout_ms = 10000".into(),
        }
    }
}

impl TestPipeline {
    /// Writes a pipeline file for `spec` with unique topic names.
    pub fn new(prefix: &str, spec: &Spec) -> Self {
        let name = unique_name(prefix);
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("pipeline.toml");
        let (source, sink, dead_letters) = (format!("{name}-in"), format!("{name}-out"), format!("{name}-dlq"));
        let text = format!(
            "name = \"{name}\"\n\n[source]\nbrokers = \"{brokers}\"\ntopics = [\"{source}\"]\n{source_extra}\n\n\
             [[transforms]]\nname = \"{plugin}\"\nwasm = \"{wasm}\"\n{transform}\n\n\
             [sink]\n{topic_line}dead_letter_topic = \"{dead_letters}\"\ncreate_topics = true\n{sink_extra}\n\n\
             [checkpoint]\n{checkpoint}\n\n[state]\ndir = \"state\"\n",
            brokers = bootstrap(),
            source_extra = spec.source,
            plugin = spec.plugin,
            wasm = plugin(spec.plugin).display(),
            transform = spec.transform,
            sink_extra = spec.sink,
            topic_line = if spec.sink_topic { format!("topic = \"{sink}\"\n") } else { String::new() },
            checkpoint = spec.checkpoint,
        );
        std::fs::write(&file, text).expect("write pipeline file");
        let log = dir.path().join("weir.log");
        Self { name, source, sink, dead_letters, file, log, dir, spawned: Default::default() }
    }

    /// The same pipeline file (name, topics, consumer group, transactional ids) in another
    /// directory, with its own state and log: the pipeline as deployed on another host.
    pub fn on_another_host(&self) -> Self {
        let dir = tempfile::tempdir().expect("temporary directory");
        let file = dir.path().join("pipeline.toml");
        std::fs::copy(&self.file, &file).expect("copy the pipeline file");
        let log = dir.path().join("weir.log");
        Self {
            name: self.name.clone(),
            source: self.source.clone(),
            sink: self.sink.clone(),
            dead_letters: self.dead_letters.clone(),
            file,
            log,
            dir,
            spawned: Default::default(),
        }
    }

    /// The pipeline's directory (pipeline file, state, log).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// Starts `weir run` with extra environment variables; its output goes to [`Self::log`].
    pub fn spawn(&self, env: &[(&str, &str)]) -> Child {
        self.spawn_with(&[], env)
    }

    /// Starts `weir run <file> <args>` with extra environment variables.
    pub fn spawn_with(&self, args: &[&str], env: &[(&str, &str)]) -> Child {
        self.spawn_logged(args, env, &self.log)
    }

    /// Starts `weir run <file> --instance <instance>`, one process of the pipeline among several;
    /// its output goes to [`Self::instance_log`].
    pub fn spawn_instance(&self, instance: &str, env: &[(&str, &str)]) -> Child {
        self.spawn_logged(&["--instance", instance], env, &self.instance_log_path(instance))
    }

    /// The log of instance `instance` so far.
    pub fn instance_log(&self, instance: &str) -> String {
        std::fs::read_to_string(self.instance_log_path(instance)).unwrap_or_default()
    }

    fn instance_log_path(&self, instance: &str) -> PathBuf {
        self.dir.path().join(format!("weir-{instance}.log"))
    }

    fn spawn_logged(&self, args: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> Child {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log file");
        let child = Command::new(weir_binary())
            .arg("run")
            .arg(&self.file)
            .args(args)
            .env("WEIR_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn weir run");
        self.spawned.lock().expect("spawned").push(child.id());
        child
    }

    /// Rewrites the pipeline file: `line` is added at the top of table `[table]` (a later key
    /// of the same name is an error, so only add keys the file does not set).
    pub fn set(&self, table: &str, line: &str) {
        let text = std::fs::read_to_string(&self.file).expect("read pipeline file");
        let header = format!("[{table}]\n");
        assert!(text.contains(&header), "no [{table}] table in {}", self.file.display());
        std::fs::write(&self.file, text.replacen(&header, &format!("{header}{line}\n"), 1))
            .expect("write pipeline file");
    }

    /// Runs `weir status` on the pipeline file; returns its standard output.
    pub fn status(&self) -> String {
        let output = Command::new(weir_binary()).arg("status").arg(&self.file).output().expect("weir status");
        assert!(output.status.success(), "weir status failed: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until the log contains `text` (at most `timeout`).
    pub fn wait_for_log(&self, text: &str, timeout: Duration) {
        let started = Instant::now();
        while !self.log_text().contains(text) {
            assert!(started.elapsed() < timeout, "`{text}` never appeared in the log:\n{}", self.log_text());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The address `weir run --metrics 127.0.0.1:0` (process `run`, logging to [`Self::log`])
    /// bound, read from its log.
    ///
    /// # Panics
    /// When the process exits first, or logs no address within [`RUN_TIMEOUT`].
    pub fn metrics_address(&self, run: &mut Child) -> String {
        let marker = "serving metrics at http://";
        let started = Instant::now();
        loop {
            let log = self.log_text();
            if let Some(at) = log.find(marker) {
                let rest = &log[at + marker.len()..];
                return rest[..rest.find('/').expect("address ends with /metrics")].to_owned();
            }
            if let Some(status) = run.try_wait().expect("try_wait") {
                panic!("weir run exited with {status} before serving metrics; log:\n{log}");
            }
            assert!(
                started.elapsed() < RUN_TIMEOUT,
                "weir run did not serve metrics within {RUN_TIMEOUT:?}; log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends SIGTERM and waits for the exit (at most `timeout`).
    pub fn stop(&self, child: &mut Child, timeout: Duration) -> ExitStatus {
        signal(child, "TERM");
        wait_exit(child, timeout)
            .unwrap_or_else(|| panic!("weir run did not stop within {timeout:?}; log:\n{}", self.log_text()))
    }
}

impl Drop for TestPipeline {
    fn drop(&mut self) {
        let file = self.file.to_string_lossy().into_owned();
        for pid in self.spawned.lock().map(|p| p.clone()).unwrap_or_default() {
            // Only a process still running this pipeline's file (a pid may have been reused).
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&file) {
                let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
            }
        }
    }
}

/// GETs `url` (a route of `weir run --metrics` or `weir serve`) without a token; returns the
/// status, 5xx included, and the body as JSON (as a JSON string when it is not JSON).
///
/// # Panics
/// When the request gets no answer.
pub fn http_get(url: &str) -> (u16, serde_json::Value) {
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).timeout_global(Some(RUN_TIMEOUT)).build().into();
    let mut response = agent.get(url).call().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let text = response.body_mut().read_to_string().unwrap_or_else(|e| panic!("GET {url}: {e}"));
    (response.status().as_u16(), serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
}

/// Polls `GET url` every 50 ms until `done(status, body)`; returns the bodies seen before, in
/// order, and the last one.
///
/// # Panics
/// When it does not happen within `timeout`, naming `what` and the last answer.
pub fn poll_until(
    url: &str,
    what: &str,
    timeout: Duration,
    mut done: impl FnMut(u16, &serde_json::Value) -> bool,
) -> (Vec<serde_json::Value>, serde_json::Value) {
    let started = Instant::now();
    let mut seen = Vec::new();
    loop {
        let (status, body) = http_get(url);
        if done(status, &body) {
            return (seen, body);
        }
        assert!(started.elapsed() < timeout, "GET {url} never answered {what}; last: {status} {body}");
        seen.push(body);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Sends a signal (`TERM`, `KILL`, `STOP`, `CONT`) to `child`.
pub fn signal(child: &Child, name: &str) {
    let status = Command::new("kill").arg(format!("-{name}")).arg(child.id().to_string()).status().expect("kill");
    assert!(status.success(), "kill -{name} {} failed", child.id());
}

/// Waits up to `timeout` for `child` to exit.
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// Creates `topic` with `partitions` and writes `(key, value)` records with an idempotent
/// producer (keys pick partitions, so one key stays in one partition).
pub async fn produce(topic: &str, partitions: i32, records: &[(Option<String>, String)]) {
    create_topic(topic, partitions).await;
    let producer = crate::admin::producer(&[("linger.ms", "10")]);
    for (key, value) in records {
        let mut record = BaseRecord::<str, str>::to(topic).payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        crate::admin::send_waiting(&producer, record);
    }
    producer.flush(Duration::from_secs(60)).expect("flush input");
}

/// The one reader of the tests: a consumer of every partition of a topic from the beginning,
/// accumulating what it reads as `R` ([`Consumed`] by default, or
/// [`ReadRecord`](crate::records::ReadRecord) for bytes, headers and timestamps).
pub struct Reader<R = Consumed> {
    consumer: BaseConsumer,
    /// Records read so far, in arrival order.
    pub records: Vec<R>,
}

/// A record as a [`Reader`] keeps it, copied from a consumed message.
pub trait FromMessage {
    /// Copies `message`.
    fn from_message(message: &BorrowedMessage<'_>) -> Self;
}

impl Reader {
    /// Reads `topic` (with `partitions` partitions) of the test broker with `isolation`.
    pub fn new(topic: &str, partitions: i32, isolation: Isolation) -> Self {
        Self::on(&bootstrap(), topic, partitions, isolation)
    }

    /// Reads `topic` (with `partitions` partitions) of the cluster at `brokers` with `isolation`.
    pub fn on(brokers: &str, topic: &str, partitions: i32, isolation: Isolation) -> Self {
        Self::of(brokers, topic, partitions, isolation)
    }
}

impl<R: FromMessage> Reader<R> {
    /// Reads `topic` (with `partitions` partitions) of the cluster at `brokers` with
    /// `isolation`, keeping each record as an `R`.
    pub fn of(brokers: &str, topic: &str, partitions: i32, isolation: Isolation) -> Self {
        let level = if isolation == Isolation::ReadCommitted { "read_committed" } else { "read_uncommitted" };
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("group.id", unique_name("weir-test-reader"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", level)
            .create()
            .expect("consumer");
        let mut list = TopicPartitionList::new();
        for partition in 0..partitions {
            list.add_partition_offset(topic, partition, Offset::Beginning).expect("partition");
        }
        consumer.assign(&list).expect("assign");
        Self { consumer, records: Vec::new() }
    }

    /// Reads until at least `count` records arrived or `timeout` passed; returns how many there are.
    pub fn read_until(&mut self, count: usize, timeout: Duration) -> usize {
        let started = Instant::now();
        // One record at a time: under endless output, draining until idle would never return.
        while self.records.len() < count && started.elapsed() < timeout {
            if let Some(message) = self.consumer.poll(Duration::from_millis(100)).and_then(readable) {
                self.records.push(R::from_message(&message));
            }
        }
        self.records.len()
    }

    /// Reads whatever arrives within `idle` of the last record.
    pub fn drain(&mut self, idle: Duration) -> usize {
        while let Some(message) = self.consumer.poll(idle) {
            if let Some(message) = readable(message) {
                self.records.push(R::from_message(&message));
            }
        }
        self.records.len()
    }
}

/// The message, or `None` for a moment without brokers (the test broker, starved of CPU on a
/// busy machine, can fence itself for a few seconds; the reader goes on, as a consumer does).
///
/// # Panics
/// On any other consumer error.
fn readable(message: rdkafka::error::KafkaResult<BorrowedMessage<'_>>) -> Option<BorrowedMessage<'_>> {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    match message {
        Ok(message) => Some(message),
        Err(KafkaError::MessageConsumption(
            RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure,
        )) => {
            std::thread::sleep(Duration::from_millis(100));
            None
        }
        Err(error) => panic!("consume: {error}"),
    }
}

/// Writes records `<prefix>-<n>` (no key) to a topic until stopped, 20 every 20 ms.
pub struct Feeder {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Feeder {
    /// Starts writing to `topic`.
    pub fn start(topic: &str, prefix: &str) -> Self {
        use std::sync::atomic::Ordering;
        let producer = crate::admin::producer(&[]);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (topic, prefix, stopped) = (topic.to_owned(), prefix.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut sent = 0;
            while !stopped.load(Ordering::Relaxed) {
                for _ in 0..20 {
                    let value = format!("{prefix}-{sent}");
                    crate::admin::send_waiting(&producer, BaseRecord::<str, str>::to(&topic).payload(&value));
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            producer.flush(Duration::from_secs(30)).expect("flush the input");
            sent
        });
        Self { stop, thread: Some(thread) }
    }

    /// Stops writing; returns how many records were written.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().expect("running").join().expect("feeder thread")
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}
