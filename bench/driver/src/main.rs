//! `weir-bench`: the measuring driver of `scripts/bench.sh`.
//!
//! - `run`: creates a fresh output topic (`LogAppendTime`), starts one system, waits until the
//!   expected number of records is committed on the output, reads the process's CPU time and
//!   peak RSS from /proc (Linux only), stops it and prints one JSON line.
//! - `recovery`: the same with a SIGKILL mid-run and a restart; prints the time from restart to
//!   the first new committed output.
//! - `rebalance`: the system as two processes (`--instance p1`, `--instance p2`), p2 SIGKILLed
//!   mid-run; prints the time from the kill until every output partition has committed output
//!   again (p2's partitions resume once the group moved them to p1).
//! - `compare`: checks that two systems' final aggregates (last value per key) agree.
//! - `table`: the markdown table of medians from the JSON lines.

mod child;
mod output;
mod report;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use child::Child;
use output::{Tally, Tracker};

#[derive(Debug, Parser)]
#[command(about = "Benchmark driver for scripts/bench.sh (Linux only: reads /proc)")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Measure one run of a system; prints one JSON line.
    Run(RunArgs),
    /// Measure recovery: SIGKILL mid-run, restart, time to the first new committed output.
    Recovery {
        #[command(flatten)]
        run: RunArgs,
        /// Seconds after the start at which to SIGKILL the system.
        #[arg(long, default_value_t = 5.0)]
        kill_after_s: f64,
    },
    /// Measure a rebalance: the command runs twice, with `--instance p1` and `--instance p2`
    /// appended; p2 is SIGKILLed mid-run; time from the kill until every output partition has
    /// committed output again.
    Rebalance {
        #[command(flatten)]
        run: RunArgs,
        /// Seconds after the start at which to SIGKILL p2.
        #[arg(long, default_value_t = 10.0)]
        kill_after_s: f64,
    },
    /// Check that two finals files (from `--finals`) agree: same keys, integers exact, other
    /// numbers within a relative 1e-12.
    Compare {
        /// The reference finals file.
        reference: PathBuf,
        /// The finals file to check.
        candidate: PathBuf,
    },
    /// Print the markdown table of medians from a results.jsonl.
    Table {
        /// The JSON lines written by `run` and `recovery`.
        results: PathBuf,
        /// The baseline for the first ratio column.
        #[arg(long, default_value = "rdkafka-loop-txn")]
        baseline: String,
        /// The baseline for the second ratio column.
        #[arg(long, default_value = "rdkafka-loop")]
        baseline2: String,
    },
}

