//! The Python, JavaScript and Go SDKs behave like the Rust one: their flight-delays ports
//! (plugins-polyglot/, built by scripts/build-polyglot.sh) give byte-identical output to the Rust
//! plugin through `weir transform run` and through an exactly-once pipeline on the broker, their
//! flights-hourly ports close the same event-time windows and send the same late flights aside,
//! and their runtimes get no file, socket or environment (tests/guests/sandbox-*).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::Duration;

use weir::{ErrorKind, InputRecord, OperatorLimits, OutputRecord};
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, keyed, produce, run_to_completion};
use weir_tests::{
    Isolation, flight_rows, flights_zip, input_records, operator_with, operator_with_outputs, plugin, run_weir,
};

/// The Rust reference first, then the ports.
const FLIGHT_DELAYS: [&str; 4] = ["flight-delays", "flight-delays-py", "flight-delays-js", "flight-delays-go"];
/// The JavaScript runtime (SpiderMonkey) needs more than the default 64 MiB.
const MEMORY_LIMIT_MB: &str = "128";

/// An output record's key and value, as text.
type KeyValue = (Option<String>, Option<String>);

/// `weir transform run` of `plugin` over the first `limit` flights; its stdout lines.
fn transform_run(plugin_name: &str, limit: u64, memory_limit_mb: &str) -> Vec<String> {
    let limit = limit.to_string();
    let (wasm, input) = (plugin(plugin_name), flights_zip());
    let args: Vec<&OsStr> = vec![
        "transform".as_ref(),
        "run".as_ref(),
        wasm.as_os_str(),
        "--input".as_ref(),
        input.as_os_str(),
        "--key".as_ref(),
        "origin,carrier".as_ref(),
        "--limit".as_ref(),
        limit.as_ref(),
        "--memory-limit-mb".as_ref(),
        memory_limit_mb.as_ref(),
    ];
    let (ok, stdout, stderr) = run_weir(&args);
    assert!(ok, "weir transform run {plugin_name} failed:\n{stderr}");
    stdout.lines().map(str::to_owned).collect()
}

/// Asserts `got` equals the Rust plugin's `want`, naming the first differing output.
fn assert_same_outputs(port: &str, got: &[String], want: &[String]) {
    if let Some(i) = (0..got.len().min(want.len())).find(|&i| got[i] != want[i]) {
        panic!("{port} output {i} differs from Rust's:\n  {port}: {}\n  rust: {}", got[i], want[i]);
    }
    assert_eq!(got.len(), want.len(), "{port} wrote {} outputs, Rust {}", got.len(), want.len());
}

#[test]
fn every_port_gives_the_rust_plugins_output_over_20000_flights() {
    let rust = transform_run(FLIGHT_DELAYS[0], 20_000, MEMORY_LIMIT_MB);
    assert_eq!(rust.len(), 20_000);
    for port in &FLIGHT_DELAYS[1..] {
        assert_same_outputs(port, &transform_run(port, 20_000, MEMORY_LIMIT_MB), &rust);
    }
}

/// componentize-py never frees what it lowers into guest memory (about 390 bytes per flight), so
/// 20,000 flights do not fit a 16 MiB instance. `weir transform run` snapshots every 16 batches,
/// and the operator recycles an instance past half its limit after a snapshot.
#[test]
fn a_leaking_python_instance_is_recycled_after_snapshots() {
    let rust = transform_run(FLIGHT_DELAYS[0], 20_000, MEMORY_LIMIT_MB);
    assert_same_outputs("flight-delays-py at 16 MiB", &transform_run("flight-delays-py", 20_000, "16"), &rust);
}

