//! Recovery takes its evidence from Kafka alone (the changelog and the group's offsets are
//! committed in one transaction), whatever the configuration is now, and fences every producer
//! an earlier run used (issue 11, cases 4, 6 and 8; issue 13); a changelog topic deleted under
//! a running pipeline never costs the state directory's copy of the state (issue 46, item 4).

use std::collections::BTreeMap;
use std::time::Duration;

use weir::StateDb;
use weir_tests::Isolation;
use weir_tests::admin::{delete_group, delete_topic, open_transaction_in};
use weir_tests::delivery::assert_exactly_once_in_key_order;
use weir_tests::pipeline::{
    RUN_TIMEOUT, Reader, Spec, TestPipeline, crash_while_feeding, produce, run_to_completion, wait_exit,
};

const PARTITIONS: i32 = 2;

/// 6,000 records with distinct values, keyed over 7 keys: twelve waves of
/// [`crash_while_feeding`], so the faults below (at checkpoint 3 or 5) are reached.
fn input() -> Vec<(Option<String>, String)> {
    (0..6_000).map(|i| (Some(format!("k{}", i % 7)), format!("id-{i}"))).collect()
}

/// How often each input value came out.
fn counts(reader: &Reader) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in &reader.records {
        *counts.entry(record.value.clone().unwrap_or_default()).or_default() += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_consumer_group_is_committed_again_from_the_changelog() {
    // The crashed process leaves the group after its session timeout (6 s, the broker's least).
    let mut spec = Spec::new("passthrough");
    spec.source.push_str("\n[source.consumer]\n\"session.timeout.ms\" = \"6000\"");
    let pipeline = TestPipeline::new("weir-nogroup", &spec);
    let input = input();
    // Checkpoint 3 committed in Kafka, not applied to the state directory.
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    crash_while_feeding(&pipeline, PARTITIONS, &input, "after-commit@3", &mut reader).await;
    delete_group(&format!("weir-{}", pipeline.name)).await;

    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let log = pipeline.log_text();
    assert!(log.contains("restored the state from the changelog"), "the unapplied checkpoint 3 was replayed:\n{log}");
    assert_exactly_once_in_key_order(&reader.records, &input, &format!("; log:\n{log}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_open_transaction_is_fenced_and_replayed_after_a_switch_to_at_least_once() {
    // A long transaction timeout: the broker does not abort the crashed run's transaction
    // during the test, so only fencing at the restart can release read_committed readers.
    let mut spec = Spec::new("passthrough");
    spec.sink = "transaction_timeout_ms = 600000".into();
    let pipeline = TestPipeline::new("weir-switch", &spec);
    let input = input();
    // Checkpoint 3's changelog, output and offsets are in its open transaction, never committed.
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    crash_while_feeding(&pipeline, PARTITIONS, &input, "after-pre-commit@3", &mut reader).await;
    assert!(open_transaction_in(&pipeline.sink, PARTITIONS), "the crashed run left its transaction open");

    pipeline.set("sink", "guarantee = \"at-least-once\"");
    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let log = pipeline.log_text();
    assert!(!open_transaction_in(&pipeline.sink, PARTITIONS), "the restart fenced the open transaction");
    let counts = counts(&reader);
    assert_eq!(counts.len(), input.len(), "no record of the aborted checkpoint is lost; log:\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fewer_producer_slots_after_a_crash_still_fence_the_slot_left_open() {
    let mut spec = Spec::new("passthrough");
    spec.sink = "transaction_timeout_ms = 600000\nproducer_slots = 3".into();
    let pipeline = TestPipeline::new("weir-slots", &spec);
    let input = input();
    // Epoch 5 runs on slot 5 mod 3 = 2, the slot that two slots no longer name.
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    crash_while_feeding(&pipeline, PARTITIONS, &input, "after-pre-commit@5", &mut reader).await;
    assert!(open_transaction_in(&pipeline.sink, PARTITIONS), "the crashed run left slot 2's transaction open");

    let text = std::fs::read_to_string(&pipeline.file).unwrap().replace("producer_slots = 3", "producer_slots = 2");
    std::fs::write(&pipeline.file, text).unwrap();
    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    assert!(pipeline.log_text().contains("fencing a producer an earlier run used"), "{}", pipeline.log_text());
    assert!(!open_transaction_in(&pipeline.sink, PARTITIONS));
    assert_exactly_once_in_key_order(&reader.records, &input, "");
}

/// `(key, value)` records of keys `k<from>..k<to>`, values `<tag>-<n>`.
fn keys(from: usize, to: usize, tag: &str) -> Vec<(Option<String>, String)> {
    (from..to).map(|i| (Some(format!("k{i}")), format!("{tag}-{i}"))).collect()
}

/// A dedup pipeline that passes each key once: a key repeated after a loss of state comes out
/// again.
fn dedup(prefix: &str) -> TestPipeline {
    let mut spec = Spec::new("dedup");
    spec.transform = "config = { window_records = \"1000000\" }".into();
    TestPipeline::new(prefix, &spec)
}

/// Expects `child` to stop refusing, its log naming every one of `parts` and the way on, with
/// nothing wiped: the state directory still holds the `held` keys seen.
fn expect_kept(pipeline: &TestPipeline, child: &mut std::process::Child, parts: &[&str], held: usize) {
    let status = wait_exit(child, Duration::from_secs(300)).expect("the pipeline stops");
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    for part in parts.iter().chain(&["--reseed-changelog"]) {
        assert!(log.contains(part), "the refusal names {part:?}:\n{log}");
    }
    assert!(!log.contains("changed outside Weir") && !log.contains("from scratch"), "nothing was wiped:\n{log}");
    let dir = pipeline.dir().join("state").join(weir::default_instance());
    let state = StateDb::open_read_only(&dir).unwrap().scan_prefix(b"", usize::MAX).unwrap();
    let kept = state.iter().filter(|(key, _)| key.windows(5).any(|w| w == b"key:k")).count();
    assert_eq!(kept, held, "the state directory keeps the keys the changelog lost");
}

/// Runs `pipeline` (with `args`) over keys `k0..k<to>` again, and checks that `reader` then
/// holds each of them exactly once.
async fn run_over_keys(pipeline: &TestPipeline, reader: &mut Reader, args: &[&str], to: usize, tag: &str) {
    let mut child = pipeline.spawn_with(args, &[]);
    produce(&pipeline.source, PARTITIONS, &keys(0, to, tag)).await;
    reader.read_until(to, RUN_TIMEOUT);
    reader.drain(Duration::from_secs(3));
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success(), "{}", pipeline.log_text());
    let mut counts = BTreeMap::<String, usize>::new();
    for record in &reader.records {
        *counts.entry(record.key.clone().unwrap_or_default()).or_default() += 1;
    }
    assert_eq!(counts.len(), to, "every key came out; log:\n{}", pipeline.log_text());
    assert!(counts.values().all(|n| *n == 1), "and once: {counts:?}\nlog:\n{}", pipeline.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_changelog_is_refused_by_name_keeping_the_state_directory_which_reseeds_it() {
    let pipeline = dedup("weir-cl-deleted");
    let changelog = format!("{}-changelog", pipeline.name);
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    produce(&pipeline.source, PARTITIONS, &keys(0, 100, "first")).await;
    let mut child = pipeline.spawn(&[]);
    assert_eq!(reader.read_until(100, RUN_TIMEOUT), 100, "{}", pipeline.log_text());

    // The changelog topic is deleted under the running pipeline, which then has to write it.
    delete_topic(&changelog).await;
    produce(&pipeline.source, PARTITIONS, &keys(100, 105, "second")).await;
    expect_kept(&pipeline, &mut child, &[&format!("changelog topic {changelog} was deleted and created again")], 100);

    // The documented way on keeps the state: repeats of the first keys stay dropped.
    run_over_keys(&pipeline, &mut reader, &["--reseed-changelog"], 110, "third").await;
    assert!(pipeline.log_text().contains("is in the changelog again"), "{}", pipeline.log_text());
    // The changelog holds the state again: restored from it alone, repeats are still dropped.
    std::fs::remove_dir_all(pipeline.dir().join("state")).unwrap();
    run_over_keys(&pipeline, &mut reader, &[], 111, "fourth").await;
}
