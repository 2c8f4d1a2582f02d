//! Misbehaving guests (tests/guests/misbehave) are stopped with the right error kind, the host
//! stays up, and the next call runs on a fresh, restored instance. Guests get no filesystem,
//! network or environment.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::{CpuLimit, ErrorKind, InputRecord, OperatorLimits, OutputRecord, ResourcePool};
use weir_tests::operator_with;

fn record(offset: i64, value: &str) -> InputRecord {
    InputRecord {
        key: Some(b"k".to_vec()),
        value: Some(value.as_bytes().to_vec()),
        headers: Vec::new(),
        timestamp: 0,
        topic: "sandbox".into(),
        partition: 3,
        offset,
        event_time: 0,
        watermark: None,
    }
}

fn limits() -> OperatorLimits {
    OperatorLimits { memory_bytes: 32 << 20, deadline: Duration::from_millis(500), ..OperatorLimits::default() }
}

fn values(outputs: &[OutputRecord]) -> Vec<String> {
    outputs.iter().map(|o| String::from_utf8_lossy(o.value.as_deref().unwrap_or_default()).into_owned()).collect()
}

/// Runs a batch of `plugin` whose middle record is `word`; returns the error kind, after checking
/// that the error names the operator and the batch's offsets and that the next batch works.
fn fails(plugin: &str, word: &str) -> ErrorKind {
    let mut operator = operator_with(plugin, &[], limits());
    assert_eq!(values(&operator.process(&[record(0, "fine")]).unwrap()), ["fine"]);
    let error = operator
        .process(&[record(10, "before"), record(11, word), record(12, "after")])
        .expect_err("the misbehaving batch fails");
    let message = error.to_string();
    assert!(message.contains(plugin) && message.contains("sandbox[3] offsets 10..=12"), "{message}");
    // The host is still up and the operator carries on with a fresh instance.
    let next = operator.process(&[record(13, "next")]).expect("a fresh instance serves the next call");
    assert_eq!(values(&next), ["next"]);
    error.kind
}

/// [`fails`] with tests/guests/misbehave.
fn misbehaves(word: &str) -> ErrorKind {
    fails("misbehave", word)
}

#[test]
fn an_endless_loop_hits_the_deadline() {
    let started = Instant::now();
    let kind = misbehaves("loop");
    assert!(matches!(kind, ErrorKind::DeadlineExceeded { .. }), "{kind:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "the loop was interrupted");
}

/// `std::thread::sleep` waits in the host (a WASI clock subscription and poll), where epoch
/// interruption does not reach: the wait itself must end at the deadline.
#[test]
fn a_sleep_in_the_host_hits_the_deadline() {
    let started = Instant::now();
    let kind = misbehaves("sleep");
    assert!(matches!(kind, ErrorKind::DeadlineExceeded { .. }), "{kind:?}");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(20), "the guest slept its 30 s despite the 500 ms deadline: {elapsed:?}");
}

#[test]
fn exit_is_reported_as_the_guest_exiting() {
    // std::process::exit(3); WASI 0.2's exit carries only success or failure.
    let kind = misbehaves("exit");
    assert!(matches!(kind, ErrorKind::Exit { status: 1 }), "{kind:?}");
    assert!(kind.to_string().contains("the guest called exit (status 1"), "{kind}");
}

#[test]
fn unbounded_allocation_hits_the_memory_limit() {
    let kind = misbehaves("alloc");
    assert!(matches!(kind, ErrorKind::MemoryLimit { limit_bytes } if limit_bytes == 32 << 20), "{kind:?}");
}

#[test]
fn a_panic_is_reported_with_its_message() {
    let kind = misbehaves("panic");
    match kind {
        ErrorKind::GuestPanic { message } => {
            // The SDK's panic hook adds the record's offset to the location.
            assert!(
                message.contains("misbehave: panic at offset 11") && message.contains("record offset 11"),
                "{message}"
            )
        }
        other => panic!("expected a guest panic, got {other:?}"),
    }
}

#[test]
fn unbounded_recursion_is_a_stack_overflow() {
    let kind = misbehaves("recurse");
    assert!(matches!(kind, ErrorKind::StackOverflow), "{kind:?}");
}

#[test]
fn output_to_an_undefined_sink_output_is_invalid() {
    let kind = misbehaves("invalid-output");
    match kind {
        ErrorKind::InvalidOutput { reason } => assert!(reason.contains("no-such-output"), "{reason}"),
        other => panic!("expected invalid output, got {other:?}"),
    }
}

/// A packed output batch whose lengths do not frame its data, or whose names are not UTF-8, is
/// invalid output (tests/guests/packed-malformed builds each such batch; the SDK cannot).
#[test]
fn a_packed_output_batch_that_does_not_frame_is_invalid() {
    for (word, problem) in [
        ("short", "output record 2: its lengths end early"),
        ("overrun", "output record 0: a length runs past its data"),
        ("leftover", "0 lengths and 1 bytes of data left after its records"),
        ("extra-length", "1 lengths and 0 bytes of data left after its records"),
        ("not-utf8", "output record 0: a name that is not UTF-8"),
        ("null-header-name", "output record 0: a null header name"),
    ] {
        match fails("packed-malformed", word) {
            ErrorKind::InvalidOutput { reason } => assert!(reason.contains(problem), "{word}: {reason}"),
            other => panic!("{word}: expected invalid output, got {other:?}"),
        }
    }
}

#[test]
fn a_guest_error_names_the_offset() {
    let kind = misbehaves("error");
    assert!(matches!(kind, ErrorKind::Guest { .. }), "{kind:?}");
}

