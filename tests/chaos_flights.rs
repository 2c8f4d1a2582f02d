//! The main job under faults: all 336,776 flights through flight-delays, exactly-once, while a
//! driver SIGKILLs `weir run` at random moments, restarts the broker and forces a transaction
//! timeout (SIGSTOP past `transaction.timeout.ms`). Then every key's `flights` must run exactly
//! 1..n with n its input count, and its last record must equal the direct computation.
//!
//! `WEIR_CHAOS_KILLS` sets the number of kills (default 20); `scripts/chaos.sh` runs this test
//! with its summary line shown.

use std::time::{Duration, Instant};

use weir_tests::flights::verify;
use weir_tests::pipeline::{Reader, Spec, TestPipeline, produce, signal};
use weir_tests::{Isolation, flight_rows, repo_root};

const PARTITIONS: i32 = 8;
const TRANSACTION_TIMEOUT_MS: u64 = 6_000;

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

fn kafka(command: &str) {
    let status = std::process::Command::new("bash")
        .arg(repo_root().join("scripts/kafka.sh"))
        .arg(command)
        .status()
        .expect("scripts/kafka.sh");
    assert!(status.success(), "scripts/kafka.sh {command} failed");
}

#[tokio::test(flavor = "multi_thread")]
async fn flight_delays_is_exactly_once_under_kills_broker_restarts_and_timeouts() {
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
    let (mut killed, mut broker_restarts, mut timeouts) = (0, 0, 0);
    let mut child = pipeline.spawn(&[]);
    while killed < kills {
        std::thread::sleep(Duration::from_millis(500 + random.below(3_000)));
        if killed >= kills / 3 && timeouts == 0 && killed + 1 < kills {
            // Freeze the process past the transaction timeout: the broker aborts its open
            // transaction, and the thawed process fails its next send or commit into recovery.
            // Counted only when that failure shows in the log (an idle, empty epoch has no
            // transaction to lose; then it is tried again later).
            let before = pipeline.log_text().len();
            signal(&child, "STOP");
            std::thread::sleep(Duration::from_millis(TRANSACTION_TIMEOUT_MS + 4_000));
            signal(&child, "CONT");
            let deadline = Instant::now() + Duration::from_secs(15);
            while Instant::now() < deadline {
                if pipeline.log_text()[before..].contains("pipeline failed; recovering") {
                    timeouts += 1;
                    break;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        if killed == kills / 2 && broker_restarts == 0 {
            kafka("stop");
            std::thread::sleep(Duration::from_secs(2));
            kafka("start");
            broker_restarts += 1;
        }
        signal(&child, "KILL");
        child.wait().expect("reap");
        killed += 1;
        child = pipeline.spawn(&[]);
    }
    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let read = reader.read_until(rows.len(), Duration::from_secs(900));
    let status = pipeline.stop(&mut child, Duration::from_secs(120));
    reader.drain(Duration::from_secs(3));
    let elapsed = started.elapsed();

    let verdict = verify(&rows, &reader.records, 15);
    let log = pipeline.log_text();
    let recoveries = log.matches("recovered").count();
    println!(
        "chaos: kills {killed}, broker restarts {broker_restarts}, timeouts forced {timeouts}, recoveries {recoveries}, records in {}, records out {}, duplicates {}, gaps {}, wrong finals {}, wall {:.0} s, {:.0} records/s (seed {seed})",
        verdict.records_in,
        verdict.records_out,
        verdict.duplicates,
        verdict.gaps,
        verdict.wrong_finals,
        elapsed.as_secs_f64(),
        verdict.records_in as f64 / elapsed.as_secs_f64()
    );
    assert!(read >= rows.len(), "only {read} outputs; log tail:\n{}", &log[log.len().saturating_sub(5000)..]);
    assert!(status.success(), "the final run stops cleanly");
    assert!(timeouts >= 1, "a transaction was aborted by the broker's timeout and replayed");
    assert!(verdict.is_exactly_once(), "{verdict:?}");
}
