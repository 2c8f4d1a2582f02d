//! `weir run` end to end on the real broker: output checked record by record, crashes at every
//! fault-injection point, a transaction the broker aborts, read_committed vs read_uncommitted,
//! refused configurations, clean restarts and dead letters.

use std::time::Duration;

use weir::Row;
use weir_tests::admin::open_transaction_in;
use weir_tests::delivery::assert_exactly_once_in_key_order;
use weir_tests::flights::verify;
use weir_tests::pipeline::{
    RUN_TIMEOUT, Reader, Spec, TestPipeline, crash_while_feeding, keyed, produce, run_to_completion, wait_exit,
};
use weir_tests::{Isolation, flight_rows};

const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread")]
async fn passthrough_copies_every_record_once_in_partition_order() {
    let pipeline = TestPipeline::new("weir-pass", &Spec::new("passthrough"));
    let input = keyed(&flight_rows(3_000));
    produce(&pipeline.source, PARTITIONS, &input).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));

    // Per key, order is kept (a key stays in one partition end to end).
    assert_exactly_once_in_key_order(&reader.records, &input, "");
}

#[tokio::test(flavor = "multi_thread")]
async fn flight_delays_output_matches_a_direct_computation() {
    let pipeline = TestPipeline::new("weir-fd", &Spec::new("flight-delays"));
    let rows = flight_rows(10_000);
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
    assert!(pipeline.log_text().contains("checkpoint committed"), "checkpoints are logged");
}