#[test]
fn state_writes_of_a_failed_batch_are_discarded() {
    let mut operator = operator_with("misbehave", &[], limits());
    operator.process(&[record(0, "a"), record(1, "b")]).unwrap();
    let count = |operator: &mut weir::Operator| operator.state_mut().get(b"count").unwrap();
    let before = count(&mut operator);
    assert!(before.is_some(), "misbehave counts records in state");
    operator.process(&[record(2, "c"), record(3, "panic")]).unwrap_err();
    assert_eq!(count(&mut operator), before, "the failed batch's increments were rolled back");
    operator.process(&[record(4, "d")]).unwrap();
    assert_ne!(count(&mut operator), before);
}

#[test]
fn guests_get_no_filesystem_network_or_environment() {
    let mut operator = operator_with("misbehave", &[], limits());
    let outputs = operator.process(&[record(0, "open-file"), record(1, "connect"), record(2, "env")]).unwrap();
    let outputs = values(&outputs);
    assert!(outputs[0].starts_with("open-file: err"), "{}", outputs[0]);
    assert!(outputs[1].starts_with("connect: err"), "{}", outputs[1]);
    assert_eq!(outputs[2], "env: 0");
}

#[test]
fn components_of_another_version_or_world_are_rejected_at_load() {
    let engine = weir_tests::engine();
    let wrong = engine.load(&weir_tests::plugin("wrong-version")).err().expect("wrong version is rejected").to_string();
    assert!(wrong.contains("weir:transform@1.0.0") && wrong.contains("0.2.x and @0.1.x"), "{wrong}");
    let other = engine.load(&weir_tests::plugin("other-world")).err().expect("other world is rejected").to_string();
    assert!(other.contains("not a weir:transform component") && other.contains("run"), "{other}");
}

/// Operators sharing a [`ResourcePool`] hold at most its memory together: a growth that fits the
/// operator's own limit but not the pool is refused, named as the pool's quota, and a failed or
/// dropped instance gives its memory back.
#[test]
fn operators_sharing_a_pool_stay_within_its_memory_together() {
    let pool = Arc::new(ResourcePool::new("tenant `t`", 32 << 20, None));
    let pooled = OperatorLimits { pool: Some(pool.clone()), ..limits() };
    let mut holder = operator_with("misbehave", &[], pooled.clone());
    assert_eq!(values(&holder.process(&[record(0, "fine")]).unwrap()), ["fine"]);
    let held = pool.memory_used();
    assert!(held > 0, "a live instance holds memory from the pool");
    let mut hungry = operator_with("misbehave", &[], pooled);
    let error = hungry.process(&[record(1, "alloc")]).expect_err("the pool runs out before the operator's 32 MiB");
    assert!(
        matches!(&error.kind, ErrorKind::PoolMemory { owner, limit_bytes } if owner == "tenant `t`" && *limit_bytes == 32 << 20),
        "{error}"
    );
    assert!(error.to_string().contains("max_total_memory_mb"), "{error}");
    assert_eq!(pool.memory_used(), held, "the failed instance gave its memory back");
    drop(hungry);
    drop(holder);
    assert_eq!(pool.memory_used(), 0);
}

/// A pool's guest code runs for at most its share of CPU time: once its operators have burned
/// CPU (endless loops stopped at their deadline), the next call waits until the share pays
/// for it.
#[test]
fn a_pool_in_cpu_debt_waits_before_its_next_call() {
    let cores = 0.5;
    let pool = Arc::new(ResourcePool::new("tenant `t`", 64 << 20, Some(CpuLimit::Cores(cores))));
    let limits = OperatorLimits { deadline: Duration::from_millis(200), pool: Some(pool.clone()), ..limits() };
    let mut operator = operator_with("misbehave", &[], limits);
    let started = Instant::now();
    // Loop until the pool has provably been charged a debt worth waiting for.
    for offset in 0.. {
        assert!(offset < 50, "50 looping calls burned only {:?} of CPU", pool.cpu_charged());
        if pool.cpu_charged() >= Duration::from_millis(400) {
            break;
        }
        operator.process(&[record(offset, "loop")]).expect_err("the loop hits its deadline");
    }
    let charged = pool.cpu_charged();
    assert_eq!(values(&operator.process(&[record(100, "fine")]).unwrap()), ["fine"]);
    // The last call starts only once the pool's rate has refilled all it was charged before.
    let elapsed = started.elapsed();
    assert!(elapsed.as_secs_f64() >= 0.99 * charged.as_secs_f64() / cores, "{elapsed:?} for {charged:?} of CPU");
}

/// A dropped instance (an idle pipeline's, `Operator::recycle`) is not started again for a
/// checkpoint's snapshot, which is the one a fresh instance would restore; the next record's call
/// starts one restored from it (`memory-counter` keeps its count in memory, carried by snapshots).
#[test]
fn a_dropped_instance_gives_its_snapshot_without_starting_and_the_next_call_restores_it() {
    let mut operator = operator_with("memory-counter", &[], limits());
    assert_eq!(values(&operator.process(&[record(0, "a"), record(1, "a")]).unwrap()), ["1", "2"]);
    assert_eq!(operator.snapshot().unwrap(), b"2");
    assert!(operator.recycle(), "a live instance was dropped");
    assert!(!operator.recycle(), "nothing left to drop");
    assert_eq!(operator.snapshot().unwrap(), b"2");
    assert_eq!(operator.peak_memory(), 0, "no instance was started for the snapshot");
    assert_eq!(values(&operator.process(&[record(2, "a")]).unwrap()), ["3"]);
    assert!(operator.peak_memory() > 0);
}