/// One flight-delays pipeline per language over the same 20,000 flights, exactly-once; the
/// committed output bytes of each partition are the Rust pipeline's.
#[tokio::test(flavor = "multi_thread")]
async fn every_port_runs_exactly_once_on_the_broker_like_rust() {
    const PARTITIONS: i32 = 4;
    let input = keyed(&flight_rows(20_000));
    let mut outputs = Vec::new();
    for name in FLIGHT_DELAYS {
        let spec = Spec {
            transform: format!("memory_limit_mb = {MEMORY_LIMIT_MB}\ndeadline_ms = 10000"),
            checkpoint: "interval_ms = 500\ntimeout_ms = 30000".into(),
            ..Spec::new(name)
        };
        let pipeline = TestPipeline::new(&format!("weir-{name}"), &spec);
        produce(&pipeline.source, PARTITIONS, &input).await;
        let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
        run_to_completion(&pipeline, &mut reader, input.len(), &[]);
        reader.drain(Duration::from_secs(2));
        let mut by_partition: BTreeMap<i32, Vec<KeyValue>> = BTreeMap::new();
        for record in reader.records {
            by_partition.entry(record.partition).or_default().push((record.key, record.value));
        }
        outputs.push((name, by_partition));
    }
    let (_, rust) = &outputs[0];
    assert_eq!(
        rust.values().map(Vec::len).sum::<usize>(),
        input.len(),
        "the Rust pipeline wrote one output per flight"
    );
    for (port, got) in &outputs[1..] {
        for (partition, want) in rust {
            let got = got.get(partition).map_or(&[][..], Vec::as_slice);
            let render = |records: &[KeyValue]| records.iter().map(|(k, v)| format!("{k:?} {v:?}")).collect::<Vec<_>>();
            assert_same_outputs(&format!("{port} partition {partition}"), &render(got), &render(want));
        }
    }
}

/// The flights-hourly ports' windows (SDK windows helpers on timers) close exactly the Rust
/// plugin's hours, with the same output bytes and timestamps, and send the same flights to the
/// late output: 20,000 flights in file order (by day, but out of time order within a day), event
/// time `time_hour`, a watermark 12 hours behind the latest hour read (so a fifth of the flights
/// arrive late for their hour), batches of 256 and due timers fired after each, as a task does.
#[test]
fn every_flights_hourly_port_closes_the_rust_plugins_windows() {
    const BOUND_MS: i64 = 12 * 3_600_000;
    let mut records = input_records("flights", &flight_rows(20_000));
    let mut latest = None;
    for record in &mut records {
        let value: serde_json::Value = serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
        let time_hour = value["time_hour"].as_str().unwrap();
        record.event_time = weir::parse_rfc3339(time_hour).unwrap_or_else(|| panic!("time_hour {time_hour}"));
        record.watermark = latest.map(|l: i64| l - BOUND_MS - 1);
        latest = latest.max(Some(record.event_time));
    }
    let limits =
        OperatorLimits { memory_bytes: 128 << 20, deadline: Duration::from_secs(10), ..OperatorLimits::default() };
    let run = |name: &str| {
        let mut operator = operator_with_outputs(name, &[("late_output", "late")], limits.clone(), &["late"]);
        let mut lines = Vec::new();
        let fire = |operator: &mut weir::Operator, watermark: i64, lines: &mut Vec<String>| {
            operator.set_watermark(Some(watermark));
            loop {
                let due = operator.due_timers(i64::MIN).unwrap();
                if due.is_empty() {
                    break;
                }
                lines.extend(operator.on_timer(&due).unwrap().to_records().iter().map(render));
            }
        };
        for batch in records.chunks(256) {
            lines.extend(operator.process(batch).unwrap_or_else(|e| panic!("{name}: {e}")).iter().map(render));
            let last = batch.last().unwrap();
            fire(&mut operator, last.watermark.unwrap_or(i64::MIN).max(last.event_time - BOUND_MS - 1), &mut lines);
        }
        fire(&mut operator, i64::MAX, &mut lines);
        lines
    };
    let rust = run("flights-hourly");
    let late = rust.iter().filter(|l| l.starts_with("late ")).count();
    assert!(late > 1_000 && rust.len() - late > 500, "{late} late flights, {} hours", rust.len() - late);
    for port in ["flights-hourly-py", "flights-hourly-js", "flights-hourly-go"] {
        assert_same_outputs(port, &run(port), &rust);
    }
}

/// An output as one line: its sink output (`-` for the default one), timestamp, key and value.
fn render(output: &OutputRecord) -> String {
    fn text(bytes: &Option<Vec<u8>>) -> Option<std::borrow::Cow<'_, str>> {
        bytes.as_deref().map(String::from_utf8_lossy)
    }
    let sink = output.output.as_deref().unwrap_or("-");
    format!("{sink} {:?} {:?} {:?}", output.timestamp, text(&output.key), text(&output.value))
}

