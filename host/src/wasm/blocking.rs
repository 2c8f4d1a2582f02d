//! The WASI calls a guest can wait in, bounded by the current call's deadline.
//!
//! Epoch interruption stops guest code only: a guest waiting inside a host call is not
//! interrupted. Every wait of a WASI guest ends in `wasi:io`: `std::thread::sleep` and timers are
//! `wasi:clocks/monotonic-clock.subscribe-*` followed by `wasi:io/poll` (`poll` or
//! `pollable.block`), and a stream's `blocking-*` methods wait for its pollable. wasmtime-wasi's
//! synchronous versions of those calls wait as long as the guest asks; [`add_to_linker`]
//! replaces them with versions that wait at most until the deadline of the guest call in progress
//! ([`super::OperatorLimits::deadline`]) and then trap with `HostTrap::DeadlineExceeded`, so the
//! call fails like guest code that ran too long. Calls that never wait are delegated unchanged.

use std::future::Future;
use std::time::Instant;

use wasmtime::component::{HasData, Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::bindings::io::poll as async_poll;
use wasmtime_wasi::p2::bindings::io::streams::{
    HostInputStream as AsyncInputStream, HostOutputStream as AsyncOutputStream,
};
use wasmtime_wasi::p2::bindings::sync::io::{poll, streams};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable, StreamError, StreamResult};
use wasmtime_wasi::runtime::in_tokio;

use super::error::HostTrap;
use super::host::HostState;

/// The resource table of an instance with the deadline of its current call.
pub(crate) struct BoundedIo<'a> {
    pub(crate) table: &'a mut ResourceTable,
    /// End of the current call's deadline; `None` outside a call.
    pub(crate) deadline: Option<Instant>,
}

struct Bounded;

impl HasData for Bounded {
    type Data<'a> = BoundedIo<'a>;
}

/// Replaces wasmtime-wasi's `wasi:io/poll` and `wasi:io/streams` in `linker` (which must already
/// hold them, from `wasmtime_wasi::p2::add_to_linker_sync`) with the deadline-bounded versions.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    poll::add_to_linker::<HostState, Bounded>(linker, HostState::bounded_io)?;
    streams::add_to_linker::<HostState, Bounded>(linker, HostState::bounded_io)?;
    linker.allow_shadowing(false);
    Ok(())
}

impl BoundedIo<'_> {
    /// Runs `wait` to completion, or until the deadline: then the call traps.
    fn wait<R>(deadline: Option<Instant>, wait: impl Future<Output = R>) -> wasmtime::Result<R> {
        match deadline {
            None => Ok(in_tokio(wait)),
            Some(deadline) => in_tokio(async { tokio::time::timeout_at(deadline.into(), wait).await })
                .map_err(|_elapsed| HostTrap::DeadlineExceeded.into()),
        }
    }

    /// [`Self::wait`] for a stream call, whose trap travels inside its `StreamResult`.
    fn wait_stream<R>(deadline: Option<Instant>, wait: impl Future<Output = StreamResult<R>>) -> StreamResult<R> {
        Self::wait(deadline, wait).map_err(StreamError::Trap)?
    }
}

impl poll::Host for BoundedIo<'_> {
    fn poll(&mut self, pollables: Vec<Resource<DynPollable>>) -> wasmtime::Result<Vec<u32>> {
        Self::wait(self.deadline, async_poll::Host::poll(self.table, pollables))?
    }
}

impl poll::HostPollable for BoundedIo<'_> {
    fn ready(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<bool> {
        poll::HostPollable::ready(self.table, pollable)
    }

    fn block(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        Self::wait(self.deadline, async_poll::HostPollable::block(self.table, pollable))?
    }

    fn drop(&mut self, pollable: Resource<DynPollable>) -> wasmtime::Result<()> {
        poll::HostPollable::drop(self.table, pollable)
    }
}

impl streams::Host for BoundedIo<'_> {
    fn convert_stream_error(&mut self, error: StreamError) -> wasmtime::Result<streams::StreamError> {
        streams::Host::convert_stream_error(self.table, error)
    }
}

impl streams::HostOutputStream for BoundedIo<'_> {
    fn drop(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<()> {
        streams::HostOutputStream::drop(self.table, stream)
    }

    fn check_write(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<u64> {
        streams::HostOutputStream::check_write(self.table, stream)
    }

    fn write(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        streams::HostOutputStream::write(self.table, stream, bytes)
    }

    fn blocking_write_and_flush(&mut self, stream: Resource<DynOutputStream>, bytes: Vec<u8>) -> StreamResult<()> {
        Self::wait_stream(self.deadline, AsyncOutputStream::blocking_write_and_flush(self.table, stream, bytes))
    }

    fn blocking_write_zeroes_and_flush(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        Self::wait_stream(self.deadline, AsyncOutputStream::blocking_write_zeroes_and_flush(self.table, stream, len))
    }

    fn subscribe(&mut self, stream: Resource<DynOutputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostOutputStream::subscribe(self.table, stream)
    }

    fn write_zeroes(&mut self, stream: Resource<DynOutputStream>, len: u64) -> StreamResult<()> {
        streams::HostOutputStream::write_zeroes(self.table, stream, len)
    }

    fn flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        streams::HostOutputStream::flush(self.table, stream)
    }

    fn blocking_flush(&mut self, stream: Resource<DynOutputStream>) -> StreamResult<()> {
        Self::wait_stream(self.deadline, AsyncOutputStream::blocking_flush(self.table, stream))
    }

    fn splice(&mut self, dst: Resource<DynOutputStream>, src: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostOutputStream::splice(self.table, dst, src, len)
    }

    fn blocking_splice(
        &mut self,
        dst: Resource<DynOutputStream>,
        src: Resource<DynInputStream>,
        len: u64,
    ) -> StreamResult<u64> {
        Self::wait_stream(self.deadline, AsyncOutputStream::blocking_splice(self.table, dst, src, len))
    }
}

impl streams::HostInputStream for BoundedIo<'_> {
    fn drop(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<()> {
        streams::HostInputStream::drop(self.table, stream)
    }

    fn read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        streams::HostInputStream::read(self.table, stream, len)
    }

    fn blocking_read(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<Vec<u8>> {
        Self::wait_stream(self.deadline, AsyncInputStream::blocking_read(self.table, stream, len))
    }

    fn skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        streams::HostInputStream::skip(self.table, stream, len)
    }

    fn blocking_skip(&mut self, stream: Resource<DynInputStream>, len: u64) -> StreamResult<u64> {
        Self::wait_stream(self.deadline, AsyncInputStream::blocking_skip(self.table, stream, len))
    }

    fn subscribe(&mut self, stream: Resource<DynInputStream>) -> wasmtime::Result<Resource<DynPollable>> {
        streams::HostInputStream::subscribe(self.table, stream)
    }
}
