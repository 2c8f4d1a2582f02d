//! Several `weir run` processes of one pipeline share its partitions through the consumer group
//! (issue 14): a process frozen past `session.timeout.ms` (a zombie) commits nothing once the
//! group moved its partitions, a process whose static membership another member took rejoins,
//! and processes killed, added and removed while the flights flow leave every key's output exact.

use std::collections::BTreeSet;
use std::process::Child;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use weir_tests::flights::verify;
use weir_tests::pipeline::{Feeder, RUN_TIMEOUT, Reader, Spec, TestPipeline, keyed, produce, signal, wait_exit};
use weir_tests::{Isolation, bootstrap, create_topic, flight_rows, log_tail};

/// The group notices a process gone after 6 s (the broker's `group.min.session.timeout.ms`).
const CONSUMER: &str = "[source.consumer]\n\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\"";

/// A pipeline of `plugin` whose processes leave the group after 6 s of silence, and whose open
/// transactions the broker aborts after 20 s (a killed process's open transaction pins its
/// partitions' last stable offset until then).
fn spec(plugin: &'static str) -> Spec {
    let mut spec = Spec::new(plugin);
    spec.source.push_str(&format!("\n{CONSUMER}"));
    spec.sink = "transaction_timeout_ms = 20000".into();
    spec.checkpoint = "interval_ms = 100\ntimeout_ms = 10000".into();
    spec
}

/// The end of an instance's log, which a failure quotes.
fn tail(log: &str) -> &str {
    log_tail(log, 4_000)
}

/// How often `text` appears in the log of `instance`.
fn count(pipeline: &TestPipeline, instance: &str, text: &str) -> usize {
    pipeline.instance_log(instance).matches(text).count()
}

