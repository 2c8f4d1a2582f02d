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
//! Within one `process` or `on-timer` call the SDK keeps the keys read and written in guest
//! memory, and passes the call's writes to the host when the call succeeds: a key costs one
//! host call to read and one to write per batch, not per record.
//!
//! On targets other than `wasm32` (native unit tests), the state is an in-memory map private to
//! the calling thread; see [`crate::testing`].

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::TransformError;

/// The value stored under `key`, if any.
pub fn get(key: impl AsRef<[u8]>) -> Option<Vec<u8>> {
    let key = key.as_ref();
    CALL.with_borrow_mut(|call| match call {
        Some(call) => call.get(key),
        None => imp::get(key),
    })
}

/// Stores `value` under `key`, replacing any previous value.
pub fn put(key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
    write(key.as_ref(), Some(value.as_ref().to_vec()));
}

/// Removes `key`; removing a missing key is not an error.
pub fn delete(key: impl AsRef<[u8]>) {
    write(key.as_ref(), None);
}

/// Up to `limit` `(key, value)` entries whose key starts with `prefix`, in ascending byte order
/// of key.
pub fn scan_prefix(prefix: impl AsRef<[u8]>, limit: u32) -> Vec<(Vec<u8>, Vec<u8>)> {
    // The host answers the scan: it must hold the call's writes so far.
    CALL.with_borrow_mut(|call| call.as_mut().map(Call::flush));
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
    write(key, Some(bytes));
    Ok(())
}

/// The state reads and writes of one `process` or `on-timer` call, kept in the guest (see
/// [`in_call`]).
#[derive(Default)]
struct Call {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The keys written by the call and not yet passed to the host.
    dirty: Vec<Vec<u8>>,
    /// Bytes of keys and values that entered `entries` since it was last emptied.
    bytes: usize,
}

/// A key's value as the current call last read or wrote it.
struct Entry {
    /// `None`: absent, or deleted by the call.
    value: Option<Vec<u8>>,
    /// Written by the call and not yet passed to the host (the key is in [`Call::dirty`]).
    dirty: bool,
}

/// How many bytes of keys and values a call keeps before it hands its writes to the host and
/// forgets what it read: a batch over many large values must not hold them all in guest memory.
const CALL_BYTES: usize = 1 << 20;

impl Call {
    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(entry) = self.entries.get(key) {
            return entry.value.clone();
        }
        let value = imp::get(key);
        self.keep(key, value.clone(), false);
        value
    }

    fn keep(&mut self, key: &[u8], value: Option<Vec<u8>>, dirty: bool) {
        self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        let newly_dirty = match self.entries.get_mut(key) {
            Some(entry) => {
                let newly_dirty = dirty && !entry.dirty;
                *entry = Entry { value, dirty: dirty || entry.dirty };
                newly_dirty
            }
            None => {
                self.entries.insert(key.to_vec(), Entry { value, dirty });
                dirty
            }
        };
        if newly_dirty {
            self.dirty.push(key.to_vec());
        }
        if self.bytes > CALL_BYTES {
            self.flush();
            self.entries.clear();
            self.bytes = 0;
        }
    }

    /// Passes the call's unwritten writes to the host, in key order.
    fn flush(&mut self) {
        self.dirty.sort_unstable();
        for key in self.dirty.drain(..) {
            let entry = self.entries.get_mut(&key).expect("a dirty key is kept");
            match &entry.value {
                Some(value) => imp::put(&key, value),
                None => imp::delete(&key),
            }
            entry.dirty = false;
        }
    }
}

std::thread_local! {
    /// The current `process` or `on-timer` call's reads and writes ([`in_call`]); `None`
    /// between calls.
    static CALL: std::cell::RefCell<Option<Call>> = const { std::cell::RefCell::new(None) };
}

