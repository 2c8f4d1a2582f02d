//! `weir transform check|run|init|build|test`.

mod init;
mod project;
mod sdk;
mod test;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Map, Value};
use weir::{
    EngineConfig, ErrorKind, Format, Header, InputRecord, MAX_DEADLINE, MAX_MEMORY_LIMIT_BYTES, MemoryState, Operator,
    OperatorError, OperatorLimits, OutputRecord, WasmEngine, read_rows,
};

use super::bytes::{insert_bytes, insert_value};

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
    /// Create a transform project: source, weir-transform.toml, a copy of the SDK, samples.
    Init(init::InitArgs),
    /// Build a transform project into a component (exit 2 on a build error) and check it.
    Build(project::BuildArgs),
    /// Build if needed, run the project's unit tests and its samples; exit 0 pass, 1 fail, 2 error.
    Test(test::TestArgs),
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The component file (.wasm).
    file: PathBuf,
    /// Input records: .csv (header row), .jsonl, or a .zip holding one of those.
    #[arg(long)]
    input: PathBuf,
    /// Input format: `csv`, `jsonl` (each line a record's value) or `samples` (each line a whole
    /// record, `{"key", "value", "headers", "timestamp"}`, as in a project's
    /// samples/<case>.input.jsonl). By default implied by the file name, and `samples` for a JSON
    /// lines file whose every line is such a record.
    #[arg(long, value_enum)]
    format: Option<InputFormat>,
    /// Fields whose values, joined by `|`, form each record's key (e.g. `origin,carrier`); each must
    /// be a column of a CSV file's header, or a field of a JSON lines file's first record (a later
    /// record without one keys it as empty). Sample records carry their own keys.
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
    /// Linear-memory limit of the instance, in MiB (1 to 4096, as `memory_limit_mb` of a
    /// pipeline's transform).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=(MAX_MEMORY_LIMIT_BYTES >> 20) as u64))]
    memory_limit_mb: u64,
    /// Deadline of one `process` call, in milliseconds (1 to 600,000, as `deadline_ms` of a
    /// pipeline's transform).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_DEADLINE.as_millis() as u64))]
    deadline_ms: u64,
    /// Named sink outputs the transform may address (besides the default); repeatable.
    #[arg(long = "output")]
    outputs: Vec<String>,
}

/// Input formats of `weir transform run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum InputFormat {
    /// Comma-separated values with a header row; each row is a record's value (a JSON object).
    Csv,
    /// One JSON value per line, each a record's value.
    Jsonl,
    /// One sample record per line, as `weir transform test` reads them.
    Samples,
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())).ok_or_else(|| format!("`{text}` is not key=value"))
}

pub fn run(command: TransformCommand) -> anyhow::Result<ExitCode> {
    match command {
        TransformCommand::Check { file } => check(&file),
        TransformCommand::Run(args) => run_file(args),
        TransformCommand::Init(args) => Ok(usage_error_exits_2(init::execute(args))),
        TransformCommand::Build(args) => Ok(usage_error_exits_2(project::build_command(args))),
        TransformCommand::Test(args) => Ok(usage_error_exits_2(test::execute(args))),
    }
}

/// Exit status of `weir transform init|build|test` for a usage, project or build error; 1 is
/// left to a failing test, as CI scripts expect.
const EXIT_ERROR: u8 = 2;

/// Reports an error of `init`, `build` or `test` the way `main` does, with exit status 2.
fn usage_error_exits_2(result: anyhow::Result<ExitCode>) -> ExitCode {
    result.unwrap_or_else(|error| {
        eprintln!("error: {error:#}");
        ExitCode::from(EXIT_ERROR)
    })
}

