//! The process's recent log lines, kept for the dashboard by a `tracing` layer.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::sync::{Mutex, OnceLock};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

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
        self.push(format_line(event, &mut Line::default()));
    }
}

/// `<hh:mm:ss.mmm UTC> <LEVEL> <message> key=value ...`, with `line` the event's fields.
fn format_line(event: &Event<'_>, line: &mut Line) -> String {
    event.record(line);
    let time = super::pipeline::now_ms();
    let (seconds, millis) = (time / 1000, time % 1000);
    let clock = format!("{:02}:{:02}:{:02}.{millis:03}", seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    let line = format!("{clock} {:>5} {}{}", event.metadata().level(), line.message, line.fields);
    // A secret a library echoes must not reach the dashboard or the logs route either.
    crate::config::secret::redact(&line).into_owned()
}

/// How many lines are kept per pipeline by [`PipelineLog`].
pub const PIPELINE_LINES: usize = 1000;
/// How many bytes of lines are kept per pipeline by [`PipelineLog`] (the oldest go first).
pub const PIPELINE_BYTES: usize = 1 << 20;
/// Longest line kept by [`PipelineLog`], in bytes; a longer one is cut with a marker.
pub const PIPELINE_LINE_BYTES: usize = 8 << 10;

/// One line of a pipeline's log, numbered from 1 in the order they were logged.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NumberedLine {
    /// Its number; ask for lines after it to follow the log.
    pub seq: u64,
    /// The line, as in the process's log.
    pub line: String,
}

/// A `tracing` layer that keeps the last [`PIPELINE_LINES`] lines of each pipeline: events with
/// a `pipeline` field, or inside a span that has one (`weir serve` runs each pipeline, and its
/// worker threads, in such a span, so guest log lines count too). Bounded per pipeline; guest
/// lines are rate-limited where they enter the host.
#[derive(Debug, Default)]
pub struct PipelineLog {
    pipelines: Mutex<HashMap<String, Kept>>,
}

/// A pipeline's last line number, the bytes of its kept lines, and the lines.
type Kept = (u64, usize, VecDeque<NumberedLine>);

/// The `pipeline` field of a span, kept in its extensions.
struct SpanPipeline(String);

impl PipelineLog {
    /// The process's one per-pipeline log.
    pub fn global() -> &'static PipelineLog {
        static LOG: OnceLock<PipelineLog> = OnceLock::new();
        LOG.get_or_init(PipelineLog::default)
    }

    /// The first `limit` kept lines of `pipeline` numbered above `after`, oldest first.
    pub fn after(&self, pipeline: &str, after: u64, limit: usize) -> Vec<NumberedLine> {
        lock(&self.pipelines)
            .get(pipeline)
            .map(|(_, _, lines)| lines.iter().filter(|l| l.seq > after).take(limit).cloned().collect())
            .unwrap_or_default()
    }

    /// Drops the lines of `pipeline` (deleted).
    pub fn forget(&self, pipeline: &str) {
        lock(&self.pipelines).remove(pipeline);
    }

    fn push(&self, pipeline: String, line: String) {
        let mut pipelines = lock(&self.pipelines);
        let line = match crate::wasm::truncate_line(&line, PIPELINE_LINE_BYTES) {
            std::borrow::Cow::Borrowed(_) => line,
            std::borrow::Cow::Owned(cut) => cut,
        };
        let (last, bytes, lines) = pipelines.entry(pipeline).or_default();
        while lines.len() == PIPELINE_LINES || (!lines.is_empty() && *bytes + line.len() > PIPELINE_BYTES) {
            if let Some(old) = lines.pop_front() {
                *bytes -= old.line.len();
            }
        }
        *last += 1;
        *bytes += line.len();
        lines.push_back(NumberedLine { seq: *last, line });
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for &'static PipelineLog {
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let mut line = Line::default();
        attributes.record(&mut line);
        if let (Some(pipeline), Some(span)) = (line.pipeline, context.span(id)) {
            span.extensions_mut().insert(SpanPipeline(pipeline));
        }
    }

    fn on_event(&self, event: &Event<'_>, context: Context<'_, S>) {
        let from_span = || {
            context.event_scope(event)?.find_map(|span| span.extensions().get::<SpanPipeline>().map(|p| p.0.clone()))
        };
        let mut line = Line::default();
        let text = format_line(event, &mut line);
        if let Some(pipeline) = from_span().or(line.pipeline) {
            self.push(pipeline, text);
        }
    }
}

/// An event's message and its other fields as ` key=value`.
#[derive(Default)]
struct Line {
    message: String,
    fields: String,
    /// The `pipeline` field's value, when there is one.
    pipeline: Option<String>,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "pipeline" {
            self.pipeline = Some(format!("{value:?}"));
        }
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "pipeline" {
            self.pipeline = Some(value.to_owned());
        }
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}

#[cfg(test)]
mod pipeline_log_tests {
    use super::*;

    #[test]
    fn a_pipeline_keeps_at_most_its_bytes_and_lines_cut_long_ones_and_pages() {
        let log = PipelineLog::default();
        for _ in 0..300 {
            log.push("t.p".into(), "y".repeat(100 << 10));
        }
        let kept = log.after("t.p", 0, usize::MAX);
        let bytes: usize = kept.iter().map(|l| l.line.len()).sum();
        assert!(bytes <= PIPELINE_BYTES, "{bytes} bytes kept");
        assert!(kept.iter().all(|l| l.line.len() < PIPELINE_LINE_BYTES + 64 && l.line.contains("[truncated: ")));
        assert_eq!(kept.last().map(|l| l.seq), Some(300));
        let page = log.after("t.p", 0, 10);
        assert_eq!(page.len(), 10);
        assert_eq!(log.after("t.p", page[9].seq, 10)[0].seq, page[9].seq + 1);
    }
}
