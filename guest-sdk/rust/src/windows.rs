//! Event-time windows over keyed records, built on [`state`](crate::state) and
//! [`timers`](crate::timers) (docs/event-time.md).
//!
//! A [`Windows`] value describes how records are grouped in time — [tumbling](Windows::tumbling),
//! [hopping](Windows::hopping) or [session](Windows::session) windows, each a half-open
//! interval `[start, end)` of event time in milliseconds — and what happens to late records.
//! [`Windows::add`] folds a record into an accumulator per (key, window), kept in state;
//! [`Windows::close`], called from [`Transform::on_timer`](crate::Transform::on_timer), hands
//! back a window's final accumulator once the watermark has passed its end plus the allowed
//! lateness. So each window yields exactly one result, exactly once, even across crashes.
//!
//! # Late records
//! A record is late for a window when, before the record, the task's watermark had already
//! reached the window's end − 1 + allowed lateness (the window is closed, or closes after this
//! batch). A record late for every window it belongs to is counted ([`Windows::late_count`]) or,
//! with [`Windows::late_to`], forwarded unchanged to a named sink output. Whether a record is late
//! depends only on the records before it in its partition, so it is the same in every replay.
//!
//! # Example: records per key per minute
//! ```
//! use weir_guest::windows::{Accumulator, Windows};
//! use weir_guest::{timers::Timer, Config, Emitter, Output, Record, Transform, TransformError};
//!
//! #[derive(Default, serde::Serialize, serde::Deserialize)]
//! struct Count(u64);
//! impl Accumulator for Count {
//!     fn merge(&mut self, other: Self) { self.0 += other.0; }
//! }
//!
//! struct PerMinute { windows: Windows }
//! impl Transform for PerMinute {
//!     fn init(_: &Config) -> Result<Self, String> {
//!         Ok(PerMinute { windows: Windows::tumbling("per-minute", 60_000) })
//!     }
//!     fn process(&mut self, r: &Record, out: &mut Emitter) -> Result<(), TransformError> {
//!         let key = r.key().unwrap_or_default().to_vec();
//!         self.windows.add(&key, r, out, |c: &mut Count| c.0 += 1)?;
//!         Ok(())
//!     }
//!     fn on_timer(&mut self, timer: &Timer, out: &mut Emitter) -> Result<(), TransformError> {
//!         if let Some(closed) = self.windows.close::<Count>(timer)? {
//!             out.emit(Output::json(Some(closed.key), &(closed.window.start_ms, closed.value.0))?);
//!         }
//!         Ok(())
//!     }
//! }
//! # let mut h = weir_guest::testing::Harness::<PerMinute>::new(&[]).unwrap();
//! # let r = |t: i64| Record::new(Some("k"), Some("x")).with_event_time_ms(t);
//! # h.process(vec![r(1_000), r(2_000), r(61_000)]).unwrap();
//! # let out = h.advance_watermark(59_999).unwrap();
//! # assert_eq!(out[0].value(), Some(&b"[0,2]"[..]));
//! ```

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::timers::{self, TimeDomain, Timer};
use crate::{Emitter, Output, Record, TransformError, state};

/// Most windows of one key read back at once (hopping windows overlap `size / slide` times).
const MAX_WINDOWS_PER_KEY: u32 = 10_000;

/// A window's accumulator, kept in state as JSON between the records that update it.
pub trait Accumulator: Default + Serialize + DeserializeOwned {
    /// Folds `other` into `self`: session windows that a record bridges become one.
    fn merge(&mut self, other: Self);
}

/// How records are grouped in event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// Windows of `size_ms`, one after the other from the Unix epoch on.
    Tumbling {
        /// Length, in milliseconds.
        size_ms: i64,
    },
    /// Windows of `size_ms` starting every `slide_ms` from the Unix epoch on; a record belongs to
    /// every window that covers it.
    Hopping {
        /// Length, in milliseconds.
        size_ms: i64,
        /// Distance between window starts, in milliseconds.
        slide_ms: i64,
    },
    /// Per key, records less than `gap_ms` apart in event time share a window, which ends
    /// `gap_ms` after its last record.
    Session {
        /// Longest silence inside a session, in milliseconds.
        gap_ms: i64,
    },
}

/// A window: the half-open interval `[start_ms, end_ms)` of event time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// First millisecond in the window (milliseconds since the Unix epoch).
    pub start_ms: i64,
    /// First millisecond after the window.
    pub end_ms: i64,
}

/// A window closed by [`Windows::close`]: its key, bounds and final accumulator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed<A> {
    /// The key the records were grouped by.
    pub key: Vec<u8>,
    /// The window.
    pub window: Window,
    /// The accumulator after the window's last record.
    pub value: A,
}

