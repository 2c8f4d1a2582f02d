//! How a transform's timers are kept in state.
//!
//! Each operator of each task keeps its timers in a state scope of its own (see the WebAssembly
//! host's `Operator`), one entry per timer with an empty value, under the key
//! `<clock: 1 byte><time: 8 bytes><key>`, where the time is an i64 with its sign bit flipped,
//! big-endian, so that keys sort by clock, then time (negative times first), then key: the due
//! timers of a clock are the first entries of a prefix scan.

/// The clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Clock {
    /// The task's watermark.
    EventTime,
    /// The host's wall clock.
    ProcessingTime,
}

impl Clock {
    fn byte(self) -> u8 {
        match self {
            Clock::EventTime => 0,
            Clock::ProcessingTime => 1,
        }
    }
}

/// The prefix of every timer of `clock`.
pub fn timer_prefix(clock: Clock) -> Vec<u8> {
    vec![clock.byte()]
}

/// The state key of the timer for `key` at `time` (milliseconds since the Unix epoch) on `clock`.
pub fn timer_key(clock: Clock, time: i64, key: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(9 + key.len());
    bytes.push(clock.byte());
    bytes.extend_from_slice(&((time as u64) ^ (1 << 63)).to_be_bytes());
    bytes.extend_from_slice(key);
    bytes
}

/// The clock, time and key of a [`timer_key`]; `None` for bytes that are not one.
pub fn parse_timer_key(bytes: &[u8]) -> Option<(Clock, i64, &[u8])> {
    let clock = match bytes.first()? {
        0 => Clock::EventTime,
        1 => Clock::ProcessingTime,
        _ => return None,
    };
    let time: [u8; 8] = bytes.get(1..9)?.try_into().ok()?;
    Some((clock, (u64::from_be_bytes(time) ^ (1 << 63)) as i64, &bytes[9..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_keys_sort_by_clock_then_time_then_key_and_read_back() {
        let mut keys = [
            timer_key(Clock::ProcessingTime, -5, b"a"),
            timer_key(Clock::EventTime, 10, b"b"),
            timer_key(Clock::EventTime, -3, b"z"),
            timer_key(Clock::EventTime, 10, b"a"),
            timer_key(Clock::EventTime, i64::MAX, b""),
        ];
        keys.sort();
        let parsed: Vec<_> = keys.iter().map(|k| parse_timer_key(k).unwrap()).collect();
        assert_eq!(
            parsed,
            vec![
                (Clock::EventTime, -3, &b"z"[..]),
                (Clock::EventTime, 10, &b"a"[..]),
                (Clock::EventTime, 10, &b"b"[..]),
                (Clock::EventTime, i64::MAX, &b""[..]),
                (Clock::ProcessingTime, -5, &b"a"[..]),
            ]
        );
        assert!(keys.iter().take(4).all(|k| k.starts_with(&timer_prefix(Clock::EventTime))));
        assert_eq!(parse_timer_key(b"\x02short"), None);
    }
}
