//! Records that used to stop a pipeline (issue 12, cases 1–3), on the real broker with real
//! components: header names that are not UTF-8, outputs too large for the producer or the
//! topic, state writes too large for the changelog, and what passthrough keeps byte for byte.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::json;
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, run_to_completion, wait_exit};
use weir_tests::records::{RawRecord, ReadRecord, produce_raw, read_raw, weir_consume};
use weir_tests::{Isolation, bootstrap};

/// librdkafka's default `message.max.bytes`, the sink producer's limit unless configured.
const PRODUCER_LIMIT: usize = 1_000_000;

fn header(name: &[u8], value: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    (name.to_vec(), Some(value.to_vec()))
}

fn values(records: &[ReadRecord]) -> Vec<Vec<u8>> {
    records.iter().map(|r| r.record.value.clone().unwrap_or_default()).collect()
}

fn header_value<'a>(record: &'a ReadRecord, name: &str) -> Option<&'a [u8]> {
    record.record.headers.iter().find(|(k, _)| k == name.as_bytes()).and_then(|(_, v)| v.as_deref())
}

/// Headers a source record may carry that a passthrough must keep: an empty name, binary bytes,
/// a null value next to an empty one, and one name repeated a hundred times.
fn odd_headers() -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut odd = vec![
        header(b"", b"empty name"),
        header(b"bin", &[0xff, 0x00, 0xfe]),
        (b"null".to_vec(), None),
        header(b"empty", b""),
    ];
    odd.extend((0..100).map(|i| header(b"dup", format!("{i}").as_bytes())));
    odd
}

/// Runs `plugin` over a record whose header name is not UTF-8, one with [`odd_headers`], and 8
/// plain records; returns the input and the committed output, after checking that every record
/// arrived once, in order, and nothing panicked.
async fn pass_odd_headers(prefix: &str, plugin: &'static str) -> (TestPipeline, Vec<RawRecord>, Vec<ReadRecord>) {
    let pipeline = TestPipeline::new(prefix, &Spec::new(plugin));
    let mut input = vec![
        RawRecord { headers: vec![header(&[0xc3, 0x28], b"x")], ..RawRecord::value("first") },
        RawRecord { headers: odd_headers(), ..RawRecord::value("second") },
    ];
    input.extend((0..8).map(|i| RawRecord::value(format!("v{i}"))));
    produce_raw(&pipeline.source, &input, None).await;

    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, input.len(), &[]);
    let output = read_raw(&pipeline.sink, 1, input.len(), RUN_TIMEOUT);
    assert!(!pipeline.log_text().contains("panicked"), "{}", pipeline.log_text());
    assert_eq!(
        values(&output),
        input.iter().map(|r| r.value.clone().unwrap()).collect::<Vec<_>>(),
        "all, once, in order"
    );
    // Header names are UTF-8 in the contract: the name is handed on lossily (docs/configuration.md).
    assert_eq!(output[0].record.headers, vec![header("\u{FFFD}(".as_bytes(), b"x")]);
    assert!(output[2..].iter().all(|r| r.record.headers.is_empty()));
    (pipeline, input, output)
}

