//! Byte encodings of the keys Weir stores in RocksDB (layout documented in the module doc of
//! [`crate::state`]).
//!
//! Every composite key is built from NUL-terminated names and fixed-width big-endian integers, so
//! it is prefix-free (no encoded operator/task is a prefix of another one, even when one topic name
//! is a prefix of another) and sorts by its parts. Kafka topic names cannot contain NUL (legal
//! characters are `[a-zA-Z0-9._-]`); operator names must not either.

use crate::types::TaskId;

/// `meta` key of the last applied checkpoint id (u64 BE).
pub(super) const META_CHECKPOINT: &[u8] = b"checkpoint";
/// `meta` key of the highest checkpoint id ever applied or seen in Kafka (u64 BE).
pub(super) const META_EPOCH_FLOOR: &[u8] = b"epoch_floor";
/// `meta` key of the state directory's lineage: a random id (UTF-8 hex) made when the database
/// is created, written into every checkpoint's offset metadata so that an older life's or another
/// pipeline's offsets are never taken for this one's.
pub(super) const META_LINEAGE: &[u8] = b"lineage";
/// `meta` key of the transactional ids the pipeline's producers have used (UTF-8, one per line):
/// a start fences all of them, not only the slots its configuration names now.
pub(super) const META_TRANSACTIONAL_IDS: &[u8] = b"transactional_ids";
/// `meta` key prefix of committed offsets: `offset/<topic>\0<partition BE u32>` → next offset, i64 BE.
pub(super) const META_OFFSET: &[u8] = b"offset/";
/// `meta` key prefix of committed snapshots: `snapshot/<operator>\0<topic>\0<partition BE u32>` → bytes.
pub(super) const META_SNAPSHOT: &[u8] = b"snapshot/";

/// `meta` key of the pipeline that owns the database (UTF-8): a start of another pipeline on
/// this directory is refused.
pub(super) const META_PIPELINE: &[u8] = b"pipeline";
/// `meta` key of the changelog topic the database caches (UTF-8).
pub(super) const META_CHANGELOG_TOPIC: &[u8] = b"changelog_topic";
/// `meta` key prefix of the component each operator last ran: `component/<operator>` → SHA-256
/// (hex), so an upgrade of a transform is logged with both builds.
pub(super) const META_COMPONENT: &[u8] = b"component/";
/// `meta` key prefix of how far the state reflects each task's changelog partition:
/// `changelog/<topic>\0<partition BE u32>` → next changelog offset to read, i64 BE.
pub(super) const META_CHANGELOG_OFFSET: &[u8] = b"changelog/";
/// `meta` key prefix of when each task's state was last caught up with its changelog partition:
/// `caught_up/<topic>\0<partition BE u32>` → milliseconds since the Unix epoch, i64 BE, a time
/// before which no record at or after the task's changelog offset was committed (see
/// [`crate::checkpoint::restore`]).
pub(super) const META_CAUGHT_UP: &[u8] = b"caught_up/";
/// `meta` key of the topic id (KIP-516, 32 hex digits) of the changelog topic the state reflects:
/// a topic deleted and created again has another.
pub(super) const META_CHANGELOG_TOPIC_ID: &[u8] = b"changelog_topic_id";

/// Key prefix scoping state to one operator of one task: `<operator>\0<topic>\0<partition as 4
/// bytes BE>\0`.
///
/// The operator's own keys follow the prefix unchanged; prefixes of different (operator, task)
/// pairs never prefix each other, so a scan under one never sees another's keys.
///
/// # Panics
/// If `operator` or the topic contains a NUL byte (pipeline config validation must reject such
/// names; reaching this is a bug in Weir).
pub fn state_prefix(operator: &str, task: &TaskId) -> Vec<u8> {
    let mut key = Vec::with_capacity(operator.len() + task.topic.len() + 7);
    push_operator_task(&mut key, operator, task);
    key.push(0);
    key
}

/// Appends `<topic>\0<partition BE u32>`.
pub(super) fn push_task(key: &mut Vec<u8>, task: &TaskId) {
    push_name(key, &task.topic, "topic");
    key.extend_from_slice(&task.partition.to_be_bytes());
}

