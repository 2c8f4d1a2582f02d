//! The guest's log: the `log` import and guest stdout/stderr, rate-limited, into `tracing`.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime_wasi::cli::{IsTerminal, StdoutStream};

use super::Level;

/// Lines one operator instance may log per window; the rest are dropped and counted.
const LINES_PER_WINDOW: u32 = 100;
const WINDOW: Duration = Duration::from_secs(1);
/// Bytes of guest stderr kept to explain a trap (a Rust guest prints its panic message there).
const STDERR_TAIL_BYTES: usize = 4096;
/// Longest guest log line kept, in bytes: a longer one is cut at it with a marker saying how
/// much was left out, and the rest of a line written without a newline is dropped.
pub(crate) const MAX_LINE_BYTES: usize = 4096;

/// `line` cut to at most `max` bytes (at a character boundary), with a marker saying how many
/// bytes were left out.
pub fn truncate_line(line: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if line.len() <= max {
        return line.into();
    }
    let head = char_prefix(line, max);
    format!("{head} [truncated: {} more bytes]", line.len() - head.len()).into()
}

/// The longest start of `text` of at most `max` bytes that ends at a character boundary.
fn char_prefix(text: &str, max: usize) -> &str {
    let mut end = max.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Shared by the `log` import and the guest's stdout/stderr streams of one instance.
#[derive(Debug)]
pub(crate) struct GuestLog {
    operator: Arc<str>,
    window_start: Instant,
    lines_in_window: u32,
    dropped: u64,
    partial: [Vec<u8>; 2],
    /// Whether the rest of the current line of stdout (0) or stderr (1) is being dropped: its
    /// first [`MAX_LINE_BYTES`] were logged already.
    skipping: [bool; 2],
    stderr_tail: Vec<u8>,
}

impl GuestLog {
    pub(crate) fn new(operator: Arc<str>) -> Self {
        Self {
            operator,
            window_start: Instant::now(),
            lines_in_window: 0,
            dropped: 0,
            partial: [Vec::new(), Vec::new()],
            skipping: [false, false],
            stderr_tail: Vec::new(),
        }
    }

    /// Logs one guest line at `level`, unless this window's budget is spent.
    pub(crate) fn line(&mut self, level: Level, message: &str) {
        let now = Instant::now();
        if now.duration_since(self.window_start) >= WINDOW {
            if self.dropped > 0 {
                tracing::warn!(operator = %self.operator, dropped = self.dropped, "guest log lines dropped by the rate limit");
            }
            self.window_start = now;
            self.lines_in_window = 0;
            self.dropped = 0;
        }
        if self.lines_in_window >= LINES_PER_WINDOW {
            self.dropped += 1;
            return;
        }
        self.lines_in_window += 1;
        let message = &*truncate_line(message, MAX_LINE_BYTES);
        let operator = &*self.operator;
        match level {
            Level::Trace => tracing::trace!(operator, "{message}"),
            Level::Debug => tracing::debug!(operator, "{message}"),
            Level::Info => tracing::info!(operator, "{message}"),
            Level::Warn => tracing::warn!(operator, "{message}"),
            Level::Error => tracing::error!(operator, "{message}"),
        }
    }

    /// Takes bytes the guest wrote to stdout (`stream` 0) or stderr (1), logging whole lines.
    fn write(&mut self, stream: usize, bytes: &[u8]) {
        if stream == 1 {
            self.stderr_tail.extend_from_slice(bytes);
            let excess = self.stderr_tail.len().saturating_sub(STDERR_TAIL_BYTES);
            self.stderr_tail.drain(..excess);
        }
        let mut pending = std::mem::take(&mut self.partial[stream]);
        pending.extend_from_slice(bytes);
        let mut rest = pending.as_slice();
        let level = if stream == 1 { Level::Warn } else { Level::Info };
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            if !std::mem::take(&mut self.skipping[stream]) {
                self.line(level, String::from_utf8_lossy(&rest[..end]).trim_end());
            }
            rest = &rest[end + 1..];
        }
        if self.skipping[stream] {
            rest = &[];
        } else if rest.len() > MAX_LINE_BYTES {
            // A line longer than any kept: log its start now, drop the rest up to its newline.
            const MARKER: &str = " [truncated: the line goes on]";
            let head = String::from_utf8_lossy(&rest[..MAX_LINE_BYTES]);
            self.line(level, &format!("{}{MARKER}", char_prefix(&head, MAX_LINE_BYTES - MARKER.len())));
            self.skipping[stream] = true;
            rest = &[];
        }
        self.partial[stream] = rest.to_vec();
    }

    /// The panic message a Rust guest printed to stderr since the last call, if any.
    ///
    /// Rust's default panic hook prints `thread '…' panicked at file:line:col:\nmessage`.
    pub(crate) fn take_panic_message(&mut self) -> Option<String> {
        let tail = String::from_utf8_lossy(&std::mem::take(&mut self.stderr_tail)).into_owned();
        let after = &tail[tail.rfind("panicked at ")?..];
        let message = match after.split_once('\n') {
            Some((location, rest)) => {
                let rest = rest.lines().take_while(|l| !l.starts_with("note: ")).collect::<Vec<_>>().join("\n");
                format!("{} ({})", rest.trim(), location.trim_start_matches("panicked at ").trim_end_matches(':'))
            }
            None => after.to_owned(),
        };
        Some(message)
    }

    /// Forgets stderr output of earlier calls.
    pub(crate) fn clear_stderr_tail(&mut self) {
        self.stderr_tail.clear();
    }
}

