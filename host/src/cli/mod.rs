//! Subcommands of `weir`. Errors are reported here, at the edge, with `anyhow`.

mod bytes;
mod cluster;
mod consume;
mod hosting;
mod output;
mod produce;
mod run;
mod savepoint;
mod serve;
mod status;
mod transform;
mod txn;
mod validate;

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
    /// Check a pipeline file without a broker (keys, values, components); report every error.
    Validate(validate::ValidateArgs),
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
    /// Host many tenants' transforms and pipelines behind an HTTP API (see docs/hosting.md).
    Serve(serve::ServeArgs),
    /// Deploy a pipeline file to a `weir serve`, uploading the components it names.
    Deploy(hosting::DeployArgs),
    /// List, show, stop, start or delete your pipelines on a `weir serve`.
    Pipelines {
        #[command(subcommand)]
        command: hosting::PipelinesCommand,
        #[command(flatten)]
        server: hosting::ServerArgs,
    },
    /// Print a pipeline's log lines from a `weir serve`.
    Logs(hosting::LogsArgs),
    /// Upload, list, show or delete your transforms on a `weir serve` (`weir transforms`, its
    /// former name, still works in this release and goes in the next).
    #[command(name = "hosted-transforms", alias = "transforms")]
    HostedTransforms {
        #[command(subcommand)]
        command: hosting::HostedTransformsCommand,
        #[command(flatten)]
        server: hosting::ServerArgs,
    },
    /// Create, list, re-key or delete tenants of a `weir serve` (admin token).
    Tenants {
        #[command(subcommand)]
        command: hosting::TenantsCommand,
        #[command(flatten)]
        server: hosting::ServerArgs,
    },
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Transform(command) => transform::run(command),
        Command::Validate(args) => validate::execute(args),
        Command::Run(args) => run::execute(args),
        Command::Savepoint(args) => savepoint::execute(args),
        Command::Status(args) => status::execute(args),
        Command::Txn(command) => txn::execute(command),
        Command::Produce(args) => produce::execute(args),
        Command::Consume(args) => consume::execute(args),
        Command::Serve(args) => serve::execute(args),
        Command::Deploy(args) => hosting::deploy(args),
        Command::Pipelines { command, server } => hosting::pipelines(command, &server),
        Command::Logs(args) => hosting::logs(args),
        Command::HostedTransforms { command, server } => hosting::hosted_transforms(command, &server),
        Command::Tenants { command, server } => hosting::tenants(command, &server),
    }
}
