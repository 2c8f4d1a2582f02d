//! Source positions on the real broker: never a silent skip, never a start applied twice, no
//! partition left unread, and a lag that reaches 0 (issue 11, cases 1, 2, 3 and 7).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use weir_tests::admin::{
    add_partitions, delete_records_before, delete_topic, produce_in_transaction, produce_to, watermarks,
};
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, run_to_completion, wait_exit};
use weir_tests::{Isolation, create_topic};

/// `prefix-<i>` for each `i` of `range`.
fn values(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

/// The values read so far, as a set, checking that none came twice.
fn distinct_values(reader: &Reader) -> BTreeSet<String> {
    let values: Vec<String> = reader.records.iter().filter_map(|r| r.value.clone()).collect();
    let set: BTreeSet<String> = values.iter().cloned().collect();
    assert_eq!(set.len(), values.len(), "no record comes out twice");
    set
}

/// Starts the pipeline and expects it to refuse: a non-zero exit, with every one of `needles` in
/// the log.
fn expect_refusal(pipeline: &TestPipeline, needles: &[&str]) {
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, RUN_TIMEOUT)
        .unwrap_or_else(|| panic!("weir run did not refuse to start; log:\n{}", pipeline.log_text()));
    assert!(!status.success(), "weir run exited 0; log:\n{}", pipeline.log_text());
    let log = pipeline.log_text();
    for needle in needles {
        assert!(log.contains(needle), "the refusal names `{needle}`; log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_offset_deleted_from_the_log_fails_the_start_or_skips_visibly() {
    let pipeline = TestPipeline::new("weir-range", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("id", 0..1000));
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 1000, &[]);

    produce_to(&pipeline.source, 0, &values("id", 1000..2000));
    delete_records_before(&pipeline.source, 0, 1500).await;
    assert_eq!(watermarks(&pipeline.source, 0, "read_committed").0, 1500, "the broker deleted offsets below 1500");
    let partition = format!("{}[0]", pipeline.source);
    expect_refusal(&pipeline, &[&partition, "is 1000", "offsets 1500 to 2000", "source.offset_reset = \"earliest\""]);
    reader.drain(Duration::from_secs(1));
    assert_eq!(reader.records.len(), 1000, "the refused start wrote nothing");

    pipeline.set("source", "offset_reset = \"earliest\"");
    run_to_completion(&pipeline, &mut reader, 1500, &[]);
    reader.drain(Duration::from_secs(1));
    let want: BTreeSet<String> = values("id", 0..1000).into_iter().chain(values("id", 1500..2000)).collect();
    assert_eq!(distinct_values(&reader), want, "1500..1999 come out after the gap");
    assert!(pipeline.log_text().contains("500 offsets were skipped"), "the gap is logged:\n{}", pipeline.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_recreated_source_topic_fails_the_start_or_is_read_from_its_start() {
    let pipeline = TestPipeline::new("weir-recreate", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("old", 0..100));
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 100, &[]);

    delete_topic(&pipeline.source).await;
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("new", 0..10));
    expect_refusal(&pipeline, &["is 100", "offsets 0 to 10", "deleted and created again"]);

    pipeline.set("source", "offset_reset = \"earliest\"");
    run_to_completion(&pipeline, &mut reader, 110, &[]);
    reader.drain(Duration::from_secs(1));
    let want: BTreeSet<String> = values("old", 0..100).into_iter().chain(values("new", 0..10)).collect();
    assert_eq!(distinct_values(&reader), want);
}

/// Issue 46 item 7: the recreated topic's log reaches past the checkpoint offset (5 of 10), so
/// the range check alone passed and the new topic's offsets 0..4 were skipped. The topic id
/// recorded with the checkpoint tells the old topic from the new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_topic_recreated_past_the_checkpoint_offset_fails_the_start_or_is_read_from_its_start() {
    let pipeline = TestPipeline::new("weir-recreate-past", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("old", 0..5));
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 5, &[]);

    delete_topic(&pipeline.source).await;
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("new", 0..10));
    let partition = format!("{}[0]", pipeline.source);
    expect_refusal(&pipeline, &[&partition, "is 5", "deleted and created again", "topic id", "source.offset_reset"]);
    reader.drain(Duration::from_secs(1));
    assert_eq!(reader.records.len(), 5, "the refused start wrote nothing");

    pipeline.set("source", "offset_reset = \"earliest\"");
    run_to_completion(&pipeline, &mut reader, 15, &[]);
    reader.drain(Duration::from_secs(1));
    let want: BTreeSet<String> = values("old", 0..5).into_iter().chain(values("new", 0..10)).collect();
    assert_eq!(distinct_values(&reader), want, "every record of the new topic comes out, once");
    assert!(pipeline.log_text().contains("reading the new topic from its start offset"), "{}", pipeline.log_text());
}

