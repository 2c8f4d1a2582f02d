//! The Python, JavaScript and Go SDKs behave like the Rust one: their flight-delays ports
//! (plugins-polyglot/, built by scripts/build-polyglot.sh) give byte-identical output to the Rust
//! plugin through `weir transform run` and through an exactly-once pipeline on the broker, and
//! their runtimes get no file, socket or environment (tests/guests/sandbox-*).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::time::Duration;

use weir::wasm::{ErrorKind, InputRecord, OperatorLimits, OutputRecord};
use weir_tests::pipeline::{Reader, Spec, TestPipeline, keyed, produce, run_to_completion};
use weir_tests::{Isolation, flight_rows, flights_zip, operator_with, plugin, run_weir};

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

fn probe(offset: i64, word: &str) -> InputRecord {
    InputRecord {
        key: None,
        value: Some(word.as_bytes().to_vec()),
        headers: Vec::new(),
        timestamp: 0,
        topic: "sandbox".into(),
        partition: 0,
        offset,
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
        let answer = |operator: &mut weir::wasm::Operator, offset, word| {
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
