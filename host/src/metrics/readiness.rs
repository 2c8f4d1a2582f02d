//! Readiness: whether a pipeline does its work now, for `GET /readyz` (`weir run --metrics`,
//! `weir serve`). It is judged from what the pipeline's metrics already know — its state, the
//! consumer group's assignment, a restore in progress, when its work was last all committed,
//! and whether the cluster answers — never by asking the pipeline's threads, so a probe cannot
//! stall the record path, and a stuck runner shows as not ready instead of hanging the probe.
//!
//! - [`Reason`]: why a pipeline is not ready, in order of precedence.
//! - [`PipelineReadiness`], [`Readiness`]: one pipeline's verdict, and a process's (or a `weir
//!   serve` node's) over all of its pipelines, with the rules: the JSON `/readyz` answers.
//! - [`Signals`]: what the runner and the sampler report for it, kept in the pipeline's metrics.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;
use utoipa::ToSchema;

use super::pipeline::PipelineState;
use super::view::ErrorView;

/// Checkpoint intervals a pipeline may go without committing its work before it is not ready
/// ([`Reason::CheckpointOverdue`]). A checkpoint is due every interval; three let one commit
/// take up to two intervals (a slow broker fsync, a changelog flush after a large epoch) without
/// readiness flapping, while a runner that is stuck shows within seconds.
pub const OVERDUE_INTERVALS: u32 = 3;

/// The shortest time a pipeline may go without committing its work before it is not ready,
/// whatever its interval: with the short intervals of tests and latency-minded pipelines
/// (tens of milliseconds), three intervals would turn an ordinary pause — a rebalance, a
/// leader election, a busy machine — into a failed probe.
pub const MIN_OVERDUE: Duration = Duration::from_secs(10);

/// How long a pipeline with checkpoint interval `interval` may go without committing its work
/// before it is not ready: [`OVERDUE_INTERVALS`] intervals, at least [`MIN_OVERDUE`].
pub fn overdue_after(interval: Duration) -> Duration {
    interval.saturating_mul(OVERDUE_INTERVALS).max(MIN_OVERDUE)
}

/// Why a pipeline is not ready. A pipeline reports the first that applies, in this order
/// (which is also how a process's `reason` is picked among its pipelines').
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Stopped by an error that needs a human (state `failed`).
    Failed,
    /// Stopped on request, or stopping (state `stopped`).
    Stopped,
    /// No broker of the pipeline's cluster answers (see `Readiness`).
    BrokerUnreachable,
    /// Failed with a retriable error; recovery runs again after a back-off (state
    /// `recovering`), e.g. a record that fails its transform under `on_error = "fail"`.
    Recovering,
    /// Loading its transforms, checking the cluster, fencing, recovering its checkpoint (state
    /// `starting`); under `weir serve` also a pipeline not started on this node yet.
    Starting,
    /// Restoring the state of partitions the group assigned from the changelog.
    Restoring,
    /// Running, but the consumer group has not assigned its partitions yet.
    Joining,
    /// Work read longer ago than 3 checkpoint intervals, at least 10 s (`overdue_after`), is
    /// still not committed.
    CheckpointOverdue,
}

/// One pipeline's readiness.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PipelineReadiness {
    /// The pipeline's name (`<tenant>.<pipeline>` under `weir serve`).
    pub name: String,
    /// Whether it is ready.
    pub ready: bool,
    /// Why not; null when ready.
    pub reason: Option<Reason>,
    /// The reason in words, with what it is about (the last error, how long, how many
    /// partitions); null when ready.
    pub detail: Option<String>,
}

impl PipelineReadiness {
    /// Pipeline `name` that has no metrics yet: it has not started in this process.
    pub fn not_started(name: String) -> Self {
        Self {
            name,
            ready: false,
            reason: Some(Reason::Starting),
            detail: Some("not started in this process yet".to_owned()),
        }
    }
}

// The doc comments of the types `/readyz` answers are also `weir serve`'s OpenAPI description:
// plain text, no intra-doc links.

/// A process's readiness: the body of `GET /readyz`, answered with 200 when `ready`, else 503.
///
/// Rules: a pipeline is ready when it is `running`, the consumer group has given it its
/// partitions (possibly none: an instance beyond the partition count stands by) and their state
/// is restored, it has completed a checkpoint round since it started (committed, or found
/// nothing to commit), its cluster answers, and none of its work has been left uncommitted for longer
/// than 3 checkpoint intervals, at least 10 s (`overdue_after`). An idle pipeline commits no
/// checkpoint, yet is current: the runner reports each round in which it finds nothing to
/// commit. Otherwise its reason is the first `Reason` that applies. A process is ready when
/// every pipeline it judges is.
///
/// A pipeline's cluster is unreachable from the moment a request to it finds no broker to
/// answer (`kafka::is_unreachable`: the metrics sampler's request, made once a second with its
/// own client, or the runner's consumer reporting every broker connection down) until a request
/// sent after that moment is answered.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct Readiness {
    /// Whether every pipeline judged is ready (and, under `weir run`, the pipeline has
    /// registered: a process without one yet is `starting`).
    pub ready: bool,
    /// The first reason, in the order of `Reason`, among the pipelines that are not ready; null
    /// when ready.
    pub reason: Option<Reason>,
    /// How many pipelines were judged.
    pub total: usize,
    /// How many pipelines are not ready, by reason; empty when ready.
    pub not_ready: BTreeMap<Reason, usize>,
    /// Each pipeline judged, in start order (under `weir serve`: by tenant, then name). Left
    /// out where the caller may not learn pipeline names (`weir serve` without the admin
    /// token).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipelines: Option<Vec<PipelineReadiness>>,
}