/// The same, recreated under a running pipeline: it fails into recovery (the topic vanished),
/// whose start tells the new topic by its id and refuses — or stops on the missing topic, if the
/// recovery came first; either way nothing of the new topic is skipped, and a restart with
/// `offset_reset = "earliest"` reads all of it.
#[tokio::test(flavor = "multi_thread")]
async fn a_source_topic_recreated_under_a_running_pipeline_is_not_read_from_the_old_offset() {
    let pipeline = TestPipeline::new("weir-recreate-running", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("old", 0..5));
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    let mut child = pipeline.spawn(&[]);
    assert_eq!(reader.read_until(5, RUN_TIMEOUT), 5, "{}", pipeline.log_text());

    delete_topic(&pipeline.source).await;
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("new", 0..10));
    let status = wait_exit(&mut child, RUN_TIMEOUT)
        .unwrap_or_else(|| panic!("the pipeline went on reading the new topic; log:\n{}", pipeline.log_text()));
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    assert!(log.contains("deleted and created again") || log.contains("does not exist"), "{log}");
    reader.drain(Duration::from_secs(1));
    assert_eq!(reader.records.len(), 5, "nothing of the new topic was written from the old offset; log:\n{log}");

    pipeline.set("source", "offset_reset = \"earliest\"");
    run_to_completion(&pipeline, &mut reader, 15, &[]);
    reader.drain(Duration::from_secs(1));
    let want: BTreeSet<String> = values("old", 0..5).into_iter().chain(values("new", 0..10)).collect();
    assert_eq!(distinct_values(&reader), want, "every record of the new topic comes out, once");
}

/// A source topic recreated with fewer partitions: the changelog holds the state of partitions
/// the topic no longer has, and the refusal names them (not the changelog as a stranger's).
#[tokio::test(flavor = "multi_thread")]
async fn a_source_topic_recreated_with_fewer_partitions_is_refused_naming_the_vanished_ones() {
    let pipeline = TestPipeline::new("weir-recreate-fewer", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 3).await;
    for partition in 0..3 {
        produce_to(&pipeline.source, partition, &values(&format!("p{partition}"), 0..5));
    }
    let mut reader = Reader::new(&pipeline.sink, 3, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 15, &[]);

    delete_topic(&pipeline.source).await;
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("new", 0..5));
    let vanished = format!("{0}[1], {0}[2]", pipeline.source);
    expect_refusal(&pipeline, &[&vanished, "no longer have", "drop that state", "--partitions"]);
}

