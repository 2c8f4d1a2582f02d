//! The command-line tools on awkward input (issue 12, case 8): `weir consume` shows records
//! faithfully, no command panics when its stdout is closed, and `weir run` says on SIGTERM
//! whether it committed anything.

use std::ffi::OsStr;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use weir_tests::admin::{listed_partitions, open_transaction_in};
use weir_tests::pipeline::{Reader, Spec, TestPipeline, signal};
use weir_tests::records::{RawRecord, produce_raw, weir_consume as consume};
use weir_tests::{Isolation, bootstrap, flights_zip, plugin, run_weir, unique_name, weir_binary};

/// A topic holding one record of every kind `weir consume` must show faithfully.
async fn awkward_topic() -> String {
    let topic = unique_name("weir-consume");
    let first = RawRecord {
        key: Some(vec![0xff, 0x00]),
        value: Some(vec![0x80, 0x81]),
        headers: vec![
            (vec![0xc3, 0x28], Some(b"x".to_vec())),
            (b"dup".to_vec(), Some(b"1".to_vec())),
            (b"a".to_vec(), None),
            (b"dup".to_vec(), Some(b"2".to_vec())),
            (b"e".to_vec(), Some(Vec::new())),
        ],
    };
    let second = RawRecord { key: Some(b"k".to_vec()), ..RawRecord::value(r#"{"b": 1, "a": 2}"#) };
    produce_raw(&topic, &[first, second], Some(1_600_000_000_000)).await;
    topic
}

#[tokio::test(flavor = "multi_thread")]
async fn consume_shows_headers_in_order_null_apart_from_empty_and_bytes_losslessly() {
    let topic = awkward_topic().await;
    let lines = consume(&topic, 2);
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0],
        json!({
            "partition": 0,
            "offset": 0,
            "timestamp": 1_600_000_000_000_i64,
            "timestamp_type": "create_time",
            "key_base64": "/wA=",
            "value_base64": "gIE=",
            "headers": [
                {"key_base64": "wyg=", "value": "x"},
                {"key": "dup", "value": "1"},
                {"key": "a", "value": null},
                {"key": "dup", "value": "2"},
                {"key": "e", "value": ""},
            ],
        })
    );
    // A JSON value is shown as its exact text, not re-serialised.
    assert_eq!(lines[1]["value"], json!(r#"{"b": 1, "a": 2}"#));
    assert_eq!((&lines[1]["key"], &lines[1]["headers"]), (&json!("k"), &json!([])));
}

/// Runs `weir` with `args` writing to a pipe whose reader is already closed, so that its
/// first write to stdout fails with EPIPE; checks it exits cleanly without a panic.
fn with_closed_stdout(args: &[&OsStr]) {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let output =
        Command::new(weir_binary()).args(args).stdout(writer).stderr(Stdio::piped()).output().expect("run weir");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked on a closed stdout: {stderr}");
    assert!(output.status.success(), "{args:?} exited with {}: {stderr}", output.status);
}

#[test]
fn transform_commands_stop_quietly_when_stdout_is_closed() {
    let wasm = plugin("passthrough");
    with_closed_stdout(&[OsStr::new("transform"), OsStr::new("check"), wasm.as_os_str()]);
    let zip = flights_zip();
    let run = ["transform", "run"].map(OsStr::new);
    let rest = [OsStr::new("--input"), zip.as_os_str(), OsStr::new("--limit"), OsStr::new("1000")];
    with_closed_stdout(&[&run[..], &[wasm.as_os_str()][..], &rest[..]].concat());
}

#[tokio::test(flavor = "multi_thread")]
async fn consume_stops_quietly_when_stdout_is_closed() {
    let topic = awkward_topic().await;
    let brokers = bootstrap();
    let args = ["consume", "--topic", topic.as_str(), "--from-beginning", "--max", "2", "--brokers", brokers.as_str()];
    with_closed_stdout(&args.map(OsStr::new));
}

/// A pipeline whose first epoch only ends at shutdown (a checkpoint interval of 500 s).
fn slow_pipeline(prefix: &str) -> TestPipeline {
    let mut spec = Spec::new("passthrough");
    spec.sink = "transaction_timeout_ms = 600000".into();
    spec.checkpoint = "interval_ms = 500000\ntimeout_ms = 10000".into();
    TestPipeline::new(prefix, &spec)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_an_empty_epoch_does_not_claim_a_commit() {
    let pipeline = slow_pipeline("weir-term-empty");
    weir_tests::create_topic(&pipeline.source, 1).await;
    let mut child = pipeline.spawn(&[]);
    // Wait until the runner has started (it logs `recovered` before its first poll).
    let started = std::time::Instant::now();
    while !pipeline.log_text().contains("recovered") {
        assert!(started.elapsed() < Duration::from_secs(60), "not started; log:\n{}", pipeline.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    let log = pipeline.log_text();
    assert!(status.success(), "{log}");
    assert!(!log.contains("stopped after committing the open epoch"), "{log}");
    assert!(log.contains("nothing to commit"), "{log}");
}

/// Starts [`slow_pipeline`] on 10 records and waits until its sink holds them, uncommitted.
async fn running_with_records_written(prefix: &str) -> (TestPipeline, std::process::Child) {
    let pipeline = slow_pipeline(prefix);
    let input: Vec<_> = (0..10).map(|i| RawRecord::value(format!("v{i}"))).collect();
    produce_raw(&pipeline.source, &input, None).await;
    let child = pipeline.spawn(&[]);
    let mut open = Reader::new(&pipeline.sink, 1, Isolation::ReadUncommitted);
    assert_eq!(open.read_until(10, Duration::from_secs(60)), 10, "log:\n{}", pipeline.log_text());
    (pipeline, child)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_records_in_the_open_epoch_commits_and_says_so() {
    // The records are in the open epoch once a read_uncommitted reader sees them and a
    // read_committed one does not.
    let (pipeline, mut child) = running_with_records_written("weir-term-full").await;
    let mut committed = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    let log = pipeline.log_text();
    assert_eq!(committed.drain(Duration::from_secs(1)), 0, "the records must still be in the open epoch; log:\n{log}");
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    let log = pipeline.log_text();
    assert!(status.success(), "{log}");
    assert!(log.contains("stopped after committing the open epoch"), "{log}");
    assert_eq!(committed.read_until(10, Duration::from_secs(30)), 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn txn_abort_refuses_a_running_instance_and_aborts_a_killed_ones_transaction() {
    let (pipeline, mut child) = running_with_records_written("weir-txn-abort").await;
    assert!(open_transaction_in(&pipeline.sink, 1), "the records are in the open epoch");
    let brokers = bootstrap();
    let abort = |force: bool| {
        let mut args = vec!["txn", "abort", "--prefix", &pipeline.name, "--brokers", &brokers];
        args.extend(force.then_some("--force"));
        weir_tests::run_weir(&args.iter().map(OsStr::new).collect::<Vec<_>>())
    };

    let (ok, _, stderr) = abort(false);
    assert!(!ok && stderr.contains("members of consumer group") && stderr.contains("--force"), "{stderr}");
    assert!(child.try_wait().expect("try_wait").is_none(), "the running pipeline goes on");
    assert!(open_transaction_in(&pipeline.sink, 1), "its transaction is untouched");

    // Killed, the process leaves its transaction open and stays a member until its session
    // times out: --force aborts the transaction.
    signal(&child, "KILL");
    child.wait().expect("wait");
    let (ok, stdout, stderr) = abort(true);
    assert!(ok && stdout.contains("fenced"), "{stdout}{stderr}");
    assert!(!open_transaction_in(&pipeline.sink, 1), "the killed process's transaction was aborted");
    let mut committed = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    assert_eq!(committed.drain(Duration::from_secs(1)), 0, "none of it was committed");
}

/// A JSON lines file whose first record lacks a `--key` field (a typo) is refused before
/// anything reaches the broker: no record, and no topic either.
#[test]
fn produce_refuses_a_misspelt_key_field_before_creating_the_topic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flights.jsonl");
    std::fs::write(&file, "\u{feff}{\"origin\":\"EWR\",\"carrier\":\"UA\"}\n{\"origin\":\"JFK\"}\n").unwrap();
    let topic = unique_name("weir-produce-key");
    let produce = |key: &str| {
        run_weir(&[
            OsStr::new("produce"),
            OsStr::new("--topic"),
            OsStr::new(&topic),
            OsStr::new("--key"),
            OsStr::new(key),
            OsStr::new("--brokers"),
            OsStr::new(&bootstrap()),
            file.as_os_str(),
        ])
    };
    let (ok, _, stderr) = produce("origin,carier");
    assert!(!ok && stderr.contains("key field \"carier\" is not a field of the first record"), "{stderr}");
    assert_eq!(listed_partitions(&topic), None, "no topic was created");

    let (ok, stdout, stderr) = produce("origin,carrier");
    assert!(ok && stdout.contains("wrote 2 records"), "{stdout}{stderr}");
    assert!(listed_partitions(&topic).is_some());
    let mut keys: Vec<String> =
        consume(&topic, 2).iter().map(|r| r["key"].as_str().unwrap_or_default().to_owned()).collect();
    keys.sort();
    assert_eq!(keys, ["EWR|UA", "JFK|"], "the byte order mark is not part of the first key");
}

/// A `--timeout` shorter than the consumer takes to find its positions still reads what the
/// topic holds: the idle clock starts once every partition was read to its end.
#[tokio::test(flavor = "multi_thread")]
async fn consume_with_a_short_timeout_reads_what_the_topic_holds() {
    let topic = unique_name("weir-consume-short");
    let records: Vec<RawRecord> = (0..3).map(|i| RawRecord::value(format!("r{i}"))).collect();
    produce_raw(&topic, &records, None).await;
    let output = Command::new(weir_binary())
        .args(["consume", "--topic", &topic, "--from-beginning", "--timeout", "0.05", "--brokers", &bootstrap()])
        .output()
        .expect("run weir consume");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 3, "{stderr}");
}

/// Runs `weir` with `args`; returns its exit code, stdout and stderr.
fn weir_exit(args: &[&OsStr]) -> (Option<i32>, String, String) {
    let output = Command::new(weir_binary()).args(args).output().expect("run weir");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// `weir validate` accepts the examples' pipeline files and sums each up in one line. They name
/// their components relative to the repository's `target/plugins`; a copy names where
/// `scripts/build-plugins.sh` put them.
#[test]
fn validate_accepts_the_example_pipelines() {
    let dir = tempfile::tempdir().unwrap();
    for (example, component, summary) in [
        ("flights", "flight-delays", "flight-delays: source flights → operators flight-delays → sink flight-delays"),
        (
            "flights-hourly",
            "flights-hourly",
            "flights-hourly: source flights-by-origin → operators flights-hourly → sink flights-hourly, late: \
             flights-hourly-late",
        ),
        (
            "flights-weather",
            "flights-weather",
            "flights-weather: source flights → operators flights-weather → sink flights-weather",
        ),
    ] {
        let text = std::fs::read_to_string(weir_tests::repo_root().join(format!("examples/{example}/pipeline.toml")))
            .expect("example pipeline file");
        let wasm = format!("../../target/plugins/{component}.wasm");
        assert!(text.contains(&wasm), "{example} names {wasm}");
        let file = dir.path().join(format!("{example}.toml"));
        std::fs::write(&file, text.replace(&wasm, &plugin(component).display().to_string())).unwrap();
        let (code, stdout, stderr) = weir_exit(&[OsStr::new("validate"), file.as_os_str()]);
        assert_eq!(code, Some(0), "{example}: {stderr}");
        let expected = format!("{}: valid: pipeline {summary} (exactly-once)\n", file.display());
        assert_eq!(stdout, expected);
    }
}

/// A file with many kinds of mistakes gets every one of them reported at once, each naming its
/// key and line, in the order of the file, and exit status 1.
#[test]
fn validate_reports_every_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let file = dir.path().join("pipeline.toml");
    std::fs::write(
        &file,
        r#"name = "bad pipeline"

[source]
brokers = "127.0.0.1:9092"
topics = ["in"]
batch_size = "many"
strat = "latest"

[[transforms]]
name = "missing"
wasm = "missing.wasm"

[[transforms]]
name = "core"
wasm = "core.wasm"

[sink]
topic = "in"
producer_slots = 1
"#,
    )
    .unwrap();
    let (code, stdout, stderr) = weir_exit(&[OsStr::new("validate"), file.as_os_str()]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.starts_with(&format!("error: invalid pipeline file {}: 7 errors:\n", file.display())), "{stderr}");
    let expected = [
        ("`name` (line 1)", "must be 1 to 200 characters"),
        ("`source.batch_size` (line 6)", "invalid type: string \"many\", expected usize"),
        ("`source.strat` (line 7)", "unknown key; did you mean `start`?"),
        ("`transforms[0].wasm` (line 11)", "cannot read transform"),
        ("`transforms[1].wasm` (line 15)", "core WebAssembly module, not a component"),
        ("`sink.topic` (line 18)", "read its own output back"),
        ("`sink.producer_slots` (line 19)", "must be within 2..=16"),
    ];
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("  - ")).collect();
    assert_eq!(lines.len(), expected.len(), "{stderr}");
    for (line, (key, message)) in lines.iter().zip(expected) {
        assert!(line.starts_with(&format!("  - {key}: ")) && line.contains(message), "{key} {message:?}: {line}");
    }
    // What to do: the missing file says how to fix it, the module how to look at it.
    assert!(
        lines[3].contains(&*dir.path().join("missing.wasm").to_string_lossy()) && lines[3].contains("fix the path")
    );
    assert!(lines[4].contains("weir transform check"), "{}", lines[4]);

    // A file that is not TOML: its syntax errors, nothing else.
    std::fs::write(&file, "name = [\n").unwrap();
    let (code, _, stderr) = weir_exit(&[OsStr::new("validate"), file.as_os_str()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("TOML parse error at line 1"), "{stderr}");
    // No file at all.
    let (code, _, stderr) = weir_exit(&[OsStr::new("validate"), dir.path().join("none.toml").as_os_str()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot read pipeline file") && stderr.contains("none.toml"), "{stderr}");
}

/// `weir status --output json` prints one JSON object; `--json`, its old spelling, the same.
#[tokio::test(flavor = "multi_thread")]
async fn status_prints_one_json_object_with_output_json_and_json() {
    let pipeline = TestPipeline::new("weir-status-output", &Spec::new("passthrough"));
    weir_tests::create_topic(&pipeline.source, 2).await;
    let status = |format: &[&str]| {
        let mut args = vec![OsStr::new("status")];
        args.extend(format.iter().map(OsStr::new));
        args.push(pipeline.file.as_os_str());
        let (code, stdout, stderr) = weir_exit(&args);
        assert_eq!(code, Some(0), "{format:?}: {stderr}");
        stdout
    };
    for format in [&["--output", "json"][..], &["-o", "json"], &["--json"]] {
        let json: serde_json::Value = serde_json::from_str(&status(format)).expect("one JSON document");
        assert_eq!(json["pipeline"], pipeline.name.as_str(), "{format:?}");
        assert_eq!(json["committed_checkpoint"], 0, "{format:?}");
        assert_eq!(json["partitions"].as_array().map(Vec::len), Some(2), "{format:?}");
    }
    let table = status(&["--output", "table"]);
    assert!(table.contains("last committed checkpoint: 0\n"), "{table}");
    assert_eq!(table, status(&[]), "table is the default");
}
