//! `weir run <pipeline.toml>`: runs a pipeline until SIGINT or SIGTERM.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use weir::{
    EngineConfig, MAX_WORKERS, Metrics, PipelineConfig, PipelineState, RunOptions, WasmEngine, read_savepoint,
    run_pipeline, start_sampler,
};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The pipeline file (TOML; see docs/configuration.md).
    pipeline: PathBuf,
    /// Start even when the consumer group's offsets disagree with the changelog (they were
    /// reset by hand); the changelog's positions win.
    #[arg(long)]
    ignore_group_offsets: bool,
    /// Start from the savepoint in DIR (made by `weir savepoint`): its state and source positions
    /// replace the pipeline's, and the first checkpoint writes them to the changelog and the
    /// consumer group. Works under the savepoint's pipeline name or another one.
    #[arg(long, value_name = "DIR")]
    from_savepoint: Option<PathBuf>,
    /// With --from-savepoint: start even when the savepoint holds state this pipeline would not
    /// restore (a transform renamed or removed, a source partition or topic it no longer reads),
    /// dropping that state with a warning that names it (Flink's flag). Without it such a start is
    /// refused, naming what would be dropped.
    #[arg(long, requires = "from_savepoint")]
    allow_non_restored_state: bool,
    /// The changelog topic was deleted (and created again, empty) while the state directory
    /// still holds the state: write that state into the changelog with the next checkpoint, once
    /// it agrees with the consumer group's offsets, and go on. Without it such a start is
    /// refused and the state directory kept (docs/configuration.md).
    #[arg(long)]
    reseed_changelog: bool,
    /// Serve Prometheus metrics (`/metrics`), the dashboard (`/`), its JSON (`/api/pipelines`)
    /// and the probes `/healthz` (alive) and `/readyz` (running, assigned, checkpoints current)
    /// at ADDRESS, e.g. `127.0.0.1:9464` (port 0 picks a free port; the log says which). See
    /// docs/observability.md.
    #[arg(long, value_name = "ADDRESS", value_parser = parse_address)]
    metrics: Option<SocketAddr>,
    /// With --metrics: when the pipeline stops on an error that needs a human, keep serving its
    /// dashboard, `/metrics` and `/api/pipelines` (state `failed`, the error and the failure
    /// history; `/readyz` answers 503) until SIGINT or SIGTERM, then exit with the failure's
    /// status. Without it the process exits at once, and the page goes with it.
    #[arg(long, requires = "metrics")]
    keep_serving: bool,
    /// This process's instance id, to run the pipeline in several processes (on one machine or
    /// many): each process is a static member of the pipeline's consumer group with this
    /// `group.instance.id`, uses the transactional ids `<prefix>-<ID>-<slot>` and the state
    /// directory `<state.dir>/<ID>`. Keep it across restarts; by default the host name (so two
    /// processes on one host need one each). 1 to 100 characters of A-Z a-z 0-9 . _ -
    #[arg(long, value_name = "ID", value_parser = parse_instance)]
    instance: Option<String>,
    /// Worker threads of this process, in place of the file's `runtime.workers` (one pipeline
    /// file can serve machines of several sizes). 1 to 1024; by default the available cores.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=MAX_WORKERS as i64))]
    workers: Option<u16>,
    /// Stop, rather than recover again, after the pipeline failed this many times in a row with
    /// the same error (a PostgreSQL sink whose database stays down, a transform that fails on
    /// every start; a run that commits a checkpoint before it fails starts the count again); by
    /// default it recovers for ever. A broker outage never counts.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    max_identical_failures: Option<u32>,
}

fn parse_instance(text: &str) -> Result<String, String> {
    weir::check_instance(text).map(|()| text.to_owned())
}

/// Parses `--metrics <host>:<port>`, resolving a host name to its first address.
fn parse_address(text: &str) -> Result<SocketAddr, String> {
    let usage = |why: String| format!("expected HOST:PORT, e.g. 127.0.0.1:9464, got {text:?}: {why}");
    text.to_socket_addrs()
        .map_err(|error| usage(error.to_string()))?
        .next()
        .ok_or_else(|| usage("the host name has no address".into()))
}

