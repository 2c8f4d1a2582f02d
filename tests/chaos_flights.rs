//! The main job under faults: all 336,776 flights through flight-delays, exactly-once, while a
//! driver forces a transaction timeout (SIGSTOP until the broker has aborted the open
//! transaction), SIGKILLs `weir run` at random moments (deleting its state directory before every
//! third restart, so the state comes back from the changelog) and restarts the broker. Then every key's
//! `flights` must run exactly 1..n with n its input count, and its last record must equal the
//! direct computation.
//!
//! `WEIR_CHAOS_KILLS` sets the number of kills (default 20); `scripts/chaos.sh` runs this test
//! with its summary line shown.
//!
//! Also here, because it stops the broker: `/readyz` reporting the broker unreachable while it
//! is stopped, and ready again once it is back. The tests take turns ([`broker_turn`]).

use std::process::Child;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use weir_tests::broker::{Transaction, kafka_sh, transactions};
use weir_tests::delivery::assert_exactly_once_in_key_order;
use weir_tests::flights::verify;
use weir_tests::pipeline::{
    Feeder, RUN_TIMEOUT, Reader, Spec, TestPipeline, http_get, poll_until, produce, run_to_completion, signal,
    wait_exit,
};
use weir_tests::{Isolation, create_topic, flight_rows, log_tail};

/// Whether a test of this binary has its turn with the broker ([`broker_turn`]).
static BROKER_TAKEN: Mutex<bool> = Mutex::new(false);
/// Signalled when a turn ends.
static BROKER_FREED: Condvar = Condvar::new();

/// A test's turn with the broker, until dropped: the tests of this binary stop the broker, and
/// none expects another to stop it meanwhile. A turn, not a `MutexGuard` held for the whole
/// test, since the tests await while they hold it.
struct BrokerTurn;

/// Waits until no other test of this binary has its turn with the broker, and takes it.
fn broker_turn() -> BrokerTurn {
    let mut taken = BROKER_TAKEN.lock().unwrap_or_else(PoisonError::into_inner);
    while *taken {
        taken = BROKER_FREED.wait(taken).unwrap_or_else(PoisonError::into_inner);
    }
    *taken = true;
    BrokerTurn
}

impl Drop for BrokerTurn {
    fn drop(&mut self) {
        *BROKER_TAKEN.lock().unwrap_or_else(PoisonError::into_inner) = false;
        BROKER_FREED.notify_one();
    }
}

const PARTITIONS: i32 = 8;
const TRANSACTION_TIMEOUT_MS: u64 = 6_000;
/// Freezes tried before giving up on catching an open transaction.
const MAX_FREEZES: u32 = 20;
/// How long the broker may take past the transaction timeout to abort a transaction (it looks
/// every second, scripts/kafka.sh) and the thawed pipeline to fail into recovery, on a busy
/// machine.
const GRACE: Duration = Duration::from_secs(60);

/// A small deterministic generator (xorshift), seeded from the clock and printed for replay.
struct Random(u64);

