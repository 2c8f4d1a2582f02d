//! `weir run` against Kafka faults that retrying cannot heal, on the real broker: a sink on
//! another cluster under exactly-once, two pipelines fencing each other's transactional ids, a
//! source topic deleted while running, and librdkafka properties the clients reject. Each must
//! stop the pipeline with an error naming the thing at fault, never retry forever.

use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;

use weir_tests::delivery::assert_exactly_once_in_key_order;
use weir_tests::pipeline::{
    Feeder, RUN_TIMEOUT, Reader, Spec, TestPipeline, keyed, produce, run_to_completion, signal, wait_exit,
};
use weir_tests::{Isolation, bootstrap, create_topic, flight_rows, repo_root, unique_name};

/// How long a pipeline may take to stop on a lasting error (its start-up included).
const EXIT_TIMEOUT: Duration = Duration::from_secs(60);

/// A `weir run` process, killed when dropped (so a failing test leaves none behind).
struct Running<'a> {
    pipeline: &'a TestPipeline,
    child: Child,
}

impl<'a> Running<'a> {
    fn start(pipeline: &'a TestPipeline) -> Self {
        Self { pipeline, child: pipeline.spawn(&[]) }
    }

    /// Waits for the process to exit with an error within [`EXIT_TIMEOUT`]; returns the log.
    fn fails(&mut self) -> String {
        let status = wait_exit(&mut self.child, EXIT_TIMEOUT).unwrap_or_else(|| {
            panic!("weir run still runs after {EXIT_TIMEOUT:?}; log:\n{}", self.pipeline.log_text())
        });
        let log = self.pipeline.log_text();
        assert!(!status.success(), "weir run exited with {status}; log:\n{log}");
        log
    }

