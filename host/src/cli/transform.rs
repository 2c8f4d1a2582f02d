//! `weir transform check|run`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Map, Value};
use weir::file::{Format, read_rows};
use weir::state::MemoryState;
use weir::wasm::{EngineConfig, InputRecord, Operator, OperatorLimits, OutputRecord, WasmEngine};

#[derive(Debug, Subcommand)]
pub enum TransformCommand {
    /// Validate that a file is a weir:transform component (0.2.x or 0.1.x); print its contract
    /// version, exports, imports and size.
    Check {
        /// The component file (.wasm).
        file: PathBuf,
    },
    /// Run a transform over a local file with in-memory state; print output records as JSON lines.
    Run(RunArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The component file (.wasm).
    file: PathBuf,
    /// Input records: .csv (header row), .jsonl, or a .zip holding one of those.
    #[arg(long)]
    input: PathBuf,
    /// Input format; by default implied by the file name.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Fields whose values, joined by `|`, form each record's key (e.g. `origin,carrier`).
    #[arg(long, value_delimiter = ',')]
    key: Vec<String>,
    /// Transform configuration, `key=value`; repeatable.
    #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    config: Vec<(String, String)>,
    /// Records per `process` call.
    #[arg(long, default_value_t = 256)]
    batch_size: usize,
    /// Stop after this many input records.
    #[arg(long)]
    limit: Option<u64>,
    /// Linear-memory limit of the instance, in MiB.
    #[arg(long, default_value_t = 64)]
    memory_limit_mb: usize,
    /// Deadline of one `process` call, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    deadline_ms: u64,
    /// Named sink outputs the transform may address (besides the default); repeatable.
    #[arg(long = "output")]
    outputs: Vec<String>,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{text}` is not key=value"))
}

pub fn run(command: TransformCommand) -> anyhow::Result<ExitCode> {
    match command {
        TransformCommand::Check { file } => check(&file),
        TransformCommand::Run(args) => run_file(args),
    }
}

fn check(file: &Path) -> anyhow::Result<ExitCode> {
    let engine = WasmEngine::new(&EngineConfig::with_default_cache())?;
    let component = engine.load(file)?;
    let description = component.description();
    writeln!(std::io::stdout(), "{}: {} component, {} bytes", file.display(), description.contract, component.size())?;
    writeln!(std::io::stdout(), "exports:")?;
    for name in &description.exports {
        writeln!(std::io::stdout(), "  {name}")?;
    }
    writeln!(std::io::stdout(), "imports:")?;
    for name in &description.imports {
        writeln!(std::io::stdout(), "  {name}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Batches between two snapshots in `weir transform run`.
const SNAPSHOT_EVERY_BATCHES: u64 = 16;

fn run_file(args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(args.batch_size > 0, "--batch-size must be at least 1");
    let engine = WasmEngine::new(&EngineConfig::with_default_cache())?;
    let component = Arc::new(engine.load(&args.file)?);
    let name = args.file.file_stem().map_or_else(|| "transform".into(), |s| s.to_string_lossy().into_owned());
    let limits = OperatorLimits {
        memory_bytes: args.memory_limit_mb << 20,
        deadline: Duration::from_millis(args.deadline_ms),
        ..OperatorLimits::default()
    };
    let mut operator = Operator::new(
        component,
        &name,
        args.config,
        limits,
        args.outputs,
        Box::new(MemoryState::new()),
        Box::new(MemoryState::new()),
    )?;

    let topic = args.input.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut batch = Vec::with_capacity(args.batch_size);
    let mut batches = 0u64;
    let mut write_error = None;
    let mut flush = |batch: &mut Vec<InputRecord>, out: &mut dyn Write| -> Result<(), String> {
        let outputs = operator.process(batch).map_err(|e| e.to_string())?;
        batch.clear();
        batches += 1;
        // As a pipeline's checkpoints do: a snapshot lets the operator recycle an instance whose
        // memory grew past half its limit (some guest runtimes never free memory).
        if batches.is_multiple_of(SNAPSHOT_EVERY_BATCHES) {
            operator.snapshot().map_err(|e| e.to_string())?;
        }
        // Keep the I/O error itself, so that a closed stdout (`| head`) ends the run quietly.
        let written = outputs.iter().try_for_each(|output| writeln!(out, "{}", output_json(output)));
        written.map_err(|error| {
            let message = error.to_string();
            write_error = Some(error);
            message
        })
    };
    let limit = args.limit.unwrap_or(u64::MAX);
    let read = read_rows(&args.input, args.format, &args.key, |row| {
        if row.line > limit {
            return Ok(());
        }
        batch.push(InputRecord {
            value: Some(row.value_bytes()),
            key: row.key.map(String::into_bytes),
            headers: Vec::new(),
            timestamp,
            topic: topic.clone(),
            partition: 0,
            offset: row.line as i64 - 1,
            event_time: timestamp,
            watermark: None,
        });
        if batch.len() == args.batch_size { flush(&mut batch, &mut out) } else { Ok(()) }
    });
    let result = read
        .with_context(|| format!("running {} over {}", args.file.display(), args.input.display()))
        .and_then(|_| flush(&mut batch, &mut out).map_err(anyhow::Error::msg));
    if let Some(error) = write_error {
        return Err(error).context("writing the output records to stdout");
    }
    result?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// An output record as one JSON object: key and value as JSON when they parse, else strings.
fn output_json(output: &OutputRecord) -> Value {
    let text = |bytes: &Option<Vec<u8>>| match bytes {
        None => Value::Null,
        Some(bytes) => {
            serde_json::from_slice(bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
        }
    };
    let key = output.key.as_ref().map_or(Value::Null, |k| Value::String(String::from_utf8_lossy(k).into_owned()));
    let headers: Map<String, Value> = output
        .headers
        .iter()
        .map(|h| {
            let value =
                h.value.as_ref().map_or(Value::Null, |v| Value::String(String::from_utf8_lossy(v).into_owned()));
            (h.key.clone(), value)
        })
        .collect();
    let mut object = Map::new();
    object.insert("key".into(), key);
    object.insert("value".into(), text(&output.value));
    object.insert("headers".into(), Value::Object(headers));
    if let Some(name) = &output.output {
        object.insert("output".into(), Value::String(name.clone()));
    }
    Value::Object(object)
}
