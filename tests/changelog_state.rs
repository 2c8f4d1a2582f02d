//! State in Kafka (issue 13): the changelog topic is the truth and the state directory a cache.
//! A deleted state directory costs a restore, a restored state equals the one that was kept, and
//! a state directory or changelog topic that is not the pipeline's own is refused; a state
//! directory that may have missed deletes compaction purged is restored from scratch, never
//! reused (issue 46, item 1).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use weir::{Admin, ChangelogEntry, Committed, Entries, StateDb};
use weir_tests::flights::verify;
use weir_tests::pipeline::{
    RUN_TIMEOUT, Reader, Spec, TestPipeline, crash_while_feeding, keyed, produce, run_to_completion, wait_exit,
};
use weir_tests::{Isolation, bootstrap, create_topic, flight_rows};

const PARTITIONS: i32 = 4;

/// Everything a state directory holds that the changelog restores: every state entry, and the
/// committed checkpoint's id, offsets and snapshots.
/// The state database of the process in state directory `dir` (`<state.dir>/<instance>`, the
/// instance being the host's default).
fn contents(dir: &Path) -> (Entries, Committed) {
    let db = StateDb::open_read_only(&dir.join(weir::default_instance())).expect("open the state directory");
    let entries = db.scan_prefix(b"", usize::MAX).expect("scan");
    let committed = Committed { changelog_offsets: BTreeMap::new(), ..db.committed().expect("committed") };
    (entries, committed)
}

