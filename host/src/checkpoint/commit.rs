//! An epoch's commit on a thread of its own: under exactly-once, once epoch N's output is
//! delivered (the coordinator flushes it first, so that it precedes N+1's in every partition),
//! N's pre-commit (changelog records and their flush, offsets into T_N), `commit_transaction`, the PostgreSQL table's `COMMIT PREPARED` and
//! the apply to RocksDB run while epoch N+1 processes on the next producer slot (DESIGN.md,
//! "Exactly-once protocol": barrier N+k-1 waits for T_N, and a checkpoint is applied only after
//! its commit, in epoch order).
//!
//! [`InFlight::start`] hands the sealed checkpoint to the thread; [`InFlight::settle`] waits for
//! it and gives back the PostgreSQL connection and the outcome. The coordinator settles before
//! the next barrier, so at most one epoch commits at a time and they apply in order.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::consumer::ConsumerGroupMetadata;

use super::fault::{FaultPoint, inject};
use super::protocol::{self, Sealed};
use crate::error::PipelineError;
use crate::kafka::{Changelog, Lineage, ProducerSlot};
use crate::metrics::{CheckpointFigures, PipelineMetrics};
use crate::postgres::PostgresSink;
use crate::state::{StateDb, TaskOverlays};
use crate::types::CheckpointId;

/// What one checkpoint did, for its `checkpoint committed` log line and the metrics: the
/// epoch's figures and the phases timed before the commit started.
#[derive(Debug, Clone)]
pub struct Report {
    /// The checkpoint.
    pub id: CheckpointId,
    /// Input records of the epoch.
    pub records: u64,
    /// Key and value bytes of the epoch's output.
    pub output_bytes: u64,
    /// Key and value bytes of the epoch's state writes.
    pub state_bytes: usize,
    /// Changelog records the checkpoint writes.
    pub changelog_records: usize,
    /// When the epoch began.
    pub epoch_started: Instant,
    /// When the barrier was taken.
    pub barrier_at: Instant,
    /// Waiting for the previous epoch's commit before the barrier.
    pub wait: Duration,
    /// The barrier, and the PostgreSQL table's rows written and prepared.
    pub barrier: Duration,
    /// How long processing paused for this checkpoint: the wait, the barrier, and whatever of
    /// the commit ran before processing went on (all of it unless exactly-once).
    pub stall: Duration,
}

impl Report {
    /// Logs the committed checkpoint with its phases and reports them to `metrics`.
    pub fn committed(&self, metrics: &PipelineMetrics, pre_commit: Duration, commit: Duration, apply: Duration) {
        let total = self.barrier_at.elapsed();
        let us = |d: Duration| d.as_micros() as u64;
        tracing::info!(
            checkpoint = %self.id,
            records = self.records,
            output_bytes = self.output_bytes,
            state_bytes = self.state_bytes,
            changelog_records = self.changelog_records,
            epoch_ms = (self.barrier_at - self.epoch_started).as_millis() as u64,
            // Barrier to apply: how long the checkpoint itself took, then its phases; stall_us is
            // the part of it (and of the wait for the previous one) that processing waited for.
            checkpoint_us = us(total),
            stall_us = us(self.stall),
            wait_us = us(self.wait),
            barrier_us = us(self.barrier),
            pre_commit_us = us(pre_commit),
            commit_us = us(commit),
            apply_us = us(apply),
            "checkpoint committed"
        );
        metrics.checkpoint(&CheckpointFigures {
            id: self.id,
            total,
            stall: self.stall,
            barrier: self.barrier,
            pre_commit,
            commit,
            apply,
            records: self.records,
            output_bytes: self.output_bytes,
            state_bytes: self.state_bytes as u64,
        });
    }
}