impl Random {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Waits until `weir run` is in its loop — its last lifecycle line is a committed checkpoint, not
/// start-up or a recovery back-off — so that an open transaction of the pipeline is the live
/// runner's, whose commit must then fail.
fn wait_until_running(pipeline: &TestPipeline) {
    let started = Instant::now();
    while !running(&pipeline.log_text()) {
        assert!(started.elapsed() < GRACE, "weir run did not get to its loop; log:\n{}", pipeline.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether `log` ends in the loop: its last lifecycle line is a committed checkpoint. The log
/// holds every process of the run: only a checkpoint of the current process, after its last
/// failure, counts (a respawned process is not running yet because the killed one was).
fn running(log: &str) -> bool {
    let since = log.rfind("pipeline failed").max(log.rfind("weir::cli::run: starting"));
    log.rfind("checkpoint committed") > since
}

/// Forces a transaction timeout and its replay: freezes `weir run` (SIGSTOP) and, when the broker
/// reports one of the pipeline's transactions `Ongoing`, keeps it frozen until the broker reports
/// that transaction aborted (only the broker's timeout can end it while the process is frozen),
/// then thaws it and waits for its failed commit to send it into recovery. A freeze that catches
/// no open transaction (start-up, between epochs) or a commit already sent is thawed and tried
/// again. Returns how many freezes it took.
fn force_transaction_timeout(pipeline: &TestPipeline, child: &Child) -> u32 {
    let prefix = format!("{}-", pipeline.name);
    for freeze in 1..=MAX_FREEZES {
        wait_until_running(pipeline);
        std::thread::sleep(Duration::from_millis(500));
        let before = pipeline.log_text().len();
        signal(child, "STOP");
        if !running(&pipeline.log_text()) {
            // It failed since it was seen running (in the pause above, or just before the
            // freeze): an open transaction now is a dead runner's, which the next start fences.
            signal(child, "CONT");
            continue;
        }
        let open: Vec<String> =
            transactions(&prefix).into_iter().filter(|t| t.state == "Ongoing").map(|t| t.id).collect();
        let aborted = if open.is_empty() { None } else { aborted_while_frozen(&prefix, &open) };
        signal(child, "CONT");
        let Some(aborted) = aborted else {
            eprintln!("chaos: freeze {freeze} caught no open transaction ({open:?} Ongoing); trying again");
            continue;
        };
        eprintln!("chaos: freeze {freeze}: the broker aborted {} ({}) on its timeout", aborted.id, aborted.state);
        let thawed = Instant::now();
        while !pipeline.log_text()[before..].contains("pipeline failed; recovering") {
            assert!(
                thawed.elapsed() < GRACE,
                "the broker aborted {} but the thawed pipeline did not fail into recovery; log tail:\n{}",
                aborted.id,
                &pipeline.log_text()[before..]
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        return freeze;
    }
    panic!("{MAX_FREEZES} freezes caught no open transaction of {prefix}*; log:\n{}", pipeline.log_text());
}

/// Polls the broker until one of the `open` transactions is aborted (`Some`), or none of them is
/// `Ongoing` any more (`None`: a commit sent just before the freeze ended them).
///
/// # Panics
/// When the broker keeps one `Ongoing` [`GRACE`] past the transaction timeout.
fn aborted_while_frozen(prefix: &str, open: &[String]) -> Option<Transaction> {
    let deadline = Instant::now() + Duration::from_millis(TRANSACTION_TIMEOUT_MS) + GRACE;
    loop {
        // No sleep between polls: each TransactionsCommand takes seconds.
        let ours: Vec<Transaction> = transactions(prefix).into_iter().filter(|t| open.contains(&t.id)).collect();
        if let Some(aborted) = ours.iter().find(|t| t.is_aborted()) {
            return Some(aborted.clone());
        }
        if !ours.iter().any(|t| t.state == "Ongoing") {
            return None;
        }
        assert!(Instant::now() < deadline, "the broker kept {ours:?} open {GRACE:?} past its transaction timeout");
    }
}

/// What a process logs when it restored state from the changelog.
const RESTORED: &str = "restored the state from the changelog";

#[tokio::test(flavor = "multi_thread")]
async fn flight_delays_is_exactly_once_under_kills_broker_restarts_and_timeouts() {
    let _turn = broker_turn();
    let kills: u32 = std::env::var("WEIR_CHAOS_KILLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20);
    let seed = std::env::var("WEIR_CHAOS_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    let mut random = Random(seed);
    eprintln!("chaos: seed {seed}, {kills} kills");

    let mut spec = Spec::new("flight-delays");
    spec.sink = format!("transaction_timeout_ms = {TRANSACTION_TIMEOUT_MS}");
    spec.checkpoint = "interval_ms = 500\ntimeout_ms = 4000".into();
    let pipeline = TestPipeline::new("weir-chaos", &spec);
    let rows = flight_rows(u64::MAX);
    let input: Vec<_> = rows.iter().map(|r| (r.key.clone(), String::from_utf8(r.value_bytes()).unwrap())).collect();
    produce(&pipeline.source, PARTITIONS, &input).await;

    let started = Instant::now();
    let (mut killed, mut broker_restarts, mut wiped) = (0, 0, 0);
    let mut child = pipeline.spawn(&[]);
    // The forced timeout comes first, while most of the input is still ahead: at tens of
    // thousands of records per second a pipeline can finish its input within the kills, and an
    // idle pipeline has no transaction to lose.
    let freezes = force_transaction_timeout(&pipeline, &child);
    while killed < kills {
        std::thread::sleep(Duration::from_millis(500 + random.below(3_000)));
        if killed == kills / 2 && broker_restarts == 0 {
            kafka_sh(&["stop"]);
            std::thread::sleep(Duration::from_secs(2));
            kafka_sh(&["start"]);
            broker_restarts += 1;
        }
        signal(&child, "KILL");
        child.wait().expect("reap");
        killed += 1;
        // Every third restart finds no state directory: the state is the changelog's. The next
        // kill waits for the restore (it runs once the group assigns the partitions), so that
        // every deletion is provably restored from the changelog.
        let restores = pipeline.log_text().matches(RESTORED).count();
        let wipe = killed % 3 == 1;
        if wipe {
            std::fs::remove_dir_all(pipeline.dir().join("state")).expect("delete the state directory");
            wiped += 1;
        }
        child = pipeline.spawn(&[]);
        if wipe {
            let waited = Instant::now();
            while pipeline.log_text().matches(RESTORED).count() == restores {
                assert!(waited.elapsed() < RUN_TIMEOUT, "no restore after the state directory was deleted");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let read = reader.read_until(rows.len(), Duration::from_secs(900));
    let status = pipeline.stop(&mut child, Duration::from_secs(120));
    reader.drain(Duration::from_secs(3));
    let elapsed = started.elapsed();

    let verdict = verify(&rows, &reader.records, 15);
    let log = pipeline.log_text();
    let recoveries = log.matches("recovered").count();
    let restores = log.matches(RESTORED).count() as u32;
    println!(
        "chaos: kills {killed}, state directories deleted {wiped}, restores {restores}, broker restarts {broker_restarts}, transaction timeout forced after {freezes} freeze(s), recoveries {recoveries}, records in {}, records out {}, duplicates {}, gaps {}, wrong finals {}, wall {:.0} s, {:.0} records/s (seed {seed})",
        verdict.records_in,
        verdict.records_out,
        verdict.duplicates,
        verdict.gaps,
        verdict.wrong_finals,
        elapsed.as_secs_f64(),
        verdict.records_in as f64 / elapsed.as_secs_f64()
    );
    assert!(read >= rows.len(), "only {read} outputs; log tail:\n{}", log_tail(&log, 5_000));
    assert!(status.success(), "the final run stops cleanly ({status}); log tail:\n{}", log_tail(&log, 8_000));
    assert!(verdict.is_exactly_once(), "{verdict:?}");
    assert!(wiped >= kills / 3 && restores >= wiped, "every deleted state directory was restored: {restores} restores");
}

/// Starts the broker when dropped: a test that fails while the broker is stopped must not leave
/// it stopped for the tests after it (`scripts/kafka.sh start` does nothing when it runs).
struct StartBrokerOnDrop;

impl Drop for StartBrokerOnDrop {
    fn drop(&mut self) {
        kafka_sh(&["start"]);
    }
}

/// `weir run --metrics`'s `/readyz` with the broker stopped: 503 `broker_unreachable` (seen by
/// the runner's consumer or the metrics sampler) while `/healthz` stays 200, and 200 again once
/// the broker is back.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_reports_the_broker_unreachable_while_it_is_stopped_and_ready_once_it_is_back() {
    let _turn = broker_turn();
    let pipeline = TestPipeline::new("weir-ready-broker", &Spec::new("passthrough"));
    let values: Vec<(Option<String>, String)> = (0..200).map(|i| (Some(format!("k{i}")), format!("v{i}"))).collect();
    produce(&pipeline.source, 2, &values).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    let mut run = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let address = pipeline.metrics_address(&mut run);
    assert_eq!(reader.read_until(values.len(), RUN_TIMEOUT), values.len(), "{}", pipeline.log_text());
    let readyz = format!("http://{address}/readyz");
    poll_until(&readyz, "200 before the broker stops", RUN_TIMEOUT, |status, _| status == 200);

    let restart = StartBrokerOnDrop;
    kafka_sh(&["stop"]);
    let (_, down) = poll_until(&readyz, "503 broker_unreachable", RUN_TIMEOUT, |status, body| {
        status == 503 && body["reason"] == "broker_unreachable"
    });
    let shown = &down["pipelines"][0];
    assert_eq!(shown["name"], pipeline.name.as_str(), "{down}");
    assert!(shown["detail"].as_str().is_some_and(|d| d.starts_with("no broker has answered")), "{down}");
    assert_eq!(http_get(&format!("http://{address}/healthz")).0, 200, "alive without a broker");
    drop(restart);

    // Back: the sampler reaches the cluster; the pipeline may go through recovery first.
    let (_, back) = poll_until(&readyz, "200 once the broker is back", RUN_TIMEOUT * 2, |status, _| status == 200);
    assert_eq!(back["not_ready"], serde_json::json!({}), "{back}");
    let status = pipeline.stop(&mut run, Duration::from_secs(120));
    assert!(status.success(), "{status}; log:\n{}", pipeline.log_text());
}

/// `runtime.shutdown_grace_ms` of [`sigterm_with_the_broker_down_exits_within_the_shutdown_grace`].
const SHUTDOWN_GRACE: Duration = Duration::from_millis(4_000);

/// Issue 46, item 8: SIGTERM while the broker is down. `weir run` exits once
/// `runtime.shutdown_grace_ms` has passed (this waits 3× as long), with status 124 and saying
/// why, instead of waiting out its Kafka timeouts one after the other (58.6 s in the report;
/// `checkpoint.timeout_ms` here is 5× the grace). Nothing is committed twice: once the broker is
/// back, the next start processes the epoch left open, and every input is in the output once.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_with_the_broker_down_exits_within_the_shutdown_grace() {
    let _turn = broker_turn();
    let mut spec = Spec::new("passthrough");
    spec.checkpoint = "interval_ms = 200\ntimeout_ms = 20000".into();
    let pipeline = TestPipeline::new("weir-grace", &spec);
    let mut text = std::fs::read_to_string(&pipeline.file).unwrap();
    text.push_str(&format!("\n[runtime]\nshutdown_grace_ms = {}\n", SHUTDOWN_GRACE.as_millis()));
    std::fs::write(&pipeline.file, text).unwrap();
    create_topic(&pipeline.source, 2).await;
    // Input keeps coming, so that the broker goes down under an epoch with records.
    let feeder = Feeder::start(&pipeline.source, "grace");
    let mut child = pipeline.spawn(&[]);
    wait_until_running(&pipeline);

    let restart = StartBrokerOnDrop;
    kafka_sh(&["stop"]);
    signal(&child, "TERM");
    let bound = SHUTDOWN_GRACE * 3;
    let status = wait_exit(&mut child, bound)
        .unwrap_or_else(|| panic!("weir run still running {bound:?} after SIGTERM; log:\n{}", pipeline.log_text()));
    let log = pipeline.log_text();
    assert_eq!(status.code(), Some(124), "{status}; log:\n{log}");
    assert!(
        log.contains("did not stop within runtime.shutdown_grace_ms = 4000")
            && log.contains("exiting without committing the open epoch"),
        "the exit says why; log:\n{log}"
    );

    drop(restart);
    let sent = feeder.stop() as usize;
    // The run that catches up stops with the broker up: a grace a busy machine cannot miss.
    let text = std::fs::read_to_string(&pipeline.file)
        .unwrap()
        .replace("shutdown_grace_ms = 4000", "shutdown_grace_ms = 120000");
    std::fs::write(&pipeline.file, text).unwrap();
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, sent, &[]);
    reader.drain(Duration::from_secs(2));
    let input: Vec<_> = (0..sent).map(|n| (None, format!("grace-{n}"))).collect();
    assert_exactly_once_in_key_order(&reader.records, &input, &format!("; log:\n{}", pipeline.log_text()));
}
