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
//! host call to read and one to write per batch, not per record. [`update_json`] goes further for
//! a running aggregate: it keeps the decoded value, so the key's JSON is parsed and written once
//! per batch too.
//!
//! On targets other than `wasm32` (native unit tests), the state is an in-memory map private to
//! the calling thread; see [`crate::testing`].

use std::any::Any;
use std::borrow::Cow;
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
    let prefix = prefix.as_ref();
    CALL.with_borrow_mut(|call| {
        let Some(call) = call.as_mut() else { return };
        if let Some(key) = call.lent_key(prefix) {
            lent(key)
        }
        // The host answers the scan: it must hold the call's writes so far.
        call.flush();
    });
    imp::scan_prefix(prefix, limit)
}

/// The JSON value stored under `key`, deserialised into `T`; `Ok(None)` when the key is absent.
/// Fails when the stored bytes do not deserialise into `T`.
pub fn get_json<T: DeserializeOwned>(key: impl AsRef<[u8]>) -> Result<Option<T>, TransformError> {
    let key = key.as_ref();
    decode(key, get(key).as_deref())
}

/// Stores `value` as JSON under `key`.
pub fn put_json<T: Serialize + ?Sized>(key: impl AsRef<[u8]>, value: &T) -> Result<(), TransformError> {
    let key = key.as_ref();
    write(key, Some(encode(key, value)?));
    Ok(())
}

/// Reads the JSON value stored under `key` into `T` (`None` when the key is absent), lets
/// `update` change it, and stores the result: `Some` as JSON, `None` deletes the key. Returns
/// what `update` returns.
///
/// The fast way to keep a running aggregate per key: within a `process` or `on-timer` call the
/// SDK keeps the decoded `T` and writes its JSON once, when the call's writes go to the host,
/// so a key updated at every record of a batch is parsed and serialised once per batch, not
/// once per record as a [`get_json`]/[`put_json`] pair is. Outside a call (in `init`, in
/// tests without a harness) it is exactly that pair.
///
/// `update` must not read, write or scan over `key` itself through this module (that panics);
/// other keys are fine.
///
/// `T` must come back from its JSON as it went in: a batch keeps the `T` the closure left, the
/// next batch reads its JSON. So no `#[serde(skip)]` fields and no NaN or infinite floats
/// (written as `null`); finite floats round-trip exactly (the SDK enables `serde_json`'s
/// `float_roundtrip`).
///
/// # Errors
/// When the stored bytes do not deserialise into `T`; the stored value is then unchanged and
/// `update` does not run. A `T` that cannot be serialised as JSON (a map with keys that are not
/// strings) fails the call that updated it when its writes go to the host.
pub fn update_json<T, R>(key: impl AsRef<[u8]>, update: impl FnOnce(&mut Option<T>) -> R) -> Result<R, TransformError>
where
    T: Serialize + DeserializeOwned + 'static,
{
    let key = key.as_ref();
    let lent = CALL.with_borrow_mut(|call| call.as_mut().map(|call| call.lend::<T>(key)));
    let Some(value) = lent else {
        let mut value = get_json(key)?;
        let result = update(&mut value);
        write(key, value.map(|value| encode(key, &value)).transpose()?);
        return Ok(result);
    };
    let mut value = value?;
    let result = update(&mut value);
    CALL.with_borrow_mut(|call| call.as_mut().expect("a call outlives its updates").give_back(key, value));
    Ok(result)
}

/// `value` as JSON, to be stored under `key`.
fn encode<T: Serialize + ?Sized>(key: &[u8], value: &T) -> Result<Vec<u8>, TransformError> {
    serde_json::to_vec(value).map_err(|e| encode_error(key, &e))
}

fn encode_error(key: &[u8], error: &serde_json::Error) -> TransformError {
    TransformError::new(format!(
        "state key {:?}: cannot serialise value as JSON: {error}",
        String::from_utf8_lossy(key)
    ))
}

fn decode<T: DeserializeOwned>(key: &[u8], bytes: Option<&[u8]>) -> Result<Option<T>, TransformError> {
    bytes
        .map(|bytes| {
            serde_json::from_slice(bytes).map_err(|e| {
                TransformError::new(format!(
                    "state key {:?}: stored value is not the expected JSON: {e}",
                    String::from_utf8_lossy(key)
                ))
            })
        })
        .transpose()
}