fn check(file: &Path) -> anyhow::Result<ExitCode> {
    let engine = WasmEngine::new(&EngineConfig::with_default_cache()?)?;
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

/// Batches between two snapshots in `weir transform run` and `test`.
const SNAPSHOT_EVERY_BATCHES: u64 = 16;

/// Runs input records through an operator in batches, as `weir transform run` and `test` do.
struct BatchRunner {
    operator: Operator,
    batch: Vec<InputRecord>,
    batch_size: usize,
    batches: u64,
}

impl BatchRunner {
    /// Loads `file` and starts an operator named after it, with in-memory state.
    fn new(
        file: &Path,
        config: Vec<(String, String)>,
        limits: OperatorLimits,
        outputs: Vec<String>,
        batch_size: usize,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(batch_size > 0, "--batch-size must be at least 1");
        let engine = WasmEngine::new(&EngineConfig::with_default_cache()?)?;
        let component = Arc::new(engine.load(file)?);
        let name = file.file_stem().map_or_else(|| "transform".into(), |s| s.to_string_lossy().into_owned());
        let (state, timers) = (Box::new(MemoryState::new()), Box::new(MemoryState::new()));
        let operator = Operator::new(component, &name, config, limits, outputs, state, timers)?;
        Ok(Self { operator, batch: Vec::with_capacity(batch_size), batch_size, batches: 0 })
    }

    /// Adds `record` to the batch; a full batch is processed and its outputs go to `sink`.
    ///
    /// # Errors
    /// An [`OperatorError`] when the operator fails; `sink`'s error as a message.
    fn push(
        &mut self,
        record: InputRecord,
        sink: &mut dyn FnMut(&OutputRecord) -> Result<(), String>,
    ) -> anyhow::Result<()> {
        self.batch.push(record);
        if self.batch.len() == self.batch_size { self.flush(sink) } else { Ok(()) }
    }

    /// Processes the records pushed since the last batch, handing the outputs to `sink`. When a
    /// record fails, the outputs of the records before it still reach `sink` (see
    /// [`BatchRunner::replay`]).
    fn flush(&mut self, sink: &mut dyn FnMut(&OutputRecord) -> Result<(), String>) -> anyhow::Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        // A failed call rolls the guest back to its restore point: make that the state before
        // this batch, so that a replay of the batch starts where the batch did.
        self.operator.set_restore_point()?;
        let outputs = match self.operator.process(&self.batch) {
            Ok(outputs) => outputs,
            Err(error) => return self.replay(error, sink),
        };
        self.batch.clear();
        self.batches += 1;
        // As a pipeline's checkpoints do: a snapshot lets the operator recycle an instance whose
        // memory grew past half its limit (some guest runtimes never free memory).
        if self.batches.is_multiple_of(SNAPSHOT_EVERY_BATCHES) {
            self.operator.snapshot()?;
        }
        outputs.iter().try_for_each(sink).map_err(anyhow::Error::msg)
    }

    /// After `error` failed the pending batch: processes its records again one at a time (from
    /// the state before the batch), handing each one's outputs to `sink`, until one fails, and
    /// returns that failure naming the record. A batch's outputs are all or nothing, so without
    /// this a bad record hid the outputs of the good ones before it.
    fn replay(
        &mut self,
        error: OperatorError,
        sink: &mut dyn FnMut(&OutputRecord) -> Result<(), String>,
    ) -> anyhow::Result<()> {
        let batch = std::mem::take(&mut self.batch);
        if !error.is_record_failure() {
            return Err(error.into());
        }
        if let [record] = batch.as_slice() {
            return Err(record_failure(error, record));
        }
        for record in &batch {
            match self.operator.process(std::slice::from_ref(record)) {
                Ok(outputs) => outputs.iter().try_for_each(&mut *sink).map_err(anyhow::Error::msg)?,
                Err(failed) => return Err(record_failure(failed, record)),
            }
        }
        // Every record passed alone: the failure depends on the batch, so report the batch's.
        Err(error.into())
    }

    /// Ends the input: processes the last batch, then moves the watermark to the end of time so
    /// that every event-time timer fires (windows close), as a bounded input does in Flink.
    /// Processing-time timers do not fire.
    fn finish(&mut self, sink: &mut dyn FnMut(&OutputRecord) -> Result<(), String>) -> anyhow::Result<()> {
        self.flush(sink)?;
        self.operator.set_watermark(Some(i64::MAX));
        // Timers may register timers; a transform that keeps registering due ones stops here.
        for _ in 0..FINAL_TIMER_ROUNDS {
            let due = self.operator.due_timers(i64::MIN)?;
            if due.is_empty() {
                return Ok(());
            }
            let outputs = self.operator.on_timer(&due)?.to_records();
            outputs.iter().try_for_each(&mut *sink).map_err(anyhow::Error::msg)?;
        }
        anyhow::bail!("timers still due after {FINAL_TIMER_ROUNDS} rounds of on-timer at the end of the input")
    }
}

