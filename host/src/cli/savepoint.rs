//! `weir savepoint <pipeline.toml> <dir>`: a portable copy of a pipeline's committed state.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use weir::{
    Admin, Changelog, ChangelogReader, PipelineConfig, StateDb, TaskId, TopicCheck, savepoint_checkpoint,
    take_savepoint, write_savepoint,
};

#[derive(Debug, Args)]
pub struct SavepointArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    /// A new (or empty) directory to write the savepoint into.
    dir: PathBuf,
    /// Bound of each Kafka call, and of a read without progress, in seconds (1 to 3600).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout_s: u64,
}

pub fn execute(args: SavepointArgs) -> anyhow::Result<ExitCode> {
    let config = PipelineConfig::from_file(&args.pipeline)?;
    let timeout = Duration::from_secs(args.timeout_s);
    let admin = Admin::new(&config.source.cluster, &config.source.consumer)?;
    let names: Vec<&str> = config.source.topics.iter().map(String::as_str).collect();
    let mut tasks = Vec::new();
    let checks = admin.topics(&names).with_context(|| {
        format!("reading the metadata of source.topics from {} (is the broker up?)", config.source.cluster)
    })?;
    for (topic, check) in checks {
        if let TopicCheck::Exists(partitions) = check {
            tasks.extend((0..partitions).map(|partition| TaskId::new(topic.clone(), partition)));
        }
    }
    let changelog = Changelog::new(&config.state.changelog_topic, &config.source.topics);
    let reader = ChangelogReader::new(&config.sink.cluster, &config.sink.producer, changelog, &config.group_id())?;
    // The components are named when the state directory is at hand (it may be on another host).
    let components = StateDb::open_read_only(&config.state.dir).and_then(|db| db.components()).unwrap_or_default();
    let taken = take_savepoint(&reader, &tasks, &config.name, components, timeout)?;
    write_savepoint(&taken, &args.dir)?;
    let entries: u64 = taken.manifest.tasks.iter().map(|t| t.entries).sum();
    let bytes: u64 = taken.manifest.tasks.iter().map(|t| t.bytes).sum();
    writeln!(
        std::io::stdout(),
        "savepoint {} of pipeline {} in {}: {} tasks, {entries} records, {bytes} bytes, as of checkpoint {}",
        taken.manifest.id,
        config.name,
        args.dir.display(),
        taken.manifest.tasks.len(),
        savepoint_checkpoint(&taken)
    )?;
    Ok(ExitCode::SUCCESS)
}
