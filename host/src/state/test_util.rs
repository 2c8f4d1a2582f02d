//! Helpers shared by the state module's unit tests.

use crate::types::TaskId;

/// The task reading `topic`'s `partition`.
pub(crate) fn task(topic: &str, partition: i32) -> TaskId {
    TaskId::new(topic, partition)
}

/// A write storing `value` under `key`.
pub(crate) fn put(key: &str, value: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    (key.as_bytes().to_vec(), Some(value.as_bytes().to_vec()))
}

/// A write deleting `key`.
pub(crate) fn delete(key: &str) -> (Vec<u8>, Option<Vec<u8>>) {
    (key.as_bytes().to_vec(), None)
}