fn probe(offset: i64, word: &str) -> InputRecord {
    InputRecord {
        key: None,
        value: Some(word.as_bytes().to_vec()),
        headers: Vec::new(),
        timestamp: 0,
        topic: "sandbox".into(),
        partition: 0,
        offset,
        event_time: 0,
        watermark: None,
    }
}

fn text(outputs: &[OutputRecord]) -> String {
    String::from_utf8_lossy(outputs[0].value.as_deref().unwrap_or_default()).into_owned()
}

/// Each runtime's own file and socket APIs fail inside the guest, and it sees no environment.
/// The answers are whatever the runtime reports for the host's refusal (see tests/guests).
#[test]
fn every_runtime_is_refused_files_sockets_and_environment() {
    let limits =
        OperatorLimits { memory_bytes: 128 << 20, deadline: Duration::from_secs(10), ..OperatorLimits::default() };
    let expected = [
        // CPython: open() finds no preopened directory; the socket is denied by wasi:sockets.
        ("sandbox-py", "open-file: err: FileNotFoundError", "connect: err: PermissionError"),
        // Go's wasip1 port: no preopen; net.Dial goes to Go's in-process network, which has no
        // listener (preview1 has no socket calls to make).
        ("sandbox-go", "open-file: err: open /etc/passwd", "connect: err: dial tcp 127.0.0.1:9092"),
    ];
    for (name, file, socket) in expected {
        let mut operator = operator_with(name, &[], limits.clone());
        let answer = |operator: &mut weir::Operator, offset, word| {
            text(&operator.process(&[probe(offset, word)]).unwrap_or_else(|e| panic!("{name} {word}: {e}")))
        };
        assert!(answer(&mut operator, 0, "open-file").starts_with(file), "{name}");
        assert!(answer(&mut operator, 1, "connect").starts_with(socket), "{name}");
        assert_eq!(answer(&mut operator, 2, "env"), "env: 0", "{name}");
        assert_eq!(answer(&mut operator, 3, "hello"), "hello", "{name}");
    }

    // StarlingMonkey has no file or socket API; its only I/O, fetch, traps without wasi:http
    // (which the host does not grant), and the next call runs on a fresh instance.
    let mut operator = operator_with("sandbox-js", &[], limits);
    for (offset, word) in [(0, "open-file"), (1, "connect")] {
        let error = operator.process(&[probe(offset, word)]).expect_err("fetch fails the call");
        assert!(matches!(error.kind, ErrorKind::Trap { .. }), "sandbox-js {word}: {error}");
    }
    assert_eq!(text(&operator.process(&[probe(2, "env")]).unwrap()), "env: 0");
    assert_eq!(text(&operator.process(&[probe(3, "hello")]).unwrap()), "hello");
}

/// A failure the transform did not mean — a Rust panic, a Python exception that is not a
/// TransformError, a JavaScript TypeError, a Go runtime panic — and exiting the process
/// (`std::process::exit`, `sys.exit`, `os.Exit`) are reported with what failed, its message and
/// the record's offset (the host only knows the batch's offsets: 10..=12 here).
#[test]
fn every_language_names_an_unexpected_failure_and_its_offset() {
    let limits =
        OperatorLimits { memory_bytes: 128 << 20, deadline: Duration::from_secs(10), ..OperatorLimits::default() };
    type Expected<'a> = &'a dyn Fn(&ErrorKind) -> bool;
    let cases: [(&str, &str, Expected); 7] = [
        (
            "misbehave",
            "panic",
            &|k| matches!(k, ErrorKind::GuestPanic { message } if message.contains("misbehave: panic at offset 11") && message.contains("record offset 11")),
        ),
        // exit(3): WASI 0.2's exit carries only success or failure.
        ("misbehave", "exit", &|k| matches!(k, ErrorKind::Exit { status: 1 })),
        (
            "sandbox-py",
            "raise",
            &|k| matches!(k, ErrorKind::Guest { message, offset: Some(11) } if message.starts_with("uncaught ZeroDivisionError: division by zero (sandbox.py:")),
        ),
        (
            "sandbox-py",
            "exit",
            &|k| matches!(k, ErrorKind::Guest { message, offset: Some(11) } if message.starts_with("uncaught SystemExit: 3")),
        ),
        (
            "sandbox-js",
            "raise",
            &|k| matches!(k, ErrorKind::Guest { message, offset: Some(11) } if message.starts_with("uncaught TypeError: ") && message.contains("null")),
        ),
        (
            "sandbox-go",
            "raise",
            &|k| matches!(k, ErrorKind::Guest { message, offset: Some(11) } if message == "uncaught panic: runtime error: index out of range [0] with length 0"),
        ),
        ("sandbox-go", "exit", &|k| matches!(k, ErrorKind::Exit { status: 1 })),
    ];
    for (guest, word, expected) in cases {
        let mut operator = operator_with(guest, &[], limits.clone());
        let error =
            operator.process(&[probe(10, "hello"), probe(11, word), probe(12, "hello")]).expect_err("the batch fails");
        assert!(expected(&error.kind), "{guest} {word}: {:?}", error.kind);
        assert!(error.to_string().contains("offsets 10..=12"), "{error}");
        assert_eq!(text(&operator.process(&[probe(13, "hello")]).unwrap()), "hello", "{guest} carries on");
    }
}