/// `weir status` of a pipeline whose consumer group is gone (deleted; offsets expire the same
/// way) shows the checkpoint the changelog holds, as recovery reads it, not "checkpoint 0" and a
/// lag from the log's start.
#[tokio::test(flavor = "multi_thread")]
async fn status_reads_the_checkpoint_from_the_changelog_when_the_group_has_no_offsets() {
    let pipeline = TestPipeline::new("weir-status-lost", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 1).await;
    produce_to(&pipeline.source, 0, &values("id", 0..40));
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 40, &[]);
    weir_tests::admin::delete_group(&format!("weir-{}", pipeline.name)).await;
    produce_to(&pipeline.source, 0, &values("id", 40..50));

    let (ok, stdout, stderr) =
        weir_tests::run_weir(&["status".as_ref(), pipeline.file.as_ref(), "--output".as_ref(), "json".as_ref()]);
    assert!(ok, "weir status: {stderr}");
    let status: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    let partition = &status["partitions"][0];
    assert_eq!(partition["group_offset"], serde_json::Value::Null, "{status}");
    assert_eq!(partition["checkpoint_offset"], 40, "{status}");
    assert_eq!(partition["checkpoint_from"], "changelog", "{status}");
    assert_eq!(partition["lag"], 10, "{status}");
    assert!(status["committed_checkpoint"].as_u64().is_some_and(|id| id > 0), "{status}");
}

#[tokio::test(flavor = "multi_thread")]
async fn start_latest_is_fixed_once_per_partition_even_for_a_partition_without_input() {
    let mut spec = Spec::new("passthrough");
    spec.source.push_str("\nstart = \"latest\"");
    let pipeline = TestPipeline::new("weir-latest", &spec);
    create_topic(&pipeline.source, 2).await;
    produce_to(&pipeline.source, 0, &values("before-p0", 0..5));
    produce_to(&pipeline.source, 1, &values("before-p1", 0..5));
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);

    // First start, no input at all: the end offsets are fixed as the start positions.
    let mut child = pipeline.spawn(&[]);
    pipeline.wait_for_log("checkpoint committed", RUN_TIMEOUT);
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success());
    produce_to(&pipeline.source, 1, &values("between-p1", 0..3));

    // Second run: input to p0 only while it runs.
    let mut child = pipeline.spawn(&[]);
    produce_to(&pipeline.source, 0, &values("run2-p0", 0..10));
    reader.read_until(13, RUN_TIMEOUT);
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success());

    // Stopped: both partitions get input; the restart reads all of it.
    produce_to(&pipeline.source, 1, &values("stopped-p1", 0..10));
    produce_to(&pipeline.source, 0, &values("stopped-p0", 0..10));
    run_to_completion(&pipeline, &mut reader, 33, &[]);
    reader.drain(Duration::from_secs(1));
    let want: BTreeSet<String> = [
        values("between-p1", 0..3),
        values("run2-p0", 0..10),
        values("stopped-p1", 0..10),
        values("stopped-p0", 0..10),
    ]
    .concat()
    .into_iter()
    .collect();
    assert_eq!(
        distinct_values(&reader),
        want,
        "nothing produced after the first start is skipped, nothing before it is read"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn partitions_added_while_running_or_stopped_are_read_from_their_earliest_offset() {
    let mut spec = Spec::new("passthrough");
    spec.source.push_str("\nstart = \"latest\"\npartition_discovery_interval_ms = 500");
    // The restart comes back within the session (5 minutes), so the group hands the static
    // member its old assignment without a rebalance: the case where nobody owns the partitions
    // added while it was stopped until the process rejoins.
    spec.source.push_str("\n[source.consumer]\n\"session.timeout.ms\" = \"300000\"");
    let pipeline = TestPipeline::new("weir-grow", &spec);
    create_topic(&pipeline.source, 2).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    let mut child = pipeline.spawn(&[]);
    pipeline.wait_for_log("checkpoint committed", RUN_TIMEOUT);

    add_partitions(&pipeline.source, 4).await;
    for partition in 0..4 {
        produce_to(&pipeline.source, partition, &values(&format!("running-p{partition}"), 0..25));
    }
    let read = reader.read_until(100, RUN_TIMEOUT);
    assert_eq!(read, 100, "the records of the added partitions come out; log:\n{}", pipeline.log_text());
    assert!(pipeline.log_text().contains("source partition added while running"), "{}", pipeline.log_text());
    // The changelog's new partitions are known to the producer before a task writes them.
    assert!(!pipeline.log_text().contains("recovering"), "no failure on the way; log:\n{}", pipeline.log_text());
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success());

    // Added while stopped: a pipeline that has a checkpoint reads them from the earliest offset,
    // whatever source.start says.
    add_partitions(&pipeline.source, 6).await;
    for partition in 4..6 {
        produce_to(&pipeline.source, partition, &values(&format!("stopped-p{partition}"), 0..5));
    }
    run_to_completion(&pipeline, &mut reader, 110, &[]);
    reader.drain(Duration::from_secs(1));
    assert_eq!(distinct_values(&reader).len(), 110);
    assert!(
        pipeline.log_text().contains("source partitions without an owner in the consumer group"),
        "the restart kept its old assignment and rejoined for the added partitions; log:\n{}",
        pipeline.log_text()
    );
}