/// `error`, which `record` caused, with the record (shortened) as its context.
fn record_failure(error: OperatorError, record: &InputRecord) -> anyhow::Error {
    /// Characters of the record shown at most: enough to recognise it, not a page of JSON.
    const SHOWN: usize = 300;
    let json = Value::Object(record_json(record.key.as_deref(), record.value.as_deref(), &record.headers)).to_string();
    let shown = match json.char_indices().nth(SHOWN) {
        Some((end, _)) => format!("{}…", &json[..end]),
        None => json,
    };
    anyhow::Error::new(error).context(format!("record {shown}"))
}

/// Most `on-timer` rounds at the end of `weir transform run` and `test`'s input.
const FINAL_TIMER_ROUNDS: usize = 10_000;

fn run_file(mut args: RunArgs) -> anyhow::Result<ExitCode> {
    let format = input_format(&args.input, args.format);
    if format == Some(InputFormat::Samples) && !args.key.is_empty() {
        anyhow::bail!(
            "--key does not apply to {}: sample records carry their own key (\"key\"); to read each line as a \
             record's value instead, give --format jsonl",
            args.input.display()
        );
    }
    let limits = OperatorLimits {
        memory_bytes: (args.memory_limit_mb as usize) << 20,
        deadline: Duration::from_millis(args.deadline_ms),
        ..OperatorLimits::default()
    };
    let (config, outputs) = (std::mem::take(&mut args.config), std::mem::take(&mut args.outputs));
    let mut runner = BatchRunner::new(&args.file, config, limits, outputs, args.batch_size)?;

    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut write_error = None;
    // Keep the I/O error itself, so that a closed stdout (`| head`) ends the run quietly.
    let mut sink = |output: &OutputRecord| {
        writeln!(out, "{}", output_json(output)).map_err(|error| {
            let message = error.to_string();
            write_error = Some(error);
            message
        })
    };
    let limit = args.limit.unwrap_or(u64::MAX);
    let read = match format {
        Some(InputFormat::Samples) => test::read_samples(&args.input).and_then(|records| {
            let records = records.into_iter().take(usize::try_from(limit).unwrap_or(usize::MAX));
            records.into_iter().try_for_each(|(line, mut record)| {
                // The offset of the record's line, as for the other formats, which the error
                // of a failed record is told by (`with_input_lines`).
                record.offset = line as i64 - 1;
                runner.push(record, &mut sink)
            })
        }),
        Some(InputFormat::Csv) => read_values(&args, Some(Format::Csv), &mut runner, &mut sink),
        Some(InputFormat::Jsonl) => read_values(&args, Some(Format::Jsonl), &mut runner, &mut sink),
        None => read_values(&args, None, &mut runner, &mut sink),
    };
    let result = read
        .and_then(|()| runner.finish(&mut sink))
        .map_err(with_input_lines)
        .with_context(|| format!("running {} over {}", args.file.display(), args.input.display()));
    if let Some(error) = write_error {
        return Err(error).context("writing the output records to stdout");
    }
    // The outputs of the records before a failure come out before the failure's message.
    out.flush()?;
    result?;
    Ok(ExitCode::SUCCESS)
}