/// Everything the commit of one sealed epoch needs, moved to its thread.
pub struct Commit {
    /// The checkpoint, its changelog records and offsets.
    pub sealed: Sealed,
    /// The epoch's producer slot, whose transaction T_N is open.
    pub producer: Arc<ProducerSlot>,
    /// The source consumer's group metadata at the barrier (KIP-447).
    pub group: ConsumerGroupMetadata,
    /// The changelog topic.
    pub changelog: Changelog,
    /// The pipeline's lineage, in the offsets' metadata.
    pub lineage: Lineage,
    /// The state database the checkpoint is applied to.
    pub db: Arc<StateDb>,
    /// Every task's overlays, which drop the sealed epoch once it is applied.
    pub overlays: Vec<Arc<Mutex<TaskOverlays>>>,
    /// With rows this epoch: the PostgreSQL connection and the prepared transaction's id,
    /// committed once Kafka's transaction did.
    pub prepared: Option<(PostgresSink, String)>,
    /// Bound of each Kafka call (`checkpoint.timeout_ms`).
    pub timeout: Duration,
    /// The figures for the log line.
    pub report: Report,
    /// Where the phases are reported.
    pub metrics: Arc<PipelineMetrics>,
}

impl Commit {
    /// Pre-commit, commit, `COMMIT PREPARED`, apply.
    fn run(&mut self) -> Result<(), PipelineError> {
        let id = self.sealed.checkpoint.id;
        let started = Instant::now();
        protocol::pre_commit(
            &self.producer,
            &self.group,
            &self.changelog,
            &mut self.sealed,
            &self.lineage,
            self.timeout,
        )?;
        let pre_committed = Instant::now();
        protocol::commit(&self.producer, id, self.timeout)?;
        if let Some((sink, gid)) = &mut self.prepared {
            // Kafka decided: a failure here leaves the decision to the next start.
            sink.db().finish_prepared(gid, true)?;
            inject(FaultPoint::AfterCommitPrepared, id);
        }
        let committed = Instant::now();
        protocol::apply(&self.db, &self.overlays, &self.sealed.checkpoint)?;
        self.report.committed(&self.metrics, pre_committed - started, committed - pre_committed, committed.elapsed());
        Ok(())
    }
}

/// What a commit thread hands back.
struct Committed {
    /// The PostgreSQL connection it used, if the epoch had rows.
    postgres: Option<PostgresSink>,
    result: Result<(), PipelineError>,
}

/// An epoch committing on its thread.
pub struct InFlight {
    /// Its checkpoint.
    pub id: CheckpointId,
    /// Its producer slot, which no later epoch may begin a transaction on before it settled.
    pub slot: usize,
    thread: JoinHandle<Committed>,
}

impl InFlight {
    /// Starts committing `commit` (of the epoch on producer slot `slot`) on a thread.
    ///
    /// # Errors
    /// [`PipelineError::Refused`] when the system cannot start a thread.
    pub fn start(mut commit: Commit, slot: usize) -> Result<Self, PipelineError> {
        let id = commit.sealed.checkpoint.id;
        // The runner's span (`weir serve` names the pipeline in it) covers the commit's log lines.
        let span = tracing::Span::current();
        let thread = std::thread::Builder::new()
            .name("weir-commit".into())
            .spawn(move || {
                let _span = span.enter();
                let result = commit.run();
                Committed { postgres: commit.prepared.map(|(sink, _)| sink), result }
            })
            .map_err(|e| {
                PipelineError::Refused(format!("cannot start the thread that commits checkpoint {id}: {e}"))
            })?;
        Ok(Self { id, slot, thread })
    }

    /// Whether the commit ended, so that [`InFlight::settle`] would not wait.
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Waits for the commit; the PostgreSQL connection it used, and its outcome.
    pub fn settle(self) -> (Option<PostgresSink>, Result<(), PipelineError>) {
        match self.thread.join() {
            Ok(Committed { postgres, result }) => (postgres, result),
            Err(_) => (None, Err(PipelineError::Bug(format!("the thread committing checkpoint {} panicked", self.id)))),
        }
    }
}