/// Where records late for all their windows go.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Late {
    Count,
    Output(String),
}

/// Windows of one kind, under a name that scopes their state and timers (one transform may keep
/// several).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Windows {
    name: String,
    kind: WindowKind,
    allowed_lateness_ms: i64,
    late: Late,
}

/// A window as kept in state, under [`Windows::window_key`].
#[derive(Serialize, Deserialize)]
struct Stored<A> {
    end: i64,
    acc: A,
}

impl Windows {
    /// Tumbling windows of `size_ms` (at least 1) named `name`.
    pub fn tumbling(name: impl Into<String>, size_ms: i64) -> Self {
        Self::new(name, WindowKind::Tumbling { size_ms: size_ms.max(1) })
    }

    /// Hopping windows of `size_ms` every `slide_ms` (each at least 1) named `name`.
    pub fn hopping(name: impl Into<String>, size_ms: i64, slide_ms: i64) -> Self {
        Self::new(name, WindowKind::Hopping { size_ms: size_ms.max(1), slide_ms: slide_ms.max(1) })
    }

    /// Session windows with a gap of `gap_ms` (at least 1) named `name`.
    pub fn session(name: impl Into<String>, gap_ms: i64) -> Self {
        Self::new(name, WindowKind::Session { gap_ms: gap_ms.max(1) })
    }

    fn new(name: impl Into<String>, kind: WindowKind) -> Self {
        Windows { name: name.into(), kind, allowed_lateness_ms: 0, late: Late::Count }
    }

    /// Keeps each window open for `ms` more of event time after its end, so that records up to
    /// that late still count; its result comes that much later. By default 0.
    pub fn allowed_lateness_ms(mut self, ms: i64) -> Self {
        self.allowed_lateness_ms = ms.max(0);
        self
    }

    /// Forwards records late for all their windows, unchanged, to the sink output `output`
    /// instead of counting them.
    pub fn late_to(mut self, output: impl Into<String>) -> Self {
        self.late = Late::Output(output.into());
        self
    }

    /// The kind of windows.
    pub fn kind(&self) -> WindowKind {
        self.kind
    }

    /// Folds `record` into the windows of `key` it belongs to (by its
    /// [event time](Record::event_time_ms)) that are not closed, with `update`. Returns `false`
    /// when the record was late for all of them: then it was counted or forwarded to the late
    /// output (see the module doc) and `update` was not called.
    ///
    /// # Errors
    /// When an accumulator in state does not deserialise into `A` (another type under this
    /// name) or cannot be serialised.
    pub fn add<A: Accumulator>(
        &self,
        key: &[u8],
        record: &Record,
        out: &mut Emitter,
        mut update: impl FnMut(&mut A),
    ) -> Result<bool, TransformError> {
        let time = record.event_time_ms();
        let watermark = record.watermark_ms();
        let open = |w: &Window| watermark.is_none_or(|wm| self.fire_time(w) > wm);
        let mut added = false;
        match self.kind {
            WindowKind::Tumbling { size_ms } => {
                let start = time.div_euclid(size_ms) * size_ms;
                added =
                    self.update_window(key, Window { start_ms: start, end_ms: start + size_ms }, &open, &mut update)?;
            }
            WindowKind::Hopping { size_ms, slide_ms } => {
                let last = time.div_euclid(slide_ms) * slide_ms;
                let mut start = last;
                while start > time - size_ms {
                    let window = Window { start_ms: start, end_ms: start + size_ms };
                    added |= self.update_window(key, window, &open, &mut update)?;
                    start -= slide_ms;
                }
            }
            WindowKind::Session { gap_ms } => {
                let mut merged = Window { start_ms: time, end_ms: time + gap_ms };
                let mut acc = A::default();
                let mut bridged = Vec::new();
                for (window, stored) in self.windows_of::<A>(key)? {
                    if window.start_ms < merged.end_ms && merged.start_ms < window.end_ms {
                        merged.start_ms = merged.start_ms.min(window.start_ms);
                        merged.end_ms = merged.end_ms.max(window.end_ms);
                        acc.merge(stored);
                        bridged.push(window);
                    }
                }
                if open(&merged) {
                    for window in bridged {
                        state::delete(self.window_key(key, window.start_ms));
                        timers::cancel(self.timer_key(key), self.fire_time(&window), TimeDomain::EventTime);
                    }
                    update(&mut acc);
                    self.store(key, merged, acc)?;
                    added = true;
                }
            }
        }
        if !added {
            match &self.late {
                Late::Count => state::put_json(self.late_key(), &(self.late_count() + 1))?,
                Late::Output(output) => out.emit(Output::from_record(record).to_output(output.clone())),
            }
        }
        Ok(added)
    }

