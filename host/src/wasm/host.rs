//! The data of one operator instance's `Store`, and the host side of its imports.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::UpdateDeadline;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::Level;
use super::bindings::current::weir::transform::{log, state, timers, types};
use super::bindings::v0_1::weir::transform as v0_1;
use super::blocking::BoundedIo;
use super::error::{ErrorKind, HostTrap};
use super::guest_log::{GuestLog, GuestStream};
use super::limits::MemoryLimiter;
use crate::record::{RecordLimit, changelog_record_size};
use crate::state::StateStore;
use crate::time::{Clock, parse_timer_key, timer_key};

/// Largest `limit` a guest may pass to `scan-prefix`, to bound one call's result.
const MAX_SCAN_LIMIT: usize = 10_000;

/// Everything a `Store` owns for one operator instance.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) log: Arc<Mutex<GuestLog>>,
    /// The operator's state; survives the instance (taken back out when the `Store` is dropped).
    pub(crate) state: Box<dyn StateStore>,
    /// Writes of the current call, applied to `state` only when the call succeeds.
    pub(crate) writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The operator's timers ([`crate::time`]); survive the instance like `state`.
    pub(crate) timers: Box<dyn StateStore>,
    /// Timers registered (`Some`) and cancelled (`None`) by the current call, applied to
    /// `timers` only when the call succeeds.
    pub(crate) timer_writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// The task's watermark for the current call (`timers.watermark`).
    pub(crate) watermark: Option<i64>,
    /// End of the current call's deadline; host calls past it trap.
    pub(crate) deadline: Option<Instant>,
    /// Set when the pipeline is asked to stop ([`super::OperatorLimits::stop`]): ends a wait
    /// for CPU at once.
    stop: Option<Arc<AtomicBool>>,
    /// Largest changelog record a write may make ([`super::OperatorLimits::max_state_record`]).
    max_state_record: RecordLimit,
}

impl HostState {
    pub(crate) fn new(
        operator: Arc<str>,
        limiter: MemoryLimiter,
        max_state_record: RecordLimit,
        stop: Option<Arc<AtomicBool>>,
        state: Box<dyn StateStore>,
        timers: Box<dyn StateStore>,
    ) -> Self {
        let log = Arc::new(Mutex::new(GuestLog::new(operator)));
        // No preopened directories, environment, arguments or sockets: clocks, random and the
        // captured stdio are all a guest gets.
        let wasi = WasiCtxBuilder::new()
            .stdout(GuestStream::stdout(log.clone()))
            .stderr(GuestStream::stderr(log.clone()))
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            limiter,
            log,
            state,
            writes: BTreeMap::new(),
            timers,
            timer_writes: BTreeMap::new(),
            watermark: None,
            deadline: None,
            stop,
            max_state_record,
        }
    }

    /// Runs at every epoch tick (10 ms) of guest code: [`pace`](super::pool::pace)s the call's
    /// CPU time, moving its deadline by the wait (time spent waiting for the tenant's CPU share
    /// is not the guest's), and traps once the deadline has passed.
    pub(crate) fn epoch_tick(&mut self) -> wasmtime::Result<UpdateDeadline> {
        let waited = super::pool::pace(self.stop.as_deref());
        if let Some(deadline) = &mut self.deadline {
            *deadline += waited;
            if Instant::now() >= *deadline {
                return Err(HostTrap::DeadlineExceeded.into());
            }
        }
        Ok(UpdateDeadline::Continue(1))
    }

    /// Applies the current call's writes and timers to the operator's stores. Both stores write
    /// into the task's in-memory epoch overlay, so they take effect together.
    ///
    /// # Errors
    /// [`ErrorKind::StateTooLarge`] when a write would make a changelog record larger than
    /// [`super::OperatorLimits::max_state_record`] (then nothing is applied): the checkpoint
    /// could never commit it, so the call fails instead. Checked here rather than at each
    /// `put`, because only the call's last write of a key reaches the changelog, whether or not
    /// the guest's SDK buffers its writes. [`ErrorKind::State`] when a store fails.
    pub(crate) fn commit_writes(&mut self) -> Result<(), ErrorKind> {
        self.check_record_sizes()?;
        if !self.writes.is_empty() {
            self.state.write(std::mem::take(&mut self.writes).into_iter().collect()).map_err(ErrorKind::State)?;
        }
        if !self.timer_writes.is_empty() {
            self.timers
                .write(std::mem::take(&mut self.timer_writes).into_iter().collect())
                .map_err(ErrorKind::State)?;
        }
        Ok(())
    }

    /// The first of the call's writes and timers whose changelog record is over the limit.
    fn check_record_sizes(&self) -> Result<(), ErrorKind> {
        let limit = &self.max_state_record;
        let too_large = |write: String, bytes| ErrorKind::StateTooLarge {
            write: write.into(),
            bytes,
            limit: Box::new(limit.clone()),
        };
        for (key, value) in &self.writes {
            let bytes =
                changelog_record_size(self.state.key_prefix_len() + key.len(), value.as_ref().map_or(0, Vec::len));
            if bytes > limit.bytes {
                let what = if value.is_some() { "state value" } else { "state delete" };
                return Err(too_large(format!("{what} of key `{}`", show_key(key)), bytes));
            }
        }
        for (timer, registered) in &self.timer_writes {
            let bytes = changelog_record_size(self.timers.key_prefix_len() + timer.len(), 0);
            if bytes > limit.bytes {
                let key = parse_timer_key(timer).map_or(&timer[..], |(_, _, key)| key);
                let what = if registered.is_some() { "timer" } else { "timer removal" };
                return Err(too_large(format!("{what} of key `{}`", show_key(key)), bytes));
            }
        }
        Ok(())
    }

    /// Forgets the current call's writes and timers.
    pub(crate) fn clear_writes(&mut self) {
        self.writes.clear();
        self.timer_writes.clear();
    }

    /// The resource table with the current call's deadline, for the bounded WASI waits.
    pub(crate) fn bounded_io(&mut self) -> BoundedIo<'_> {
        BoundedIo { table: &mut self.table, deadline: self.deadline }
    }

    fn check_deadline(&self) -> wasmtime::Result<()> {
        match self.deadline {
            Some(deadline) if Instant::now() >= deadline => Err(HostTrap::DeadlineExceeded.into()),
            _ => Ok(()),
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl types::Host for HostState {}

impl state::Host for HostState {
    fn get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        self.check_deadline()?;
        if let Some(value) = self.writes.get(&key) {
            return Ok(value.clone());
        }
        Ok(self.state.get(&key).map_err(HostTrap::State)?)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.check_deadline()?;
        self.writes.insert(key, Some(value));
        Ok(())
    }

    fn delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        self.check_deadline()?;
        self.writes.insert(key, None);
        Ok(())
    }

    fn scan_prefix(&mut self, prefix: Vec<u8>, limit: u32) -> wasmtime::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.check_deadline()?;
        let limit = (limit as usize).min(MAX_SCAN_LIMIT);
        // Committed entries, over-read by the number of this call's writes under the prefix so
        // that deletes cannot leave the merged result short.
        let own: Vec<_> = self.writes.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)).collect();
        let stored = self.state.scan_prefix(&prefix, limit + own.len()).map_err(HostTrap::State)?;
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = stored.into_iter().map(|(k, v)| (k, Some(v))).collect();
        merged.extend(own.into_iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(merged.into_iter().filter_map(|(k, v)| Some((k, v?))).take(limit).collect())
    }
}