#[tokio::test(flavor = "multi_thread")]
async fn header_names_that_are_not_utf8_and_other_odd_headers_pass_through() {
    let (pipeline, _, output) = pass_odd_headers("weir-hdr", "passthrough").await;
    // Everything else byte for byte, in order, a null value as null (contract 0.2).
    assert_eq!(output[1].record.headers, odd_headers());
    // As `weir consume` shows it: null apart from empty.
    let shown = weir_consume(&pipeline.sink, 2);
    assert_eq!(shown[1]["headers"][2], json!({"key": "null", "value": null}));
    assert_eq!(shown[1]["headers"][3], json!({"key": "empty", "value": ""}));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transform_of_contract_0_1_still_runs_and_sees_null_header_values_as_empty() {
    let (pipeline, input, output) = pass_odd_headers("weir-hdr-01", "contract-0-1").await;
    // Contract 0.1 has no null header value: it reaches the transform, and so the output, empty.
    let want: Vec<_> = odd_headers().into_iter().map(|(k, v)| (k, Some(v.unwrap_or_default()))).collect();
    assert_eq!(output[1].record.headers, want);
    // Its `log` call and its `state` calls (each batch reads and writes `count`; a failing call
    // would have trapped the batch) went through the 0.1 imports.
    assert!(pipeline.log_text().contains("contract-0-1: init"), "{}", pipeline.log_text());
    assert_eq!(output.len(), input.len());
}

/// Writes `input` through passthrough under `on_error`, with `sink` lines in the pipeline file.
async fn oversized(prefix: &str, on_error: &str, input: &[RawRecord], sink: &str) -> TestPipeline {
    let mut spec = Spec::new("passthrough");
    spec.transform = format!("on_error = \"{on_error}\"");
    spec.sink = sink.into();
    let pipeline = TestPipeline::new(prefix, &spec);
    produce_raw(&pipeline.source, input, None).await;
    pipeline
}

fn big(bytes: usize) -> Vec<u8> {
    vec![b'a'; bytes]
}

#[tokio::test(flavor = "multi_thread")]
async fn outputs_too_large_for_the_producer_are_dead_lettered_and_the_rest_commits() {
    // Too large by its value; by its key (the value alone fits); by a header (likewise).
    let by_value = RawRecord::value(big(PRODUCER_LIMIT + 100));
    let by_key = RawRecord { key: Some(big(100)), ..RawRecord::value(big(PRODUCER_LIMIT - 100)) };
    let by_header = RawRecord { headers: vec![header(b"h", &big(100))], ..RawRecord::value(big(PRODUCER_LIMIT - 100)) };
    let normal = |i: usize| RawRecord::value(format!("v{i}"));
    let input = vec![
        normal(0),
        normal(1),
        by_value,
        normal(2),
        normal(3),
        by_key,
        normal(4),
        normal(5),
        by_header,
        normal(6),
        normal(7),
    ];
    let pipeline = oversized("weir-big", "dead-letter", &input, "").await;
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 8, &[]);

    let output = read_raw(&pipeline.sink, 1, 8, RUN_TIMEOUT);
    let want: Vec<Vec<u8>> = (0..8).map(|i| format!("v{i}").into_bytes()).collect();
    assert_eq!(values(&output), want, "the normal records commit, once, in order");
    let dead = read_raw(&pipeline.dead_letters, 1, 3, RUN_TIMEOUT);
    assert_eq!(dead.len(), 3, "each oversized record is dead-lettered once");
    for (letter, offset) in dead.iter().zip([2, 5, 8]) {
        let error = String::from_utf8_lossy(header_value(letter, "weir.error").expect("weir.error")).into_owned();
        assert!(error.contains("too large") && error.contains("message.max.bytes"), "{error}");
        assert_eq!(header_value(letter, "weir.offset"), Some(offset.to_string().as_bytes()));
        // The input record is itself too large to dead-letter whole: its value is left out
        // and named, the rest kept.
        assert_eq!(letter.record.value, None);
        let dropped = String::from_utf8_lossy(header_value(letter, "weir.dropped").expect("weir.dropped")).into_owned();
        assert!(dropped.starts_with("value ("), "{dropped}");
    }
    assert_eq!(dead[1].record.key, Some(big(100)), "the key is kept when dropping the value suffices");
    assert_eq!(header_value(&dead[2], "h"), Some(&big(100)[..]), "so are the input's headers");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_output_too_large_under_fail_stops_the_pipeline_naming_record_limit_and_setting() {
    let mut input: Vec<_> = (0..4).map(|i| RawRecord::value(format!("v{i}"))).collect();
    input.push(RawRecord::value(big(PRODUCER_LIMIT + 100)));
    input.push(RawRecord::value("after"));
    let pipeline = oversized("weir-big-fail", "fail", &input, "").await;
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(90));
    let log = pipeline.log_text();
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("weir run did not stop on a record it can never write; log:\n{log}")
    });
    assert!(!status.success(), "{log}");
    let named = format!("{}[0] offsets 4..=4", pipeline.source);
    assert!(log.contains(&named), "names the record ({named}):\n{log}");
    assert!(log.contains("limit of 1000000 bytes") && log.contains("message.max.bytes"), "{log}");
    assert!(!log.contains("recovering after back-off"), "not retried:\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sink_topics_max_message_bytes_is_checked_too() {
    let input = vec![RawRecord::value("v0"), RawRecord::value(big(30_000)), RawRecord::value("v1")];
    let pipeline = oversized("weir-topic-limit", "dead-letter", &input, "").await;
    // The sink topic exists already, with a limit below the producer's.
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("admin client");
    let topic = NewTopic::new(&pipeline.sink, 1, TopicReplication::Fixed(1)).set("max.message.bytes", "20000");
    let created = admin.create_topics(&[topic], &AdminOptions::new()).await.expect("create the sink topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");

    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 2, &[]);
    let output = read_raw(&pipeline.sink, 1, 2, RUN_TIMEOUT);
    assert_eq!(values(&output), vec![b"v0".to_vec(), b"v1".to_vec()]);
    let dead = read_raw(&pipeline.dead_letters, 1, 1, RUN_TIMEOUT);
    assert_eq!(dead.len(), 1);
    let error = String::from_utf8_lossy(header_value(&dead[0], "weir.error").expect("weir.error")).into_owned();
    let setting = format!("max.message.bytes = 20000 of topic `{}`", pipeline.sink);
    assert!(error.contains(&setting), "{error}");
}

