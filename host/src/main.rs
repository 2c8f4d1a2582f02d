//! The `weir` command line.

mod cli;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use weir::{RedactingWriter, redact};

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::EnvFilter::try_from_env("WEIR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        // Colours only for a terminal: a log file or a CI log gets plain text.
        .with(
            tracing_subscriber::fmt::layer()
                // Resolved secrets (issue 43) never reach the log, even when a library quotes one.
                .with_writer(|| RedactingWriter(std::io::stderr()))
                .with_ansi(std::io::stderr().is_terminal()),
        )
        // The dashboard's recent log lines (`weir run --metrics`).
        .with(weir::RecentLog::global())
        // Each pipeline's own lines (`weir serve`'s logs route).
        .with(weir::PipelineLog::global())
        .init();
    match cli::run(args) {
        Ok(code) => code,
        // The reader of stdout went away (`weir ... | head`): what it wanted was written.
        Err(error) if is_broken_pipe(&error) => ExitCode::SUCCESS,
        Err(error) => {
            let mut text = message(&error);
            // A tool's request that found no broker, while the cluster refused its handshake or a right.
            let unreachable = error.chain().any(|c| c.downcast_ref().is_some_and(weir::is_unreachable));
            if let Some(reason) = weir::recent_refusal().filter(|_| unreachable) {
                text.push_str(&format!(
                    ": the cluster refuses: {reason}; check the security properties (security.protocol, \
                     sasl.*, ssl.*) of --kafka-config or the pipeline's [kafka], or the principal's ACLs"
                ));
            }
            eprintln!("error: {}", redact(&text));
            ExitCode::FAILURE
        }
    }
}

/// `error` and its causes, joined by `: `; a cause that the one before it already says is left
/// out (many errors put their source in their own message, so `{:#}` printed it twice).
fn message(error: &anyhow::Error) -> String {
    let mut text = String::new();
    let mut previous = String::new();
    for cause in error.chain().map(ToString::to_string) {
        if text.is_empty() {
            text.clone_from(&cause);
        } else if !previous.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
        previous = cause;
    }
    text
}

/// Whether `error` comes from writing to a pipe whose reader has closed it (EPIPE; Rust ignores
/// SIGPIPE, so the write fails instead of killing the process).
fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_printed_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory (os error 2)");
        let said = anyhow::Error::new(io()).context(format!("cannot read x.wasm: {}", io()));
        assert_eq!(message(&said), "cannot read x.wasm: No such file or directory (os error 2)");
        let unsaid = anyhow::anyhow!("connection refused").context("reading the topic metadata");
        assert_eq!(message(&unsaid), "reading the topic metadata: connection refused");
    }
}