/// Polls `weir status` until it reports a total lag of 0; returns the last output.
fn wait_for_zero_lag(pipeline: &TestPipeline, timeout: Duration) -> String {
    let started = Instant::now();
    loop {
        let status = pipeline.status();
        if status.lines().any(|line| line.starts_with("total lag: 0 ")) || started.elapsed() > timeout {
            return status;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lag_reaches_zero_on_a_transactional_input() {
    let pipeline = TestPipeline::new("weir-lag", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 2).await;
    produce_in_transaction(&pipeline.source, 0, &values("aborted", 0..10), false);
    produce_in_transaction(&pipeline.source, 0, &values("committed", 0..50), true);
    // Partition 1 is never written to: its lag must not count from offset 0 either.
    let (_, end) = watermarks(&pipeline.source, 0, "read_committed");
    assert_eq!(end, 62, "60 records and 2 control records in the log");

    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    let mut child = pipeline.spawn(&[]);
    assert_eq!(reader.read_until(50, RUN_TIMEOUT), 50, "log:\n{}", pipeline.log_text());
    let status = wait_for_zero_lag(&pipeline, RUN_TIMEOUT);
    assert!(pipeline.stop(&mut child, Duration::from_secs(60)).success());
    assert!(status.contains("total lag: 0 "), "the lag reaches 0 past the commit marker:\n{status}");
    reader.drain(Duration::from_secs(1));
    assert_eq!(distinct_values(&reader), values("committed", 0..50).into_iter().collect());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_assignment_kept_from_another_topic_makes_the_process_rejoin() {
    // Two pipelines share a consumer group id, one after the other, as the same static member
    // within its session (5 minutes): the group hands the second its predecessor's assignment,
    // of a topic it does not read, without a rebalance (KIP-345).
    let group = weir_tests::unique_name("weir-shared-group");
    let mut spec = Spec::new("passthrough");
    spec.source.push_str(&format!("\ngroup_id = \"{group}\"\n[source.consumer]\n\"session.timeout.ms\" = \"300000\""));
    let first = TestPipeline::new("weir-kept-a", &spec);
    let second = TestPipeline::new("weir-kept-b", &spec);
    for (pipeline, prefix) in [(&first, "a"), (&second, "b")] {
        create_topic(&pipeline.source, 2).await;
        for partition in 0..2 {
            produce_to(&pipeline.source, partition, &values(&format!("{prefix}-p{partition}"), 0..5));
        }
    }
    let mut reader = Reader::new(&first.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&first, &mut reader, 10, &[]);
    let mut reader = Reader::new(&second.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&second, &mut reader, 10, &[]);
    reader.drain(Duration::from_secs(1));
    let values = distinct_values(&reader);
    assert!(values.iter().all(|v| v.starts_with("b-")) && values.len() == 10, "{values:?}");
    assert!(
        second.log_text().contains("assigned partitions of topics this pipeline does not read"),
        "the second pipeline was handed the first one's partitions and rejoined; log:\n{}",
        second.log_text()
    );
}
