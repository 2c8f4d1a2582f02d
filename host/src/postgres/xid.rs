//! The global ids of the PostgreSQL sink's prepared transactions, and how Kafka's evidence
//! decides each one.
//!
//! Epoch N of instance I prepares at most one transaction, named
//! `weir:<pipeline>:<instance>:<N>:<lineage>` (PostgreSQL allows 199 bytes). Its Kafka
//! transaction commits the source offsets with metadata naming the checkpoint and the
//! transactional id (`weir:ckpt=N;…;txn=<prefix>-<instance>-<slot>`, [`CheckpointMetadata`]), on
//! every partition the epoch's tasks read. An instance never begins epoch N+1 before epoch N's
//! prepared transaction is committed (or, when its Kafka transaction failed, before its next
//! start has rolled it back), so a group offset that an instance committed at checkpoint M ≥ N
//! proves its epoch N committed in Kafka: the prepared transaction is committed. Otherwise it is
//! rolled back, but only by whoever can be sure that its Kafka transaction can no longer
//! commit: the instance itself once its start fenced its transactional ids, or another instance
//! once the group no longer counts that instance as a member (a departed member's offset
//! commits are refused, KIP-447), after a stable fetch of the group's offsets.

use std::collections::BTreeMap;

use crate::kafka::{CheckpointMetadata, GroupOffset};
use crate::types::{CheckpointId, TaskId};

/// PostgreSQL's limit on a prepared transaction's global id: 200 bytes with the terminator.
pub const MAX_GID_LEN: usize = 199;

/// What names one prepared transaction of the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Xid {
    /// The pipeline's `name`.
    pub pipeline: String,
    /// The instance whose epoch it is (`weir run --instance`).
    pub instance: String,
    /// The epoch (its checkpoint id).
    pub epoch: CheckpointId,
    /// The pipeline's lineage when the epoch ran.
    pub lineage: String,
}

impl Xid {
    /// The global id, `weir:<pipeline>:<instance>:<epoch>:<lineage>`.
    pub fn gid(&self) -> String {
        format!("{}{}:{}:{}", prefix(&self.pipeline), self.instance, self.epoch.0, self.lineage)
    }

    /// Reads a global id written by [`Xid::gid`]; `None` for any other.
    pub fn parse(gid: &str) -> Option<Self> {
        let mut fields = gid.strip_prefix("weir:")?.splitn(4, ':');
        let pipeline = fields.next()?.to_owned();
        let instance = fields.next()?.to_owned();
        let epoch = CheckpointId(fields.next()?.parse().ok()?);
        let lineage = fields.next()?.to_owned();
        Some(Xid { pipeline, instance, epoch, lineage })
    }
}

/// The start of the global ids of `pipeline`'s prepared transactions (names hold no `:`).
pub fn prefix(pipeline: &str) -> String {
    format!("weir:{pipeline}:")
}

/// What to do with a prepared transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// Its epoch committed in Kafka: `COMMIT PREPARED`.
    Commit,
    /// Its epoch did not commit and cannot any more: `ROLLBACK PREPARED`.
    Rollback,
    /// Its instance may still commit it: leave it to that instance.
    Undecided,
}

/// Decides `xid` from `group`, the group's committed offsets of every source partition (fetched
/// stable, KIP-447). `txn_prefix` is `sink.transactional_id_prefix`; `settled` tells whether the
/// instance's Kafka transactions can no longer commit (its own start fenced them, or it is no
/// member of the group).
pub fn decide(
    xid: &Xid,
    group: &BTreeMap<TaskId, GroupOffset>,
    txn_prefix: &str,
    settled: impl Fn(&str) -> bool,
) -> Resolution {
    let ours = format!("{txn_prefix}-{}-", xid.instance);
    let committed = group.values().filter_map(|offset| CheckpointMetadata::parse(&offset.metadata)).any(|metadata| {
        let same_lineage =
            metadata.lineage.as_ref().is_some_and(|l| l.pipeline == xid.pipeline && l.lineage == xid.lineage);
        let same_instance = metadata
            .transactional_id
            .as_deref()
            .and_then(|id| id.strip_prefix(&ours))
            .is_some_and(|slot| !slot.is_empty() && slot.bytes().all(|b| b.is_ascii_digit()));
        same_lineage && same_instance && metadata.checkpoint >= xid.epoch
    });
    if committed {
        Resolution::Commit
    } else if settled(&xid.instance) {
        Resolution::Rollback
    } else {
        Resolution::Undecided
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::Lineage;

    fn xid(instance: &str, epoch: u64) -> Xid {
        Xid { pipeline: "delays".into(), instance: instance.into(), epoch: CheckpointId(epoch), lineage: "l1".into() }
    }

    fn group(entries: &[(i32, u64, &str, &str)]) -> BTreeMap<TaskId, GroupOffset> {
        entries
            .iter()
            .map(|(partition, ckpt, lineage, txn)| {
                let metadata = CheckpointMetadata {
                    checkpoint: CheckpointId(*ckpt),
                    lineage: Some(Lineage { pipeline: "delays".into(), lineage: (*lineage).into() }),
                    transactional_id: Some((*txn).into()),
                    watermark: None,
                };
                (TaskId::new("flights", *partition), GroupOffset { offset: 10, metadata: metadata.encode() })
            })
            .collect()
    }

    #[test]
    fn gids_round_trip_and_others_are_not_read() {
        let x = xid("host-1", 42);
        assert_eq!(x.gid(), "weir:delays:host-1:42:l1");
        assert_eq!(Xid::parse(&x.gid()), Some(x));
        assert_eq!(Xid::parse("weir:delays:host-1:x:l1"), None);
        assert_eq!(Xid::parse("other:delays:host-1:1:l1"), None);
    }

    #[test]
    fn an_offset_of_the_instance_at_or_after_the_epoch_commits_it() {
        let never = |_: &str| false;
        // Its own offset of that checkpoint, on any partition.
        let g = group(&[(0, 7, "l1", "delays-b-0"), (1, 42, "l1", "delays-a-0")]);
        assert_eq!(decide(&xid("a", 42), &g, "delays", never), Resolution::Commit);
        // A later checkpoint of the instance: epoch 42 was resolved before it began.
        let g = group(&[(0, 45, "l1", "delays-a-1")]);
        assert_eq!(decide(&xid("a", 42), &g, "delays", never), Resolution::Commit);
        // Another instance's, another lineage's, or an instance whose name extends this one's.
        for g in [
            group(&[(0, 50, "l1", "delays-b-0")]),
            group(&[(0, 50, "l0", "delays-a-0")]),
            group(&[(0, 50, "l1", "delays-a-x-0")]),
            group(&[(0, 41, "l1", "delays-a-1")]),
        ] {
            assert_eq!(decide(&xid("a", 42), &g, "delays", never), Resolution::Undecided);
            assert_eq!(decide(&xid("a", 42), &g, "delays", |i| i == "a"), Resolution::Rollback);
        }
    }
}
