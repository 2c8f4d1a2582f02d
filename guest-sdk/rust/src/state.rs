//! Durable key-value state, scoped by the host to this operator and task.
//!
//! Reads see this task's own writes, including those of the current, not yet committed epoch.
//! Writes become durable only when the epoch's checkpoint commits together with its output
//! records; after a crash, or when a batch fails, they are rolled back with the output and the
//! input is replayed. Keep every fact the transform must remember here (or in
//! [`Transform::snapshot`](crate::Transform::snapshot)), never only in memory.
//!
//! Keys and values are bytes; the `*_json` functions store values as JSON.
//!
//! On targets other than `wasm32` (native unit tests), the state is an in-memory map private to
//! the calling thread; see [`crate::testing`].

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::TransformError;

/// The value stored under `key`, if any.
pub fn get(key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
    imp::get(key.as_ref())
}

/// Stores `value` under `key`, replacing any previous value.
pub fn put(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
    imp::put(key.as_ref(), value.as_ref())
}

/// Removes `key`; removing a missing key is not an error.
pub fn delete(key: impl AsRef<[u8]>) {
    imp::delete(key.as_ref())
}

/// Up to `limit` `(key, value)` entries whose key starts with `prefix`, in ascending byte order
/// of key.
pub fn scan_prefix(prefix: impl AsRef<[u8]>, limit: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    imp::scan_prefix(prefix.as_ref(), limit)
}

/// The JSON value stored under `key`, deserialised into `T`; `Ok(None)` when the key is absent.
/// Fails when the stored bytes do not deserialise into `T`.
pub fn get_json<T: DeserializeOwned>(key: impl AsRef<[u8]>) -> Result<Option<T>, TransformError> {
    let key = key.as_ref();
    get(key)
        .map(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| {
                TransformError::new(format!(
                    "state key {:?}: stored value is not the expected JSON: {e}",
                    String::from_utf8_lossy(key)
                ))
            })
        })
        .transpose()
}

/// Stores `value` as JSON under `key`.
pub fn put_json<T: Serialize + ?Sized>(key: impl AsRef<[u8]>, value: &T) -> Result<(), TransformError> {
    let key = key.as_ref();
    let bytes = serde_json::to_vec(value).map_err(|e| {
        TransformError::new(format!(
            "state key {:?}: cannot serialise value as JSON: {e}",
            String::from_utf8_lossy(key)
        ))
    })?;
    put(key, bytes);
    Ok(())
}

#[cfg(target_arch = "wasm32")]
mod imp {
    pub use crate::bindings::weir::transform::state::{delete, get, put, scan_prefix};
}

#[cfg(not(target_arch = "wasm32"))]
pub(crate) mod imp {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    pub(crate) type Map = BTreeMap<Vec<u8>, Vec<u8>>;

    thread_local! {
        pub(crate) static STATE: RefCell<Map> = const { RefCell::new(BTreeMap::new()) };
    }

    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        STATE.with_borrow(|m| m.get(key).cloned())
    }

    pub fn put(key: &[u8], value: &[u8]) {
        STATE.with_borrow_mut(|m| m.insert(key.to_vec(), value.to_vec()));
    }

    pub fn delete(key: &[u8]) {
        STATE.with_borrow_mut(|m| m.remove(key));
    }

    pub fn scan_prefix(prefix: &[u8], limit: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
        STATE.with_borrow(|m| {
            m.range(prefix.to_vec()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .take(limit as usize)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    }
}