/// Pushes each row of a CSV or JSON lines file into `runner` as a record's value, keyed by
/// `--key`, timestamped now, its offset its line's (from 0).
fn read_values(
    args: &RunArgs,
    format: Option<Format>,
    runner: &mut BatchRunner,
    sink: &mut dyn FnMut(&OutputRecord) -> Result<(), String>,
) -> anyhow::Result<()> {
    let topic = args.input.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let timestamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64);
    let limit = args.limit.unwrap_or(u64::MAX);
    // The operator's own error, rather than `read_rows`' wrapping of it in the line that
    // completed the batch: the failing record's line is found from its offset.
    let mut failure = None;
    let read = read_rows(&args.input, format, &args.key, |row| {
        if row.line > limit {
            return Ok(());
        }
        let record = InputRecord {
            value: Some(row.value_bytes()),
            key: row.key.map(String::into_bytes),
            headers: Vec::new(),
            timestamp,
            topic: topic.clone(),
            partition: 0,
            offset: row.line as i64 - 1,
            event_time: timestamp,
            watermark: None,
        };
        runner.push(record, sink).map_err(|error| {
            let message = error.to_string();
            failure = Some(error);
            message
        })
    });
    match failure {
        Some(error) => Err(error),
        None => read.map(drop).map_err(anyhow::Error::from),
    }
}

/// The format `weir transform run` reads `input` in: `format` when given; else `samples` for a
/// JSON lines file (not in a zip) whose every line is a sample record, said on stderr because
/// the same file reads differently as `jsonl`; else the one the file name implies (`None`:
/// `read_rows` says so).
fn input_format(input: &Path, format: Option<InputFormat>) -> Option<InputFormat> {
    if format.is_some() {
        return format;
    }
    match Format::from_name(&input.to_string_lossy())? {
        Format::Csv => Some(InputFormat::Csv),
        Format::Jsonl if test::holds_samples(input) => {
            eprintln!(
                "run: reading {} as sample records (every line is {{\"key\", \"value\", \"headers\", \"timestamp\"}}, \
                 as in samples/<case>.input.jsonl); --format jsonl reads each line as a record's value",
                input.display()
            );
            Some(InputFormat::Samples)
        }
        Format::Jsonl => Some(InputFormat::Jsonl),
    }
}

/// `error` with the input lines of the records it names, when an operator failed on a batch:
/// `weir transform run` gives each record the offset of its line, counting from 0.
fn with_input_lines(error: anyhow::Error) -> anyhow::Error {
    let Some(failed) = error.downcast_ref::<OperatorError>() else { return error };
    let lines = match (&failed.kind, &failed.offsets) {
        (ErrorKind::Guest { offset: Some(offset), .. }, _) => format!("line {}", offset + 1),
        (_, Some(batch)) if batch.first == batch.last => format!("line {}", batch.first + 1),
        (_, Some(batch)) => format!("lines {} to {}", batch.first + 1, batch.last + 1),
        _ => return error,
    };
    error.context(lines)
}

/// An output record as one JSON object, faithfully: as [`record_json`], and `output` when it
/// goes to a named output.
fn output_json(output: &OutputRecord) -> Value {
    let mut object = record_json(output.key.as_deref(), output.value.as_deref(), &output.headers);
    if let Some(name) = &output.output {
        object.insert("output".into(), Value::String(name.clone()));
    }
    Value::Object(object)
}

/// A record as JSON fields, faithfully: `key` (or `key_base64`), `value` (the JSON it holds, its
/// text, or `value_base64`; see [`insert_value`]), `headers` as a list of `{key, value}` in
/// order (repeated names kept, null apart from empty).
fn record_json(key: Option<&[u8]>, value: Option<&[u8]>, headers: &[Header]) -> Map<String, Value> {
    let mut object = Map::new();
    insert_bytes(&mut object, "key", key);
    insert_value(&mut object, "value", value);
    let headers = headers
        .iter()
        .map(|h| {
            let mut header = Map::new();
            header.insert("key".into(), h.key.clone().into());
            insert_bytes(&mut header, "value", h.value.as_deref());
            Value::Object(header)
        })
        .collect();
    object.insert("headers".into(), Value::Array(headers));
    object
}