    /// If `timer` is one of these windows' timers, the window it closes, removed from state with
    /// its accumulator; `None` for a timer of something else.
    ///
    /// # Errors
    /// When the accumulator in state does not deserialise into `A`.
    pub fn close<A: Accumulator>(&self, timer: &Timer) -> Result<Option<Closed<A>>, TransformError> {
        let prefix = self.timer_key(b"");
        if timer.domain != TimeDomain::EventTime || !timer.key.starts_with(&prefix) {
            return Ok(None);
        }
        let key = &timer.key[prefix.len()..];
        for (window, acc) in self.windows_of::<A>(key)? {
            if self.fire_time(&window) == timer.time {
                state::delete(self.window_key(key, window.start_ms));
                return Ok(Some(Closed { key: key.to_vec(), window, value: acc }));
            }
        }
        Ok(None)
    }

    /// How many records were late for all their windows (when they are counted, the default).
    pub fn late_count(&self) -> u64 {
        state::get_json(self.late_key()).ok().flatten().unwrap_or(0)
    }

    /// When a window's timer fires: its end − 1 + allowed lateness.
    fn fire_time(&self, window: &Window) -> i64 {
        window.end_ms - 1 + self.allowed_lateness_ms
    }

    /// Applies `update` to `window` of `key` if it is open; whether it was.
    fn update_window<A: Accumulator>(
        &self,
        key: &[u8],
        window: Window,
        open: &impl Fn(&Window) -> bool,
        update: &mut impl FnMut(&mut A),
    ) -> Result<bool, TransformError> {
        if !open(&window) {
            return Ok(false);
        }
        let state_key = self.window_key(key, window.start_ms);
        let mut acc = state::get_json::<Stored<A>>(&state_key)?.map_or_else(A::default, |s| s.acc);
        update(&mut acc);
        self.store(key, window, acc)?;
        Ok(true)
    }

    fn store<A: Accumulator>(&self, key: &[u8], window: Window, acc: A) -> Result<(), TransformError> {
        state::put_json(self.window_key(key, window.start_ms), &Stored { end: window.end_ms, acc })?;
        timers::register_event_time(self.timer_key(key), self.fire_time(&window));
        Ok(())
    }

    /// The windows of `key` in state, by start.
    fn windows_of<A: Accumulator>(&self, key: &[u8]) -> Result<Vec<(Window, A)>, TransformError> {
        let prefix = self.window_key(key, i64::MIN);
        let prefix = &prefix[..prefix.len() - 8];
        let mut windows = Vec::new();
        for (state_key, bytes) in state::scan_prefix(prefix, MAX_WINDOWS_PER_KEY) {
            let start: [u8; 8] = state_key[prefix.len()..].try_into().map_err(|_| {
                TransformError::new(format!("windows `{}`: a state key under their prefix is not a window", self.name))
            })?;
            let stored: Stored<A> = serde_json::from_slice(&bytes).map_err(|e| {
                TransformError::new(format!(
                    "windows `{}`: stored accumulator is not the expected JSON: {e}",
                    self.name
                ))
            })?;
            let start_ms = (u64::from_be_bytes(start) ^ (1 << 63)) as i64;
            windows.push((Window { start_ms, end_ms: stored.end }, stored.acc));
        }
        Ok(windows)
    }

    /// `weir.w\0<name>\0<key length: 4 bytes BE><key><start: i64 with the sign bit flipped, BE>`:
    /// the windows of one key sort by start, and no key's prefix is another's.
    fn window_key(&self, key: &[u8], start_ms: i64) -> Vec<u8> {
        let mut bytes = self.scope(b'w');
        bytes.extend_from_slice(&(key.len() as u32).to_be_bytes());
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(&((start_ms as u64) ^ (1 << 63)).to_be_bytes());
        bytes
    }

    /// `weir.t\0<name>\0<key>`: the timer key of `key`'s windows.
    fn timer_key(&self, key: &[u8]) -> Vec<u8> {
        let mut bytes = self.scope(b't');
        bytes.extend_from_slice(key);
        bytes
    }

    fn late_key(&self) -> Vec<u8> {
        self.scope(b'l')
    }

