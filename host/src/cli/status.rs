//! `weir status <pipeline.toml> [--json]`: last committed checkpoint, offsets per partition and
//! lag, as text or as JSON (field names documented in docs/observability.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use weir::config::PipelineConfig;
use weir::kafka::{Admin, Source, TopicCheck};
use weir::state::StateDb;
use weir::types::TaskId;

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    /// Print one JSON object instead of text (fields: docs/observability.md).
    #[arg(long)]
    json: bool,
}

/// What `weir status` reports; the JSON form is this, serialised.
#[derive(Debug, Serialize)]
struct Status {
    /// The pipeline's `name`.
    pipeline: String,
    /// The state directory (`state.dir`).
    state_dir: PathBuf,
    /// Id of the last committed checkpoint (0: none yet).
    committed_checkpoint: u64,
    /// The compacted topic holding the pipeline's state (`state.changelog_topic`).
    changelog_topic: String,
    /// One entry per source partition, in topic and partition order.
    partitions: Vec<PartitionStatus>,
    /// Sum of `lag` over the partitions.
    total_lag: i64,
}

#[derive(Debug, Serialize)]
struct PartitionStatus {
    topic: String,
    partition: i32,
    /// Next offset to read according to the last committed checkpoint; null for a partition
    /// added since.
    checkpoint_offset: Option<i64>,
    /// The consumer group's committed offset; null when it has none.
    group_offset: Option<i64>,
    /// End offset: the last stable offset (read_committed).
    end_offset: i64,
    /// `end_offset` minus `checkpoint_offset` (minus the earliest offset for a partition
    /// without one), never negative.
    lag: i64,
}

pub fn execute(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let status = read_status(&PipelineConfig::from_file(&args.pipeline)?)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        // As an I/O error, so that a closed stdout (`| head`) ends the command quietly.
        serde_json::to_writer_pretty(&mut out, &status).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        write_text(&mut out, &status)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn read_status(config: &PipelineConfig) -> anyhow::Result<Status> {
    let db = StateDb::open_read_only(&config.state.dir)?;
    let committed = db.committed()?;
    let admin = Admin::new(&config.source.brokers, &config.source.consumer)?;
    let names: Vec<&str> = config.source.topics.iter().map(String::as_str).collect();
    let mut tasks = Vec::new();
    for (topic, check) in admin.topics(&names)? {
        if let TopicCheck::Exists(partitions) = check {
            tasks.extend((0..partitions).map(|partition| TaskId { topic: topic.clone(), partition }));
        }
    }
    let source = Source::new(&config.source.brokers, &config.source.consumer, &config.group_id())?;
    let group = source.group_offsets(&tasks, TIMEOUT)?;
    let mut partitions = Vec::with_capacity(tasks.len());
    for task in tasks {
        let ours = committed.offsets.get(&task).copied();
        let (start, end) = source.watermarks(&task, TIMEOUT)?;
        // A partition without a checkpoint offset is one added since the last checkpoint: it is
        // read from its earliest offset, not from 0.
        let lag = (end - ours.unwrap_or(start)).max(0);
        partitions.push(PartitionStatus {
            group_offset: group.get(&task).map(|g| g.offset),
            topic: task.topic,
            partition: task.partition,
            checkpoint_offset: ours,
            end_offset: end,
            lag,
        });
    }
    Ok(Status {
        pipeline: config.name.clone(),
        state_dir: config.state.dir.clone(),
        committed_checkpoint: committed.id.0,
        changelog_topic: config.state.changelog_topic.clone(),
        total_lag: partitions.iter().map(|p| p.lag).sum(),
        partitions,
    })
}

fn write_text(out: &mut impl Write, status: &Status) -> std::io::Result<()> {
    writeln!(
        out,
        "pipeline {} (state {}, changelog {})",
        status.pipeline,
        status.state_dir.display(),
        status.changelog_topic
    )?;
    writeln!(out, "last committed checkpoint: {}", status.committed_checkpoint)?;
    writeln!(out, "{:<32} {:>12} {:>12} {:>12} {:>10}", "partition", "checkpoint", "group", "end", "lag")?;
    let show = |o: Option<i64>| o.map_or_else(|| "-".to_owned(), |o| o.to_string());
    for p in &status.partitions {
        writeln!(
            out,
            "{:<32} {:>12} {:>12} {:>12} {:>10}",
            TaskId { topic: p.topic.clone(), partition: p.partition }.to_string(),
            show(p.checkpoint_offset),
            show(p.group_offset),
            p.end_offset,
            p.lag
        )?;
    }
    writeln!(out, "total lag: {} (end = last stable offset, read_committed)", status.total_lag)
}
