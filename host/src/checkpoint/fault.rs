//! Fault injection for tests: abort the process, like SIGKILL, at a named point of the protocol.
//!
//! Set `WEIR_FAULT=<point>` or `WEIR_FAULT=<point>@<checkpoint>`; the process aborts the first
//! time it reaches `<point>` (of that checkpoint). Points: `mid-epoch` (after a batch of an
//! epoch, before its barrier), `after-pre-commit`, `after-durable`, `after-commit` (before
//! apply). Nothing else reads this variable; unset, it costs one branch per call.

use std::sync::OnceLock;

use crate::types::CheckpointId;

/// The environment variable that arms a fault.
pub const FAULT_ENV: &str = "WEIR_FAULT";

/// A point of the protocol where a fault can be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// After a batch was processed and its output sent, before the epoch's barrier.
    MidEpoch,
    /// After pre-commit (sink flushed, offsets added to the transaction), before the durable write.
    AfterPreCommit,
    /// After the durable write of the pending checkpoint, before `commit_transaction`.
    AfterDurable,
    /// After `commit_transaction` succeeded, before the pending checkpoint is applied.
    AfterCommit,
}

impl FaultPoint {
    fn name(self) -> &'static str {
        match self {
            FaultPoint::MidEpoch => "mid-epoch",
            FaultPoint::AfterPreCommit => "after-pre-commit",
            FaultPoint::AfterDurable => "after-durable",
            FaultPoint::AfterCommit => "after-commit",
        }
    }
}

fn armed() -> Option<&'static (String, Option<u64>)> {
    static ARMED: OnceLock<Option<(String, Option<u64>)>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let value = std::env::var(FAULT_ENV).ok().filter(|v| !v.is_empty())?;
            Some(match value.split_once('@') {
                Some((point, id)) => (point.to_owned(), id.parse().ok()),
                None => (value, None),
            })
        })
        .as_ref()
}

/// Aborts the process if `WEIR_FAULT` names `point` (and `id`, when it names a checkpoint).
pub fn inject(point: FaultPoint, id: CheckpointId) {
    if let Some((name, at)) = armed()
        && name == point.name()
        && at.is_none_or(|at| at == id.0)
    {
        eprintln!("{FAULT_ENV}: aborting at {} of checkpoint {id}", point.name());
        std::process::abort();
    }
}
