//! Guests that hold the host, on the real broker: a guest sleeping in a WASI wait is stopped at
//! its deadline and its pipeline stops promptly; an operator keeping in-memory state
//! (tests/guests/memory-counter) keeps it exactly through dead letters, restarts and crashes;
//! `dead-letter` does not swallow failures no record causes; and a dead letter's header names a
//! polyglot guest's exception and its offset.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, crash_while_feeding, produce, run_to_completion};
use weir_tests::records::{ReadRecord, read_raw};
use weir_tests::{Isolation, bootstrap};

/// A committed record's value and headers (UTF-8, lossy).
#[derive(Debug)]
struct WithHeaders {
    value: Option<String>,
    headers: BTreeMap<String, String>,
}

/// Reads partition 0 of `topic` (read_committed) until `count` records arrived or `timeout`
/// passed, then whatever follows within 2 s.
fn read_with_headers(topic: &str, count: usize, timeout: Duration) -> Vec<WithHeaders> {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let with_headers = |read: ReadRecord| WithHeaders {
        value: read.record.value.as_deref().map(text),
        headers: read
            .record
            .headers
            .iter()
            .map(|(name, value)| (text(name), text(value.as_deref().unwrap_or_default())))
            .collect(),
    };
    read_raw(topic, 1, count, timeout).into_iter().map(with_headers).collect()
}

/// `(no key, value)` records for [`produce`].
fn values(words: &[&str]) -> Vec<(Option<String>, String)> {
    words.iter().map(|w| (None, (*w).to_owned())).collect()
}

fn sink_values(reader: &Reader) -> Vec<String> {
    reader.records.iter().map(|r| r.value.clone().unwrap_or_default()).collect()
}

/// The log so far without its terminal colour codes, so that fields read `records=4`.
fn plain_log(pipeline: &TestPipeline) -> String {
    let log = pipeline.log_text();
    let mut plain = String::with_capacity(log.len());
    let mut rest = log.as_str();
    while let Some(start) = rest.find("\x1b[") {
        plain.push_str(&rest[..start]);
        rest = rest[start..].split_once('m').map_or("", |(_, after)| after);
    }
    plain.push_str(rest);
    plain
}

/// Waits until at least `times` lines of the log contain every one of `texts`.
fn await_log(pipeline: &TestPipeline, texts: &[&str], times: usize, timeout: Duration) -> bool {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if plain_log(pipeline).lines().filter(|line| texts.iter().all(|t| line.contains(t))).count() >= times {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// The end offset of partition 0 of `topic`, as the broker reports it: 0 when nothing, not even
/// an aborted transaction's record, was ever written to it.
fn end_offset(topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("consumer");
    let (_, high) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)).expect("watermarks");
    high
}

/// A guest in `std::thread::sleep(30 s)` waits in the host (a WASI clock subscription and
/// poll), where epoch interruption cannot reach it: the wait must end at `deadline_ms`. Before,
/// the batch and then the isolated record each slept the full 30 s before failing.
#[tokio::test(flavor = "multi_thread")]
async fn a_sleeping_guest_is_stopped_at_its_deadline_and_dead_lettered() {
    let mut spec = Spec::new("misbehave");
    spec.transform = "deadline_ms = 200\non_error = \"dead-letter\"".into();
    let pipeline = TestPipeline::new("weir-sleep-dlq", &spec);
    let words: Vec<&str> = (0..20).map(|i| if i == 10 { "sleep" } else { "fine" }).collect();
    produce(&pipeline.source, 1, &values(&words)).await;
    let started = Instant::now();
    let mut child = pipeline.spawn(&[]);
    let dead = read_with_headers(&pipeline.dead_letters, 1, RUN_TIMEOUT);
    let elapsed = started.elapsed();
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    reader.read_until(19, RUN_TIMEOUT);
    reader.drain(Duration::from_secs(1));
    pipeline.stop(&mut child, Duration::from_secs(20));
    let log = pipeline.log_text();

    assert_eq!(dead.len(), 1, "the sleeping record is dead-lettered once; log:\n{log}");
    assert_eq!(dead[0].value.as_deref(), Some("sleep"));
    let error = &dead[0].headers["weir.error"];
    assert!(error.contains("deadline exceeded") && error.contains("200ms"), "{error}");
    assert_eq!(dead[0].headers["weir.offset"], "10");
    // Two sleeps of 30 s (the batch, then the record alone) would take over a minute.
    assert!(elapsed < Duration::from_secs(40), "the dead letter took {elapsed:?}; log:\n{log}");
    assert_eq!(reader.records.len(), 19, "the other records flow, once");
}

