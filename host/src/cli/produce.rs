//! `weir produce`: loads a CSV / JSON-lines / zip file into a topic.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use weir::{Admin, Format, LogContext, TopicCheck, read_rows};

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// The input: .csv (header row), .jsonl, or a .zip holding one of those. JSON lines are
    /// written as they are; CSV rows become JSON objects (header names as fields in their order,
    /// `NA` and empty cells as null, cells written as JSON numbers as numbers, the rest, `02134`
    /// too, as strings).
    file: PathBuf,
    /// Target topic; created when missing (with the first record).
    #[arg(long)]
    topic: String,
    /// Partitions of the topic when it is created (1 to 10,000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..=10_000))]
    partitions: i32,
    /// Input format; by default implied by the file name.
    #[arg(long, value_enum)]
    format: Option<Format>,
    /// Fields whose values, joined by `|`, form each record's key (e.g. `origin,carrier`); each must
    /// be a column of a CSV file's header, or a field of a JSON lines file's first record (a later
    /// record without one keys it as empty).
    #[arg(long, value_delimiter = ',')]
    key: Vec<String>,
    #[command(flatten)]
    cluster: super::cluster::ClusterArgs,
}

pub fn execute(args: ProduceArgs) -> anyhow::Result<ExitCode> {
    let cluster = args.cluster.cluster()?;
    let admin = Admin::new(&cluster, &BTreeMap::new())?;
    let found = admin.topics(&[&args.topic]).with_context(|| format!("cannot reach the broker at {cluster}"))?;
    // Created with the first record, so that a file refused at its first line leaves nothing.
    let mut missing = found.get(&args.topic) == Some(&TopicCheck::Missing);
    let mut create_if_missing = || -> anyhow::Result<()> {
        if std::mem::take(&mut missing) {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(admin.create_topic(&args.topic, args.partitions))
                .with_context(|| format!("creating topic {}", args.topic))?;
            eprintln!("created topic {} with {} partitions", args.topic, args.partitions);
        }
        Ok(())
    };
    // Idempotent, acks=all: a retried batch is never written twice.
    let own = [("enable.idempotence", "true"), ("linger.ms", "20"), ("compression.type", "lz4")];
    let producer: ThreadedProducer<LogContext> =
        weir::client_config(&cluster, &[], &BTreeMap::new(), &own).create_with_context(LogContext::new("producer"))?;

    let progress = if console_is_terminal() { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
    progress.set_style(ProgressStyle::with_template("{spinner} {human_pos} records  {per_sec}  {elapsed}")?);
    let started = Instant::now();
    let count = read_rows(&args.file, args.format, &args.key, |row| {
        create_if_missing().map_err(|error| format!("{error:#}"))?;
        let value = row.value_bytes();
        let mut record = BaseRecord::<[u8], [u8]>::to(&args.topic).payload(&value);
        if let Some(key) = &row.key {
            record = record.key(key.as_bytes());
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), returned)) => {
                    record = returned;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((error, _)) => return Err(format!("producing to {}: {error}", args.topic)),
            }
        }
        progress.inc(1);
        Ok(())
    })?;
    create_if_missing()?; // an empty file still makes the topic
    producer.flush(Duration::from_secs(60)).context("waiting for the broker to acknowledge every record")?;
    progress.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    writeln!(
        std::io::stdout(),
        "wrote {count} records to {} in {seconds:.1} s ({:.0} records/s)",
        args.topic,
        count as f64 / seconds.max(1e-9)
    )?;
    Ok(ExitCode::SUCCESS)
}

fn console_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal()
}