/// One of the guest's output streams, as WASI `StdoutStream`.
#[derive(Clone)]
pub(crate) struct GuestStream {
    log: Arc<Mutex<GuestLog>>,
    stream: usize,
}

impl GuestStream {
    pub(crate) fn stdout(log: Arc<Mutex<GuestLog>>) -> Self {
        Self { log, stream: 0 }
    }

    pub(crate) fn stderr(log: Arc<Mutex<GuestLog>>) -> Self {
        Self { log, stream: 1 }
    }
}

impl IsTerminal for GuestStream {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStream {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for GuestStream {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        // A poisoned lock means a panic elsewhere in the host; drop the guest's output then.
        if let Ok(mut log) = self.log.lock() {
            log.write(self.stream, buf);
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_message_is_extracted_from_rust_stderr() {
        let mut log = GuestLog::new("op".into());
        log.write(1, b"thread '<unnamed>' panicked at src/lib.rs:10:5:\nmisbehave: panic at offset 3\n");
        log.write(1, b"note: run with `RUST_BACKTRACE=1`\n");
        assert_eq!(log.take_panic_message().as_deref(), Some("misbehave: panic at offset 3 (src/lib.rs:10:5)"));
        assert_eq!(log.take_panic_message(), None);
    }

    #[test]
    fn lines_over_the_budget_are_dropped_and_counted() {
        let mut log = GuestLog::new("op".into());
        for _ in 0..LINES_PER_WINDOW + 5 {
            log.line(Level::Info, "x");
        }
        assert_eq!(log.dropped, 5);
    }

    #[test]
    fn long_lines_are_cut_with_a_marker_and_an_endless_one_is_not_kept() {
        assert_eq!(truncate_line("short", 10), "short");
        let long = "é".repeat(3000);
        let cut = truncate_line(&long, MAX_LINE_BYTES);
        assert!(cut.starts_with(&"é".repeat(2048)) && cut.ends_with("[truncated: 1904 more bytes]"), "{cut}");
        let mut log = GuestLog::new("op".into());
        for _ in 0..1000 {
            log.write(0, &[b'x'; 1 << 10]);
            assert!(log.partial[0].len() <= MAX_LINE_BYTES + (1 << 10));
        }
        assert!(log.skipping[0]);
        assert_eq!(log.lines_in_window, 1, "one line logged for the whole megabyte");
        log.write(0, b"xxx\nnext line\n");
        assert!(!log.skipping[0] && log.partial[0].is_empty());
        assert_eq!(log.lines_in_window, 2, "the rest of the long line dropped, the next one logged");
    }
}