/// A pipeline of misbehave under `on_error`, whose `store:<k>:<v>` words write state of those
/// sizes.
fn storing(prefix: &str, on_error: &str) -> TestPipeline {
    let mut spec = Spec::new("misbehave");
    spec.transform = format!("on_error = \"{on_error}\"");
    TestPipeline::new(prefix, &spec)
}

async fn produce_values(pipeline: &TestPipeline, values: &[&str]) {
    let input: Vec<_> = values.iter().map(|v| RawRecord::value(*v)).collect();
    produce_raw(&pipeline.source, &input, None).await;
}

/// The dead letters' `weir.error` headers.
fn dead_letter_errors(letters: &[ReadRecord]) -> Vec<String> {
    letters
        .iter()
        .map(|l| String::from_utf8_lossy(header_value(l, "weir.error").expect("weir.error")).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn state_writes_too_large_for_the_changelog_are_dead_lettered_and_the_rest_commits() {
    let pipeline = storing("weir-big-state", "dead-letter");
    // The largest value under a 1-byte key whose changelog record fits the producer's limit:
    // 36 bytes of record overhead, the entry byte, misbehave's state prefix
    // (`misbehave\0<topic>\0<partition: 4 bytes>\0`) and the key.
    let fits = PRODUCER_LIMIT - 36 - 1 - ("misbehave".len() + pipeline.source.len() + 7) - 1;
    // Too large by one byte of value; by its key (the value alone fits); then the largest that fits.
    let (over, by_key, exact) =
        (format!("store:1:{}", fits + 1), format!("store:{PRODUCER_LIMIT}:1"), format!("store:1:{fits}"));
    produce_values(&pipeline, &["v0", &over, "v1", &by_key, "v2", &exact, "v3"]).await;
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 5, &[]);

    let output = read_raw(&pipeline.sink, 1, 5, RUN_TIMEOUT);
    let stored = format!("stored 1:{fits}");
    let want: Vec<Vec<u8>> = ["v0", "v1", "v2", &stored, "v3"].map(|v| v.as_bytes().to_vec()).to_vec();
    assert_eq!(values(&output), want, "the other records commit, once, in order");
    let dead = read_raw(&pipeline.dead_letters, 1, 2, RUN_TIMEOUT);
    assert_eq!(dead.len(), 2, "each too-large write is dead-lettered once");
    let errors = dead_letter_errors(&dead);
    for ((letter, error), offset) in dead.iter().zip(&errors).zip([1, 3]) {
        assert!(error.contains("too large for the changelog") && error.contains("message.max.bytes"), "{error}");
        assert_eq!(header_value(letter, "weir.offset"), Some(offset.to_string().as_bytes()));
    }
    let over_by_one = format!("state value of key `k` is too large for the changelog: {} bytes", PRODUCER_LIMIT + 1);
    assert!(errors[0].contains(&over_by_one), "{}", errors[0]);
    assert!(errors[1].contains(&format!("… ({PRODUCER_LIMIT} bytes)")), "names the key's size: {}", errors[1]);

    // Through the broker: the value that fits exactly is in the changelog.
    let started = std::time::Instant::now();
    loop {
        let changelog = read_raw(&format!("{}-changelog", pipeline.name), 1, usize::MAX, Duration::from_secs(3));
        let exact_write = |r: &ReadRecord| {
            r.record.key.as_ref().is_some_and(|k| k.ends_with(b"\0k"))
                && r.record.value.as_ref().is_some_and(|v| v.len() == fits)
        };
        if changelog.iter().any(exact_write) {
            break;
        }
        assert!(started.elapsed() < RUN_TIMEOUT, "the changelog has no value of {fits} bytes under key `k`");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_state_write_too_large_under_fail_stops_the_pipeline_naming_record_limit_and_setting() {
    let too_large = format!("store:1:{PRODUCER_LIMIT}");
    let pipeline = storing("weir-big-state-fail", "fail");
    produce_values(&pipeline, &["v0", "v1", "v2", "v3", &too_large, "after"]).await;
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(90));
    let log = pipeline.log_text();
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("weir run did not stop on a state write it can never checkpoint; log:\n{log}")
    });
    assert!(!status.success(), "{log}");
    let named = format!("{}[0] offsets 4..=4", pipeline.source);
    assert!(log.contains(&named), "names the record ({named}):\n{log}");
    assert!(log.contains("state value of key `k` is too large for the changelog"), "{log}");
    assert!(log.contains("limit of 1000000 bytes") && log.contains("message.max.bytes"), "{log}");
    assert!(!log.contains("recovering after back-off"), "not retried:\n{log}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_changelog_topics_max_message_bytes_is_checked_too() {
    let pipeline = storing("weir-changelog-limit", "dead-letter");
    produce_values(&pipeline, &["v0", "store:1:30000", "v1"]).await;
    // The changelog topic exists already, with a limit below the producer's.
    let changelog = format!("{}-changelog", pipeline.name);
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("admin client");
    let topic = NewTopic::new(&changelog, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("max.message.bytes", "20000");
    let created = admin.create_topics(&[topic], &AdminOptions::new()).await.expect("create the changelog topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");

    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 2, &[]);
    let output = read_raw(&pipeline.sink, 1, 2, RUN_TIMEOUT);
    assert_eq!(values(&output), vec![b"v0".to_vec(), b"v1".to_vec()]);
    let dead = read_raw(&pipeline.dead_letters, 1, 1, RUN_TIMEOUT);
    assert_eq!(dead.len(), 1);
    let error = &dead_letter_errors(&dead)[0];
    let setting = format!("max.message.bytes = 20000 of topic `{changelog}`");
    assert!(error.contains("too large for the changelog") && error.contains(&setting), "{error}");
}

/// Creates `topic` (one partition) with `configs`.
async fn create_topic_with(topic: &str, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("admin client");
    let new = configs.iter().fold(NewTopic::new(topic, 1, TopicReplication::Fixed(1)), |t, (k, v)| t.set(k, v));
    let created = admin.create_topics(&[new], &AdminOptions::new()).await.expect("create the topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

/// Writes (key, value, timestamp) records to partition 0 of `topic`, in order.
fn produce_at(topic: &str, records: &[(Option<&str>, &str, i64)]) {
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
    let producer: ThreadedProducer<DefaultProducerContext> =
        ClientConfig::new().set("bootstrap.servers", bootstrap()).create().expect("producer");
    for (key, value, timestamp) in records {
        let mut record = BaseRecord::<str, str>::to(topic).partition(0).payload(*value).timestamp(*timestamp);
        record.key = *key;
        producer.send(record).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush the input");
}

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Kafka's "no bound" for the timestamp configs (`Long.MAX_VALUE`): the source takes any timestamp.
const UNBOUNDED: &str = "9223372036854775807";

/// A sink topic and a dead-letter topic that refuse timestamps more than an hour ahead or a week
/// behind, and records without a key (compacted); a source that takes any timestamp.
async fn refusing_topics(pipeline: &TestPipeline) {
    create_topic_with(&pipeline.source, &[("message.timestamp.after.max.ms", UNBOUNDED)]).await;
    let refusing = [
        ("message.timestamp.after.max.ms", "3600000"),
        ("message.timestamp.before.max.ms", "604800000"),
        ("cleanup.policy", "compact"),
    ];
    create_topic_with(&pipeline.sink, &refusing).await;
    create_topic_with(&pipeline.dead_letters, &refusing).await;
}

/// Records the sink topic's broker would refuse (issue 46 item 2): a timestamp two days ahead,
/// one thirty days behind, and no key into a compacted topic, between good records. Each is
/// dead-lettered, naming the topic's config; the dead-letter topic, which refuses the same, takes
/// the dead letters (the producer's clock for a refused timestamp, kept in `weir.timestamp`; a
/// key from the source position for a keyless record); the good records commit once, in order.
#[tokio::test(flavor = "multi_thread")]
async fn records_the_sink_topics_refuse_for_timestamp_or_key_are_dead_lettered_and_the_rest_commits() {
    let mut spec = Spec::new("passthrough");
    spec.transform = "on_error = \"dead-letter\"".into();
    let pipeline = TestPipeline::new("weir-refused-record", &spec);
    refusing_topics(&pipeline).await;
    let now = weir::now_ms();
    let (ahead, behind) = (now + 2 * DAY_MS, now - 30 * DAY_MS);
    let input = [
        (Some("k0"), "good-0", now),
        (Some("k1"), "ahead", ahead),
        (Some("k2"), "good-1", now),
        (Some("k3"), "behind", behind),
        (Some("k4"), "good-2", now),
        (None, "keyless", now),
        (Some("k6"), "good-3", now),
    ];
    produce_at(&pipeline.source, &input);
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, 4, &[]);

    let output = read_raw(&pipeline.sink, 1, 4, RUN_TIMEOUT);
    let want: Vec<Vec<u8>> = (0..4).map(|i| format!("good-{i}").into_bytes()).collect();
    assert_eq!(values(&output), want, "the good records commit, once, in order");
    let dead = read_raw(&pipeline.dead_letters, 1, 3, RUN_TIMEOUT);
    assert_eq!(values(&dead), [&b"ahead"[..], b"behind", b"keyless"], "each refused record is dead-lettered once");
    let errors = dead_letter_errors(&dead);
    let sink = format!("topic `{}`", pipeline.sink);
    for (error, setting) in
        errors.iter().zip(["message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "compacted"])
    {
        assert!(error.contains(&sink) && error.contains(setting), "names the topic and {setting}: {error}");
    }
    for (letter, (offset, timestamp)) in dead.iter().zip([(1, ahead), (3, behind)]) {
        assert_eq!(header_value(letter, "weir.offset"), Some(offset.to_string().as_bytes()));
        assert_eq!(
            header_value(letter, "weir.timestamp"),
            Some(timestamp.to_string().as_bytes()),
            "the input's timestamp is kept"
        );
    }
    let position = format!("{}/0/5", pipeline.source);
    assert_eq!(
        dead[2].record.key.as_deref(),
        Some(position.as_bytes()),
        "a keyless dead letter is keyed by its position"
    );
}

/// Under `on_error = "fail"`, a record the sink topic refuses stops the pipeline before anything of
/// its epoch commits, naming the record's source position, the sink topic and the broker's rule;
/// it is not retried.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_the_sink_topic_refuses_under_fail_stops_the_pipeline_naming_position_topic_and_reason() {
    let mut spec = Spec::new("passthrough");
    spec.transform = "on_error = \"fail\"".into();
    let pipeline = TestPipeline::new("weir-refused-fail", &spec);
    refusing_topics(&pipeline).await;
    let now = weir::now_ms();
    let input: Vec<_> =
        (0..4).map(|_| (Some("k"), "good", now)).chain([(Some("k"), "ahead", now + 2 * DAY_MS)]).collect();
    produce_at(&pipeline.source, &input);
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, Duration::from_secs(90));
    let log = pipeline.log_text();
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("weir run did not stop on a record the sink refuses; log:\n{log}")
    });
    assert!(!status.success(), "{log}");
    let named = format!("{}[0] offsets 4..=4", pipeline.source);
    assert!(log.contains(&named), "names the record ({named}):\n{log}");
    let rule = format!("topic `{}`'s message.timestamp.after.max.ms = 3600000", pipeline.sink);
    assert!(log.contains(&rule), "names the topic and its rule:\n{log}");
    assert!(!log.contains("recovering after back-off"), "not retried:\n{log}");
}
