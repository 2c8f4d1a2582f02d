//! `weir run`'s loop around the runner: start, run, and on a failure recover after back-off,
//! stop, or give up (see [`run`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::runner::Runner;
use crate::checkpoint::recovery;
use crate::checkpoint::savepoint::Savepoint;
use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::failure::Disposition;
use crate::metrics::{Metrics, PipelineState};
use crate::wasm::{ResourcePool, WasmEngine};

/// Longest pause between two recovery attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Options of `weir run` beyond the pipeline file.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Start even when the consumer group's offsets disagree with the changelog (someone reset
    /// them by hand); the changelog wins.
    pub ignore_group_offsets: bool,
    /// Start from this savepoint (`weir run --from-savepoint`): its state and positions replace
    /// the pipeline's, and its first checkpoint rewrites the changelog and the group's offsets. A
    /// pipeline whose lineage is already the savepoint's id started from it before and ignores it.
    /// Only a process that is given every partition of the pipeline loads it.
    pub from_savepoint: Option<Savepoint>,
    /// Start from `from_savepoint` even when it holds state the pipeline would not restore (an
    /// operator it lacks, a partition it does not read), dropping that state with a warning
    /// (`weir run --allow-non-restored-state`, Flink's flag); otherwise such a start is refused.
    pub allow_non_restored_state: bool,
    /// When the changelog topic lost state that the state directory still holds (it was deleted
    /// and created again), write that state into it with the next checkpoint, once it agrees
    /// with the consumer group's offsets (`weir run --reseed-changelog`); otherwise such a start
    /// is refused and the state directory kept.
    pub reseed_changelog: bool,
    /// Where the pipeline reports its metrics and state (see [`crate::metrics`]).
    pub metrics: Arc<Metrics>,
    /// This process's instance id (`weir run --instance`; [`default_instance`] when `None`): its
    /// `group.instance.id`, its transactional ids `<prefix>-<instance>-<slot>` and its state
    /// directory `<state.dir>/<instance>`.
    pub instance: Option<String>,
    /// Give up (return the error) after this many consecutive retriable failures with the same
    /// message, instead of recovering for ever; errors that heal themselves (a broker outage,
    /// [`Disposition::Retry`]'s `heals_itself`) are not counted. `None` retries for ever (`weir run`),
    /// `weir serve` sets its `max_identical_failures`.
    pub max_identical_failures: Option<u32>,
    /// Memory and CPU the pipeline's operators share with other pipelines' (`weir serve`: the
    /// tenant's); `None` for none.
    pub pool: Option<Arc<ResourcePool>>,
}

/// The instance id of a process started without `--instance`: the host name (from
/// `/proc/sys/kernel/hostname`, else `$HOSTNAME`), else `weir`. Stable across restarts on one
/// machine; two processes of one pipeline on one machine need an `--instance` each.
pub fn default_instance() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "weir".to_owned())
}

/// Checks an instance id: 1 to 100 characters of `A-Z a-z 0-9 . _ -` (it goes into
/// transactional ids, `group.instance.id` and a directory name).
///
/// # Errors
/// A message naming the rule.
pub fn check_instance(instance: &str) -> Result<(), String> {
    let valid = !instance.is_empty()
        && instance.len() <= 100
        && instance.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && instance != "."
        && instance != "..";
    if valid {
        Ok(())
    } else {
        Err(format!("instance id {instance:?} must be 1 to 100 characters of A-Z, a-z, 0-9, '.', '_' and '-'"))
    }
}