impl timers::Host for HostState {
    fn register(&mut self, key: Vec<u8>, time: i64, domain: types::TimeDomain) -> wasmtime::Result<()> {
        self.check_deadline()?;
        self.timer_writes.insert(timer_key(clock(domain), time, &key), Some(Vec::new()));
        Ok(())
    }

    fn cancel(&mut self, key: Vec<u8>, time: i64, domain: types::TimeDomain) -> wasmtime::Result<()> {
        self.check_deadline()?;
        self.timer_writes.insert(timer_key(clock(domain), time, &key), None);
        Ok(())
    }

    fn watermark(&mut self) -> wasmtime::Result<Option<i64>> {
        Ok(self.watermark)
    }
}

/// A key for a message: its first 64 bytes, ASCII-escaped, and an ellipsis when there are more.
fn show_key(key: &[u8]) -> String {
    const SHOWN: usize = 64;
    let shown = key[..key.len().min(SHOWN)].escape_ascii().to_string();
    if key.len() > SHOWN { format!("{shown}… ({} bytes)", key.len()) } else { shown }
}

/// The host's name of a contract time domain.
pub(crate) fn clock(domain: types::TimeDomain) -> Clock {
    match domain {
        types::TimeDomain::EventTime => Clock::EventTime,
        types::TimeDomain::ProcessingTime => Clock::ProcessingTime,
    }
}

impl log::Host for HostState {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        if let Ok(mut log) = self.log.lock() {
            log.line(level, &message);
        }
        Ok(())
    }
}

// A 0.1 component's imports are the current ones: `state` is unchanged and `log` differs only in
// the enum's type.
impl v0_1::types::Host for HostState {}

impl v0_1::state::Host for HostState {
    fn get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        state::Host::get(self, key)
    }

    fn put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        state::Host::put(self, key, value)
    }

    fn delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        state::Host::delete(self, key)
    }

    fn scan_prefix(&mut self, prefix: Vec<u8>, limit: u32) -> wasmtime::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        state::Host::scan_prefix(self, prefix, limit)
    }
}

impl v0_1::log::Host for HostState {
    fn log(&mut self, level: v0_1::log::Level, message: String) -> wasmtime::Result<()> {
        use v0_1::log::Level as Old;
        let level = match level {
            Old::Trace => Level::Trace,
            Old::Debug => Level::Debug,
            Old::Info => Level::Info,
            Old::Warn => Level::Warn,
            Old::Error => Level::Error,
        };
        log::Host::log(self, level, message)
    }
}