/// Appends `<operator>\0<topic>\0<partition BE u32>`.
pub(super) fn push_operator_task(key: &mut Vec<u8>, operator: &str, task: &TaskId) {
    push_name(key, operator, "operator");
    push_task(key, task);
}

fn push_name(key: &mut Vec<u8>, name: &str, what: &str) {
    assert!(
        !name.as_bytes().contains(&0),
        "{what} name {name:?} contains a NUL byte; config validation should have rejected it (this is a bug in Weir)"
    );
    key.extend_from_slice(name.as_bytes());
    key.push(0);
}

/// Decodes `<topic>\0<partition BE u32>` (the whole of `bytes`).
pub(super) fn decode_task(bytes: &[u8]) -> Option<TaskId> {
    let (topic, rest) = split_name(bytes)?;
    let partition = i32::from_be_bytes(rest.try_into().ok()?);
    Some(TaskId::new(topic, partition))
}

/// Decodes `<operator>\0<topic>\0<partition BE u32>` (the whole of `bytes`).
pub(super) fn decode_operator_task(bytes: &[u8]) -> Option<(String, TaskId)> {
    let (operator, rest) = split_name(bytes)?;
    Some((operator, decode_task(rest)?))
}

/// The task of a full state key (`<operator>\0<topic>\0<partition BE u32>\0<key>`).
pub(super) fn task_of_state_key(key: &[u8]) -> Option<TaskId> {
    let (_, rest) = split_name(key)?;
    let (topic, rest) = split_name(rest)?;
    let partition = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    (rest.get(4) == Some(&0)).then_some(TaskId::new(topic, partition))
}

fn split_name(bytes: &[u8]) -> Option<(String, &[u8])> {
    let end = bytes.iter().position(|&b| b == 0)?;
    let name = std::str::from_utf8(&bytes[..end]).ok()?.to_owned();
    Some((name, &bytes[end + 1..]))
}

/// Decodes a big-endian u64 value.
pub(super) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.try_into().ok()?))
}

/// Decodes a big-endian i64 value.
pub(super) fn decode_i64(bytes: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(topic: &str, partition: i32) -> TaskId {
        TaskId::new(topic, partition)
    }

    #[test]
    fn state_prefix_has_the_documented_layout() {
        assert_eq!(state_prefix("op", &task("t", 258)), b"op\0t\0\x00\x00\x01\x02\0".to_vec());
    }

    #[test]
    fn prefixes_of_different_operators_and_tasks_never_prefix_each_other() {
        let prefixes = [
            state_prefix("a", &task("a", 0)),
            state_prefix("a", &task("ab", 0)),
            state_prefix("ab", &task("a", 0)),
            state_prefix("a", &task("a", 1)),
            state_prefix("a", &task("a", 256)),
            state_prefix("a", &task("a\x01", 0)),
        ];
        for (i, a) in prefixes.iter().enumerate() {
            for (j, b) in prefixes.iter().enumerate() {
                if i != j {
                    assert!(!b.starts_with(a), "{a:?} prefixes {b:?}");
                }
            }
        }
    }

    #[test]
    fn task_keys_round_trip() {
        let mut key = Vec::new();
        push_operator_task(&mut key, "dedupe", &task("orders.v1", 7));
        assert_eq!(decode_operator_task(&key), Some(("dedupe".to_owned(), task("orders.v1", 7))));
        let mut key = Vec::new();
        push_task(&mut key, &task("orders", 0));
        assert_eq!(decode_task(&key), Some(task("orders", 0)));
        assert_eq!(decode_task(b"orders\0\0\0"), None);
        let mut key = state_prefix("dedupe", &task("orders", 7));
        key.extend_from_slice(b"user key");
        assert_eq!(task_of_state_key(&key), Some(task("orders", 7)));
        assert_eq!(task_of_state_key(b"dedupe\0orders\0\0\0"), None);
    }

    #[test]
    #[should_panic(expected = "NUL")]
    fn operator_names_with_nul_are_refused() {
        state_prefix("a\0b", &task("t", 0));
    }
}