pub fn execute(args: RunArgs) -> anyhow::Result<ExitCode> {
    let mut config = PipelineConfig::from_file(&args.pipeline)?;
    if let Some(workers) = args.workers {
        config.runtime.workers = Some(workers.into());
    }
    let engine = WasmEngine::new(&EngineConfig::with_default_cache()?)?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let metrics = Arc::new(Metrics::default());
    let pipeline = metrics.pipeline(&config);
    let stopped = move || pipeline.state() == PipelineState::Stopped;
    watch_signals(shutdown.clone(), config.runtime.shutdown_grace, stopped)?;
    tracing::info!(pipeline = %config.name, file = %args.pipeline.display(), "starting");
    let from_savepoint = args.from_savepoint.as_deref().map(read_savepoint).transpose()?;
    if let Some(address) = args.metrics {
        start_sampler(&metrics)?;
        let bound = weir::serve_metrics(address, metrics.clone())
            .map_err(|error| anyhow::anyhow!("cannot serve metrics at {address} (--metrics): {error}"))?;
        tracing::info!(pipeline = %config.name, "serving metrics at http://{bound}/metrics and the dashboard at http://{bound}/");
    }
    let options = RunOptions {
        ignore_group_offsets: args.ignore_group_offsets,
        from_savepoint,
        allow_non_restored_state: args.allow_non_restored_state,
        reseed_changelog: args.reseed_changelog,
        metrics,
        instance: args.instance,
        max_identical_failures: args.max_identical_failures,
        pool: None,
    };
    let result = run_pipeline(&config, &engine, &options, &shutdown);
    if let Err(error) = &result
        && args.keep_serving
    {
        tracing::error!(pipeline = %config.name, %error, "pipeline failed; serving its dashboard until SIGINT or SIGTERM (--keep-serving)");
        while !shutdown.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    result?;
    Ok(ExitCode::SUCCESS)
}

/// The exit status of a `weir run` that did not stop within `runtime.shutdown_grace_ms`, as
/// `timeout(1)`'s.
const GRACE_EXPIRED: i32 = 124;

/// The exit status after a second SIGINT or SIGTERM: 128 + SIGINT, as a shell reports Ctrl-C.
const SECOND_SIGNAL: i32 = 130;

/// Sets `shutdown` on the first SIGINT or SIGTERM and gives the pipeline `grace`
/// (`runtime.shutdown_grace_ms`) to commit its open epoch and stop; past it, or at a second
/// signal, the process exits at once, committing nothing more. A pipeline that has `stopped`
/// (its open epoch committed) but whose Kafka clients are still closing past `grace` exits with
/// success: nothing is left to commit. That is as safe as a crash: the
/// open epoch's transaction is aborted by the broker (`transaction.timeout.ms`) or by the next
/// start's fencing, which processes the epoch again; a commit the broker had already taken is
/// found in the changelog by the next start's restore.
fn watch_signals(
    shutdown: Arc<AtomicBool>,
    grace: Duration,
    stopped: impl Fn() -> bool + Clone + Send + 'static,
) -> anyhow::Result<()> {
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
                    exit_now(SECOND_SIGNAL, "second signal: exiting without committing the open epoch");
                }
                tracing::info!(grace_ms = grace.as_millis() as u64, "shutdown requested: finishing the open epoch");
                let stopped = stopped.clone();
                std::thread::spawn(move || {
                    std::thread::sleep(grace);
                    if stopped() {
                        exit_now(0, "the pipeline stopped, but its Kafka clients were still closing past runtime.shutdown_grace_ms; exiting");
                    }
                    exit_now(
                        GRACE_EXPIRED,
                        &format!(
                            "error: the pipeline did not stop within runtime.shutdown_grace_ms = {} (is the broker \
                             reachable?); exiting without committing the open epoch, which the next start processes again",
                            grace.as_millis()
                        ),
                    );
                });
            }
        });
    })?;
    Ok(())
}

/// Prints `why` and ends the process with `status` at once: without running `atexit` handlers or
/// C++ static destructors, which RocksDB's and librdkafka's threads, still running, may use.
fn exit_now(status: i32, why: &str) -> ! {
    eprintln!("{why}");
    // SAFETY: `_exit` only ends the process; nothing of this process runs after it.
    unsafe { libc::_exit(status) }
}