/// The state reads and writes of one `process` or `on-timer` call, kept in the guest (see
/// [`in_call`]).
#[derive(Default)]
struct Call {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The keys written by the call and not yet passed to the host.
    dirty: Vec<Vec<u8>>,
    /// Bytes of keys and values that entered `entries` since it was last emptied. A value kept
    /// by [`update_json`] counts once, as its stored bytes plus its size in memory: what it
    /// grows to within the call (a growing `Vec` in `T`) is not counted.
    bytes: usize,
    /// The first value that could not be serialised when it was to go to the host: the call
    /// fails with it.
    failed: Option<TransformError>,
}

/// A key's value as the current call last read or wrote it.
struct Entry {
    value: Value,
    /// Written by the call and not yet passed to the host (the key is in [`Call::dirty`]).
    dirty: bool,
}

/// A kept value.
enum Value {
    /// As the host has it or will get it; `None`: absent, or deleted by the call.
    Bytes(Option<Vec<u8>>),
    /// Decoded by [`update_json`], serialised only when needed as bytes.
    Json(Box<dyn Json>),
    /// With the [`update_json`] running on it.
    Lent,
}

/// An `Option<T>` kept by [`update_json`], whatever its `T`.
trait Json {
    fn to_bytes(&self) -> Result<Option<Vec<u8>>, serde_json::Error>;
    fn as_any(&self) -> &dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<T: Serialize + 'static> Json for Option<T> {
    fn to_bytes(&self) -> Result<Option<Vec<u8>>, serde_json::Error> {
        self.as_ref().map(serde_json::to_vec).transpose()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// How many bytes of keys and values a call keeps before it hands its writes to the host and
/// forgets what it read: a batch over many large values must not hold them all in guest memory.
const CALL_BYTES: usize = 1 << 20;

impl Call {
    fn get(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(entry) = self.entries.get(key) {
            return match &entry.value {
                Value::Bytes(value) => value.clone(),
                Value::Json(json) => json.to_bytes().unwrap_or_else(|e| {
                    // The call fails with it; what it reads until then does not matter.
                    self.failed.get_or_insert(encode_error(key, &e));
                    None
                }),
                Value::Lent => lent(key),
            };
        }
        let value = imp::get(key);
        self.keep(key, value.clone(), false);
        value
    }

    /// Takes `key`'s value out for an [`update_json`], reading it from the host if the call has
    /// not; [`Call::give_back`] returns it. On an error the kept value stays as it was.
    fn lend<T: DeserializeOwned + 'static>(&mut self, key: &[u8]) -> Result<Option<T>, TransformError> {
        let Some(entry) = self.entries.get_mut(key) else {
            // Kept as lent at once: a flush for the bound, before the update gives it back,
            // leaves lent entries alone.
            let bytes = imp::get(key);
            let decoded = decode(key, bytes.as_deref());
            self.bytes += key.len() + bytes.as_ref().map_or(0, Vec::len) + std::mem::size_of::<Option<T>>();
            let value = if decoded.is_ok() { Value::Lent } else { Value::Bytes(bytes) };
            self.entries.insert(key.to_vec(), Entry { value, dirty: false });
            return decoded;
        };
        let value = std::mem::replace(&mut entry.value, Value::Lent);
        let decoded = match value {
            Value::Json(json) if json.as_any().is::<Option<T>>() => {
                return Ok(*json.into_any().downcast().expect("the type was checked"));
            }
            Value::Json(ref json) => {
                json.to_bytes().map_err(|e| encode_error(key, &e)).and_then(|bytes| decode(key, bytes.as_deref()))
            }
            Value::Bytes(ref bytes) => decode(key, bytes.as_deref()),
            Value::Lent => lent(key),
        };
        match decoded {
            Ok(_) => self.bytes += std::mem::size_of::<Option<T>>(),
            Err(_) => entry.value = value,
        }
        decoded
    }

    /// Keeps the result of an [`update_json`] as the call's write of `key`. Counts no bytes:
    /// the entry was counted when it was lent, so a key updated at every record of a batch does
    /// not bring the bound nearer.
    fn give_back<T: Serialize + 'static>(&mut self, key: &[u8], value: Option<T>) {
        let entry = self.entries.get_mut(key).expect("a lent key stays kept until it is given back");
        entry.value = Value::Json(Box::new(value));
        if !entry.dirty {
            entry.dirty = true;
            self.dirty.push(key.to_vec());
        }
    }

