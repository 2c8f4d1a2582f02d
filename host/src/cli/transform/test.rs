//! `weir transform test`: the project's own unit tests, then its samples through the component.
//!
//! A sample is a pair of files in `samples/`: `<case>.input.jsonl`, one input record per line
//! (`{"key": "k", "value": {...}, "headers": {"h": "v"}, "timestamp": 0}`, every field optional;
//! a string value is the record's raw text, any other JSON value its compact JSON text, `null` or
//! no value a null value), and `<case>.expected.jsonl`, the output records as `weir transform run`
//! prints them. Each case runs on a fresh instance with empty in-memory state, with the
//! manifest's `[test]` configuration, as one partition from offset 0.
//!
//! Exit status: 0 when everything passed, 1 when a unit test failed or a sample's output differs
//! (or the transform failed on it), 2 for a usage, project or build error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use similar::TextDiff;
use weir::{Header, InputRecord, OperatorLimits, OutputRecord};

use super::project::{Language, Project};
use super::sdk::sdk_dir;
use super::{BatchRunner, output_json};

#[derive(Debug, Args)]
pub struct TestArgs {
    /// The project folder (holding weir-transform.toml).
    #[arg(default_value = ".")]
    dir: PathBuf,
    /// Rewrite each samples/<case>.expected.jsonl with the outputs of this run.
    #[arg(long)]
    update: bool,
    /// Folder of the component, `<folder name>.wasm`; default: the project's `target/`. It is
    /// (re)built first when missing, or when a file of the project changed since its build.
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

/// Records per `process` call in a sample run (the default of `weir transform run`).
const BATCH_SIZE: usize = 256;

pub fn execute(args: TestArgs) -> anyhow::Result<ExitCode> {
    let project = Project::open(&args.dir)?;
    let cases = sample_cases(&project.dir)?;
    let component = project.component_path(args.out_dir.as_deref());
    if !project.up_to_date(&component) {
        eprintln!("test: building {} (missing, or the project changed since its build)", component.display());
        project.build(&component)?;
    }

    let mut failed = false;
    if let Some(mut command) = unit_tests(&project)? {
        eprintln!("test: unit tests: {command:?}");
        let status = command.status().with_context(|| format!("running {command:?}"))?;
        if !status.success() {
            eprintln!("test: FAILED unit tests ({status})");
            failed = true;
        }
    }
    for case in &cases {
        failed |= !run_case(&project, &component, case, args.update)?;
    }
    if failed {
        return Ok(ExitCode::FAILURE);
    }
    println!("test: {} passed ({} sample(s))", project.name, cases.len());
    Ok(ExitCode::SUCCESS)
}

/// One sample: its input file and its expected output file.
struct Case {
    name: String,
    input: PathBuf,
    expected: PathBuf,
}

/// The samples of the project, by name.
fn sample_cases(dir: &Path) -> anyhow::Result<Vec<Case>> {
    let samples = dir.join("samples");
    let mut cases = Vec::new();
    if let Ok(entries) = std::fs::read_dir(&samples) {
        for entry in entries {
            let input = entry?.path();
            let file_name = input.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if let Some(name) = file_name.strip_suffix(".input.jsonl") {
                let expected = samples.join(format!("{name}.expected.jsonl"));
                cases.push(Case { name: name.to_owned(), input, expected });
            }
        }
    }
    if cases.is_empty() {
        bail!(
            "{} has no samples: add samples/<case>.input.jsonl (one JSON record per line) and run \
             `weir transform test --update` to write its expected output",
            dir.display()
        );
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cases)
}

/// Runs one sample; whether it passed. Prints the diff of a mismatch, or rewrites the expected
/// file with `update`.
fn run_case(project: &Project, component: &Path, case: &Case, update: bool) -> anyhow::Result<bool> {
    let records = read_samples(&case.input)?.into_iter().map(|(_, record)| record).collect();
    let label = format!("samples/{}", case.name);
    let outputs = match run_records(project, component, records) {
        Ok(outputs) => outputs,
        Err(error) => {
            eprintln!("test: FAILED {label}: the transform failed: {error:#}");
            return Ok(false);
        }
    };
    let actual: String = outputs.iter().map(|line| format!("{line}\n")).collect();
    if update {
        std::fs::write(&case.expected, &actual).with_context(|| format!("writing {}", case.expected.display()))?;
        eprintln!("test: updated {} ({} output records)", case.expected.display(), outputs.len());
        return Ok(true);
    }
    let expected = match std::fs::read_to_string(&case.expected) {
        Ok(text) => normalize_expected(&text, &case.expected)?,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            eprintln!(
                "test: FAILED {label}: {} is missing: run `weir transform test --update` to write it from this \
                 run's {} output records",
                case.expected.display(),
                outputs.len()
            );
            return Ok(false);
        }
        Err(error) => return Err(error).with_context(|| format!("reading {}", case.expected.display())),
    };
    if expected == actual {
        eprintln!("test: ok {label} ({} output records)", outputs.len());
        return Ok(true);
    }
    let diff = TextDiff::from_lines(&expected, &actual);
    eprintln!(
        "test: FAILED {label}: the outputs differ from {} (- expected, + actual; `--update` accepts the actual ones):\n{}",
        case.expected.display(),
        diff.unified_diff().context_radius(3).header("expected", "actual")
    );
    Ok(false)
}