#[derive(Debug, Args)]
struct RunArgs {
    /// Kafka bootstrap servers.
    #[arg(long)]
    bootstrap: String,
    /// Output topic of the system; created here, so it must not exist yet.
    #[arg(long)]
    output: String,
    /// Partitions of the output topic.
    #[arg(long, default_value_t = 8)]
    partitions: i32,
    /// Committed output records that mark the end of the run (one per input record).
    #[arg(long)]
    expect: u64,
    /// Name of the system in the results.
    #[arg(long)]
    name: String,
    /// Where the system's stdout and stderr go.
    #[arg(long)]
    log: PathBuf,
    /// Write the last value per output key here, as a JSON object.
    #[arg(long)]
    finals: Option<PathBuf>,
    /// Give up when the output is not complete after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// The system's command line (no shell).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Cmd::Run(args) => run(&args),
        Cmd::Recovery { run, kill_after_s } => recovery(&run, kill_after_s),
        Cmd::Rebalance { run, kill_after_s } => rebalance(&run, kill_after_s),
        Cmd::Compare { reference, candidate } => report::compare(&reference, &candidate),
        Cmd::Table { results, baseline, baseline2 } => report::table(&results, &baseline, &baseline2),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("weir-bench: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

const POLL: Duration = Duration::from_millis(50);
const STOP_GRACE: Duration = Duration::from_secs(30);
/// After the system stops, the output is complete once no record came for this long.
const QUIET: Duration = Duration::from_secs(2);

/// Polls until `done()` or the run's timeout, failing if the child exits or the consumer fails.
fn wait_until(
    args: &RunArgs,
    child: &mut Child,
    tracker: &mut Tracker,
    started: Instant,
    what: &str,
    done: impl Fn(u64) -> bool,
) -> anyhow::Result<()> {
    while !done(tracker.records()) {
        child.check_alive(&args.log)?;
        tracker.check()?;
        if started.elapsed() > Duration::from_secs(args.timeout_s) {
            let seen = tracker.records();
            child.terminate(STOP_GRACE)?;
            bail!("{}: timed out after {} s waiting for {what} ({seen} committed so far)", args.name, args.timeout_s);
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

fn run(args: &RunArgs) -> anyhow::Result<()> {
    output::create_topic(&args.bootstrap, &args.output, args.partitions)?;
    let mut tracker = Tracker::start(&args.bootstrap, &args.output, args.partitions)?;
    let started = Instant::now();
    let mut child = Child::spawn(&args.name, &args.command, &args.log)?;
    wait_until(args, &mut child, &mut tracker, started, "the expected output", |n| n >= args.expect)?;
    let usage = child.usage()?;
    let status = child.terminate(STOP_GRACE)?;
    let tally = tracker.drain(QUIET)?;

    let first = tally.first_append.context("the output records have no timestamps")?;
    let last = tally.time_of(args.expect).context("fewer records than expected")?;
    let seconds = secs_between(first, last);
    let mut line = json!({
        "name": args.name,
        "kind": "run",
        "records": tally.records,
        "seconds": seconds,
        "records_per_s": args.expect as f64 / seconds,
        "cpu_s": usage.cpu_s,
        "peak_rss_mib": usage.peak_rss_mib,
        "exit": status.code(),
    });
    add_checkpoints(&mut line, &args.log)?;
    finish(args, &tally, &line)
}

fn recovery(args: &RunArgs, kill_after_s: f64) -> anyhow::Result<()> {
    output::create_topic(&args.bootstrap, &args.output, args.partitions)?;
    let mut tracker = Tracker::start(&args.bootstrap, &args.output, args.partitions)?;
    let started = Instant::now();
    let mut child = Child::spawn(&args.name, &args.command, &args.log)?;
    let kill_at = started + Duration::from_secs_f64(kill_after_s);
    wait_until(args, &mut child, &mut tracker, started, "the kill time", |_| Instant::now() >= kill_at)?;
    child.kill()?;
    // A commit the process had already sent may still complete; let it land before counting.
    std::thread::sleep(Duration::from_secs(1));
    let before = tracker.records();
    if before >= args.expect {
        bail!("{}: the run finished before the kill at {kill_after_s} s; use a smaller --kill-after-s", args.name);
    }
    let restarted = SystemTime::now();
    let mut child = Child::spawn(&args.name, &args.command, &args.log)?;
    wait_until(args, &mut child, &mut tracker, started, "the expected output", |n| n >= args.expect)?;
    let status = child.terminate(STOP_GRACE)?;
    let tally = tracker.drain(QUIET)?;

    let resumed = tally.time_of(before + 1).context("no output after the restart")?;
    let mut line = json!({
        "name": args.name,
        "kind": "recovery",
        "records": tally.records,
        "records_before_kill": before,
        "recovery_s": secs_between(restarted, resumed),
        "exit": status.code(),
    });
    add_checkpoints(&mut line, &args.log)?;
    finish(args, &tally, &line)
}

fn rebalance(args: &RunArgs, kill_after_s: f64) -> anyhow::Result<()> {
    output::create_topic(&args.bootstrap, &args.output, args.partitions)?;
    let mut tracker = Tracker::start(&args.bootstrap, &args.output, args.partitions)?;
    let started = Instant::now();
    let instance = |id: &str| [args.command.clone(), vec!["--instance".into(), id.into()]].concat();
    let mut survivor = Child::spawn(&args.name, &instance("p1"), &args.log)?;
    let mut victim = Child::spawn(&args.name, &instance("p2"), &args.log)?;
    let kill_at = started + Duration::from_secs_f64(kill_after_s);
    wait_until(args, &mut victim, &mut tracker, started, "the kill time", |_| Instant::now() >= kill_at)?;
    victim.kill()?;
    let killed = SystemTime::now();
    let before = tracker.records();
    if before >= args.expect {
        bail!("{}: the run finished before the kill at {kill_after_s} s; use a smaller --kill-after-s", args.name);
    }
    wait_until(args, &mut survivor, &mut tracker, started, "the expected output", |n| n >= args.expect)?;
    let status = survivor.terminate(STOP_GRACE)?;
    let tally = tracker.drain(QUIET)?;

    // Per partition, the first output committed after the kill: the survivor's own partitions
    // go on within a checkpoint interval; the victim's wait for the group and its transaction.
    let resumed = tally.first_per_partition_after(killed);
    let waits: Vec<f64> = resumed.values().map(|at| secs_between(killed, *at)).collect();
    let slowest = waits.iter().copied().fold(0.0, f64::max);
    let mut line = json!({
        "name": args.name,
        "kind": "rebalance",
        "records": tally.records,
        "records_before_kill": before,
        "rebalance_s": slowest,
        "partitions_after_kill": resumed.len(),
        "exit": status.code(),
    });
    add_checkpoints(&mut line, &args.log)?;
    finish(args, &tally, &line)
}

/// Prints the result line, writes the finals, and fails unless exactly the expected records came.
fn finish(args: &RunArgs, tally: &Tally, line: &serde_json::Value) -> anyhow::Result<()> {
    println!("{line}");
    if let Some(path) = &args.finals {
        std::fs::write(path, serde_json::to_string_pretty(&tally.finals_json())?)
            .with_context(|| format!("could not write {}", path.display()))?;
    }
    if tally.records != args.expect {
        bail!(
            "{}: output topic {} has {} committed records, expected exactly {} (one per input record)",
            args.name,
            args.output,
            tally.records,
            args.expect
        );
    }
    Ok(())
}

/// Adds checkpoint count and barrier-to-commit p50/p99 (ms) when the log has Weir's
/// `checkpoint committed` lines.
fn add_checkpoints(line: &mut serde_json::Value, log: &Path) -> anyhow::Result<()> {
    let mut latencies = child::checkpoint_latencies_us(log)?;
    if latencies.is_empty() {
        return Ok(());
    }
    latencies.sort_unstable();
    let ms = |q: f64| report::nearest_rank(&latencies, q) as f64 / 1000.0;
    line["checkpoints"] = json!(latencies.len());
    line["checkpoint_p50_ms"] = json!(ms(0.50));
    line["checkpoint_p99_ms"] = json!(ms(0.99));
    Ok(())
}

fn secs_between(from: SystemTime, to: SystemTime) -> f64 {
    match to.duration_since(from) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}
