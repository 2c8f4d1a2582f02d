//! `contract-0-1`: a passthrough built against the previous contract, `weir:transform@0.1.0`
//! (guest-sdk/wit-0.1), with wit-bindgen directly, as a transform built before 0.2 is. The host
//! must keep running it unchanged. Besides forwarding each record (key, value, headers; the
//! host gives it the record's timestamp) it counts records in state key `count`, and logs once
//! in `init`, so that the 0.1 `state` and `log` imports are exercised too.

wit_bindgen::generate!({
    path: "../../../guest-sdk/wit-0.1",
    world: "transform",
});

use weir::transform::{log, state};

struct Contract01;

impl Guest for Contract01 {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        log::log(log::Level::Info, "contract-0-1: init");
        Ok(())
    }

    fn process(batch: Vec<InputRecord>) -> Result<Vec<OutputRecord>, TransformError> {
        let count = state::get(b"count").map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap_or_default()));
        state::put(b"count", &(count + batch.len() as u64).to_le_bytes());
        Ok(batch
            .into_iter()
            .map(|r| OutputRecord {
                key: r.key,
                value: r.value,
                headers: r.headers,
                timestamp: Some(r.timestamp),
                output: None,
            })
            .collect())
    }

    fn snapshot() -> Vec<u8> {
        Vec::new()
    }

    fn restore(_snapshot: Vec<u8>) -> Result<(), String> {
        Ok(())
    }
}

export!(Contract01);