/// Under `on_error = "fail"` every attempt fails at the deadline (not after the guest's 30 s),
/// and SIGTERM stops the pipeline promptly.
#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_whose_guest_sleeps_retries_at_its_deadline_and_stops_on_sigterm() {
    let mut spec = Spec::new("misbehave");
    spec.transform = "deadline_ms = 200".into();
    let pipeline = TestPipeline::new("weir-sleep-fail", &spec);
    produce(&pipeline.source, 1, &values(&["fine", "sleep", "fine"])).await;
    let mut child = pipeline.spawn(&[]);
    // Two attempts stopped at the deadline: at 30 s per sleep that would take over a minute.
    let retried = await_log(&pipeline, &["recovering after back-off", "deadline exceeded"], 2, Duration::from_secs(50));
    // `stop` fails the test unless weir run exits within 20 s of SIGTERM.
    pipeline.stop(&mut child, Duration::from_secs(20));
    let log = pipeline.log_text();
    assert!(retried, "two attempts did not fail at the deadline within 50 s; log:\n{log}");
    assert!(log.contains("offsets 0..=2"), "the error names the batch; log:\n{log}");
}

/// A stop that comes while a failed batch is replayed record by record (`on_error =
/// "dead-letter"`, each record running to its 1 s deadline) ends the replay between records and
/// aborts the open epoch. Before, the stop waited for every record of the batch: 40 s here.
#[tokio::test(flavor = "multi_thread")]
async fn a_stop_during_a_record_by_record_replay_ends_it_and_aborts_the_epoch() {
    let mut spec = Spec::new("misbehave");
    spec.transform = "deadline_ms = 1000\non_error = \"dead-letter\"".into();
    let pipeline = TestPipeline::new("weir-stop-replay", &spec);
    produce(&pipeline.source, 1, &values(&["loop"; 40])).await;
    let mut child = pipeline.spawn(&[]);
    // The replay provably runs: it has dead-lettered two records.
    let replaying = await_log(&pipeline, &["record sent to the dead-letter topic"], 2, RUN_TIMEOUT);
    assert!(replaying, "the replay never started; log:\n{}", pipeline.log_text());
    // `stop` fails the test unless weir run exits within 20 s of SIGTERM.
    pipeline.stop(&mut child, Duration::from_secs(20));
    let log = plain_log(&pipeline);
    assert!(log.contains("stopped during a record-by-record replay"), "log:\n{log}");
    let replayed = log.lines().filter(|l| l.contains("record sent to the dead-letter topic")).count();
    assert!(replayed < 40, "the replay ran through every record; log:\n{log}");
    // The aborted epoch's dead letters never become visible.
    let mut dead = Reader::new(&pipeline.dead_letters, 1, Isolation::ReadCommitted);
    dead.drain(Duration::from_secs(2));
    assert!(dead.records.is_empty(), "{} dead letters of the aborted epoch are visible", dead.records.len());
}

/// A batch ends at a quarter of its guests' `memory_limit_mb` as well as at `batch_size`: 40
/// records of 400 KiB (16 MiB) in batches of up to 64 reach a guest of 8 MiB a few at a time,
/// and all come out once; a batch of all of them failed every call for want of memory.
#[tokio::test(flavor = "multi_thread")]
async fn large_records_are_batched_to_what_the_guests_memory_takes() {
    let spec =
        Spec { source: "batch_size = 64".into(), transform: "memory_limit_mb = 8".into(), ..Spec::new("misbehave") };
    let pipeline = TestPipeline::new("weir-big-batch", &spec);
    let records: Vec<_> = (0..40).map(|i| (None, format!("{i:04}").repeat(100 << 10))).collect();
    produce(&pipeline.source, 1, &records).await;
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, records.len(), &[]);
    reader.drain(Duration::from_secs(1));
    let mut out: Vec<_> = reader.records.iter().filter_map(|record| record.value.clone()).collect();
    out.sort();
    let sent: Vec<_> = records.into_iter().map(|(_, value)| value).collect();
    assert!(out == sent, "{} records out of 40, or not those sent:\n{}", out.len(), pipeline.log_text());
}

/// A counter kept in guest memory over `a, a, <poison>, a`, one record per batch, in one
/// epoch: the poison record's failure must roll the guest back to the state before it (2), not
/// to the epoch's start. Before, the output was 1, 2, 1.
#[tokio::test(flavor = "multi_thread")]
async fn in_memory_state_survives_a_dead_letter_within_the_epoch() {
    let spec = Spec {
        source: "batch_size = 1".into(),
        transform: "on_error = \"dead-letter\"".into(),
        checkpoint: "interval_ms = 5000\ntimeout_ms = 10000".into(),
        ..Spec::new("memory-counter")
    };
    let pipeline = TestPipeline::new("weir-mem-dlq", &spec);
    produce(&pipeline.source, 1, &values(&["a", "a", "poison", "a"])).await;
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 3, &[]);
    reader.drain(Duration::from_secs(1));
    let dead = read_with_headers(&pipeline.dead_letters, 1, Duration::from_secs(30));
    let log = plain_log(&pipeline);
    let first_checkpoint =
        log.lines().find(|l| l.contains("checkpoint committed") && !l.contains("records=0")).unwrap_or_default();
    assert!(first_checkpoint.contains("records=4"), "all four records were in one epoch:\n{log}");
    assert_eq!(sink_values(&reader), ["1", "2", "3"], "log:\n{log}");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].value.as_deref(), Some("poison"));
    assert!(dead[0].headers["weir.error"].contains("memory-counter: poison record"), "{:?}", dead[0].headers);
    assert_eq!(dead[0].headers["weir.offset"], "2");
}

