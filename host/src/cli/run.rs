//! `weir run <pipeline.toml>`: runs a pipeline until SIGINT or SIGTERM.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use clap::Args;
use weir::checkpoint::protocol::PendingOverride;
use weir::config::PipelineConfig;
use weir::pipeline::{RunOptions, run};
use weir::wasm::{EngineConfig, WasmEngine};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The pipeline file (TOML; see docs/configuration.md).
    pipeline: PathBuf,
    /// Start even when the consumer group's offsets disagree with the state directory (they
    /// were reset by hand); the state directory's checkpoint wins.
    #[arg(long)]
    ignore_group_offsets: bool,
    /// Decide a pending checkpoint that the consumer group cannot decide (its offsets were
    /// deleted or overwritten): `committed` applies it, `aborted` discards it and replays its
    /// input. Look at the sink first: use `committed` only if the checkpoint's output is there.
    #[arg(long, value_name = "OUTCOME")]
    pending_checkpoint: Option<PendingOutcome>,
}

/// The values of `--pending-checkpoint`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PendingOutcome {
    Committed,
    Aborted,
}

pub fn execute(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = PipelineConfig::from_file(&args.pipeline)?;
    let engine = WasmEngine::new(&EngineConfig::with_default_cache())?;
    let shutdown = Arc::new(AtomicBool::new(false));
    watch_signals(shutdown.clone())?;
    tracing::info!(pipeline = %config.name, file = %args.pipeline.display(), "starting");
    let pending = args.pending_checkpoint.map(|outcome| match outcome {
        PendingOutcome::Committed => PendingOverride::Committed,
        PendingOutcome::Aborted => PendingOverride::Aborted,
    });
    run(&config, &engine, &RunOptions { ignore_group_offsets: args.ignore_group_offsets, pending }, &shutdown)?;
    Ok(ExitCode::SUCCESS)
}

/// Sets `shutdown` on the first SIGINT or SIGTERM; a second one exits at once.
fn watch_signals(shutdown: Arc<AtomicBool>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    std::thread::Builder::new().name("weir-signals".into()).spawn(move || {
        runtime.block_on(async move {
            let Ok(mut terminate) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
                return;
            };
            loop {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
                if shutdown.swap(true, Ordering::Relaxed) {
                    eprintln!("second signal: exiting without committing the open epoch");
                    std::process::exit(130);
                }
                tracing::info!("shutdown requested: finishing the open epoch");
            }
        });
    })?;
    Ok(())
}