    fn stop(&mut self) -> ExitStatus {
        self.pipeline.stop(&mut self.child, Duration::from_secs(60))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A second single-node Kafka cluster (scripts/kafka.sh) on the test broker's port + 2, with
/// its own temporary data directory; stopped when dropped, also when the test fails.
struct SecondCluster {
    port: u16,
    dir: tempfile::TempDir,
}

impl SecondCluster {
    fn start() -> Self {
        let main: u16 = bootstrap().rsplit(':').next().and_then(|p| p.parse().ok()).expect("the test broker's port");
        let cluster = Self { port: main + 2, dir: tempfile::tempdir().expect("temporary directory") };
        let status = cluster.script("start");
        assert!(status.success(), "scripts/kafka.sh start of a second broker on port {} failed", cluster.port);
        cluster
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn script(&self, command: &str) -> ExitStatus {
        Command::new(repo_root().join("scripts/kafka.sh"))
            .arg(command)
            .env("WEIR_KAFKA_PORT", self.port.to_string())
            .env_remove("WEIR_KAFKA_CONTROLLER_PORT")
            .env("WEIR_KAFKA_DIR", self.dir.path())
            .env("KAFKA_HEAP_OPTS", "-Xms128m -Xmx512m")
            .status()
            .expect("run scripts/kafka.sh")
    }
}

impl Drop for SecondCluster {
    fn drop(&mut self) {
        let _ = self.script("stop");
    }
}

fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new().set("bootstrap.servers", brokers).create().expect("admin client")
}

fn cluster_id(brokers: &str) -> String {
    admin(brokers).inner().fetch_cluster_id(Duration::from_secs(30)).expect("cluster id")
}

#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_refuses_a_sink_on_another_cluster_but_not_the_same_cluster_under_another_address() {
    let other = SecondCluster::start();
    let (here, there) = (bootstrap(), other.bootstrap());
    let (here_id, there_id) = (cluster_id(&here), cluster_id(&there));
    assert_ne!(here_id, there_id, "two clusters");
    let input = keyed(&flight_rows(500));

    // Exactly-once with the sink on the other cluster: refused at start, naming both clusters.
    let mut spec = Spec::new("passthrough");
    spec.sink = format!("brokers = \"{there}\"");
    let across = TestPipeline::new("weir-xcluster", &spec);
    produce(&across.source, 1, &input).await;
    let log = Running::start(&across).fails();
    for part in [here.as_str(), &there, &here_id, &there_id, "sink.brokers", "at-least-once"] {
        assert!(log.contains(part), "the refusal names {part}:\n{log}");
    }

    // The same cluster under another address: accepted, exactly once.
    let same_address = here.replacen("127.0.0.1", "localhost", 1);
    assert_ne!(same_address, here, "the test broker listens on 127.0.0.1");
    spec.sink = format!("brokers = \"{same_address}\"");
    let same = TestPipeline::new("weir-samecluster", &spec);
    produce(&same.source, 1, &input).await;
    let mut reader = Reader::new(&same.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&same, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    assert_eq!(reader.records.len(), input.len(), "every record once");

    // At-least-once shares no transaction between the clusters: the other cluster is accepted.
    spec.sink = format!("brokers = \"{there}\"\nguarantee = \"at-least-once\"");
    let at_least_once = TestPipeline::new("weir-xcluster-alo", &spec);
    produce(&at_least_once.source, 1, &input).await;
    let mut reader = Reader::on(&there, &at_least_once.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&at_least_once, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    assert_eq!(reader.records.len(), input.len(), "every record, on the other cluster");
}

fn values(reader: &Reader) -> Vec<String> {
    let mut values: Vec<String> = reader.records.iter().map(|r| r.value.clone().unwrap_or_default()).collect();
    values.sort();
    values
}

#[tokio::test(flavor = "multi_thread")]
async fn of_two_pipelines_with_one_transactional_id_prefix_the_fenced_one_stops_naming_the_prefix() {
    let prefix = unique_name("weir-shared");
    let mut spec = Spec::new("passthrough");
    spec.sink = format!("transactional_id_prefix = \"{prefix}\"");
    let first = TestPipeline::new("weir-fenced", &spec);
    let second = TestPipeline::new("weir-fencer", &spec);

    // The first pipeline runs on endless input, so it is inside a transaction when fenced.
    create_topic(&first.source, 1).await;
    let feeder = Feeder::start(&first.source, "first");
    let mut fenced = Running::start(&first);
    let mut first_output = Reader::new(&first.sink, 1, Isolation::ReadCommitted);
    assert!(first_output.read_until(1, RUN_TIMEOUT) > 0, "the first pipeline commits; log:\n{}", first.log_text());

    // The second one starts with the same transactional ids: its init_transactions fences the first.
    let input: Vec<_> = (0..1_000).map(|i| (Some(format!("k{}", i % 7)), format!("second-{i}"))).collect();
    produce(&second.source, 1, &input).await;
    let mut fencer = Running::start(&second);
    let log = fenced.fails();
    let (id, quoted) = (format!("`{prefix}-"), format!("\"{prefix}\""));
    for part in [id.as_str(), &quoted, "sink.transactional_id_prefix", "started twice"] {
        assert!(log.contains(part), "the fenced pipeline's error names {part}:\n{log}");
    }

    // The second pipeline goes on undisturbed: its input once.
    let mut second_output = Reader::new(&second.sink, 1, Isolation::ReadCommitted);
    second_output.read_until(input.len(), RUN_TIMEOUT);
    assert!(fencer.stop().success(), "the second pipeline stops cleanly; log:\n{}", second.log_text());
    second_output.drain(Duration::from_secs(2));
    assert_exactly_once_in_key_order(&second_output.records, &input, "; the second pipeline's input, once");

    // What the first one committed before it was fenced came out once.
    let written = feeder.stop();
    first_output.drain(Duration::from_secs(2));
    let got = values(&first_output);
    let mut unique = got.clone();
    unique.dedup();
    assert_eq!(got.len(), unique.len(), "no output of the first pipeline is duplicated");
    assert!(got.len() as u64 <= written && got.iter().all(|v| v.starts_with("first-")));
}

/// The same pipeline started twice with one instance id, as on two hosts: the second process
/// takes over the instance's transactional ids (`init_transactions`, KIP-98), then its
/// `group.instance.id` (KIP-345). The first learns of it from its consumer, fenced by the
/// second's; it must stop, as on a fenced commit, not recover and fence the second back (the
/// two would take the instance from each other for ever). The first is idle when the second
/// starts, so its consumer, not a commit, is what tells it; and idle for longer than its
/// `transaction_timeout_ms`, which an idle transaction (begun, nothing sent) never reaches, so
/// the takeover must not pass for the broker's timeout abort.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_process_of_one_instance_takes_over_and_the_first_stops_rather_than_fence_it_back() {
    const CONSUMER_FENCED: &str = "Static consumer fenced by other consumer with same group.instance.id";
    let mut spec = Spec::new("passthrough");
    spec.sink = "transaction_timeout_ms = 3000".into();
    spec.checkpoint = "interval_ms = 200\ntimeout_ms = 2000".into();
    let first = TestPipeline::new("weir-twin", &spec);
    let second = first.on_another_host();
    let before: Vec<_> = (0..200).map(|i| (None, format!("before-{i}"))).collect();
    produce(&first.source, 1, &before).await;
    let mut older = Running::start(&first);
    let mut output = Reader::new(&first.sink, 1, Isolation::ReadCommitted);
    output.read_until(before.len(), RUN_TIMEOUT);
    assert_eq!(output.records.len(), before.len(), "the first process commits its input; log:\n{}", first.log_text());
    std::thread::sleep(Duration::from_secs(4)); // idle past transaction_timeout_ms

    let mut newer = Running::start(&second);
    let log = older.fails();
    assert!(log.contains(CONSUMER_FENCED), "the first process's consumer was fenced; log:\n{log}");
    for part in ["was taken over by another producer", "started twice", "--instance"] {
        assert!(log.contains(part), "the first process's error says {part}; log:\n{log}");
    }

    // The second carries on, never fenced back: new input comes out, and all of it once.
    let after: Vec<_> = (0..200).map(|i| (None, format!("after-{i}"))).collect();
    produce(&first.source, 1, &after).await;
    output.read_until(before.len() + after.len(), RUN_TIMEOUT);
    assert!(newer.stop().success(), "the second process stops cleanly; log:\n{}", second.log_text());
    let log = second.log_text();
    assert!(!log.contains("recovering"), "the second process never had to recover; log:\n{log}");
    output.drain(Duration::from_secs(2));
    let input: Vec<_> = before.into_iter().chain(after).collect();
    assert_exactly_once_in_key_order(&output.records, &input, "");
}

/// As above, but the first process is frozen (SIGSTOP) past its `session.timeout.ms` when the
/// second starts, and woken once the second runs: it finds its partitions lost (or its consumer
/// fenced) at the same moment, and must stop all the same, not recover and take the instance
/// back from the process that replaced it.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_frozen_and_replaced_stops_when_it_wakes_rather_than_take_its_instance_back() {
    let mut spec = Spec::new("passthrough");
    spec.source.push_str("\n[source.consumer]\n\"session.timeout.ms\" = \"6000\"");
    let first = TestPipeline::new("weir-frozen-twin", &spec);
    let second = first.on_another_host();
    let batch =
        |name: &str| -> Vec<(Option<String>, String)> { (0..200).map(|i| (None, format!("{name}-{i}"))).collect() };
    let (before, during, after) = (batch("before"), batch("during"), batch("after"));
    produce(&first.source, 1, &before).await;
    let mut older = Running::start(&first);
    let mut output = Reader::new(&first.sink, 1, Isolation::ReadCommitted);
    output.read_until(before.len(), RUN_TIMEOUT);
    assert_eq!(output.records.len(), before.len(), "the first process commits its input; log:\n{}", first.log_text());

    signal(&older.child, "STOP");
    std::thread::sleep(Duration::from_secs(8)); // past session.timeout.ms
    let mut newer = Running::start(&second);
    produce(&first.source, 1, &during).await;
    output.read_until(before.len() + during.len(), RUN_TIMEOUT);
    assert_eq!(
        output.records.len(),
        before.len() + during.len(),
        "the second process took over; log:\n{}",
        second.log_text()
    );
    signal(&older.child, "CONT");
    let log = older.fails();
    for part in ["was taken over by another producer", "started twice"] {
        assert!(log.contains(part), "the first process's error says {part}; log:\n{log}");
    }

    produce(&first.source, 1, &after).await;
    output.read_until(before.len() + during.len() + after.len(), RUN_TIMEOUT);
    // (The first one's consumer may rejoin once as it closes and fence the second's; that one
    // then checks its producer, finds it its own, and recovers: so no "never recovered" here.)
    assert!(newer.stop().success(), "the second process stops cleanly; log:\n{}", second.log_text());
    output.drain(Duration::from_secs(2));
    let input: Vec<_> = before.into_iter().chain(during).chain(after).collect();
    assert_exactly_once_in_key_order(&output.records, &input, "");
}

/// Deletes `topic` and waits until the broker's metadata no longer lists it.
async fn delete_topic(topic: &str) {
    let admin = admin(&bootstrap());
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.delete_topics(&[topic], &options).await.expect("delete_topics") {
        result.unwrap_or_else(|(t, e)| panic!("deleting {t}: {e}"));
    }
    let started = Instant::now();
    loop {
        let metadata = admin.inner().fetch_metadata(None, Duration::from_secs(10)).expect("metadata");
        if !metadata.topics().iter().any(|t| t.name() == topic) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{topic} still listed a minute after its deletion");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_topic_deleted_while_running_stops_the_pipeline_naming_it() {
    let pipeline = TestPipeline::new("weir-deleted", &Spec::new("passthrough"));
    let input = keyed(&flight_rows(500));
    produce(&pipeline.source, 2, &input).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    let mut running = Running::start(&pipeline);
    assert_eq!(reader.read_until(input.len(), RUN_TIMEOUT), input.len(), "log:\n{}", pipeline.log_text());

    delete_topic(&pipeline.source).await;
    let log = running.fails();
    assert!(log.contains(&format!("`{}`", pipeline.source)) && log.contains("does not exist"), "{log}");
    reader.drain(Duration::from_secs(2));
    assert_eq!(reader.records.len(), input.len(), "nothing more, nothing twice");
}

/// `spec` with a `[table]` of librdkafka properties (TOML lets a sub-table such as
/// `[source.consumer]` follow the other tables).
fn with_properties(spec: &Spec, table: &str, properties: &str) -> Spec {
    let mut spec = spec.clone();
    spec.checkpoint = format!("{}\n\n[{table}]\n{properties}", spec.checkpoint);
    spec
}

#[tokio::test(flavor = "multi_thread")]
async fn librdkafka_properties_the_clients_reject_stop_the_pipeline_naming_them() {
    let cases = [
        // Rejected as the clients are created: an unknown key, a value of the wrong type.
        ("source.consumer", "\"no.such.property\" = \"1\"", "no.such.property"),
        ("sink.producer", "\"linger.ms\" = \"soon\"", "linger.ms"),
        // Rules librdkafka applies only to a consumer, or to an idempotent producer.
        ("source.consumer", "\"max.poll.interval.ms\" = 1000", "max.poll.interval.ms"),
        ("sink.producer", "acks = 1", "acks"),
    ];
    for (table, properties, key) in cases {
        let pipeline =
            TestPipeline::new("weir-badprop", &with_properties(&Spec::new("passthrough"), table, properties));
        create_topic(&pipeline.source, 1).await;
        let log = Running::start(&pipeline).fails();
        assert!(log.contains(key) && log.contains(table), "[{table}] {properties}: the error names {key}:\n{log}");
        assert!(!log.contains("recovering after back-off"), "[{table}] {properties} is not retried:\n{log}");
    }
}