/// Runs one `process` or `on-timer` call with its state reads and writes kept in the guest: a
/// key crosses to the host at most once to be read and once to be written per call, rather than
/// at every record that uses it (a batch of 1,024 records over a few dozen keys made over 2,000
/// host calls). The writes reach the host when `call` succeeds, in key order (or earlier, before
/// a prefix scan and once the call keeps [`CALL_BYTES`]); a failed call drops those not passed
/// on yet, and the host rolls back the rest. Reads see the call's own writes either way.
pub(crate) fn in_call<R, E>(call: impl FnOnce() -> Result<R, E>) -> Result<R, E> {
    /// Ends the call's cache also when `call` panics (natively; a guest panic is a trap).
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            CALL.take();
        }
    }
    CALL.set(Some(Call::default()));
    let scope = Scope;
    let result = call();
    if result.is_ok() {
        CALL.with_borrow_mut(|call| call.as_mut().map(Call::flush));
    }
    drop(scope);
    result
}

fn write(key: &[u8], value: Option<Vec<u8>>) {
    CALL.with_borrow_mut(|call| match call {
        Some(call) => call.keep(key, value, true),
        None => match value {
            Some(value) => imp::put(key, &value),
            None => imp::delete(key),
        },
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn stored() -> Vec<(Vec<u8>, Vec<u8>)> {
        crate::testing::state_entries()
    }

    #[test]
    fn a_call_reads_its_own_writes_and_passes_them_on_when_it_succeeds() {
        crate::testing::clear_state();
        put("kept", "0");
        put("gone", "x");
        let result: Result<(), ()> = in_call(|| {
            assert_eq!(get("kept").as_deref(), Some(&b"0"[..]));
            put("kept", "1");
            put("new", "n");
            delete("gone");
            assert_eq!(get("kept").as_deref(), Some(&b"1"[..]), "a read sees the call's write");
            assert_eq!(get("gone"), None, "nor a key the call deleted");
            assert_eq!(stored().len(), 2, "the host has none of the writes before the call ends");
            Ok(())
        });
        assert_eq!(result, Ok(()));
        let want: Vec<(Vec<u8>, Vec<u8>)> = vec![(b"kept".to_vec(), b"1".to_vec()), (b"new".to_vec(), b"n".to_vec())];
        assert_eq!(stored(), want);
        put("after", "a");
        assert_eq!(stored().len(), 3, "outside a call, writes go straight to the host");
    }

    #[test]
    fn a_failed_call_passes_no_write_on() {
        crate::testing::clear_state();
        put("kept", "0");
        let result: Result<(), &str> = in_call(|| {
            put("kept", "1");
            delete("kept");
            Err("bad record")
        });
        assert_eq!(result, Err("bad record"));
        assert_eq!(stored(), vec![(b"kept".to_vec(), b"0".to_vec())]);
        assert_eq!(get("kept").as_deref(), Some(&b"0"[..]), "the next read asks the host again");
    }

    #[test]
    fn a_scan_within_a_call_sees_the_calls_writes() {
        crate::testing::clear_state();
        put("w|1", "a");
        put("w|3", "c");
        let result: Result<_, ()> = in_call(|| {
            put("w|2", "b");
            delete("w|3");
            Ok(scan_prefix("w|", 10))
        });
        let keys: Vec<Vec<u8>> = result.unwrap().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"w|1".to_vec(), b"w|2".to_vec()]);
    }

    #[test]
    fn a_call_over_many_large_values_hands_them_on_early_instead_of_holding_them() {
        crate::testing::clear_state();
        let large = vec![7u8; CALL_BYTES / 2 + 1];
        let result: Result<(), ()> = in_call(|| {
            put("a", &large);
            assert!(stored().is_empty());
            put("b", &large);
            assert_eq!(stored().len(), 2, "past CALL_BYTES the writes so far are with the host");
            assert_eq!(get("a").as_deref(), Some(&large[..]), "and are read back from it");
            put("a", "small");
            Ok(())
        });
        assert_eq!(result, Ok(()));
        assert_eq!(get("a").as_deref(), Some(&b"small"[..]));
    }

    #[test]
    fn a_panicking_call_leaves_no_cache_behind() {
        crate::testing::clear_state();
        let panicked = std::panic::catch_unwind(|| {
            let _: Result<(), ()> = in_call(|| {
                put("k", "in the panicking call");
                panic!("guest bug")
            });
        });
        assert!(panicked.is_err());
        put("k", "v");
        assert_eq!(stored(), vec![(b"k".to_vec(), b"v".to_vec())], "a write after it goes straight to the host");
    }
}