    /// A key whose [`update_json`] has not given it back, if any.
    fn lent_key(&self, prefix: &[u8]) -> Option<&[u8]> {
        self.entries
            .range::<[u8], _>((std::ops::Bound::Included(prefix), std::ops::Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(prefix))
            .find(|(_, entry)| matches!(entry.value, Value::Lent))
            .map(|(key, _)| key.as_slice())
    }

    /// A `put` or `delete`.
    fn write(&mut self, key: &[u8], value: Option<Vec<u8>>) {
        if let Some(Entry { value: Value::Lent, .. }) = self.entries.get(key) {
            lent(key)
        }
        self.keep(key, value, true);
    }

    /// Keeps `value` as `key`'s bytes, within [`CALL_BYTES`].
    fn keep(&mut self, key: &[u8], value: Option<Vec<u8>>, dirty: bool) {
        self.bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        let value = Value::Bytes(value);
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
            // A lent value stays: its update is running and gives it back.
            self.entries.retain(|_, entry| matches!(entry.value, Value::Lent));
            self.bytes = 0;
        }
    }

    /// Passes the call's unwritten writes to the host, in key order; a lent value's write waits
    /// for it to be given back.
    fn flush(&mut self) {
        self.dirty.sort_unstable();
        let mut waiting = Vec::new();
        for key in self.dirty.drain(..) {
            let entry = self.entries.get_mut(&key).expect("a dirty key is kept");
            let value = match &entry.value {
                Value::Bytes(value) => Ok(value.as_deref().map(Cow::Borrowed)),
                Value::Json(json) => json.to_bytes().map(|bytes| bytes.map(Cow::Owned)),
                Value::Lent => {
                    waiting.push(key);
                    continue;
                }
            };
            match value {
                Ok(value) => store(&key, value.as_deref()),
                Err(e) => {
                    self.failed.get_or_insert(encode_error(&key, &e));
                }
            }
            entry.dirty = false;
        }
        self.dirty = waiting;
    }
}

/// A read or write of a key inside its own [`update_json`]: a bug in the transform.
fn lent(key: &[u8]) -> ! {
    panic!("state key {:?} was used inside its own state::update_json", String::from_utf8_lossy(key))
}

std::thread_local! {
    /// The current `process` or `on-timer` call's reads and writes ([`in_call`]); `None`
    /// between calls.
    static CALL: std::cell::RefCell<Option<Call>> = const { std::cell::RefCell::new(None) };
}

/// Runs one `process` or `on-timer` call with its state reads and writes kept in the guest: a
/// key crosses to the host once to be read and once to be written per call (more often only once
/// the call keeps [`CALL_BYTES`]), rather than
/// at every record that uses it (a batch of 1,024 records over a few dozen keys made over 2,000
/// host calls). The writes reach the host when `call` succeeds, in key order (or earlier, before
/// a prefix scan and once the call keeps [`CALL_BYTES`]); a failed call drops those not passed
/// on yet, and the host rolls back the rest. Reads see the call's own writes either way. A value
/// kept by [`update_json`] that cannot be serialised fails the call.
pub(crate) fn in_call<R>(call: impl FnOnce() -> Result<R, TransformError>) -> Result<R, TransformError> {
    /// Ends the call's cache also when `call` panics (natively; a guest panic is a trap).
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            CALL.take();
        }
    }
    CALL.set(Some(Call::default()));
    let scope = Scope;
    let result = call().and_then(|result| {
        let failed = CALL.with_borrow_mut(|call| {
            let call = call.as_mut().expect("the call's cache lives until its end");
            if let Some(key) = call.lent_key(b"") {
                // Natively, a panic inside the update that the transform caught.
                return Some(TransformError::new(format!(
                    "state key {:?}: its state::update_json did not finish",
                    String::from_utf8_lossy(key)
                )));
            }
            call.flush();
            call.failed.take()
        });
        failed.map_or(Ok(result), Err)
    });
    drop(scope);
    result
}

/// A `put` (`Some`) or `delete` (`None`): kept by the current call, if any, else passed on.
fn write(key: &[u8], value: Option<Vec<u8>>) {
    CALL.with_borrow_mut(|call| match call {
        Some(call) => call.write(key, value),
        None => store(key, value.as_deref()),
    })
}

