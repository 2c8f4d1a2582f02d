//! The process's recent log lines, kept for the dashboard by a `tracing` layer.

use std::collections::VecDeque;
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use super::pipeline::lock;

/// How many lines are kept.
pub const RECENT_LINES: usize = 200;

/// A `tracing` layer that keeps the last [`RECENT_LINES`] events of the process as text
/// (`<hh:mm:ss.mmm UTC> <LEVEL> <message> key=value ...`) that the log filter lets through.
#[derive(Debug, Default)]
pub struct RecentLog {
    lines: Mutex<VecDeque<String>>,
}

impl RecentLog {
    /// The process's one recent log, which [`super::Metrics`] shows.
    pub fn global() -> &'static RecentLog {
        static LOG: OnceLock<RecentLog> = OnceLock::new();
        LOG.get_or_init(RecentLog::default)
    }

    /// The lines, oldest first.
    pub fn lines(&self) -> Vec<String> {
        lock(&self.lines).iter().cloned().collect()
    }

    fn push(&self, line: String) {
        let mut lines = lock(&self.lines);
        if lines.len() == RECENT_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

impl<S: Subscriber> Layer<S> for &'static RecentLog {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let mut line = Line::default();
        event.record(&mut line);
        let time = super::pipeline::now_ms();
        let (seconds, millis) = (time / 1000, time % 1000);
        let clock = format!("{:02}:{:02}:{:02}.{millis:03}", seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
        self.push(format!("{clock} {:>5} {}{}", event.metadata().level(), line.message, line.fields));
    }
}

/// An event's message and its other fields as ` key=value`.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}
