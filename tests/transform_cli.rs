//! `weir transform check` and `weir transform run`, as a user runs them.

use std::ffi::OsStr;
use std::path::Path;

use weir_tests::{flights_zip, plugin, run_weir};

fn check(path: &Path) -> (bool, String, String) {
    run_weir(&[OsStr::new("transform"), OsStr::new("check"), path.as_os_str()])
}

#[test]
fn check_describes_a_valid_component_of_either_contract_version() {
    for (plugin_name, version) in [("flight-delays", "0.2.0"), ("contract-0-1", "0.1.0")] {
        let (ok, stdout, stderr) = check(&plugin(plugin_name));
        assert!(ok, "{stderr}");
        assert!(stdout.contains(&format!("weir:transform@{version} component")), "{stdout}");
        let state = format!("weir:transform/state@{version}");
        for name in ["process (func)", "init (func)", "snapshot (func)", "restore (func)", state.as_str()] {
            assert!(stdout.contains(name), "missing {name} in:\n{stdout}");
        }
        // The Rust SDK builds the packed-transform world, which the host calls through it.
        let packed = stdout.contains("weir:transform/packed@0.2.0 (instance)");
        assert_eq!(packed, plugin_name == "flight-delays", "{stdout}");
    }
}

#[test]
fn check_rejects_bad_files_with_one_line_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(plugin("passthrough")).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    let cases = [
        (write("core.wasm", b"\0asm\x01\0\0\0"), "core WebAssembly module, not a component"),
        (write("random.wasm", &[0x5a; 300]), "not a WebAssembly file"),
        (write("truncated.wasm", &good[..good.len() / 2]), "not a valid WebAssembly component"),
        (plugin("wrong-version"), "built against weir:transform@1.0.0"),
        (plugin("other-world"), "not a weir:transform component"),
        (dir.path().join("missing.wasm"), "cannot read transform"),
    ];
    for (path, expected) in cases {
        let (ok, _, stderr) = check(&path);
        assert!(!ok, "{} was accepted", path.display());
        let lines: Vec<_> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert_eq!(lines.len(), 1, "one error line for {}:\n{stderr}", path.display());
        assert!(
            lines[0].contains(expected) && lines[0].contains(&*path.to_string_lossy()),
            "{}: {}",
            path.display(),
            lines[0]
        );
    }
}

#[test]
fn a_bad_cache_bound_is_refused_by_name() {
    for (bound, expected) in [
        ("2GB", r#"WEIR_CACHE_MAX_MB="2GB": expected a whole number of MiB"#),
        ("0", r#"WEIR_CACHE_MAX_MB="0": must be 1 to 1073741824 (MiB), got 0"#),
    ] {
        let output = std::process::Command::new(weir_tests::weir_binary())
            .args(["transform", "check"])
            .arg(plugin("passthrough"))
            .env("WEIR_CACHE_MAX_MB", bound)
            .output()
            .expect("run weir");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains(expected), "{stderr}");
    }
}

#[test]
fn run_writes_one_json_line_per_output() {
    let (ok, stdout, stderr) = run_weir(&[
        OsStr::new("transform"),
        OsStr::new("run"),
        plugin("flight-delays").as_os_str(),
        OsStr::new("--input"),
        flights_zip().as_os_str(),
        OsStr::new("--key"),
        OsStr::new("origin,carrier"),
        OsStr::new("--limit"),
        OsStr::new("1000"),
        OsStr::new("--config"),
        OsStr::new("threshold_minutes=30"),
    ]);
    assert!(ok, "{stderr}");
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 1000);
    assert_eq!(lines[0]["key"], "EWR|UA");
    assert_eq!(lines[0]["value"]["flights"], 1);
    assert_eq!(lines[0]["headers"], serde_json::json!([]), "headers as a list of {{key, value}}");
}

/// A guest that traps on the third record of a batch: the outputs of the two records before it
/// are printed (a batch's outputs are all or nothing, and they were lost unless `--batch-size 1`
/// was given), then the error, naming the record's offset, its line and the record itself.
#[test]
fn run_prints_the_outputs_before_a_trapping_record_then_the_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("words.jsonl");
    std::fs::write(&input, "\"one\"\n\"two\"\n\"panic\"\n\"four\"\n").unwrap();
    let (ok, stdout, stderr) = run_weir(&[
        OsStr::new("transform"),
        OsStr::new("run"),
        plugin("misbehave").as_os_str(),
        OsStr::new("--input"),
        input.as_os_str(),
    ]);
    assert!(!ok);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "the outputs of the records before the failing one:\n{stdout}\n{stderr}");
    assert!(lines[0].contains("one") && lines[1].contains("two"), "{stdout}");
    assert!(stderr.contains("guest panicked") && stderr.contains("offsets 2..=2"), "{stderr}");
    assert!(stderr.contains("words.jsonl: line 3: record {"), "the record's line: {stderr}");
    let record = stderr.split("record {").nth(1).and_then(|rest| rest.split('}').next()).unwrap_or_default();
    assert!(record.contains("\"value\":") && record.contains("panic"), "the record itself: {stderr}");
}