/// `reset` empties the counter, so the next checkpoint's snapshot is empty: it must replace the
/// older one. Before, the restart restored 2 and the last output was 3.
#[tokio::test(flavor = "multi_thread")]
async fn an_empty_snapshot_replaces_the_older_one_across_a_restart() {
    let pipeline = TestPipeline::new("weir-mem-empty", &Spec::new("memory-counter"));
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    let mut expected = 0;
    for words in [&["a", "a"][..], &["reset"], &["a"]] {
        produce(&pipeline.source, 1, &values(words)).await;
        expected += words.len();
        run_to_completion(&pipeline, &mut reader, expected, &[]);
    }
    reader.drain(Duration::from_secs(1));
    assert_eq!(sink_values(&reader), ["1", "2", "0", "1"], "log:\n{}", pipeline.log_text());
}

/// Crashes at `fault` while counting in guest memory, restarts, and checks that the committed
/// outputs are exactly 1, 2, …, n: each epoch's snapshot commits with its outputs and offsets.
/// Input arrives in waves until the crash, so that it spans the fault's checkpoint.
async fn in_memory_count_through_a_crash(fault: &str) {
    let pipeline = TestPipeline::new("weir-mem-crash", &Spec::new("memory-counter"));
    let input = values(&["x"; 6_000]);
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    crash_while_feeding(&pipeline, 1, &input, fault, &mut reader).await;
    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    reader.drain(Duration::from_secs(2));
    let want: Vec<String> = (1..=input.len()).map(|n| n.to_string()).collect();
    assert!(
        sink_values(&reader) == want,
        "after a crash at {fault}: the counts are not 1..={} exactly once",
        input.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn in_memory_state_is_exact_through_a_crash_mid_epoch() {
    in_memory_count_through_a_crash("mid-epoch@3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn in_memory_state_is_exact_through_a_crash_after_commit() {
    in_memory_count_through_a_crash("after-commit@3").await;
}

/// Checkpoint N holds an unrestorable snapshot (`corrupt`); a poison record in epoch N+1 needs
/// a fresh instance, whose `restore` fails. That failure is no record's: it must fail the
/// pipeline, not dead-letter the poison record and every record after it with a restore error.
#[tokio::test(flavor = "multi_thread")]
async fn dead_letter_does_not_swallow_a_failed_restore() {
    let mut spec = Spec::new("memory-counter");
    spec.transform = "on_error = \"dead-letter\"".into();
    let pipeline = TestPipeline::new("weir-mem-restore", &spec);
    produce(&pipeline.source, 1, &values(&["corrupt"])).await;
    let mut child = pipeline.spawn(&[]);
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    assert_eq!(reader.read_until(1, RUN_TIMEOUT), 1, "`corrupt` committed; log:\n{}", pipeline.log_text());
    produce(&pipeline.source, 1, &values(&["poison", "a", "a"])).await;
    let failed = await_log(&pipeline, &["recovering after back-off"], 2, RUN_TIMEOUT);
    reader.drain(Duration::from_secs(1));
    pipeline.stop(&mut child, Duration::from_secs(30));
    let log = plain_log(&pipeline);
    assert!(failed, "the pipeline did not fail twice; log:\n{log}");
    let failure = log.lines().find(|l| l.contains("recovering after back-off")).unwrap_or_default();
    assert!(failure.contains("failed in restore") && failure.contains("cannot restore snapshot"), "{failure}");
    // Not even an aborted transaction wrote to it.
    assert_eq!(end_offset(&pipeline.dead_letters), 0, "records were dead-lettered for a failed restore; log:\n{log}");
    assert_eq!(sink_values(&reader), ["corrupt"], "nothing after the failure committed");
}

/// An exception that is not a TransformError (Python) and a panic (Go) reach the dead-letter
/// header with their type, message and the record's offset.
#[tokio::test(flavor = "multi_thread")]
async fn a_polyglot_guests_uncaught_failure_is_named_in_the_dead_letter_header() {
    let cases = [
        ("sandbox-py", "uncaught ZeroDivisionError: division by zero (sandbox.py:"),
        ("sandbox-go", "uncaught panic: runtime error: index out of range [0] with length 0"),
    ];
    for (guest, expected) in cases {
        let spec = Spec {
            transform: "on_error = \"dead-letter\"\nmemory_limit_mb = 128\ndeadline_ms = 10000".into(),
            ..Spec::new(guest)
        };
        let pipeline = TestPipeline::new("weir-poly-dlq", &spec);
        produce(&pipeline.source, 1, &values(&["hello", "raise", "hello"])).await;
        let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
        run_to_completion(&pipeline, &mut reader, 2, &[]);
        let dead = read_with_headers(&pipeline.dead_letters, 1, Duration::from_secs(30));
        assert_eq!(dead.len(), 1, "{guest}; log:\n{}", pipeline.log_text());
        let error = &dead[0].headers["weir.error"];
        assert!(error.contains(expected) && error.contains("(at offset 1)"), "{guest}: {error}");
        assert_eq!(dead[0].headers["weir.offset"], "1");
    }
}