/// Crashes at `fault`, restarts without it, and checks exactly-once output.
async fn crash_and_recover(fault: &str) {
    let pipeline = TestPipeline::new("weir-crash", &Spec::new("flight-delays"));
    let rows = flight_rows(6_000);
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    crash_while_feeding(&pipeline, PARTITIONS, &keyed(&rows), fault, &mut reader).await;
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "after a crash at {fault}: {verdict:?}\nlog:\n{}", pipeline.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_mid_epoch_loses_and_duplicates_nothing() {
    crash_and_recover("mid-epoch@3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_after_pre_commit_loses_and_duplicates_nothing() {
    crash_and_recover("after-pre-commit@3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn crash_after_commit_before_apply_loses_and_duplicates_nothing() {
    crash_and_recover("after-commit@3").await;
}

/// The fault that makes the broker abort a transaction: transaction.timeout.ms = 3 s, and the
/// pipeline stalls 8 s between pre-commit and the commit of checkpoint 2 (checkpoint 1 fixes
/// the start positions; 2 is the first with input), so the broker aborts that transaction
/// (scripts/kafka.sh checks for timed-out transactions every second) and the commit fails.
const STALL_PAST_TIMEOUT: (&str, &str) = ("WEIR_FAULT", "after-pre-commit@2:sleep=8000");

/// A flight-delays pipeline with a 3 s transaction timeout, and the flights it is fed.
async fn short_transaction_pipeline(prefix: &str) -> (TestPipeline, Vec<Row>) {
    let mut spec = Spec::new("flight-delays");
    spec.sink = "transaction_timeout_ms = 3000".into();
    spec.checkpoint = "interval_ms = 200\ntimeout_ms = 2000".into();
    let pipeline = TestPipeline::new(prefix, &spec);
    let rows = flight_rows(4_000);
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    (pipeline, rows)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_the_broker_aborts_on_timeout_is_replayed() {
    let (pipeline, rows) = short_transaction_pipeline("weir-timeout").await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, rows.len(), &[STALL_PAST_TIMEOUT]);
    reader.drain(Duration::from_secs(2));
    let log = pipeline.log_text();
    assert!(log.contains("recovering after back-off"), "the failed commit sent the pipeline into recovery:\n{log}");
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_that_meets_a_checkpoint_the_broker_aborts_exits_cleanly_and_loses_nothing() {
    // As above, but SIGTERM comes during the stall: the commit fails after the stop was asked
    // for. The process aborts the epoch's transaction and exits 0; the restart replays it. (The
    // broker aborted it first here, on its timeout; after a rebalance's fencing the stop's own
    // abort is what frees the partitions' next owner, but a test cannot time that race.)
    let (pipeline, rows) = short_transaction_pipeline("weir-stop-abort").await;
    let mut child = pipeline.spawn(&[STALL_PAST_TIMEOUT]);
    pipeline.wait_for_log("WEIR_FAULT: stalling", RUN_TIMEOUT);
    assert!(open_transaction_in(&pipeline.sink, PARTITIONS), "the stalled epoch's transaction is open");
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    let log = pipeline.log_text();
    assert!(status.success(), "a stop exits 0 even when its last checkpoint failed; log:\n{log}");
    assert!(log.contains("failed while stopping"), "the commit failed after the stop was asked for; log:\n{log}");
    assert!(log.contains("stopped after the failure"), "{log}");
    assert!(!open_transaction_in(&pipeline.sink, PARTITIONS), "no transaction is left open");
    // The broker holds the stalled epoch's records, and read_committed sees none of them.
    let mut uncommitted = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadUncommitted);
    assert!(uncommitted.read_until(1, Duration::from_secs(10)) > 0, "the epoch's records were written");
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    assert_eq!(reader.drain(Duration::from_secs(2)), 0, "the failed epoch was aborted");
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_uncommitted_sees_an_open_epoch_that_read_committed_does_not() {
    let pipeline = TestPipeline::new("weir-iso", &Spec::new("passthrough"));
    let input = keyed(&flight_rows(2_000));
    produce(&pipeline.source, 1, &input).await;
    // Checkpoint 2 (the first with input) stalls after pre-commit: its records are in the log,
    // uncommitted.
    let mut child = pipeline.spawn(&[("WEIR_FAULT", "after-pre-commit@2:sleep=10000")]);
    let started = std::time::Instant::now();
    while !pipeline.log_text().contains("WEIR_FAULT: stalling") {
        assert!(started.elapsed() < RUN_TIMEOUT, "never reached the stall; log:\n{}", pipeline.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut uncommitted = Reader::new(&pipeline.sink, 1, Isolation::ReadUncommitted);
    let mut committed = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    let open = uncommitted.read_until(1, Duration::from_secs(5));
    let visible = committed.drain(Duration::from_secs(1));
    assert!(open > 0, "read_uncommitted sees the open epoch's records; log:\n{}", pipeline.log_text());
    assert_eq!(visible, 0, "read_committed sees nothing before the commit");
    assert_eq!(committed.read_until(input.len(), RUN_TIMEOUT), input.len(), "all committed after the stall");
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_epoch_processes_while_a_checkpoint_commits() {
    // Epochs overlap (DESIGN.md, "Exactly-once protocol", step 3): checkpoint 2 (the first with
    // input) stalls after its pre-commit, on its commit thread. Records produced during the
    // stall are processed into epoch 3's transaction before T_2 commits: read_uncommitted sees
    // some while the log has no commit of checkpoint 2. (Some, not all: on a busy machine epoch
    // 3 may reach its barrier with part of them, and that barrier waits for T_2.) A
    // synchronous checkpoint would process nothing until the stall ends.
    let pipeline = TestPipeline::new("weir-overlap", &Spec::new("passthrough"));
    let rows = keyed(&flight_rows(2_000));
    let (first, second) = rows.split_at(1_000);
    produce(&pipeline.source, 1, first).await;
    let mut child = pipeline.spawn(&[("WEIR_FAULT", "after-pre-commit@2:sleep=20000")]);
    pipeline.wait_for_log("WEIR_FAULT: stalling", RUN_TIMEOUT);
    produce(&pipeline.source, 1, second).await;
    let mut uncommitted = Reader::new(&pipeline.sink, 1, Isolation::ReadUncommitted);
    let seen = uncommitted.read_until(first.len() + 1, Duration::from_secs(15));
    let log = pipeline.log_text();
    let committed_2 = log.lines().any(|line| line.contains("checkpoint committed") && line.contains("checkpoint=2 "));
    assert!(!committed_2, "read while checkpoint 2 still commits; log:\n{log}");
    assert!(seen > first.len(), "epoch 3 processed records during T_2's commit; log:\n{log}");
    let mut committed = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    assert_eq!(committed.read_until(rows.len(), RUN_TIMEOUT), rows.len(), "all committed after the stall");
    committed.drain(Duration::from_secs(2));
    let values: Vec<&str> = committed.records.iter().map(|r| r.value.as_deref().unwrap_or_default()).collect();
    let expected: Vec<&str> = rows.iter().map(|(_, value)| value.as_str()).collect();
    assert!(values == expected, "each record once, in order");
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_stop_and_restart_continues_where_it_left_off() {
    let pipeline = TestPipeline::new("weir-restart", &Spec::new("flight-delays"));
    let rows = flight_rows(6_000);
    let (first, second) = rows.split_at(3_500);
    produce(&pipeline.source, PARTITIONS, &keyed(first)).await;
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, first.len(), &[]);
    produce(&pipeline.source, PARTITIONS, &keyed(second)).await;
    run_to_completion(&pipeline, &mut reader, rows.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let verdict = verify(&rows, &reader.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_record_goes_to_the_dead_letter_topic_once_and_the_rest_flows() {
    let mut spec = Spec::new("misbehave");
    spec.transform = "on_error = \"dead-letter\"".into();
    let pipeline = TestPipeline::new("weir-dlq", &spec);
    let input: Vec<_> = (0..500)
        .map(|i| (Some(format!("k{}", i % 7)), if i == 250 { "panic".to_owned() } else { format!("v{i}") }))
        .collect();
    produce(&pipeline.source, 2, &input).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, input.len() - 1, &[]);
    reader.drain(Duration::from_secs(2));
    let mut dead = Reader::new(&pipeline.dead_letters, 2, Isolation::ReadCommitted);
    dead.read_until(1, Duration::from_secs(30));
    dead.drain(Duration::from_secs(2));
    assert_eq!(reader.records.len(), input.len() - 1, "every other record flows, once");
    assert!(reader.records.iter().all(|r| r.value.as_deref() != Some("panic")));
    assert_eq!(dead.records.len(), 1, "the poison record lands once");
    assert_eq!(dead.records[0].value.as_deref(), Some("panic"));
}

/// Runs a passthrough pipeline with `sink_line` in its `[sink]` table, which the broker refuses:
/// the process must exit non-zero within a minute. Returns the pipeline and its log.
fn refused_start(prefix: &str, sink_line: &str) -> (TestPipeline, String) {
    let mut spec = Spec::new("passthrough");
    spec.sink = sink_line.into();
    let pipeline = TestPipeline::new(prefix, &spec);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(weir_tests::create_topic(&pipeline.source, 1));
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(60)).expect("refused promptly");
    assert!(!status.success());
    let log = pipeline.log_text();
    (pipeline, log)
}

#[test]
fn a_transaction_timeout_above_the_broker_maximum_is_refused() {
    let (_pipeline, log) = refused_start("weir-refuse", "transaction_timeout_ms = 1000000");
    assert!(log.contains("transaction.max.timeout.ms = 900000") && log.contains("1000000"), "{log}");
}

#[test]
fn a_sink_topic_the_broker_refuses_to_create_is_named_at_once() {
    // Before, the broker's PolicyViolation was retried for ever.
    let (pipeline, log) = refused_start("weir-refuse-parts", "partitions = 100000");
    assert!(log.contains(&pipeline.sink) && log.contains("sink.partitions"), "{log}");
}

#[test]
fn interval_plus_timeout_above_the_transaction_timeout_is_refused() {
    let mut spec = Spec::new("passthrough");
    spec.sink = "transaction_timeout_ms = 5000".into();
    spec.checkpoint = "interval_ms = 3000\ntimeout_ms = 3000".into();
    let pipeline = TestPipeline::new("weir-refuse2", &spec);
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(30)).expect("refused promptly");
    assert!(!status.success());
    let log = pipeline.log_text();
    assert!(log.contains("interval") && log.contains("transaction_timeout"), "{log}");
}

#[test]
fn a_missing_source_topic_is_named() {
    let pipeline = TestPipeline::new("weir-missing", &Spec::new("passthrough"));
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(60)).expect("exits promptly");
    assert!(!status.success());
    let log = pipeline.log_text();
    assert!(log.contains(&pipeline.source) && log.contains("does not exist"), "{log}");
}

/// At-least-once and none: no transactions; everything arrives once when nothing crashes.
async fn without_transactions(guarantee: &str) {
    let mut spec = Spec::new("passthrough");
    spec.sink = format!("guarantee = \"{guarantee}\"");
    let pipeline = TestPipeline::new("weir-guarantee", &spec);
    let input = keyed(&flight_rows(2_000));
    produce(&pipeline.source, 2, &input).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    assert_eq!(reader.records.len(), input.len(), "{guarantee}: every record once");
    assert!(pipeline.log_text().contains("checkpoint committed"), "{guarantee} checkpoints too");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_least_once_delivers_everything() {
    without_transactions("at-least-once").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn none_delivers_everything_without_a_crash() {
    without_transactions("none").await;
}