/// `weir transform run` prints the same: the exception or panic, its message and the offset.
#[test]
fn transform_run_names_a_polyglot_exception_and_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("words.jsonl");
    std::fs::write(&input, "\"hello\"\n\"raise\"\n").unwrap();
    for (guest, expected) in [
        ("sandbox-py", "uncaught ZeroDivisionError: division by zero (sandbox.py:"),
        ("sandbox-go", "uncaught panic: runtime error: index out of range [0] with length 0"),
    ] {
        let wasm = plugin(guest);
        let args: [&OsStr; 7] = [
            "transform".as_ref(),
            "run".as_ref(),
            wasm.as_os_str(),
            "--input".as_ref(),
            input.as_os_str(),
            "--memory-limit-mb".as_ref(),
            MEMORY_LIMIT_MB.as_ref(),
        ];
        let (ok, _, stderr) = run_weir(&args);
        assert!(!ok, "{guest}");
        assert!(stderr.contains(expected) && stderr.contains("(at offset 1)"), "{guest}:\n{stderr}");
    }
}

/// The case: Python over many flights on one partition with a long checkpoint interval.
/// componentize-py leaks about 390 bytes per flight, so one epoch of 170,000 flights (≈ 63 MiB)
/// outgrows the default 64 MiB instance (which starts at 13.6 MiB) long before the first
/// checkpoint (60 s). The operator recycles the instance when it nears its limit, mid-epoch, and
/// the committed output is still exact. Before, every attempt hit the limit (after 151,040
/// flights) and the pipeline looped in recovery.
#[tokio::test(flavor = "multi_thread")]
async fn a_leaking_python_instance_is_recycled_within_a_long_epoch() {
    let rows = flight_rows(170_000);
    let spec = Spec {
        transform: "deadline_ms = 10000".into(),
        sink: "transaction_timeout_ms = 120000".into(),
        checkpoint: "interval_ms = 60000\ntimeout_ms = 30000".into(),
        ..Spec::new("flight-delays-py")
    };
    let pipeline = TestPipeline::new("weir-py-leak", &spec);
    produce(&pipeline.source, 1, &keyed(&rows)).await;
    let mut child = pipeline.spawn(&[]);
    // Every flight processed within the open epoch (seen uncommitted), then SIGTERM commits it.
    let mut open = Reader::new(&pipeline.sink, 1, Isolation::ReadUncommitted);
    let seen = open.read_until(rows.len(), RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    let log = pipeline.log_text();
    assert!(seen >= rows.len() && status.success(), "{seen} outputs, {status}; log:\n{log}");
    let recycled = log.find("snapshotting and recycling it").unwrap_or_else(|| panic!("no recycle; log:\n{log}"));
    // Checkpoint 1 only fixes the start position; checkpoint 2 closes the epoch with the input.
    let first_with_input = log.match_indices("checkpoint committed").nth(1).map_or(usize::MAX, |(at, _)| at);
    assert!(recycled < first_with_input, "the instance was recycled within the first epoch with input; log:\n{log}");
    assert!(!log.contains("recovering after back-off"), "no attempt failed; log:\n{log}");

    let mut committed = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    committed.read_until(rows.len(), RUN_TIMEOUT);
    committed.drain(Duration::from_secs(2));
    let verdict = weir_tests::flights::verify(&rows, &committed.records, 15);
    assert!(verdict.is_exactly_once(), "{verdict:?}");
}