/// Each non-empty line of an expected file as compact JSON, as `weir transform run` prints it,
/// so that spacing and field order in a hand-written file do not count.
fn normalize_expected(text: &str, path: &Path) -> anyhow::Result<String> {
    let mut normalized = String::new();
    for (number, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
        let value: Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not a JSON object", path.display(), number + 1))?;
        normalized.push_str(&format!("{value}\n"));
    }
    Ok(normalized)
}

/// One line of a sample input file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SampleRecord {
    #[serde(default)]
    key: Option<String>,
    #[serde(default)]
    value: Value,
    #[serde(default)]
    headers: SampleHeaders,
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    timestamp: i64,
}

/// A sample record's headers: `{"name": "text", ...}`, or, for repeated names and null values,
/// `[{"key": "name", "value": "text" or null}, ...]` (in order).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum SampleHeaders {
    Map(BTreeMap<String, String>),
    List(Vec<SampleHeader>),
}

impl Default for SampleHeaders {
    fn default() -> Self {
        SampleHeaders::List(Vec::new())
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SampleHeader {
    key: String,
    value: Option<String>,
}

impl SampleHeaders {
    fn into_headers(self) -> Vec<Header> {
        match self {
            SampleHeaders::Map(map) => {
                map.into_iter().map(|(key, value)| Header { key, value: Some(value.into_bytes()) }).collect()
            }
            SampleHeaders::List(list) => {
                list.into_iter().map(|h| Header { key: h.key, value: h.value.map(String::into_bytes) }).collect()
            }
        }
    }
}

/// The records of a sample input file, each with its line number (from 1); offsets count from 0
/// over the records.
pub(super) fn read_samples(path: &Path) -> anyhow::Result<Vec<(u64, InputRecord)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let topic = path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let lines = text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty());
    lines
        .enumerate()
        .map(|(offset, (number, line))| {
            let sample: SampleRecord = serde_json::from_str(line).with_context(|| {
                format!(
                    "{} line {}: not a sample record ({{\"key\": ..., \"value\": ..., \"headers\": {{...}} or \
                     [{{\"key\": ..., \"value\": ...}}], \"timestamp\": ...}})",
                    path.display(),
                    number + 1
                )
            })?;
            let value = match sample.value {
                Value::Null => None,
                Value::String(text) => Some(text.into_bytes()),
                json => Some(json.to_string().into_bytes()),
            };
            let headers = sample.headers.into_headers();
            let record = InputRecord {
                key: sample.key.map(String::into_bytes),
                value,
                headers,
                timestamp: sample.timestamp,
                topic: topic.clone(),
                partition: 0,
                offset: offset as i64,
                event_time: sample.timestamp,
                watermark: None,
            };
            Ok((number as u64 + 1, record))
        })
        .collect()
}

/// Whether every line of the file at `path` (one at least; blank lines aside) is a sample
/// record: a JSON object with a `value`, and no field but `key`, `value`, `headers` and
/// `timestamp`. (Requiring `value` keeps a data file of `{"key": ...}` objects a data file.)
/// Reads up to the first line that is not one, so a large data file costs one line.
pub(super) fn holds_samples(path: &Path) -> bool {
    use std::io::BufRead;
    let Ok(file) = std::fs::File::open(path) else { return false };
    let mut seen = false;
    for line in std::io::BufReader::new(file).lines() {
        let Ok(line) = line else { return false };
        if line.trim().is_empty() {
            continue;
        }
        let sample = match serde_json::from_str::<Value>(line.trim_start_matches('\u{feff}')) {
            Ok(Value::Object(fields)) if fields.contains_key("value") => fields,
            _ => return false,
        };
        if serde_json::from_value::<SampleRecord>(Value::Object(sample)).is_err() {
            return false;
        }
        seen = true;
    }
    seen
}