/// A record the guest refuses, past the first batch of 256: the error names its line, not the
/// line that completed its batch.
#[test]
fn run_names_the_line_of_the_record_a_guest_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("flights.jsonl");
    let flight = r#"{"origin":"EWR","carrier":"UA","dep_delay":2}"#;
    let mut lines = vec![flight; 600];
    lines[300] = r#"{"origin":"EWR","carrier":"UA","dep_delay":"late"}"#;
    std::fs::write(&input, lines.join("\n")).unwrap();
    let (ok, _, stderr) = run_weir(&[
        OsStr::new("transform"),
        OsStr::new("run"),
        plugin("flight-delays").as_os_str(),
        OsStr::new("--input"),
        input.as_os_str(),
    ]);
    assert!(!ok);
    assert!(stderr.contains("flights.jsonl: line 301: ") && stderr.contains("\"late\""), "{stderr}");
    assert!(!stderr.contains("line 512"), "not the line that completed the batch: {stderr}");
}

/// A guest sleeping 30 s (a wait in the host) fails at `--deadline-ms`, not after its sleep.
#[test]
fn run_stops_a_sleeping_guest_at_its_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("words.jsonl");
    std::fs::write(&input, "\"fine\"\n\"sleep\"\n").unwrap();
    let started = std::time::Instant::now();
    let (ok, _, stderr) = run_weir(&[
        OsStr::new("transform"),
        OsStr::new("run"),
        plugin("misbehave").as_os_str(),
        OsStr::new("--input"),
        input.as_os_str(),
        OsStr::new("--deadline-ms"),
        OsStr::new("200"),
    ]);
    let elapsed = started.elapsed();
    assert!(!ok);
    assert!(stderr.contains("deadline exceeded") && stderr.contains("offsets 1..=1"), "{stderr}");
    assert!(elapsed < std::time::Duration::from_secs(20), "weir transform run took {elapsed:?}: the sleep was not cut");
}

/// `weir transform run` over a project's sample file (as the generated README says to) reads
/// each line as a whole record, key and headers included: by itself when every line is one, or
/// with `--format samples`. A JSON lines file with another field stays a file of values, and
/// `--key` is refused for samples, which carry their own keys.
#[test]
fn run_reads_sample_records() {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("example.input.jsonl");
    std::fs::write(
        &samples,
        "{\"key\": \"k1\", \"value\": {\"name\": \"Ada\"}, \"headers\": {\"h\": \"v\"}, \"timestamp\": 5}\n\n\
         {\"key\": null, \"value\": \"plain\"}\n",
    )
    .unwrap();
    let misbehave = plugin("misbehave");
    let run = |input: &Path, extra: &[&str]| {
        let mut args = vec![
            OsStr::new("transform"),
            OsStr::new("run"),
            misbehave.as_os_str(),
            OsStr::new("--input"),
            input.as_os_str(),
        ];
        args.extend(extra.iter().map(OsStr::new));
        run_weir(&args)
    };
    let expected = [
        serde_json::json!({"key": "k1", "value": {"name": "Ada"}, "headers": [{"key": "h", "value": "v"}]}),
        serde_json::json!({"key": null, "value": "plain", "headers": []}),
    ];
    for extra in [&[][..], &["--format", "samples"][..]] {
        let (ok, stdout, stderr) = run(&samples, extra);
        assert!(ok, "{extra:?}: {stderr}");
        let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines, expected, "{extra:?}");
        assert_eq!(stderr.contains("as sample records"), extra.is_empty(), "the guess is said: {stderr}");
    }

    let (ok, _, stderr) = run(&samples, &["--key", "name"]);
    assert!(!ok);
    assert!(stderr.contains("--key does not apply to") && stderr.contains("--format jsonl"), "{stderr}");

    // A line with a field no sample record has: every line is a value.
    let values = dir.path().join("values.jsonl");
    std::fs::write(&values, "{\"key\": \"k1\", \"value\": 1}\n{\"key\": \"k2\", \"value\": 2, \"note\": \"x\"}\n")
        .unwrap();
    let (ok, stdout, stderr) = run(&values, &[]);
    assert!(ok, "{stderr}");
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["value"], serde_json::json!({"key": "k1", "value": 1}), "{stdout}");
    assert_eq!(first["key"], serde_json::Value::Null);
}