/// Runs the pipeline until `shutdown` is set, then commits the open epoch and returns (a
/// stop that comes while a failed batch is replayed record by record aborts the epoch instead,
/// see [`crate::wasm::OperatorLimits::stop`]).
///
/// Retriable failures ([`Disposition::Retry`]) run recovery again after an
/// exponential back-off (1 s doubling to 30 s), logging each attempt. A retriable failure once
/// `shutdown` is set ends the run instead, with `Ok`, after aborting the failed epoch's open
/// transaction (`init_transactions` on the instance's transactional ids, as recovery does): its
/// records are processed again at the next start, or by the partitions' next owner.
///
/// # Errors
/// A failure that needs a human: invalid configuration, a missing topic, a refused start-up
/// check, inconsistent offsets, a state database error, or a transform that cannot load; and
/// any failure of that abort (a broker that is down).
pub fn run(
    config: &PipelineConfig,
    engine: &WasmEngine,
    options: &RunOptions,
    shutdown: &Arc<AtomicBool>,
) -> Result<(), PipelineError> {
    let metrics = options.metrics.pipeline(config);
    let instance = options.instance.clone().unwrap_or_else(default_instance);
    check_instance(&instance)
        .map_err(|why| PipelineError::Refused(format!("{why} (weir run --instance)")))
        .inspect_err(|error| metrics.failed(error, false))?;
    let chain: Vec<_> = config
        .transforms
        .iter()
        .map(|t| Ok((Arc::new(engine.load(&t.wasm)?), t.clone())))
        .collect::<Result<_, PipelineError>>()
        .inspect_err(|error| metrics.failed(error, false))?;
    let mut backoff = Duration::from_secs(1);
    let mut repeated: Option<(String, u32)> = None;
    loop {
        let attempt = Instant::now();
        let committed = metrics.checkpoints_committed();
        metrics.set_state(PipelineState::Starting);
        // A savepoint applies until its first checkpoint commits: from then on the pipeline's
        // lineage is the savepoint's id, and every start ignores it.
        let result = Runner::start(config, &chain, options, &instance, shutdown, &metrics).and_then(|mut runner| {
            metrics.set_state(PipelineState::Running);
            runner.run(shutdown)
        });
        // Read once: a stop that lands between two reads must not skip both arms below.
        let stopping = shutdown.load(Ordering::Relaxed);
        // A run that committed a checkpoint made progress: a failure after it starts a new row.
        let progressed = metrics.checkpoints_committed() > committed;
        match result {
            Ok(()) => {
                metrics.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) if error.disposition() == Disposition::Stopped => {
                tracing::info!(pipeline = %config.name, "stopped during a record-by-record replay; the open epoch was aborted and is processed again at the next start");
                metrics.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) if error.disposition().retries() && stopping => {
                // A stop that meets a failure (a commit the broker aborted, a rebalance that
                // fenced it) still ends cleanly once the failed epoch's transaction is aborted:
                // now, rather than at the broker's `transaction.timeout.ms`, so that the
                // partitions' next owner is not held up by it.
                tracing::warn!(pipeline = %config.name, %error, "failed while stopping; the open epoch is not committed, and the next start processes it again");
                metrics.error_seen(&error);
                return match recovery::abort_open_transactions(config, &instance) {
                    Ok(()) => {
                        tracing::info!(pipeline = %config.name, "stopped after the failure (with exactly-once, after aborting the epoch's transaction, or completing it if its commit had reached the broker)");
                        metrics.set_state(PipelineState::Stopped);
                        Ok(())
                    }
                    Err(abort) => {
                        metrics.failed(&abort, false);
                        Err(abort)
                    }
                };
            }
            Err(error)
                if error.disposition().retries()
                    && !stopping
                    && !gives_up(&mut repeated, &error, progressed, options) =>
            {
                metrics.failed(&error, true);
                if attempt.elapsed() > MAX_BACKOFF {
                    backoff = Duration::from_secs(1);
                }
                tracing::error!(pipeline = %config.name, %error, retry_in = ?backoff, "pipeline failed; recovering after back-off");
                sleep_unless(shutdown, backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            // Disposition::StopPipeline or Bug, or a retry past max_identical_failures.
            Err(error) => {
                metrics.failed(&error, false);
                return Err(error);
            }
        }
    }
}

/// Counts `error` in `repeated` (its message and how many times in a row: since a run that
/// `progressed`, committing a checkpoint, before it failed) and tells whether it reached
/// `options.max_identical_failures`.
fn gives_up(
    repeated: &mut Option<(String, u32)>,
    error: &PipelineError,
    progressed: bool,
    options: &RunOptions,
) -> bool {
    if progressed {
        *repeated = None;
    }
    if error.disposition() == (Disposition::Retry { heals_itself: true }) {
        // A broker outage must not turn every pipeline to failed: recovery waits it out.
        *repeated = None;
        return false;
    }
    let message = error.to_string();
    let count = match repeated.take() {
        Some((last, count)) if last == message => count + 1,
        _ => 1,
    };
    *repeated = Some((message, count));
    let give_up = options.max_identical_failures.is_some_and(|max| count >= max);
    if give_up {
        tracing::error!(%error, failures = count, "the pipeline failed the same way {count} times in a row; giving up");
    }
    give_up
}

fn sleep_unless(shutdown: &AtomicBool, duration: Duration) {
    let until = Instant::now() + duration;
    while Instant::now() < until && !shutdown.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_failures_in_a_row_give_up_and_a_run_that_committed_breaks_the_row() {
        let options = RunOptions { max_identical_failures: Some(3), ..RunOptions::default() };
        let error = || PipelineError::Refused("the same failure".into());
        let other = PipelineError::Refused("another failure".into());
        let mut repeated = None;
        assert!(!gives_up(&mut repeated, &error(), false, &options));
        assert!(!gives_up(&mut repeated, &error(), false, &options));
        // A run that committed a checkpoint in between: the row starts again.
        assert!(!gives_up(&mut repeated, &error(), true, &options));
        assert!(!gives_up(&mut repeated, &error(), false, &options));
        assert!(gives_up(&mut repeated, &error(), false, &options), "third in a row");
        // Another failure in between breaks the row as well.
        let mut repeated = None;
        assert!(!gives_up(&mut repeated, &error(), false, &options));
        assert!(!gives_up(&mut repeated, &other, false, &options));
        assert!(!gives_up(&mut repeated, &error(), false, &options));
        assert!(!gives_up(&mut repeated, &error(), false, &options));
    }
}
