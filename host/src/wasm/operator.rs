//! One transform placed in a pipeline's chain for one task.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Store;

use super::bindings::Guest;
use super::bindings::Version;
use super::component::TransformComponent;
use super::error::{BatchOffsets, Call, ErrorKind, HostTrap, OperatorError};
use super::host::HostState;
use super::host::clock;
use super::limits::{MemoryLimiter, OperatorLimits, Refusal};
use super::outputs::NegativeTimestamp;
use super::pool::thread_cpu_time;
use super::{InputRecord, OutputRecord, TimeDomain, Timer};
use crate::record::{MalformedBatch, Outputs, RecordBatch, changelog_record_size};
use crate::state::StateStore;
use crate::time::{Clock, parse_timer_key, timer_key, timer_prefix};

/// Most timers handed to one `on-timer` call.
const TIMERS_PER_CALL: usize = 256;

/// An operator instance: its own `Store` (linear memory, limits, WASI context) and state.
///
/// # Failure
/// When a call fails — a trap, an exceeded limit, an `err` from the guest, invalid output —
/// the `Store` is dropped (a trap poisons it) together with the call's state writes, and the
/// next call runs on a fresh instance that was `init`ialised with the same configuration and
/// `restore`d from the last snapshot ([`Operator::snapshot`] or [`Operator::set_snapshot`]).
pub struct Operator {
    name: Arc<str>,
    component: Arc<TransformComponent>,
    config: Vec<(String, String)>,
    limits: OperatorLimits,
    outputs: Vec<String>,
    snapshot: Vec<u8>,
    instance: Instance,
    /// Linear memory of the live instance once instantiated, `init`ialised and `restore`d.
    memory_at_start: usize,
    /// The task's watermark, for the guest's `timers.watermark` and for due event-time timers.
    watermark: Option<i64>,
    /// Thread CPU time of the last guest call (zero without a pool).
    last_call_cpu: Duration,
    /// Whether the last call failed: the next is charged as a failure as it runs.
    failing: bool,
}

/// Either a live instance, or the state waiting for the next one.
enum Instance {
    Live {
        store: Box<Store<HostState>>,
        bindings: Guest,
    },
    /// The operator's state and timers.
    Idle(Box<dyn StateStore>, Box<dyn StateStore>),
    /// Only while a transition is in progress.
    Moving,
}

impl Operator {
    /// Instantiates `component` as operator `name`, calls `init(config)` and `restore` with an
    /// empty snapshot.
    ///
    /// `outputs` are the named sink outputs the guest may address besides the default one;
    /// `state` serves its `state` import and `timers` keeps its timers ([`crate::time`]).
    ///
    /// # Errors
    /// An [`OperatorError`] for [`Call::Init`] or [`Call::Restore`] when instantiation fails or
    /// the guest refuses its configuration.
    pub fn new(
        component: Arc<TransformComponent>,
        name: &str,
        config: Vec<(String, String)>,
        limits: OperatorLimits,
        outputs: Vec<String>,
        state: Box<dyn StateStore>,
        timers: Box<dyn StateStore>,
    ) -> Result<Self, OperatorError> {
        let mut operator = Self {
            name: name.into(),
            component,
            config,
            limits,
            outputs,
            snapshot: Vec::new(),
            instance: Instance::Idle(state, timers),
            memory_at_start: 0,
            last_call_cpu: Duration::ZERO,
            failing: false,
            watermark: None,
        };
        operator.ensure_live()?;
        Ok(operator)
    }