impl Readiness {
    /// The readiness of a process that judges `pipelines`: ready when each of them is (so with
    /// none, ready).
    pub fn of(pipelines: Vec<PipelineReadiness>) -> Self {
        let mut not_ready = BTreeMap::new();
        for reason in pipelines.iter().filter_map(|p| p.reason) {
            *not_ready.entry(reason).or_insert(0) += 1;
        }
        Self {
            ready: not_ready.is_empty(),
            reason: not_ready.keys().next().copied(),
            total: pipelines.len(),
            not_ready,
            pipelines: Some(pipelines),
        }
    }

    /// A `weir run` process whose pipeline has not registered yet (its first moments): not
    /// ready, `starting`.
    pub fn starting() -> Self {
        Self {
            ready: false,
            reason: Some(Reason::Starting),
            total: 0,
            not_ready: BTreeMap::new(),
            pipelines: Some(vec![]),
        }
    }

    /// The same verdict and counts without the pipelines' names and details: for a caller who
    /// may not learn which pipelines run.
    pub fn without_pipelines(self) -> Self {
        Self { pipelines: None, ..self }
    }
}

/// What readiness needs to know of a pipeline beyond its state and last error, reported by its
/// runner and the sampler ([`super::PipelineMetrics`]).
#[derive(Debug)]
pub(super) struct Signals {
    /// How many source partitions the group's last assignment left the pipeline; `None` from a
    /// start until its first assignment is applied.
    pub assigned: Option<usize>,
    /// A restore in progress: of how many partitions, since when.
    pub restoring: Option<(usize, Instant)>,
    /// When the pipeline last had no work uncommitted: a checkpoint committed, the runner found
    /// nothing to commit, or an assignment was applied.
    pub current_at: Instant,
    /// Whether a checkpoint round (a commit, or a round with nothing to commit) has completed
    /// since the pipeline last entered a state: until then a start that fails again within the
    /// overdue limit (a transform failing every record, say) would read as ready between its
    /// recoveries.
    pub checkpointed: bool,
    /// The cluster did not answer: since when, when last, and the last error.
    pub unreachable: Option<Unreachable>,
    /// `checkpoint.interval_ms`.
    pub checkpoint_interval: Duration,
}

/// A cluster that does not answer.
#[derive(Debug)]
pub(super) struct Unreachable {
    pub since: Instant,
    pub last: Instant,
    pub error: String,
}

impl Signals {
    pub fn new(checkpoint_interval: Duration) -> Self {
        Self {
            assigned: None,
            restoring: None,
            current_at: Instant::now(),
            checkpointed: false,
            unreachable: None,
            checkpoint_interval,
        }
    }

    /// The pipeline entered `state`: what the runner reported of its previous run no longer
    /// holds.
    pub fn entered(&mut self, state: PipelineState) {
        self.restoring = None;
        self.checkpointed = false;
        if state == PipelineState::Running {
            self.current_at = Instant::now();
        } else {
            self.assigned = None;
        }
    }

    /// The reason a pipeline in `state`, whose last error is `last_error`, is not ready at
    /// `now`, with its detail; `None` when it is ready.
    pub fn judge(
        &self,
        state: PipelineState,
        last_error: Option<&ErrorView>,
        now: Instant,
    ) -> Option<(Reason, String)> {
        let error = || last_error.map_or_else(|| "no error recorded".to_owned(), |e| e.message.clone());
        let seconds = |since: Instant| now.saturating_duration_since(since).as_secs_f64();
        match state {
            PipelineState::Failed => return Some((Reason::Failed, error())),
            PipelineState::Stopped => return Some((Reason::Stopped, "stopped on request".to_owned())),
            _ => {}
        }
        if let Some(unreachable) = &self.unreachable {
            let detail =
                format!("no broker has answered for {:.0} s: {}", seconds(unreachable.since), unreachable.error);
            return Some((Reason::BrokerUnreachable, detail));
        }
        match state {
            PipelineState::Recovering => {
                return Some((Reason::Recovering, format!("failed; recovering after a back-off: {}", error())));
            }
            PipelineState::Starting => {
                let detail = "loading the transforms, checking the cluster, recovering the last checkpoint";
                return Some((Reason::Starting, detail.to_owned()));
            }
            _ => {}
        }
        if let Some((partitions, since)) = self.restoring {
            let detail = format!(
                "restoring the state of {partitions} partition(s) from the changelog, for {:.0} s",
                seconds(since)
            );
            return Some((Reason::Restoring, detail));
        }
        if self.assigned.is_none() {
            return Some((Reason::Joining, "waiting for the consumer group to assign partitions".to_owned()));
        }
        if !self.checkpointed {
            let detail = format!(
                "running; ready after its first checkpoint round since the start (checkpoint.interval_ms = {})",
                self.checkpoint_interval.as_millis()
            );
            return Some((Reason::Starting, detail));
        }
        let limit = overdue_after(self.checkpoint_interval);
        let uncommitted = now.saturating_duration_since(self.current_at);
        if uncommitted > limit {
            let detail = format!(
                "work read {:.0} s ago is not committed yet (checkpoint.interval_ms = {}; not ready after {} s)",
                uncommitted.as_secs_f64(),
                self.checkpoint_interval.as_millis(),
                limit.as_secs()
            );
            return Some((Reason::CheckpointOverdue, detail));
        }
        None
    }
}

#[cfg(test)]
mod tests;
