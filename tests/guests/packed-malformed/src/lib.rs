//! `packed-malformed`: a component of the `packed-transform` world built with wit-bindgen
//! directly, whose `process-packed` returns an output batch that does not frame its records when
//! a record's value asks it to; the host must fail such a call as invalid output, as the
//! contract says. The Rust SDK cannot produce such a batch, which is why this guest exists.
//!
//! A batch is forwarded (each record's key and value, no headers, the default output) unless one
//! of its values is:
//!
//! | value (UTF-8) | the output batch |
//! |---|---|
//! | `short` | its last length is missing |
//! | `overrun` | its first key length is one more than the bytes left in `data` |
//! | `leftover` | one byte of `data` follows its last record |
//! | `extra-length` | one length follows its last record |
//! | `not-utf8` | its first record's output name is the byte 0xff |
//! | `null-header-name` | its first record has one header whose name is a null |
//!
//! `process`, for hosts that predate the packed world, forwards every batch.

wit_bindgen::generate!({
    path: "../../../guest-sdk/wit",
    world: "packed-transform",
});

use exports::weir::transform::packed::{Guest as PackedGuest, InputBatch, OutputBatch};

/// A length that stands for a null (the greatest u32), per the contract.
const NULL: u32 = u32::MAX;
/// A timestamp that stands for none (the least s64), per the contract.
const NONE: i64 = i64::MIN;

struct PackedMalformed;

impl Guest for PackedMalformed {
    fn init(_config: Vec<(String, String)>) -> Result<(), String> {
        Ok(())
    }

    fn process(batch: Vec<InputRecord>) -> Result<Vec<OutputRecord>, TransformError> {
        Ok(batch
            .into_iter()
            .map(|r| OutputRecord { key: r.key, value: r.value, headers: Vec::new(), timestamp: None, output: None })
            .collect())
    }

    fn snapshot() -> Vec<u8> {
        Vec::new()
    }

    fn restore(_snapshot: Vec<u8>) -> Result<(), String> {
        Ok(())
    }

    fn on_timer(_timers: Vec<Timer>) -> Result<Vec<OutputRecord>, TransformError> {
        Ok(Vec::new())
    }
}

impl PackedGuest for PackedMalformed {
    fn process_packed(batch: InputBatch) -> Result<OutputBatch, TransformError> {
        let mut out = OutputBatch { timestamps: Vec::new(), data: Vec::new(), lengths: Vec::new() };
        let mut words = Vec::new();
        let (mut data, mut lengths) = (&batch.data[..], batch.lengths.iter().copied());
        let mut take = |lengths: &mut dyn Iterator<Item = u32>| {
            let length = lengths.next().expect("the host frames its batch");
            if length == NULL {
                return (NULL, &[][..]);
            }
            let (bytes, rest) = data.split_at(length as usize);
            data = rest;
            (length, bytes)
        };
        for _ in &batch.offsets {
            let (key, value) = (take(&mut lengths), take(&mut lengths));
            let headers = lengths.next().expect("the host frames its batch");
            for _ in 0..headers {
                take(&mut lengths);
                take(&mut lengths);
            }
            words.push(String::from_utf8_lossy(value.1).into_owned());
            out.timestamps.push(NONE);
            out.data.extend_from_slice(key.1);
            out.data.extend_from_slice(value.1);
            out.lengths.extend([key.0, value.0, NULL, 0]);
        }
        malform(&mut out, &words);
        Ok(out)
    }
}

/// Breaks `out` as the first word of `words` that names a way asks.
fn malform(out: &mut OutputBatch, words: &[String]) {
    let Some(word) = words.iter().find(|w| WORDS.contains(&w.as_str())) else { return };
    match word.as_str() {
        "short" => drop(out.lengths.pop()),
        "overrun" => out.lengths[0] = out.data.len() as u32 + 1,
        "leftover" => out.data.push(b'!'),
        "extra-length" => out.lengths.push(0),
        "not-utf8" => {
            // The first record's output name: one byte, inserted after its key and value.
            let at = [out.lengths[0], out.lengths[1]].iter().filter(|&&l| l != NULL).sum::<u32>() as usize;
            out.data.insert(at, 0xff);
            out.lengths[2] = 1;
        }
        "null-header-name" => {
            out.lengths[3] = 1;
            out.lengths.splice(4..4, [NULL, NULL]);
        }
        _ => unreachable!("WORDS lists every word"),
    }
}

/// The values that malform a batch.
const WORDS: [&str; 6] = ["short", "overrun", "leftover", "extra-length", "not-utf8", "null-header-name"];

export!(PackedMalformed);