    /// The operator's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the pipeline was asked to stop ([`OperatorLimits::stop`]).
    pub fn stop_requested(&self) -> bool {
        self.limits.stop.as_ref().is_some_and(|stop| stop.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Runs `process` over `records` (of one source partition, in offset order), as
    /// [`Operator::process_batch`] does over a [`RecordBatch`] of them.
    ///
    /// # Errors
    /// As [`Operator::process_batch`].
    ///
    /// # Panics
    /// When `records` are of more than one partition.
    pub fn process(&mut self, records: &[InputRecord]) -> Result<Vec<OutputRecord>, OperatorError> {
        self.process_batch(&RecordBatch::from_records(records)).map(|outputs| outputs.to_records())
    }

    /// Runs `process` over `batch` (records of one task, in offset order).
    ///
    /// Ok means the outputs are valid and the call's state writes were applied to the state
    /// store; Err means no write of the call took effect. An instance whose linear memory nears
    /// the limit (see `nears_memory_limit`) is first snapshotted and recycled.
    ///
    /// # Errors
    /// An [`OperatorError`] naming the kind of failure and the batch's offsets.
    pub fn process_batch(&mut self, batch: &RecordBatch) -> Result<Outputs, OperatorError> {
        if self.nears_memory_limit() {
            // Some guest runtimes never give memory back (componentize-py leaks per call), and a
            // long epoch would run such an instance into its limit before the next checkpoint's
            // snapshot recycles it: recycle it here, where it is as safe as at a checkpoint. The
            // snapshot is the guest's in-memory state after the last successful call, the fresh
            // instance is restored from it, and host state lives outside the instance; so the
            // fresh instance carries on exactly where the old one stood, and what the next
            // checkpoint records is unchanged. It is taken before the batch, not after the last
            // one, so that a failing snapshot fails this call, whose writes have not happened.
            tracing::info!(operator = %self.name, peak = self.peak_memory(), limit = self.limits.memory_bytes, "instance memory near memory_limit_mb: snapshotting and recycling it");
            self.take_snapshot()?;
            self.recycle();
        }
        let offsets = batch_offsets(batch);
        let outputs =
            self.call(Call::Process, offsets.clone(), |bindings, store| bindings.call_process(store, batch))?;
        let result = match outputs {
            Ok(mut outputs) => {
                // An output without a timestamp takes its batch's last record's (DESIGN.md), as
                // the broker will see it.
                if let Some(&last) = batch.timestamps().last() {
                    outputs.set_missing_timestamps(last);
                }
                self.validate(&outputs).map(|()| outputs)
            }
            // A runtime that turns a refused growth into an exception (Python's MemoryError,
            // which the SDK reports as an error) ran out of memory all the same: say so.
            Err(error) => Err(match self.memory_refused() {
                Some(refusal) => memory_error(refusal, &self.limits),
                None => ErrorKind::guest(&error.message, error.offset),
            }),
        };
        let result = result.and_then(|outputs| {
            let Instance::Live { store, .. } = &mut self.instance else {
                unreachable!("this is a bug in Weir: the instance is live after a successful call")
            };
            store.data_mut().commit_writes().map(|()| outputs)
        });
        result.map_err(|kind| self.fail(Call::Process, offsets, kind))
    }

    /// Sets the task's watermark, which the guest reads through `timers.watermark` and which
    /// makes event-time timers due ([`Operator::due_timers`]).
    pub fn set_watermark(&mut self, watermark: Option<i64>) {
        self.watermark = watermark;
    }

    /// Up to 256 due timers, in the order `on-timer` takes them: event-time timers at or below
    /// the watermark, then processing-time timers at or before `now_ms` (milliseconds since the
    /// Unix epoch). None for a component of contract 0.1, which has no timers.
    ///
    /// # Errors
    /// An [`OperatorError`] for [`Call::OnTimer`] when the state store cannot be read.
    pub fn due_timers(&mut self, now_ms: i64) -> Result<Vec<Timer>, OperatorError> {
        if self.component.description().version == Version::V0_1 {
            return Ok(Vec::new());
        }
        let mut due = Vec::new();
        let limits = [(Clock::EventTime, self.watermark), (Clock::ProcessingTime, Some(now_ms))];
        for (clock, upto) in limits {
            let Some(upto) = upto else { continue };
            let room = TIMERS_PER_CALL - due.len();
            let found = self.timers_mut().scan_prefix(&timer_prefix(clock), room);
            let found = found.map_err(|e| self.error(Call::OnTimer, None, ErrorKind::State(e)))?;
            for (key, _) in &found {
                match parse_timer_key(key) {
                    Some((_, time, key)) if time <= upto => {
                        due.push(Timer { key: key.to_vec(), time, domain: domain(clock) })
                    }
                    _ => break,
                }
            }
        }
        Ok(due)
    }

    /// How many timers the operator holds, registered and not yet fired, counting at most
    /// `limit`. None for a component of contract 0.1, which has no timers.
    ///
    /// # Errors
    /// An [`OperatorError`] for [`Call::OnTimer`] when the state store cannot be read.
    pub fn open_timers(&mut self, limit: usize) -> Result<usize, OperatorError> {
        if self.component.description().version == Version::V0_1 {
            return Ok(0);
        }
        let found = self.timers_mut().scan_prefix(&[], limit);
        found.map(|timers| timers.len()).map_err(|e| self.error(Call::OnTimer, None, ErrorKind::State(e)))
    }

    /// Runs `on-timer` over `timers` (from [`Operator::due_timers`]) and removes them.
    ///
    /// Ok means the outputs are valid, and the call's state writes and the timers' removal were
    /// applied to the stores; outputs without a timestamp get the last timer's time. Err means
    /// none of that happened: the timers stay registered.
    ///
    /// # Errors
    /// An [`OperatorError`] for [`Call::OnTimer`].
    pub fn on_timer(&mut self, timers: &[Timer]) -> Result<Outputs, OperatorError> {
        let outputs = self.call(Call::OnTimer, None, |bindings, store| bindings.call_on_timer(store, timers))?;
        let result = match outputs {
            Ok(mut outputs) => {
                if let Some(last) = timers.last() {
                    outputs.set_missing_timestamps(last.time);
                }
                self.validate(&outputs).map(|()| outputs)
            }
            Err(error) => Err(ErrorKind::guest(&error.message, error.offset)),
        };
        let result = result.and_then(|outputs| {
            let Instance::Live { store, .. } = &mut self.instance else {
                unreachable!("this is a bug in Weir: the instance is live after a successful call")
            };
            // Removed after the call, so that a guest re-registering a timer it is handed does
            // not make it fire again.
            for timer in timers {
                store.data_mut().timer_writes.insert(timer_key(clock(timer.domain), timer.time, &timer.key), None);
            }
            store.data_mut().commit_writes().map(|()| outputs)
        });
        result.map_err(|kind| self.fail(Call::OnTimer, None, kind))
    }

    /// Takes a snapshot of the guest's in-memory state and keeps it as the one fresh instances
    /// are restored from. An instance whose linear memory grew past half the limit is then
    /// recycled (its `Store` dropped; the next call runs on a fresh one restored from it).
    ///
    /// # Errors
    /// An [`OperatorError`] for [`Call::Snapshot`].
    pub fn snapshot(&mut self) -> Result<Vec<u8>, OperatorError> {
        let snapshot = self.take_snapshot()?;
        // A Store frees memory only when dropped, and some guest runtimes never give memory
        // back (componentize-py leaks per call). Right after a snapshot a fresh instance loses
        // nothing, so recycle one that has grown past half its limit.
        if self.peak_memory() > self.limits.memory_bytes / 2 {
            tracing::debug!(operator = %self.name, peak = self.peak_memory(), "recycling the instance to free its memory");
            self.recycle();
        }
        Ok(snapshot)
    }

    /// Makes the guest's current in-memory state the one a fresh instance is restored from after
    /// a failed call, without recycling the instance: [`Operator::snapshot`] between batches.
    ///
    /// # Errors
    /// An [`OperatorError`] for [`Call::Snapshot`].
    pub fn set_restore_point(&mut self) -> Result<(), OperatorError> {
        self.take_snapshot().map(drop)
    }

    /// Calls the guest's `snapshot` and keeps the result as the one fresh instances restore.
    /// Without a live instance, that one: a fresh instance would restore it and answer it back,
    /// so none is started for it (an idle pipeline's dropped instances stay dropped).
    fn take_snapshot(&mut self) -> Result<Vec<u8>, OperatorError> {
        if let Instance::Idle(..) = self.instance {
            return Ok(self.snapshot.clone());
        }
        let snapshot = self.call(Call::Snapshot, None, |bindings, store| bindings.call_snapshot(store))?;
        // The checkpoint writes it to the changelog keyed by operator and task, which is the
        // state prefix less its last byte.
        let bytes = changelog_record_size(self.state_mut().key_prefix_len().saturating_sub(1), snapshot.len());
        let limit = &self.limits.max_state_record;
        if bytes > limit.bytes {
            let kind = ErrorKind::StateTooLarge { write: "snapshot".into(), bytes, limit: Box::new(limit.clone()) };
            return Err(self.fail(Call::Snapshot, None, kind));
        }
        self.snapshot = snapshot.clone();
        Ok(snapshot)
    }

    /// Whether the live instance's last call was refused a memory growth.
    fn memory_refused(&self) -> Option<Refusal> {
        match &self.instance {
            Instance::Live { store, .. } => store.data().limiter.refused,
            _ => None,
        }
    }

    /// Largest linear memory of the live instance so far, in bytes; 0 when there is none.
    pub fn peak_memory(&self) -> usize {
        match &self.instance {
            Instance::Live { store, .. } => store.data().limiter.peak,
            _ => 0,
        }
    }

    /// Whether the live instance has used up three quarters of the room it started with (the
    /// limit minus its memory once started): recycling it then gives that room back to a leaking
    /// runtime, whose starting memory can itself be most of a small limit (CPython's is 13.6 MiB).
    /// A runtime whose heap grows to a plateau that fits its limit (SpiderMonkey's: 72–96 MiB
    /// of 128) is recycled rarely if at all, and only after growing again.
    fn nears_memory_limit(&self) -> bool {
        let (peak, limit, start) = (self.peak_memory(), self.limits.memory_bytes, self.memory_at_start);
        peak.saturating_sub(start) > limit.saturating_sub(start) / 4 * 3
    }

    /// Replaces the snapshot fresh instances are restored from (recovery from a checkpoint),
    /// and restarts the instance from it.
    pub fn set_snapshot(&mut self, snapshot: Vec<u8>) {
        self.snapshot = snapshot;
        self.recycle();
    }

    /// Drops the current instance; the next call runs on a fresh one. A `Store` only frees its
    /// memory when dropped, so long-running operators are recycled periodically. Returns whether
    /// there was a live instance.
    pub fn recycle(&mut self) -> bool {
        let Instance::Live { .. } = self.instance else { return false };
        self.instance = match std::mem::replace(&mut self.instance, Instance::Moving) {
            Instance::Live { store, .. } => {
                let host = store.into_data();
                Instance::Idle(host.state, host.timers)
            }
            other => other,
        };
        true
    }

    /// The operator's state store.
    pub fn state_mut(&mut self) -> &mut dyn StateStore {
        match &mut self.instance {
            Instance::Live { store, .. } => &mut *store.data_mut().state,
            Instance::Idle(state, _) => &mut **state,
            Instance::Moving => unreachable!("this is a bug in Weir: operator instance left in transition"),
        }
    }

    /// The operator's timer store.
    fn timers_mut(&mut self) -> &mut dyn StateStore {
        match &mut self.instance {
            Instance::Live { store, .. } => &mut *store.data_mut().timers,
            Instance::Idle(_, timers) => &mut **timers,
            Instance::Moving => unreachable!("this is a bug in Weir: operator instance left in transition"),
        }
    }

    /// Runs one guest call with the deadline armed, classifying any failure.
    fn call<R>(
        &mut self,
        call: Call,
        offsets: Option<BatchOffsets>,
        f: impl FnOnce(&mut Guest, &mut Store<HostState>) -> wasmtime::Result<R>,
    ) -> Result<R, OperatorError> {
        self.ensure_live()?;
        let Instance::Live { store, bindings } = &mut self.instance else {
            unreachable!("this is a bug in Weir: ensure_live left no live instance")
        };
        store.data_mut().watermark = self.watermark;
        let (result, cpu) = metered(store, &self.limits, self.failing, |store| f(bindings, store));
        self.last_call_cpu = cpu;
        // Until a guest error or a bad output makes it fail after all.
        self.failing &= result.is_err();
        store.data_mut().deadline = None;
        let result = result.map_err(|error| classify(&error, store, &self.limits));
        result.map_err(|kind| self.fail(call, offsets, kind))
    }

    /// Instantiates, `init`s and `restore`s a fresh instance if there is none.
    fn ensure_live(&mut self) -> Result<(), OperatorError> {
        let (state, timers) = match std::mem::replace(&mut self.instance, Instance::Moving) {
            Instance::Idle(state, timers) => (state, timers),
            live => {
                self.instance = live;
                return Ok(());
            }
        };
        let mut store = Box::new(Store::new(
            self.component.pre.engine(),
            HostState::new(
                self.name.clone(),
                MemoryLimiter::new(&self.limits),
                self.limits.max_state_record.clone(),
                self.limits.stop.clone(),
                state,
                timers,
            ),
        ));
        store.limiter(|host| &mut host.limiter);
        store.epoch_deadline_callback(|mut store| store.data_mut().epoch_tick());
        let (started, cpu) = metered(&mut store, &self.limits, self.failing, |store| {
            let bindings = self.component.pre.instantiate(&mut *store).map_err(|e| (Call::Init, Err(e)))?;
            match bindings.call_init(&mut *store, &self.config) {
                Ok(Ok(())) => {}
                Ok(Err(message)) => return Err((Call::Init, Ok(message))),
                Err(trap) => return Err((Call::Init, Err(trap))),
            }
            match bindings.call_restore(&mut *store, &self.snapshot) {
                Ok(Ok(())) => Ok(bindings),
                Ok(Err(message)) => Err((Call::Restore, Ok(message))),
                Err(trap) => Err((Call::Restore, Err(trap))),
            }
        });
        store.data_mut().deadline = None;
        match started {
            Ok(bindings) => {
                // Writes made by init/restore are part of setting up, not of an epoch's input.
                store.data_mut().clear_writes();
                self.memory_at_start = store.data().limiter.peak;
                self.instance = Instance::Live { store, bindings };
                Ok(())
            }
            Err((call, failure)) => {
                let kind = match failure {
                    Ok(message) => ErrorKind::guest(&message, None),
                    Err(trap) => classify(&trap, &mut store, &self.limits),
                };
                let host = store.into_data();
                self.instance = Instance::Idle(host.state, host.timers);
                self.charge_failure(cpu);
                Err(self.error(call, None, kind))
            }
        }
    }

    /// Drops the instance after a failed call and builds the error.
    fn fail(&mut self, call: Call, offsets: Option<BatchOffsets>, kind: ErrorKind) -> OperatorError {
        self.recycle();
        self.charge_failure(self.last_call_cpu);
        tracing::warn!(operator = %self.name, %call, error = %kind, "operator call failed; the next call runs on a fresh instance");
        self.error(call, offsets, kind)
    }

    /// Charges a failed call that used `cpu` to the pool again
    /// ([`ResourcePool::charge_failure`](super::ResourcePool::charge_failure)).
    fn charge_failure(&mut self, cpu: Duration) {
        if let Some(pool) = &self.limits.pool {
            // A call charged as a failure as it ran owes only the least a failure costs.
            pool.charge_failure(if self.failing { Duration::ZERO } else { cpu });
        }
        self.failing = true;
    }

    fn error(&self, call: Call, offsets: Option<BatchOffsets>, kind: ErrorKind) -> OperatorError {
        OperatorError { operator: self.name.to_string(), call, offsets, kind }
    }

    fn validate(&self, outputs: &Outputs) -> Result<(), ErrorKind> {
        let max = &self.limits.max_record;
        let rules = &self.limits.sink_rules;
        let now_ms = (!rules.is_unbounded()).then(crate::time::now_ms);
        for (index, output) in outputs.iter().enumerate() {
            let invalid =
                |reason: String| Err(ErrorKind::InvalidOutput { reason: format!("output record {index}: {reason}") });
            if let Some(name) = output.output
                && !self.outputs.iter().any(|known| known == name)
            {
                let known = if self.outputs.is_empty() { "none".to_owned() } else { self.outputs.join(", ") };
                return invalid(format!(
                    "names sink output `{name}`, which the pipeline does not define (defined: {known})"
                ));
            }
            let bytes = output.size();
            if bytes > max.bytes {
                return Err(ErrorKind::OutputTooLarge { index, bytes, limit: Box::new(max.clone()) });
            }
            if let Some(timestamp) = output.timestamp
                && timestamp < 0
            {
                return invalid(format!("negative timestamp {timestamp}"));
            }
            if let Some(now_ms) = now_ms
                && let Some(reason) = rules.of(output.output).refusal(output.key.is_some(), output.timestamp, now_ms)
            {
                return Err(ErrorKind::OutputRefused { index, reason: reason.into() });
            }
        }
        Ok(())
    }
}

/// Starts a call's deadline, which guest code meets at its next epoch tick
/// ([`HostState::epoch_tick`]) and host calls check.
fn arm(store: &mut Store<HostState>, limits: &OperatorLimits) {
    store.set_epoch_deadline(1);
    store.data_mut().deadline = Some(Instant::now() + limits.deadline);
    store.data_mut().limiter.refused = None;
    store.data_mut().clear_writes();
    if let Ok(mut log) = store.data().log.lock() {
        log.clear_stderr_tail();
    }
}

/// Names the failure behind a trap.
fn classify(error: &wasmtime::Error, store: &mut Store<HostState>, limits: &OperatorLimits) -> ErrorKind {
    let deadline = ErrorKind::DeadlineExceeded { deadline: limits.deadline };
    if let Some(host) = error.downcast_ref::<HostTrap>() {
        return match host {
            HostTrap::DeadlineExceeded => deadline,
            HostTrap::State(e) => ErrorKind::State(e.clone()),
        };
    }
    if let Some(malformed) = error.downcast_ref::<MalformedBatch>() {
        return ErrorKind::InvalidOutput { reason: malformed.to_string() };
    }
    if let Some(negative) = error.downcast_ref::<NegativeTimestamp>() {
        return ErrorKind::InvalidOutput { reason: negative.to_string() };
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return ErrorKind::Exit { status: exit.0 };
    }
    if let Some(refusal) = store.data().limiter.refused {
        return memory_error(refusal, limits);
    }
    let panic_message = store.data().log.lock().ok().and_then(|mut log| log.take_panic_message());
    match error.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => deadline,
        Some(wasmtime::Trap::StackOverflow) => ErrorKind::StackOverflow,
        Some(wasmtime::Trap::UnreachableCodeReached) if panic_message.is_some() => {
            ErrorKind::GuestPanic { message: panic_message.unwrap_or_default() }
        }
        Some(trap) => ErrorKind::Trap { trap: *trap },
        None => ErrorKind::Host { reason: format!("{error:#}") },
    }
}

/// The error of a refused memory growth.
fn memory_error(refusal: Refusal, limits: &OperatorLimits) -> ErrorKind {
    match (refusal, &limits.pool) {
        (Refusal::Pool, Some(pool)) => {
            ErrorKind::PoolMemory { owner: pool.owner().to_owned(), limit_bytes: pool.memory_limit() }
        }
        _ => ErrorKind::MemoryLimit { limit_bytes: limits.memory_bytes },
    }
}

/// Runs a guest call: waits for the pool's CPU share (before the deadline starts), [`arm`]s the
/// call, and meters its thread CPU time into the pool (the worker job around it usually does).
/// Returns the call's result and, with a pool, its thread CPU time (for
/// [`Operator::fail`] to charge a failure). The call of a `failing` operator (its last call
/// failed) is charged as a failure as it runs ([`super::pool::weigh_as_failing`]).
fn metered<R>(
    store: &mut Store<HostState>,
    limits: &OperatorLimits,
    failing: bool,
    call: impl FnOnce(&mut Store<HostState>) -> R,
) -> (R, Duration) {
    let Some(pool) = &limits.pool else {
        arm(store, limits);
        return (call(store), Duration::ZERO);
    };
    let _meter = pool.meter(limits.stop.as_deref());
    let _weight = failing.then(super::pool::weigh_as_failing);
    arm(store, limits);
    let started = thread_cpu_time();
    let result = call(store);
    (result, thread_cpu_time().saturating_sub(started))
}

fn batch_offsets(batch: &RecordBatch) -> Option<BatchOffsets> {
    let offsets = batch.offsets();
    Some(BatchOffsets {
        topic: batch.topic().to_owned(),
        partition: batch.partition(),
        first: *offsets.first()?,
        last: *offsets.last()?,
    })
}

/// The contract's name of a clock.
fn domain(clock: Clock) -> TimeDomain {
    match clock {
        Clock::EventTime => TimeDomain::EventTime,
        Clock::ProcessingTime => TimeDomain::ProcessingTime,
    }
}
