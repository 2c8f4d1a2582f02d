//! Fault injection for tests: abort the process, like SIGKILL, at a named point of the protocol.
//!
//! Set `WEIR_FAULT=<point>[@<checkpoint>][:sleep=<ms>]`. The process aborts the first time it
//! reaches `<point>` (of that checkpoint, when given) — or, with `:sleep=<ms>`, stalls there
//! that long once (to let the broker time a transaction out, or a test look at an open one).
//! Points: `mid-epoch` (after a batch of an epoch, before its barrier), `after-pre-commit`,
//! `after-commit` (before apply), and with a PostgreSQL sink `before-prepare`, `after-prepare` and
//! `after-commit-prepared`, `restore` (before changelog records are replayed into the
//! state of assigned partitions; its checkpoint is the one the state directory held, 0 for an
//! empty one). Unset, it costs one branch per call.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::types::CheckpointId;

/// The environment variable that arms a fault.
pub const FAULT_ENV: &str = "WEIR_FAULT";

/// A point of the protocol where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// After a batch was processed and its output sent, before the epoch's barrier.
    MidEpoch,
    /// After pre-commit (changelog written, sink flushed, offsets added to the transaction),
    /// before `commit_transaction`.
    AfterPreCommit,
    /// PostgreSQL sink: after the epoch's rows were written, before `PREPARE TRANSACTION`.
    BeforePrepare,
    /// PostgreSQL sink: after `PREPARE TRANSACTION`, before the Kafka pre-commit.
    AfterPrepare,
    /// After `commit_transaction` succeeded, before the checkpoint is applied to RocksDB (and
    /// before the PostgreSQL sink's `COMMIT PREPARED`).
    AfterCommit,
    /// PostgreSQL sink: after `COMMIT PREPARED`, before the checkpoint is applied to RocksDB.
    AfterCommitPrepared,
    /// Before a restore replays changelog records into the state (only when there are some).
    Restore,
}

impl FaultPoint {
    fn name(self) -> &'static str {
        match self {
            FaultPoint::MidEpoch => "mid-epoch",
            FaultPoint::AfterPreCommit => "after-pre-commit",
            FaultPoint::BeforePrepare => "before-prepare",
            FaultPoint::AfterPrepare => "after-prepare",
            FaultPoint::AfterCommit => "after-commit",
            FaultPoint::AfterCommitPrepared => "after-commit-prepared",
            FaultPoint::Restore => "restore",
        }
    }
}

/// A parsed `WEIR_FAULT`.
#[derive(Debug, PartialEq, Eq)]
struct Fault {
    point: String,
    checkpoint: Option<u64>,
    sleep: Option<Duration>,
}

fn parse(value: &str) -> Option<Fault> {
    let (target, sleep) = match value.split_once(":sleep=") {
        Some((target, ms)) => (target, Some(Duration::from_millis(ms.parse().ok()?))),
        None => (value, None),
    };
    let (point, checkpoint) = match target.split_once('@') {
        Some((point, id)) => (point, Some(id.parse().ok()?)),
        None => (target, None),
    };
    Some(Fault { point: point.to_owned(), checkpoint, sleep })
}

fn armed() -> Option<&'static Fault> {
    static ARMED: OnceLock<Option<Fault>> = OnceLock::new();
    ARMED.get_or_init(|| parse(&std::env::var(FAULT_ENV).ok()?)).as_ref()
}

/// Aborts (or stalls, once) if `WEIR_FAULT` names `point` (and `id`, when it names a checkpoint).
pub fn inject(point: FaultPoint, id: CheckpointId) {
    static STALLED: AtomicBool = AtomicBool::new(false);
    let Some(fault) = armed() else { return };
    if fault.point != point.name() || fault.checkpoint.is_some_and(|at| at != id.0) {
        return;
    }
    match fault.sleep {
        Some(duration) if !STALLED.swap(true, Ordering::Relaxed) => {
            eprintln!("{FAULT_ENV}: stalling {duration:?} at {} of checkpoint {id}", point.name());
            std::thread::sleep(duration);
        }
        Some(_) => {}
        None => {
            eprintln!("{FAULT_ENV}: aborting at {} of checkpoint {id}", point.name());
            std::process::abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_point_checkpoint_and_sleep() {
        let fault = |point: &str, checkpoint, sleep: Option<u64>| {
            Some(Fault { point: point.into(), checkpoint, sleep: sleep.map(Duration::from_millis) })
        };
        assert_eq!(parse("mid-epoch"), fault("mid-epoch", None, None));
        assert_eq!(parse("after-commit@3"), fault("after-commit", Some(3), None));
        assert_eq!(parse("after-pre-commit@2:sleep=5000"), fault("after-pre-commit", Some(2), Some(5000)));
        assert_eq!(parse("after-commit@x"), None);
    }
}