/// Waits until `text` appears in the log of `instance` more than `before` times.
fn wait_for(pipeline: &TestPipeline, instance: &str, text: &str, before: usize) {
    let started = Instant::now();
    while count(pipeline, instance, text) <= before {
        assert!(
            started.elapsed() < RUN_TIMEOUT,
            "`{text}` did not appear in the log of instance {instance}:\n{}",
            pipeline.instance_log(instance)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_past_the_session_timeout_commits_nothing() {
    const ASSIGNED: &str = "partitions assigned by the consumer group";
    const COMMITTED: &str = "checkpoint committed";
    let pipeline = TestPipeline::new("weir-zombie", &spec("passthrough"));
    create_topic(&pipeline.source, 4).await;
    let feeder = Feeder::start(&pipeline.source, "v");
    let mut a = pipeline.spawn_instance("a", &[]);
    wait_for(&pipeline, "a", COMMITTED, 0);
    let mut b = pipeline.spawn_instance("b", &[]);
    wait_for(&pipeline, "b", COMMITTED, 0);
    // The group gave b some of a's partitions: a keeps the others, with epochs open on them.
    wait_for(&pipeline, "a", COMMITTED, count(&pipeline, "a", COMMITTED));

    signal(&a, "STOP");
    let assigned = count(&pipeline, "b", ASSIGNED);
    wait_for(&pipeline, "b", ASSIGNED, assigned);
    // b runs a's partitions and commits them.
    wait_for(&pipeline, "b", COMMITTED, count(&pipeline, "b", COMMITTED));
    let recoveries = count(&pipeline, "a", "recovering after back-off");
    signal(&a, "CONT");
    // a learns that it lost its partitions: from the coordinator's refusal of its offsets
    // (KIP-447: its generation is gone) or from the lost assignment; either way its open epoch
    // aborts and it rejoins.
    wait_for(&pipeline, "a", "recovering after back-off", recoveries);
    let log = pipeline.instance_log("a");
    let refused = ["send_offsets_to_transaction", "reading the group metadata", "gave"];
    let why = refused.iter().find(|why| log.contains(*why));
    assert!(why.is_some(), "the zombie's late epoch is refused or aborted; its log:\n{log}");
    eprintln!("the zombie's epoch ended by: {why:?}");
    wait_for(&pipeline, "a", ASSIGNED, count(&pipeline, "a", ASSIGNED));

    let sent = feeder.stop() as usize;
    let mut reader = Reader::new(&pipeline.sink, 4, Isolation::ReadCommitted);
    let read = reader.read_until(sent, RUN_TIMEOUT);
    for (name, child) in [("a", &mut a), ("b", &mut b)] {
        let status = pipeline.stop(child, Duration::from_secs(60));
        assert!(
            status.success(),
            "instance {name} stops cleanly ({status}); its log ends:\n{}",
            tail(&pipeline.instance_log(name))
        );
    }
    reader.drain(Duration::from_secs(2));
    let values: Vec<String> = reader.records.iter().filter_map(|r| r.value.clone()).collect();
    let distinct: BTreeSet<&String> = values.iter().collect();
    assert!(read >= sent, "every input comes out: {read} of {sent}");
    assert_eq!(values.len(), distinct.len(), "nothing the zombie produced became visible next to its replay");
    let want: BTreeSet<String> = (0..sent).map(|i| format!("v-{i}")).collect();
    assert_eq!(distinct.into_iter().cloned().collect::<BTreeSet<_>>(), want, "every input once");
}

/// A consumer that joins the group under an instance's `group.instance.id` fences that
/// instance's member (KIP-345), and librdkafka reports the fence as a fatal consumer error: that
/// consumer is finished. An instance that owns no partition has no checkpoint that would fail and
/// recover it; it must build a new consumer and rejoin by itself, rather than poll the dead one
/// forever (what a broker stalled past `session.timeout.ms` once did to an instance in CI).
#[tokio::test(flavor = "multi_thread")]
async fn an_idle_instance_fenced_by_its_own_group_instance_id_rejoins_and_takes_over() {
    const FENCED: &str = "Static consumer fenced by other consumer with same group.instance.id";
    const ASSIGNED: &str = "partitions assigned by the consumer group";
    const COMMITTED: &str = "checkpoint committed";
    let pipeline = TestPipeline::new("weir-fenced-member", &spec("passthrough"));
    let group = format!("weir-{}", pipeline.name);
    // One partition: a owns it, b waits in the group with none.
    create_topic(&pipeline.source, 1).await;
    let feeder = Feeder::start(&pipeline.source, "v");
    let mut a = pipeline.spawn_instance("a", &[]);
    wait_for(&pipeline, "a", COMMITTED, 0);
    let mut b = pipeline.spawn_instance("b", &[]);
    // The ids of the group's members of `instance` once the group is stable (static member ids
    // are `<group.instance.id>-<uuid>`).
    let members_of = |instance: &str| -> Option<Vec<String>> {
        let client: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("client");
        let groups = client.fetch_group_list(Some(&group), Duration::from_secs(10)).expect("describe the group");
        let group = groups.groups().iter().find(|g| g.state() == "Stable")?;
        let prefix = format!("{instance}-");
        Some(group.members().iter().map(|m| m.id().to_owned()).filter(|id| id.starts_with(&prefix)).collect())
    };
    let wait_for_member = |instance: &str, known: &[String]| -> String {
        let started = Instant::now();
        loop {
            let fresh = members_of(instance).into_iter().flatten().find(|id| !known.contains(id));
            if let Some(id) = fresh {
                return id;
            }
            assert!(
                started.elapsed() < RUN_TIMEOUT,
                "no new member of instance {instance} in the group; its log:\n{}",
                pipeline.instance_log(instance)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let first = wait_for_member("b", &[]);
    assert_eq!(count(&pipeline, "b", ASSIGNED), 0, "b owns no partition");

    let intruder: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", &group)
        .set("group.instance.id", "b")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", "6000")
        .set("enable.auto.commit", "false")
        .create()
        .expect("intruding consumer");
    intruder.subscribe(&[pipeline.source.as_str()]).expect("subscribe");
    let started = Instant::now();
    while count(&pipeline, "b", FENCED) == 0 {
        assert!(started.elapsed() < RUN_TIMEOUT, "b was not fenced; its log:\n{}", pipeline.instance_log("b"));
        let _ = intruder.poll(Duration::from_millis(100));
    }
    let intruding = wait_for_member("b", std::slice::from_ref(&first));
    drop(intruder);
    // b joins again by itself (with a new consumer, so under a new member id), while a still owns
    // every partition: nothing else would make b notice that its consumer is finished.
    wait_for_member("b", &[first, intruding]);
    // Its transactional ids were never taken over, so b checked them and recovered, rather than
    // stop as an instance started twice does.
    let log = pipeline.instance_log("b");
    assert!(log.contains("the transactional ids are still this process's"), "b checked its producer; log:\n{log}");

    // a leaves: its partition must go to b, whose new consumer took its instance id back.
    let status = pipeline.stop(&mut a, Duration::from_secs(60));
    assert!(status.success(), "a stops cleanly ({status}); its log ends:\n{}", tail(&pipeline.instance_log("a")));
    wait_for(&pipeline, "b", ASSIGNED, 0);
    wait_for(&pipeline, "b", COMMITTED, 0);

    let sent = feeder.stop() as usize;
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    let read = reader.read_until(sent, RUN_TIMEOUT);
    let status = pipeline.stop(&mut b, Duration::from_secs(60));
    assert!(status.success(), "b stops cleanly ({status}); its log ends:\n{}", tail(&pipeline.instance_log("b")));
    reader.drain(Duration::from_secs(2));
    let values: BTreeSet<String> = reader.records.iter().filter_map(|r| r.value.clone()).collect();
    assert_eq!(reader.records.len(), sent, "every input comes out once: {read} outputs of {sent} inputs");
    let want: BTreeSet<String> = (0..sent).map(|i| format!("v-{i}")).collect();
    assert_eq!(values, want, "every input once");
}

/// One running `weir run --instance`.
struct Process {
    instance: String,
    child: Child,
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_killed_added_and_removed_keep_every_flight_exactly_once() {
    const PARTITIONS: i32 = 12;
    let actions: usize = std::env::var("WEIR_SCALE_ACTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let pipeline = TestPipeline::new("weir-scale", &spec("flight-delays"));
    let rows = flight_rows(1_500 * actions as u64);
    let chunks: Vec<_> = rows.chunks(1_500).collect();
    produce(&pipeline.source, PARTITIONS, &keyed(chunks[0])).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let mut running: Vec<Process> = ["a", "b", "c"]
        .iter()
        .map(|instance| Process { instance: (*instance).into(), child: pipeline.spawn_instance(instance, &[]) })
        .collect();
    let mut added = 0;
    let mut log = Vec::new();
    for (step, chunk) in chunks.iter().enumerate().skip(1) {
        produce(&pipeline.source, PARTITIONS, &keyed(chunk)).await;
        // Let some output through between two actions.
        reader.read_until(step * 1_500 / 2, RUN_TIMEOUT);
        let victim = step % running.len();
        match step % 4 {
            // A crash and a restart under the same instance id.
            0 => {
                let process = &mut running[victim];
                signal(&process.child, "KILL");
                wait_exit(&mut process.child, RUN_TIMEOUT);
                process.child = pipeline.spawn_instance(&process.instance, &[]);
                log.push(format!("{step}: killed and restarted {}", process.instance));
            }
            // A new process joins.
            1 => {
                added += 1;
                let instance = format!("n{added}");
                log.push(format!("{step}: added {instance}"));
                running.push(Process { child: pipeline.spawn_instance(&instance, &[]), instance });
            }
            // A process leaves cleanly.
            2 if running.len() > 1 => {
                let mut process = running.remove(victim);
                let status = pipeline.stop(&mut process.child, Duration::from_secs(60));
                assert!(
                    status.success(),
                    "{} stops cleanly ({status}); its log ends:\n{}",
                    process.instance,
                    tail(&pipeline.instance_log(&process.instance))
                );
                log.push(format!("{step}: removed {}", process.instance));
            }
            // A process crashes for good.
            _ if running.len() > 1 => {
                let mut process = running.remove(victim);
                signal(&process.child, "KILL");
                wait_exit(&mut process.child, RUN_TIMEOUT);
                log.push(format!("{step}: killed {}", process.instance));
            }
            _ => log.push(format!("{step}: nothing (one process left)")),
        }
    }
    let read = reader.read_until(rows.len(), RUN_TIMEOUT * 3);
    for process in &mut running {
        let status = pipeline.stop(&mut process.child, Duration::from_secs(60));
        assert!(
            status.success(),
            "{} stops cleanly ({status}); its log ends:\n{}",
            process.instance,
            tail(&pipeline.instance_log(&process.instance))
        );
    }
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(read >= rows.len(), "{read} of {} outputs; actions:\n{}", rows.len(), log.join("\n"));
    assert!(verdict.is_exactly_once(), "{verdict:?}\nactions:\n{}", log.join("\n"));
}

/// A record's key and value.
type KeyValue = (Option<String>, Option<String>);

/// Per output partition, the records (key, value) in log order.
fn by_partition(records: &[weir_tests::Consumed]) -> std::collections::BTreeMap<i32, Vec<KeyValue>> {
    let mut partitions = std::collections::BTreeMap::<i32, Vec<_>>::new();
    let mut sorted: Vec<_> = records.iter().collect();
    sorted.sort_by_key(|r| (r.partition, r.offset));
    for record in sorted {
        partitions.entry(record.partition).or_default().push((record.key.clone(), record.value.clone()));
    }
    partitions
}

#[tokio::test(flavor = "multi_thread")]
async fn one_worker_thread_and_two_write_the_same_output_partition_by_partition() {
    const PARTITIONS: i32 = 8;
    let rows = flight_rows(20_000);
    let mut outputs = Vec::new();
    for workers in [1, 2] {
        let pipeline = TestPipeline::new(&format!("weir-workers-{workers}"), &Spec::new("flight-delays"));
        let text = std::fs::read_to_string(&pipeline.file).expect("pipeline file");
        std::fs::write(&pipeline.file, format!("{text}\n[runtime]\nworkers = {workers}\n")).expect("pipeline file");
        produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
        let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
        weir_tests::pipeline::run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
        reader.drain(Duration::from_secs(1));
        let log = pipeline.log_text();
        assert!(log.contains(&format!("workers={workers}")), "{workers} worker threads ran; log:\n{log}");
        let verdict = verify(&rows, &reader.records, 15);
        assert!(verdict.is_exactly_once(), "workers = {workers}: {verdict:?}");
        outputs.push(by_partition(&reader.records));
    }
    assert_eq!(outputs[0].len(), PARTITIONS as usize, "every output partition has records");
    for (partition, records) in &outputs[0] {
        assert!(outputs[1][partition] == *records, "partition {partition} differs between 1 and 2 worker threads");
    }
    assert_eq!(outputs[0], outputs[1]);
}