/// The output records of `records` as JSON lines, through the `weir transform run` machinery.
fn run_records(project: &Project, component: &Path, records: Vec<InputRecord>) -> anyhow::Result<Vec<String>> {
    let limits = OperatorLimits::default();
    let mut runner =
        BatchRunner::new(component, project.test_config.clone(), limits, project.test_outputs.clone(), BATCH_SIZE)?;
    let mut lines = Vec::new();
    let mut sink = |output: &OutputRecord| {
        lines.push(output_json(output).to_string());
        Ok(())
    };
    let processed = records.into_iter().try_for_each(|record| runner.push(record, &mut sink));
    processed.and_then(|()| runner.finish(&mut sink))?;
    Ok(lines)
}

/// A target dir name for the cargo workspace `dir` belongs to (the first of `dir` and its two
/// parents whose Cargo.toml has `[workspace]`): `<folder>-<12 hex digits of its path's SHA-256>`,
/// as guest-sdk/rust/build.sh names the wasm builds' ones. Cargo tells path packages apart by
/// their path relative to their workspace root, so two projects named alike sharing a target
/// dir would each take the other's build as their own.
fn workspace_target_name(dir: &Path) -> String {
    let has_workspace =
        |d: &Path| std::fs::read_to_string(d.join("Cargo.toml")).is_ok_and(|t| t.contains("\n[workspace]"));
    let root = dir.ancestors().take(3).find(|d| has_workspace(d)).unwrap_or(dir);
    let hash = Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hex: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("{}-{hex}", root.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned()))
}

/// The command running the project's own unit tests, when it has some: `cargo test` (Rust code
/// with `#[test]`), pytest (a `tests/` folder), `node --test` (a `test/` folder), `go test`
/// (`*_test.go` files).
fn unit_tests(project: &Project) -> anyhow::Result<Option<Command>> {
    let dir = &project.dir;
    let sdk = sdk_dir()?;
    // The project's copy of the SDK (weir transform init) wins over the installed one.
    let vendored = dir.join("weir-sdk").join(project.language.sdk_folder());
    let sdk_for_project = if vendored.is_dir() { vendored } else { sdk.join(project.language.sdk_folder()) };
    let mut command = match project.language {
        Language::Rust => {
            if !dir.join("tests").is_dir() && !contains(&dir.join("src"), "#[test]") {
                return Ok(None);
            }
            let mut command = Command::new("cargo");
            command.arg("test").arg("--manifest-path").arg(dir.join("Cargo.toml"));
            // Native builds of guests, apart from the host's and the wasm guests' artifacts.
            if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
                let native = Path::new(&target).join("guests-native").join(workspace_target_name(dir));
                command.env("CARGO_TARGET_DIR", native);
            }
            command
        }
        Language::Python => {
            if !dir.join("tests").is_dir() {
                return Ok(None);
            }
            let path = std::env::join_paths([dir.as_path(), sdk_for_project.as_path()])?;
            let mut command = Command::new("python3");
            command.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]).env("PYTHONPATH", path);
            command
        }
        Language::Js => {
            if !dir.join("test").is_dir() {
                return Ok(None);
            }
            let mut command = Command::new("node");
            command.arg("--import").arg(sdk_for_project.join("testing/register.js")).args(["--test", "test/"]);
            command
        }
        Language::Go => {
            let has_tests = std::fs::read_dir(dir)?
                .flatten()
                .any(|entry| entry.file_name().to_string_lossy().ends_with("_test.go"));
            if !has_tests {
                return Ok(None);
            }
            let mut command = Command::new("go");
            command.args(["test", "./..."]);
            command
        }
    };
    command.current_dir(dir);
    Ok(Some(command))
}

/// Whether a file below `dir` contains `needle`.
fn contains(dir: &Path, needle: &str) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries.flatten().any(|entry| {
        let path = entry.path();
        if path.is_dir() {
            contains(&path, needle)
        } else {
            std::fs::read_to_string(&path).is_ok_and(|t| t.contains(needle))
        }
    })
}
