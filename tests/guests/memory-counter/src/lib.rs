//! `memory-counter`: a test-only transform that keeps its state in guest memory, carried across
//! instances by `snapshot`/`restore` only (no state-store calls), to test how the host keeps
//! such state through checkpoints, crashes, restarts and dead letters.
//!
//! The instance counts the records it sees. For each record, by value (UTF-8):
//!
//! | value | behaviour |
//! |---|---|
//! | `reset` | sets the count to 0 and emits `0` |
//! | `poison` | fails the batch with a transform error (the count is unchanged) |
//! | `corrupt` | makes later snapshots unreadable by `restore` (until a fresh instance) and emits `corrupt` |
//! | anything else | adds 1 to the count and emits the new count in decimal |
//!
//! Outputs keep the input key. The snapshot is the count in decimal, and empty when the count is
//! 0 (an empty snapshot means "nothing to restore"); `restore` refuses anything else that is not
//! a decimal number.

use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError};

/// The in-memory count of one instance.
pub struct MemoryCounter {
    count: u64,
    /// Set by `corrupt`: snapshots become `corrupt`, which `restore` refuses.
    corrupt: bool,
}

impl Transform for MemoryCounter {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&[])?;
        Ok(MemoryCounter { count: 0, corrupt: false })
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let reply = match record.value_str().unwrap_or("") {
            "reset" => {
                self.count = 0;
                "0".to_owned()
            }
            "poison" => return Err(TransformError::new("memory-counter: poison record")),
            "corrupt" => {
                self.corrupt = true;
                "corrupt".to_owned()
            }
            _ => {
                self.count += 1;
                self.count.to_string()
            }
        };
        out.emit(Output::new(record.key(), Some(reply)));
        Ok(())
    }

    fn snapshot(&self) -> Vec<u8> {
        match (self.corrupt, self.count) {
            (true, _) => b"corrupt".to_vec(),
            (false, 0) => Vec::new(),
            (false, count) => count.to_string().into_bytes(),
        }
    }

    fn restore(&mut self, snapshot: &[u8]) -> Result<(), String> {
        self.count = match snapshot {
            [] => 0,
            bytes => std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| format!("memory-counter: cannot restore snapshot {:?}", String::from_utf8_lossy(bytes)))?,
        };
        Ok(())
    }
}

weir_guest::export!(MemoryCounter);
