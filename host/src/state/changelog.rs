//! The records of a pipeline's changelog topic (DESIGN.md, "State"): what a task's checkpoint
//! writes to its changelog partition, and what a restore reads back.
//!
//! One compacted partition per task. Keys are prefix-free by their first byte, so compaction
//! keeps the last record of each state key, of each operator's snapshot and of the task's
//! position independently:
//!
//! | key | value |
//! |---|---|
//! | `s` + full state key ([`super::state_prefix`] + the operator's key) | the value; a tombstone (null) deletes |
//! | `n` + `<operator>\0<topic>\0<partition BE u32>` | the operator's snapshot (possibly empty) |
//! | `p` + `<topic>\0<partition BE u32>` | next source offset (i64 BE), checkpoint id (u64 BE), lineage (UTF-8) |

use super::keys;
use crate::types::{CheckpointId, TaskId};

const STATE: u8 = b's';
const SNAPSHOT: u8 = b'n';
const POSITION: u8 = b'p';

/// One changelog record, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangelogEntry {
    /// A state write: full state key, `Some` puts, `None` (a tombstone) deletes.
    State {
        /// Full state key.
        key: Vec<u8>,
        /// The value, or `None` for a delete.
        value: Option<Vec<u8>>,
    },
    /// The latest snapshot of an operator that keeps in-memory state.
    Snapshot {
        /// The operator's name.
        operator: String,
        /// The task.
        task: TaskId,
        /// The snapshot's bytes.
        bytes: Vec<u8>,
    },
    /// Where the task's source partition continues after the checkpoint that wrote it.
    Position(Position),
}

/// A task's source position as of a checkpoint, with the lineage of the pipeline that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The task.
    pub task: TaskId,
    /// Next source offset to read.
    pub offset: i64,
    /// The checkpoint that committed it.
    pub checkpoint: CheckpointId,
    /// The lineage (a random id made with the pipeline's first state) that wrote it.
    pub lineage: String,
    /// The topic id (KIP-516) of the task's source topic when the offset was read: a topic
    /// deleted and created again has another, and the offset means nothing in it. Empty in
    /// records written before Weir recorded it.
    pub topic_id: String,
}

impl ChangelogEntry {
    /// Key and value (`None`: a tombstone) of the record.
    ///
    /// # Panics
    /// If an operator or topic name contains a NUL byte (see [`super::keys::state_prefix`]).
    pub fn encode(&self) -> (Vec<u8>, Option<Vec<u8>>) {
        match self {
            Self::State { key, value } => {
                let mut record_key = Vec::with_capacity(key.len() + 1);
                record_key.push(STATE);
                record_key.extend_from_slice(key);
                (record_key, value.clone())
            }
            Self::Snapshot { operator, task, bytes } => {
                let mut key = vec![SNAPSHOT];
                keys::push_operator_task(&mut key, operator, task);
                (key, Some(bytes.clone()))
            }
            Self::Position(Position { task, offset, checkpoint, lineage, topic_id }) => {
                let mut key = vec![POSITION];
                keys::push_task(&mut key, task);
                // offset, checkpoint, lineage, then (when known) NUL and the topic id: records
                // from before the topic id end after the lineage, which holds no NUL.
                let mut value = Vec::with_capacity(17 + lineage.len() + topic_id.len());
                value.extend_from_slice(&offset.to_be_bytes());
                value.extend_from_slice(&checkpoint.0.to_be_bytes());
                value.extend_from_slice(lineage.as_bytes());
                if !topic_id.is_empty() {
                    value.push(0);
                    value.extend_from_slice(topic_id.as_bytes());
                }
                (key, Some(value))
            }
        }
    }

    /// Decodes a record's key and value (`None`: a tombstone); `None` when Weir did not write it.
    pub fn decode(key: &[u8], value: Option<&[u8]>) -> Option<Self> {
        let (&kind, rest) = key.split_first()?;
        match (kind, value) {
            (STATE, value) => Some(Self::State { key: rest.to_vec(), value: value.map(<[u8]>::to_vec) }),
            (SNAPSHOT, Some(bytes)) => {
                let (operator, task) = keys::decode_operator_task(rest)?;
                Some(Self::Snapshot { operator, task, bytes: bytes.to_vec() })
            }
            (POSITION, Some(value)) if value.len() >= 16 => {
                let mut ids = value[16..].splitn(2, |&b| b == 0);
                Some(Self::Position(Position {
                    task: keys::decode_task(rest)?,
                    offset: keys::decode_i64(&value[..8])?,
                    checkpoint: CheckpointId(keys::decode_u64(&value[8..16])?),
                    lineage: String::from_utf8(ids.next()?.to_vec()).ok()?,
                    topic_id: String::from_utf8(ids.next().unwrap_or_default().to_vec()).ok()?,
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::state_prefix;
    use crate::state::test_util::task;

    #[test]
    fn entries_round_trip_and_keys_of_different_kinds_never_collide() {
        let mut state_key = state_prefix("dedupe", &task("orders", 3));
        state_key.extend_from_slice(b"k");
        let entries = [
            ChangelogEntry::State { key: state_key.clone(), value: Some(b"v".to_vec()) },
            ChangelogEntry::State { key: state_key, value: None },
            ChangelogEntry::Snapshot { operator: "dedupe".into(), task: task("orders", 3), bytes: Vec::new() },
            ChangelogEntry::Position(Position {
                task: task("orders", 3),
                offset: 42,
                checkpoint: CheckpointId(7),
                lineage: "abc".into(),
                topic_id: "0123456789abcdef0123456789abcdef".into(),
            }),
            ChangelogEntry::Position(Position {
                task: task("orders", 4),
                offset: 42,
                checkpoint: CheckpointId(7),
                lineage: "abc".into(),
                topic_id: String::new(),
            }),
        ];
        for entry in &entries {
            let (key, value) = entry.encode();
            assert_eq!(ChangelogEntry::decode(&key, value.as_deref()).as_ref(), Some(entry));
        }
        let keys: Vec<Vec<u8>> = entries[1..].iter().map(|e| e.encode().0).collect();
        assert!(keys.iter().all(|k| keys.iter().filter(|other| *other == k).count() == 1));
    }

    #[test]
    fn foreign_records_are_not_decoded() {
        assert_eq!(ChangelogEntry::decode(b"", Some(b"v")), None);
        assert_eq!(ChangelogEntry::decode(b"x-key", Some(b"v")), None);
        assert_eq!(ChangelogEntry::decode(b"porders\0\0\0\0\x01", Some(b"short")), None);
        assert_eq!(ChangelogEntry::decode(b"norders\0\0\0\0\x01", None), None);
    }
}