/// Passes one write to the host: `Some` puts, `None` deletes.
fn store(key: &[u8], value: Option<&[u8]>) {
    match value {
        Some(value) => imp::put(key, value),
        None => imp::delete(key),
    }
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
        let result: Result<(), TransformError> = in_call(|| {
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
        let result: Result<(), TransformError> = in_call(|| {
            put("kept", "1");
            delete("kept");
            Err(TransformError::new("bad record"))
        });
        assert_eq!(result, Err(TransformError::new("bad record")));
        assert_eq!(stored(), vec![(b"kept".to_vec(), b"0".to_vec())]);
        assert_eq!(get("kept").as_deref(), Some(&b"0"[..]), "the next read asks the host again");
    }

    #[test]
    fn a_scan_within_a_call_sees_the_calls_writes() {
        crate::testing::clear_state();
        put("w|1", "a");
        put("w|3", "c");
        let result: Result<_, TransformError> = in_call(|| {
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
        let result: Result<(), TransformError> = in_call(|| {
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
            let _: Result<(), TransformError> = in_call(|| {
                put("k", "in the panicking call");
                panic!("guest bug")
            });
        });
        assert!(panicked.is_err());
        put("k", "v");
        assert_eq!(stored(), vec![(b"k".to_vec(), b"v".to_vec())], "a write after it goes straight to the host");
    }

    #[derive(Debug, Default, PartialEq, Serialize, serde::Deserialize)]
    struct Count {
        n: u64,
    }

    fn add_one(key: &str) -> Result<u64, TransformError> {
        update_json(key, |count: &mut Option<Count>| {
            let count = count.get_or_insert_default();
            count.n += 1;
            count.n
        })
    }

    #[test]
    fn an_update_within_a_call_is_serialised_once_when_the_call_ends() {
        crate::testing::clear_state();
        put("c", r#"{"n":40}"#);
        let result = in_call(|| {
            assert_eq!(add_one("c")?, 41);
            assert_eq!(add_one("c")?, 42);
            assert_eq!(stored(), vec![(b"c".to_vec(), br#"{"n":40}"#.to_vec())], "the host has no write yet");
            assert_eq!(get("c").as_deref(), Some(&br#"{"n":42}"#[..]), "a byte read sees the update");
            assert_eq!(get_json::<Count>("c")?, Some(Count { n: 42 }));
            add_one("c")
        });
        assert_eq!(result, Ok(43));
        assert_eq!(stored(), vec![(b"c".to_vec(), br#"{"n":43}"#.to_vec())]);
    }

    #[test]
    fn an_update_sees_byte_writes_and_byte_writes_replace_it() {
        crate::testing::clear_state();
        let result = in_call(|| {
            assert_eq!(add_one("c")?, 1, "an absent key starts as None");
            put("c", r#"{"n":10}"#);
            assert_eq!(add_one("c")?, 11);
            let other: Option<serde_json::Value> = update_json("c", |v: &mut Option<serde_json::Value>| v.take())?;
            assert_eq!(other, Some(serde_json::json!({"n": 11})), "another type reads the JSON of the kept one");
            assert_eq!(get("c"), None, "None deletes the key");
            put("d", "not json");
            Ok(())
        });
        assert_eq!(result, Ok(()));
        assert_eq!(stored(), vec![(b"d".to_vec(), b"not json".to_vec())]);
    }

    #[test]
    fn an_update_of_a_value_that_is_not_its_json_fails_and_changes_nothing() {
        crate::testing::clear_state();
        put("c", "not json");
        let result = in_call(|| {
            let error = add_one("c").unwrap_err();
            assert!(error.message().contains("state key \"c\": stored value is not the expected JSON"), "{error:?}");
            assert_eq!(get("c").as_deref(), Some(&b"not json"[..]), "the kept value is unchanged");
            Ok(())
        });
        assert_eq!(result, Ok(()));
        assert_eq!(stored(), vec![(b"c".to_vec(), b"not json".to_vec())]);
    }

    #[test]
    fn a_failed_call_passes_no_update_on_and_outside_a_call_an_update_goes_straight_through() {
        crate::testing::clear_state();
        let result: Result<(), TransformError> = in_call(|| {
            add_one("c")?;
            Err(TransformError::new("bad record"))
        });
        assert!(result.is_err());
        assert!(stored().is_empty());
        assert_eq!(add_one("c"), Ok(1));
        assert_eq!(stored(), vec![(b"c".to_vec(), br#"{"n":1}"#.to_vec())]);
    }

    #[test]
    fn a_scan_sees_updates_and_an_update_may_use_other_keys() {
        crate::testing::clear_state();
        let result = in_call(|| {
            add_one("w|1")?;
            update_json("v", |v: &mut Option<Count>| {
                put("w|3", r#"{"n":3}"#);
                assert_eq!(get_json::<Count>("w|1").unwrap(), Some(Count { n: 1 }));
                *v = Some(Count { n: 2 });
                scan_prefix("w|", 10).len()
            })
        });
        assert_eq!(result, Ok(2), "the scan inside the update sees the other keys' writes");
        let keys: Vec<Vec<u8>> = stored().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"v".to_vec(), b"w|1".to_vec(), b"w|3".to_vec()]);
    }

    #[test]
    fn the_first_update_of_a_key_may_take_the_call_past_its_bound() {
        crate::testing::clear_state();
        let result = in_call(|| {
            put("a", vec![0u8; CALL_BYTES - 2]);
            add_one("bb")?;
            update_json("k", |_: &mut Option<Count>| {
                put("c", vec![0u8; CALL_BYTES - 3]);
                add_one("dd")
            })?
        });
        assert_eq!(result, Ok(1));
        let keys: Vec<Vec<u8>> = stored().into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, vec![b"a".to_vec(), b"bb".to_vec(), b"c".to_vec(), b"dd".to_vec()]);
        assert_eq!(get("k"), None, "an update that left None deletes");
    }

    #[test]
    fn a_key_updated_at_every_record_does_not_bring_the_bound_nearer() {
        crate::testing::clear_state();
        let result = in_call(|| {
            for _ in 0..100_000 {
                add_one("hot")?;
            }
            assert!(stored().is_empty(), "nothing was handed on early");
            Ok(())
        });
        assert_eq!(result, Ok(()));
        assert_eq!(stored(), vec![(b"hot".to_vec(), br#"{"n":100000}"#.to_vec())]);
    }

    #[test]
    fn floats_come_out_the_same_however_the_updates_are_batched() {
        let add =
            |i: u32| update_json("sum", |sum: &mut Option<f64>| *sum = Some(sum.unwrap_or(0.0) + 1.0 / f64::from(i)));
        crate::testing::clear_state();
        in_call(|| (1..=100).try_for_each(add)).unwrap();
        let one_call = stored();
        crate::testing::clear_state();
        for i in 1..=100 {
            in_call(|| add(i)).unwrap();
        }
        assert_eq!(stored(), one_call);
    }

    #[test]
    #[should_panic(expected = "state key \"w|2\" was used inside its own state::update_json")]
    fn a_scan_over_a_key_inside_its_own_update_panics() {
        crate::testing::clear_state();
        let _ = in_call(|| update_json("w|2", |_: &mut Option<Count>| scan_prefix("w|", 10)));
    }

    #[test]
    fn an_update_that_did_not_finish_fails_the_call() {
        crate::testing::clear_state();
        put("k", "1");
        let result = in_call(|| {
            let _ =
                std::panic::catch_unwind(|| update_json("k", |_: &mut Option<u64>| panic!("caught by the transform")));
            Ok(())
        });
        let error = result.unwrap_err();
        assert!(error.message().contains("state key \"k\": its state::update_json did not finish"), "{error:?}");
        assert_eq!(stored(), vec![(b"k".to_vec(), b"1".to_vec())]);
    }

    #[test]
    fn a_value_that_cannot_be_serialised_fails_the_call() {
        crate::testing::clear_state();
        let result = in_call(|| {
            update_json("m", |v: &mut Option<BTreeMap<Vec<u8>, u8>>| *v = Some(BTreeMap::from([(vec![1], 1)])))
        });
        let error = result.unwrap_err();
        assert!(error.message().contains("state key \"m\": cannot serialise value as JSON"), "{error:?}");
        assert!(stored().is_empty());
    }

    #[test]
    #[should_panic(expected = "state key \"c\" was used inside its own state::update_json")]
    fn using_a_key_inside_its_own_update_panics() {
        crate::testing::clear_state();
        let _ = in_call(|| update_json("c", |_: &mut Option<Count>| put("c", "1")));
    }
}
