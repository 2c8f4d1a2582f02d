//! Recovery takes its evidence from Kafka alone (the changelog and the group's offsets are
//! committed in one transaction), whatever the configuration is now, and fences every producer
//! an earlier run used (issue 11, cases 4, 6 and 8; issue 13).

use std::collections::BTreeMap;
use std::time::Duration;

use weir_tests::Isolation;
use weir_tests::admin::{delete_group, open_transaction_in};
use weir_tests::pipeline::{Reader, Spec, TestPipeline, crash_while_feeding, run_to_completion};

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
    let counts = counts(&reader);
    assert_eq!(counts.len(), input.len(), "every record came out");
    assert!(counts.values().all(|n| *n == 1), "and only once; log:\n{log}");
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
    let counts = counts(&reader);
    assert_eq!(counts.len(), input.len());
    assert!(counts.values().all(|n| *n == 1), "exactly once");
}
