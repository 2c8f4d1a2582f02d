//! Subcommands of `weir`. Errors are reported here, at the edge, with `anyhow`.

mod bytes;
mod consume;
mod produce;
mod run;
mod savepoint;
mod status;
mod transform;
mod txn;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Weir: exactly-once stream processing for Apache Kafka with sandboxed WebAssembly transforms.
#[derive(Debug, Parser)]
#[command(name = "weir", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check, inspect and run transforms (WebAssembly components) locally, without Kafka.
    #[command(subcommand)]
    Transform(transform::TransformCommand),
    /// Run a pipeline exactly-once until SIGINT/SIGTERM, then commit the open epoch and exit.
    Run(run::RunArgs),
    /// Copy a pipeline's committed state (from its changelog) into a portable directory.
    Savepoint(savepoint::SavepointArgs),
    /// Show a pipeline's last committed checkpoint, offsets per partition and lag.
    Status(status::StatusArgs),
    /// Load a CSV / JSON-lines / zip file into a topic (created when missing).
    Produce(produce::ProduceArgs),
    /// Print a topic's records as JSON lines (read_committed unless told otherwise).
    Consume(consume::ConsumeArgs),
    /// List or abort a dead pipeline's open Kafka transactions.
    #[command(subcommand)]
    Txn(txn::TxnCommand),
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Transform(command) => transform::run(command),
        Command::Run(args) => run::execute(args),
        Command::Savepoint(args) => savepoint::execute(args),
        Command::Status(args) => status::execute(args),
        Command::Txn(command) => txn::execute(command),
        Command::Produce(args) => produce::execute(args),
        Command::Consume(args) => consume::execute(args),
    }
}
