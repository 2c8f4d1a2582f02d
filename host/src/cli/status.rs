//! `weir status <pipeline.toml>`: last committed checkpoint, offsets per partition and lag.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use weir::config::PipelineConfig;
use weir::kafka::{Admin, Source, TopicCheck};
use weir::state::StateDb;
use weir::types::TaskId;

const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The pipeline file.
    pipeline: PathBuf,
}

pub fn execute(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let config = PipelineConfig::from_file(&args.pipeline)?;
    let db = StateDb::open_read_only(&config.state.dir)?;
    let committed = db.committed()?;
    writeln!(std::io::stdout(), "pipeline {} (state {})", config.name, config.state.dir.display())?;
    writeln!(std::io::stdout(), "last committed checkpoint: {}", committed.id)?;

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
    writeln!(
        std::io::stdout(),
        "{:<32} {:>12} {:>12} {:>12} {:>10}",
        "partition",
        "checkpoint",
        "group",
        "end",
        "lag"
    )?;
    let mut total_lag = 0;
    for task in &tasks {
        let ours = committed.offsets.get(task).copied();
        let (start, end) = source.watermarks(task, TIMEOUT)?;
        // A partition without a checkpoint offset is one added since the last checkpoint: it is
        // read from its earliest offset, not from 0.
        let lag = (end - ours.unwrap_or(start)).max(0);
        total_lag += lag;
        let show = |o: Option<i64>| o.map_or_else(|| "-".to_owned(), |o| o.to_string());
        writeln!(
            std::io::stdout(),
            "{:<32} {:>12} {:>12} {:>12} {:>10}",
            task.to_string(),
            show(ours),
            show(group.get(task).map(|g| g.offset)),
            end,
            lag
        )?;
    }
    writeln!(std::io::stdout(), "total lag: {total_lag} (end = last stable offset, read_committed)")?;
    Ok(ExitCode::SUCCESS)
}