/// Starts `pipeline` and expects a refusal whose log names every one of `parts`.
fn expect_refusal(pipeline: &TestPipeline, parts: &[&str]) {
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, RUN_TIMEOUT).expect("the start is refused promptly");
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    for part in parts {
        assert!(log.contains(part), "the refusal names {part:?}:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_state_directory_is_restored_from_the_changelog_and_equals_the_kept_one() {
    let pipeline = TestPipeline::new("weir-restore", &Spec::new("flight-delays"));
    let state = pipeline.dir().join("state");
    let rows = flight_rows(12_000);
    let (first, second) = rows.split_at(6_000);
    // Checkpoint 3 commits in Kafka but never reaches RocksDB; then the directory is lost.
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    crash_while_feeding(&pipeline, PARTITIONS, &keyed(first), "after-commit@3", &mut reader).await;
    std::fs::remove_dir_all(&state).unwrap();
    // The reader holds the outputs committed before the crash already: wait for the restore
    // itself, not only for outputs, so that the stop cannot come before it.
    let mut child = pipeline.spawn(&[]);
    pipeline.wait_for_log("restored the state from the changelog", RUN_TIMEOUT);
    assert_eq!(reader.read_until(first.len(), RUN_TIMEOUT), first.len(), "{}", pipeline.log_text());
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success(), "{}", pipeline.log_text());

    // The aggregates go on from the restored state, not from zero.
    produce(&pipeline.source, PARTITIONS, &keyed(second)).await;
    std::fs::remove_dir_all(&state).unwrap();
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}\nlog:\n{}", pipeline.log_text());

    // Key for key: a directory restored from scratch equals the one the pipeline kept.
    let kept = pipeline.dir().join("kept");
    std::fs::rename(&state, &kept).unwrap();
    let recovered = pipeline.log_text().matches("recovered").count();
    let mut child = pipeline.spawn(&[]);
    let deadline = std::time::Instant::now() + RUN_TIMEOUT;
    while pipeline.log_text().matches("recovered").count() == recovered {
        assert!(std::time::Instant::now() < deadline, "no recovery; log:\n{}", pipeline.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success(), "{}", pipeline.log_text());
    let (restored, kept) = (contents(&state), contents(&kept));
    assert!(!kept.0.is_empty(), "flight-delays keeps state");
    assert_eq!(restored.0.len(), kept.0.len(), "as many state entries");
    assert!(restored.0 == kept.0, "the same state entries");
    assert_eq!(restored.1, kept.1, "the same checkpoint, offsets and snapshots");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_directory_of_another_pipeline_is_refused_naming_both() {
    let first = TestPipeline::new("weir-owner-a", &Spec::new("passthrough"));
    produce(&first.source, PARTITIONS, &keyed(&flight_rows(100))).await;
    let mut reader = Reader::new(&first.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&first, &mut reader, 100, &[]);

    let second = TestPipeline::new("weir-owner-b", &Spec::new("passthrough"));
    produce(&second.source, PARTITIONS, &keyed(&flight_rows(10))).await;
    let dir = first.dir().join("state");
    let text = std::fs::read_to_string(&second.file)
        .unwrap()
        .replace("dir = \"state\"", &format!("dir = \"{}\"", dir.display()));
    std::fs::write(&second.file, text).unwrap();
    expect_refusal(&second, &[&first.name, &second.name, "its own state.dir"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changelog_topic_that_is_not_compacted_or_too_wide_is_refused() {
    let pipeline = TestPipeline::new("weir-cl-policy", &Spec::new("passthrough"));
    produce(&pipeline.source, PARTITIONS, &keyed(&flight_rows(10))).await;
    let changelog = format!("{}-changelog", pipeline.name);
    create_topic(&changelog, PARTITIONS).await;
    expect_refusal(&pipeline, &[&changelog, "cleanup.policy=delete", "compact"]);

    let pipeline = TestPipeline::new("weir-cl-wide", &Spec::new("passthrough"));
    produce(&pipeline.source, PARTITIONS, &keyed(&flight_rows(10))).await;
    let changelog = format!("{}-changelog", pipeline.name);
    let admin = Admin::new(&weir::ClusterConfig::new(&bootstrap()), &BTreeMap::new()).unwrap();
    admin.create_topic_with(&changelog, PARTITIONS * 2, &[("cleanup.policy", "compact")]).await.unwrap();
    expect_refusal(&pipeline, &[&changelog, "has 8 partitions", "use 4"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_pipeline_creates_a_compacted_changelog_with_a_partition_per_task() {
    let pipeline = TestPipeline::new("weir-cl-new", &Spec::new("flight-delays"));
    let rows = flight_rows(500);
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    let changelog = format!("{}-changelog", pipeline.name);
    let admin = Admin::new(&weir::ClusterConfig::new(&bootstrap()), &BTreeMap::new()).unwrap();
    assert_eq!(admin.topic_config(&changelog, "cleanup.policy").await.unwrap(), "compact");
    let partitions = admin.topics(&[changelog.as_str()]).unwrap();
    assert_eq!(partitions[&changelog], weir::TopicCheck::Exists(PARTITIONS));
    for partition in 0..PARTITIONS {
        let (_, end) = weir_tests::admin::watermarks(&changelog, partition, "read_committed");
        assert!(end > 0, "task {partition} wrote its state to changelog partition {partition}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_upgraded_transform_continues_from_the_committed_state() {
    // The same operator, `flight-delays`, first as the Rust build, then as the Python one (same
    // state shape, same output): the aggregates go on from the Rust build's state.
    let spec = Spec {
        transform: "memory_limit_mb = 128\ndeadline_ms = 10000".into(),
        checkpoint: "interval_ms = 200\ntimeout_ms = 30000".into(),
        ..Spec::new("flight-delays")
    };
    let pipeline = TestPipeline::new("weir-upgrade", &spec);
    let rows = flight_rows(4_000);
    let (first, second) = rows.split_at(2_000);
    produce(&pipeline.source, PARTITIONS, &keyed(first)).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, first.len(), &[]);

    let rust = weir_tests::plugin("flight-delays").display().to_string();
    let python = weir_tests::plugin("flight-delays-py").display().to_string();
    let text = std::fs::read_to_string(&pipeline.file).unwrap();
    assert!(text.contains(&rust));
    std::fs::write(&pipeline.file, text.replace(&rust, &python)).unwrap();
    produce(&pipeline.source, PARTITIONS, &keyed(second)).await;
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let log = pipeline.log_text();
    assert!(log.contains("transform upgraded"), "the upgrade is logged with both builds:\n{log}");
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "the aggregates continued, none restarted from zero: {verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_started_from_a_savepoint_under_a_new_name_goes_on_like_the_original() {
    let original = TestPipeline::new("weir-sp-a", &Spec::new("flight-delays"));
    let rows = flight_rows(6_000);
    let (first, second) = rows.split_at(3_000);
    produce(&original.source, PARTITIONS, &keyed(first)).await;
    let mut before = Reader::new(&original.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&original, &mut before, first.len(), &[]);
    before.drain(Duration::from_secs(1));

    let dir = original.dir().join("savepoint");
    let (ok, stdout, stderr) = weir_tests::run_weir(&["savepoint".as_ref(), original.file.as_ref(), dir.as_ref()]);
    assert!(ok, "weir savepoint failed: {stderr}");
    assert!(stdout.contains(&format!("{PARTITIONS} tasks")), "{stdout}");
    assert!(dir.join("manifest.json").is_file());
    // A second savepoint into the same directory is refused, and the first one is left whole.
    let (ok, _, stderr) = weir_tests::run_weir(&["savepoint".as_ref(), original.file.as_ref(), dir.as_ref()]);
    assert!(!ok && stderr.starts_with("error: savepoint directory ") && stderr.contains("is not empty"), "{stderr}");
    assert!(!stderr.contains("refusing to start"), "weir savepoint starts no pipeline: {stderr}");

    // The original goes on over the rest of the input.
    produce(&original.source, PARTITIONS, &keyed(second)).await;
    let mut after = Reader::new(&original.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&original, &mut after, rows.len(), &[]);
    after.drain(Duration::from_secs(2));

    // A copy under a new name, reading the same input, starts from the savepoint.
    let copy = TestPipeline::new("weir-sp-b", &Spec::new("flight-delays"));
    let text = std::fs::read_to_string(&copy.file).unwrap().replace(&copy.source, &original.source);
    std::fs::write(&copy.file, text).unwrap();
    let mut copied = Reader::new(&copy.sink, PARTITIONS, Isolation::ReadCommitted);
    let mut child = copy.spawn_with(&["--from-savepoint", dir.to_str().unwrap()], &[]);
    copied.read_until(second.len(), RUN_TIMEOUT);
    assert!(copy.stop(&mut child, Duration::from_secs(60)).success(), "{}", copy.log_text());
    copied.drain(Duration::from_secs(2));

    let values = |reader: &Reader| {
        let mut values: Vec<String> = reader.records.iter().map(|r| r.value.clone().unwrap_or_default()).collect();
        values.sort();
        values
    };
    let (before, after) = (values(&before), values(&after));
    let mut expected: Vec<String> = after.into_iter().filter(|v| before.binary_search(v).is_err()).collect();
    expected.sort();
    assert_eq!(expected.len(), second.len());
    assert!(
        values(&copied) == expected,
        "the copy's output is the original's after the savepoint; log:\n{}",
        copy.log_text()
    );

    // The same command again does not rewind the copy to the savepoint.
    let seen = copied.records.len();
    let mut child = copy.spawn_with(&["--from-savepoint", dir.to_str().unwrap()], &[]);
    copy.wait_for_log("--from-savepoint is ignored", RUN_TIMEOUT);
    assert!(copy.stop(&mut child, Duration::from_secs(60)).success(), "{}", copy.log_text());
    assert_eq!(copied.drain(Duration::from_secs(2)), seen, "nothing was replayed");
}

/// A flight of hour `hour` (0..) of 2013-01-01 or later, keyed by its origin.
/// Issue 46 item 5: a savepoint loaded into a pipeline whose transform was renamed would drop
/// that operator's state; the start is refused naming it, and goes on without it only with
/// `--allow-non-restored-state`, which logs what was dropped.
#[tokio::test(flavor = "multi_thread")]
async fn a_savepoint_with_state_the_pipeline_would_not_restore_is_refused_unless_allowed() {
    let original = TestPipeline::new("weir-sp-drop", &Spec::new("flight-delays"));
    let rows = flight_rows(500);
    produce(&original.source, PARTITIONS, &keyed(&rows)).await;
    let mut reader = Reader::new(&original.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&original, &mut reader, rows.len(), &[]);
    let dir = original.dir().join("savepoint");
    let (ok, _, stderr) = weir_tests::run_weir(&["savepoint".as_ref(), original.file.as_ref(), dir.as_ref()]);
    assert!(ok, "weir savepoint failed: {stderr}");

    // The same input under a new name, its transform renamed.
    let renamed = TestPipeline::new("weir-sp-renamed", &Spec::new("flight-delays"));
    let text = std::fs::read_to_string(&renamed.file).unwrap().replace(&renamed.source, &original.source);
    let text = text.replace("name = \"flight-delays\"", "name = \"delays-v2\"");
    std::fs::write(&renamed.file, text).unwrap();
    let savepoint = dir.to_str().unwrap();
    let mut refused = renamed.spawn_with(&["--from-savepoint", savepoint], &[]);
    let status = wait_exit(&mut refused, RUN_TIMEOUT).expect("the start is refused");
    let log = renamed.log_text();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("operator `flight-delays`") && log.contains("--allow-non-restored-state"),
        "the refusal names the state and the flag:\n{log}"
    );

    let mut allowed = renamed.spawn_with(&["--from-savepoint", savepoint, "--allow-non-restored-state"], &[]);
    renamed.wait_for_log("checkpoint committed", RUN_TIMEOUT);
    assert!(renamed.stop(&mut allowed, Duration::from_secs(60)).success(), "{}", renamed.log_text());
    let log = renamed.log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("starting without the savepoint's state") && l.contains("operator `flight-delays`")),
        "what was dropped is logged:\n{log}"
    );
}

fn hourly_flight(hour: u64, dep_delay: i64) -> (Option<String>, String) {
    let time = hour_of(hour);
    let value = serde_json::json!({"origin": "EWR", "time_hour": time, "dep_delay": dep_delay});
    (Some("EWR".to_owned()), value.to_string())
}

/// `2013-01-01T00:00:00Z` plus `hour` hours, as RFC 3339.
fn hour_of(hour: u64) -> String {
    let (day, hour) = (1 + hour / 24, hour % 24);
    let (month, day) = (1 + (day - 1) / 28, 1 + (day - 1) % 28);
    format!("2013-{month:02}-{day:02}T{hour:02}:00:00Z")
}

/// Every record of `changelog` (one partition) a read_committed reader sees from its start:
/// state key (without the changelog's `s`) → whether its last record is a tombstone.
fn changelog_state_keys(changelog: &str) -> BTreeMap<Vec<u8>, bool> {
    let mut keys = BTreeMap::new();
    for record in weir_tests::records::read_raw(changelog, 1, 1, Duration::from_secs(30)) {
        let (key, value) = (record.record.key.unwrap_or_default(), record.record.value);
        if let Some(ChangelogEntry::State { key, value }) = ChangelogEntry::decode(&key, value.as_deref()) {
            keys.insert(key, value.is_none());
        }
    }
    keys
}

/// The hour of each flights-hourly output in `reader`.
fn output_hours(reader: &Reader) -> Vec<String> {
    let hour = |r: &weir_tests::Consumed| {
        let value: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap_or("null")).unwrap();
        value["hour"].as_str().unwrap_or_default().to_owned()
    };
    reader.records.iter().map(hour).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_state_directory_never_resurrects_state_whose_deletes_compaction_purged() {
    // Two instances of a flights-hourly pipeline on one partition, one at a time.
    let mut spec = Spec::new("flights-hourly");
    spec.source = "batch_size = 64\n[source.watermark]\nfield = \"time_hour\"\nformat = \"rfc3339\"\n\
                   max_out_of_orderness_ms = 0\n[source.consumer]\n\"session.timeout.ms\" = \"6000\"\n\
                   \"heartbeat.interval.ms\" = \"500\""
        .into();
    spec.checkpoint = "interval_ms = 200\ntimeout_ms = 10000".into();
    let pipeline = TestPipeline::new("weir-purged", &spec);
    // A changelog the broker compacts at once and whose tombstones it purges 100 ms later.
    let changelog = format!("{}-changelog", pipeline.name);
    let admin = Admin::new(&weir::ClusterConfig::new(&bootstrap()), &BTreeMap::new()).unwrap();
    let configs = [
        ("cleanup.policy", "compact"),
        ("delete.retention.ms", "100"),
        ("segment.ms", "100"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("min.compaction.lag.ms", "0"),
    ];
    admin.create_topic_with(&changelog, 1, &configs).await.unwrap();
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);

    // a reads one flight of hour 0 and stops: its state holds the hour's window and timer.
    produce(&pipeline.source, 1, &[hourly_flight(0, 5)]).await;
    let mut a = pipeline.spawn_instance("a", &[]);
    let a_dir = pipeline.dir().join("state/a");
    let a_state =
        || StateDb::open_read_only(&a_dir).map(|db| db.scan_prefix(b"", usize::MAX).unwrap()).unwrap_or_default();
    let started = std::time::Instant::now();
    while a_state().is_empty() {
        assert!(started.elapsed() < RUN_TIMEOUT, "a never committed hour 0:\n{}", pipeline.instance_log("a"));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(pipeline.stop(&mut a, Duration::from_secs(60)).success(), "{}", pipeline.instance_log("a"));
    let held: Vec<Vec<u8>> = a_state().into_iter().map(|(key, _)| key).collect();

    // b takes the partition over and closes hour 0, deleting its window and timer.
    let mut b = pipeline.spawn_instance("b", &[]);
    produce(&pipeline.source, 1, &[hourly_flight(1, 7)]).await;
    reader.read_until(1, RUN_TIMEOUT);
    assert_eq!(output_hours(&reader), [hour_of(0)], "{}", pipeline.instance_log("b"));
    let deleted: Vec<Vec<u8>> = {
        let started = std::time::Instant::now();
        loop {
            let keys = changelog_state_keys(&changelog);
            let deleted: Vec<Vec<u8>> = held.iter().filter(|k| keys.get(*k) == Some(&true)).cloned().collect();
            if !deleted.is_empty() {
                break deleted;
            }
            assert!(
                started.elapsed() < RUN_TIMEOUT,
                "b never deleted a's hour-0 state:\n{}",
                pipeline.instance_log("b")
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };

    // b goes on writing (rolling segments) until the broker compacted the changelog and purged
    // the tombstones: none of the deleted keys is in it any more.
    let (started, mut hour) = (std::time::Instant::now(), 2);
    loop {
        let keys = changelog_state_keys(&changelog);
        if deleted.iter().all(|k| !keys.contains_key(k)) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "the broker did not purge the tombstones of changelog {changelog} within 300 s (its log cleaner runs every \
             log.cleaner.backoff.ms, 15 s by default; is log.cleaner.enable off?)"
        );
        let flights: Vec<_> = (hour..hour + 5).map(|h| hourly_flight(h, 1)).collect();
        produce(&pipeline.source, 1, &flights).await;
        hour += 5;
    }
    let closed = hour as usize - 1;
    reader.read_until(closed, RUN_TIMEOUT);
    assert!(pipeline.stop(&mut b, Duration::from_secs(60)).success(), "{}", pipeline.instance_log("b"));

    // a comes back: its state directory still holds hour 0, whose deletes it can never read.
    let mut a = pipeline.spawn_instance("a", &[]);
    produce(&pipeline.source, 1, &[hourly_flight(hour + 1, 3)]).await;
    reader.read_until(closed + 1, RUN_TIMEOUT);
    reader.drain(Duration::from_secs(3));
    assert!(pipeline.stop(&mut a, Duration::from_secs(60)).success(), "{}", pipeline.instance_log("a"));
    let hours = output_hours(&reader);
    let zero = hours.iter().filter(|h| **h == hour_of(0)).count();
    assert_eq!(zero, 1, "hour 0 came out {zero} times; a's log:\n{}", pipeline.instance_log("a"));
    assert_eq!(hours.len(), closed + 1, "every hour once: {hours:?}");
    assert!(
        pipeline.instance_log("a").contains("compaction may have purged deletes"),
        "{}",
        pipeline.instance_log("a")
    );
}

/// Pre-creates `pipeline`'s changelog topic (one partition per task) with topic `configs`.
async fn create_changelog(pipeline: &TestPipeline, configs: &[(&str, &str)]) -> String {
    let changelog = format!("{}-changelog", pipeline.name);
    let admin = Admin::new(&weir::ClusterConfig::new(&bootstrap()), &BTreeMap::new()).unwrap();
    admin.create_topic_with(&changelog, PARTITIONS, configs).await.unwrap();
    changelog
}

/// The command a refusal gives to make `changelog` compacted alone.
fn compact_fix(changelog: &str) -> String {
    format!(
        "kafka-configs.sh --bootstrap-server {} --entity-type topics --entity-name {changelog} --alter --add-config cleanup.policy=compact",
        bootstrap()
    )
}

/// Issue 46, item 3: a changelog whose `cleanup.policy` is not `compact` alone — `compact,delete`
/// with a short retention, in either order, by time or by size, or with no retention now (which
/// an administrator can set at any time) — is refused, naming the setting, its value, the
/// retention that would delete state, and the command that fixes it; the fix, run as given, lets
/// the pipeline start, and a retention left on the topic does not matter under `compact` alone.
#[tokio::test(flavor = "multi_thread")]
async fn a_changelog_that_can_delete_state_is_refused_naming_the_setting_and_the_fix() {
    let cases = [
        (
            &[("cleanup.policy", "compact,delete"), ("retention.ms", "60000")],
            &["cleanup.policy=compact,delete", "retention.ms=60000"],
        ),
        (
            &[("cleanup.policy", "delete,compact"), ("retention.bytes", "1048576")],
            &["cleanup.policy=delete,compact", "retention.bytes=1048576"],
        ),
        (
            &[("cleanup.policy", "compact,delete"), ("retention.ms", "-1")],
            &["cleanup.policy=compact,delete", "retention.ms=-1"],
        ),
    ];
    for (configs, named) in cases {
        let pipeline = TestPipeline::new("weir-cl-unsafe", &Spec::new("passthrough"));
        produce(&pipeline.source, PARTITIONS, &keyed(&flight_rows(10))).await;
        let changelog = create_changelog(&pipeline, configs).await;
        let fix = compact_fix(&changelog);
        let mut parts = vec![changelog.as_str(), "lets the broker delete state", fix.as_str()];
        parts.extend_from_slice(named);
        expect_refusal(&pipeline, &parts);
    }

    // The fix as the message gives it (kafka-configs.sh is Kafka's ConfigCommand).
    let pipeline = TestPipeline::new("weir-cl-fixed", &Spec::new("passthrough"));
    let rows = flight_rows(100);
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    let changelog =
        create_changelog(&pipeline, &[("cleanup.policy", "compact,delete"), ("retention.ms", "60000")]).await;
    expect_refusal(&pipeline, &[&changelog, "retention.ms=60000"]);
    let log = pipeline.log_text();
    let command =
        log[log.find("kafka-configs.sh ").expect("the refusal gives the command")..].lines().next().unwrap().to_owned();
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    weir_tests::broker::kafka_sh(&[&["run", "kafka.admin.ConfigCommand"][..], &args].concat());
    let admin = Admin::new(&weir::ClusterConfig::new(&bootstrap()), &BTreeMap::new()).unwrap();
    assert_eq!(admin.topic_config(&changelog, "cleanup.policy").await.unwrap(), "compact");
    assert_eq!(admin.topic_config(&changelog, "retention.ms").await.unwrap(), "60000", "retention is left as it was");
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
}

/// Issue 46, item 3: a running pipeline whose changelog is altered to `compact,delete` stops
/// within a config check interval, with an error (not a retry) naming the setting and the fix;
/// every later start is refused until the changelog is fixed.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_pipeline_stops_when_its_changelog_is_altered_to_delete_state() {
    let pipeline = TestPipeline::new("weir-cl-altered", &Spec::new("passthrough"));
    let rows = flight_rows(200);
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let mut child = pipeline.spawn(&[]);
    assert_eq!(reader.read_until(rows.len(), RUN_TIMEOUT), rows.len(), "{}", pipeline.log_text());

    let changelog = format!("{}-changelog", pipeline.name);
    weir_tests::admin::alter_topic_configs(
        &changelog,
        &[("cleanup.policy", "compact,delete"), ("retention.ms", "60000")],
    )
    .await;
    let bound = weir::CONFIG_CHECK_INTERVAL + RUN_TIMEOUT;
    let status = wait_exit(&mut child, bound)
        .unwrap_or_else(|| panic!("still running {bound:?} after the alter; log:\n{}", pipeline.log_text()));
    let log = pipeline.log_text();
    assert!(!status.success(), "{status}; log:\n{log}");
    for part in [
        "stopping: the changelog topic's configs changed while the pipeline ran",
        "cleanup.policy=compact,delete",
        "retention.ms=60000",
        &compact_fix(&changelog),
    ] {
        assert!(log.contains(part), "the stop names {part:?}:\n{log}");
    }
    assert!(!log.contains("recovering after back-off"), "a stop, not a retry:\n{log}");
    expect_refusal(&pipeline, &["refusing to start", &changelog, "cleanup.policy=compact,delete"]);
}
