//! The test broker itself, through `scripts/kafka.sh`: restarts, and the transaction states its
//! coordinator reports (Kafka's `TransactionsCommand`, the DescribeTransactions/ListTransactions
//! admin API that librdkafka lacks).

use std::process::Command;

use crate::{bootstrap, repo_root};

/// Runs `scripts/kafka.sh ARGS` and returns its standard output.
///
/// # Panics
/// When the script fails, with its standard error.
pub fn kafka_sh(args: &[&str]) -> String {
    let output =
        Command::new("bash").arg(repo_root().join("scripts/kafka.sh")).args(args).output().expect("scripts/kafka.sh");
    assert!(
        output.status.success(),
        "scripts/kafka.sh {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// One transactional id as the broker's transaction coordinator reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transaction {
    /// The transactional id.
    pub id: String,
    /// The coordinator's state: `Empty`, `Ongoing`, `PrepareCommit`, `PrepareAbort`,
    /// `CompleteCommit`, `CompleteAbort`, `Dead` or `PrepareEpochFence`.
    pub state: String,
}

impl Transaction {
    /// Whether the transaction has been aborted or is being aborted.
    pub fn is_aborted(&self) -> bool {
        matches!(self.state.as_str(), "PrepareAbort" | "CompleteAbort")
    }
}

/// The transactional ids starting with `prefix` and their states, from the broker
/// (`TransactionsCommand list`, one JVM start: about 2.5 s).
///
/// # Panics
/// When the command fails or prints no header.
pub fn transactions(prefix: &str) -> Vec<Transaction> {
    let text =
        kafka_sh(&["run", "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", &bootstrap(), "list"]);
    let mut lines = text.lines();
    let header: Vec<&str> =
        lines.next().expect("TransactionsCommand list prints a header").split_whitespace().collect();
    let column =
        |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name} column in {header:?}"));
    let (id, state) = (column("TransactionalId"), column("TransactionState"));
    lines
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(|fields| fields.len() == header.len() && fields[id].starts_with(prefix))
        .map(|fields| Transaction { id: fields[id].to_owned(), state: fields[state].to_owned() })
        .collect()
}