    fn scope(&self, kind: u8) -> Vec<u8> {
        let mut bytes = b"weir.".to_vec();
        bytes.push(kind);
        bytes.push(0);
        bytes.extend_from_slice(self.name.as_bytes());
        bytes.push(0);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Harness;
    use crate::{Config, Transform};

    #[derive(Default, Serialize, Deserialize, Debug, PartialEq)]
    struct Sum(i64);

    impl Accumulator for Sum {
        fn merge(&mut self, other: Self) {
            self.0 += other.0;
        }
    }

    /// Sums the values (numbers) per key in the windows the config's `kind` names; emits
    /// `start,end,sum` per closed window; late records to output `late` when `late = output`.
    struct Summer {
        windows: Windows,
    }

    impl Transform for Summer {
        fn init(config: &Config) -> Result<Self, String> {
            let mut windows = match config.get("kind").unwrap_or("tumbling") {
                "hopping" => Windows::hopping("s", 10, 5),
                "session" => Windows::session("s", 10),
                _ => Windows::tumbling("s", 10),
            };
            windows = windows.allowed_lateness_ms(config.parse("lateness", 0)?);
            if config.get("late") == Some("output") {
                windows = windows.late_to("late");
            }
            Ok(Summer { windows })
        }

        fn process(&mut self, r: &Record, out: &mut Emitter) -> Result<(), TransformError> {
            let n: i64 = r.value_str().unwrap_or("0").parse().unwrap_or(0);
            self.windows.add(r.key().unwrap_or_default(), r, out, |s: &mut Sum| s.0 += n)?;
            Ok(())
        }

        fn on_timer(&mut self, timer: &Timer, out: &mut Emitter) -> Result<(), TransformError> {
            if let Some(c) = self.windows.close::<Sum>(timer)? {
                out.emit(Output::new(
                    Some(c.key),
                    Some(format!("{},{},{}", c.window.start_ms, c.window.end_ms, c.value.0)),
                ));
            }
            Ok(())
        }
    }

    /// A record of key `k` with value `n` at event time `t`, seen at watermark `wm`.
    fn rec(n: i64, t: i64, wm: Option<i64>) -> Record {
        let r = Record::new(Some("k"), Some(n.to_string())).with_event_time_ms(t);
        match wm {
            Some(wm) => r.with_watermark_ms(wm),
            None => r,
        }
    }

    fn values(outputs: &[Output]) -> Vec<String> {
        outputs.iter().map(|o| String::from_utf8(o.value().unwrap().to_vec()).unwrap()).collect()
    }

    #[test]
    fn tumbling_windows_close_once_when_the_watermark_passes_their_end() {
        let mut h = Harness::<Summer>::new(&[]).unwrap();
        h.process(vec![rec(8, -1, None), rec(1, 0, Some(-2)), rec(2, 9, Some(-2)), rec(4, 10, Some(8))]).unwrap();
        assert_eq!(values(&h.advance_watermark(-2).unwrap()), Vec::<String>::new());
        assert_eq!(values(&h.advance_watermark(8).unwrap()), vec!["-10,0,8"]);
        assert_eq!(values(&h.advance_watermark(9).unwrap()), vec!["0,10,3"]);
        assert_eq!(values(&h.advance_watermark(100).unwrap()), vec!["10,20,4"]);
        assert_eq!(values(&h.advance_watermark(1000).unwrap()), Vec::<String>::new(), "each once");
        // At watermark 9, window [0, 10) is closed: a record for it is late, and counted.
        let late = rec(16, 5, Some(9));
        assert!(h.process(vec![late]).unwrap().is_empty());
        assert_eq!(h.transform().windows.late_count(), 1);
        assert_eq!(values(&h.advance_watermark(2000).unwrap()), Vec::<String>::new(), "no window reopens");
    }

    #[test]
    fn allowed_lateness_keeps_a_window_open_and_late_records_can_go_to_an_output() {
        let mut h = Harness::<Summer>::new(&[("lateness", "5"), ("late", "output")]).unwrap();
        let out = h.process(vec![rec(1, 0, None), rec(2, 3, Some(11)), rec(4, 3, Some(14))]).unwrap();
        assert_eq!(out.len(), 1, "the record at watermark 14 is late (window fires at 9 + 5)");
        assert_eq!((out[0].output_name(), out[0].value()), (Some("late"), Some(&b"4"[..])));
        assert_eq!(values(&h.advance_watermark(14).unwrap()), vec!["0,10,3"]);
    }

    #[test]
    fn hopping_windows_count_a_record_in_every_window_that_covers_it() {
        let mut h = Harness::<Summer>::new(&[("kind", "hopping")]).unwrap();
        h.process(vec![rec(1, 7, None), rec(2, 12, Some(6))]).unwrap();
        assert_eq!(values(&h.advance_watermark(100).unwrap()), vec!["0,10,1", "5,15,3", "10,20,2"]);
    }

    #[test]
    fn session_windows_merge_records_closer_than_the_gap() {
        let mut h = Harness::<Summer>::new(&[("kind", "session")]).unwrap();
        // 0 and 18 start two sessions; 9 bridges them (within the gap of 10 of each).
        h.process(vec![rec(1, 0, None), rec(2, 18, Some(-1)), rec(4, 9, Some(-1)), rec(8, 50, Some(-1))]).unwrap();
        assert_eq!(values(&h.advance_watermark(100).unwrap()), vec!["0,28,7", "50,60,8"]);
    }
}
