//! Rust bindings of the `weir:transform` worlds, and the adapter that runs a component of either
//! contract version through the current one's shapes.
//!
//! The host implements the current contract, `0.2.x` (`guest-sdk/wit`); its types are the ones
//! the rest of Weir uses. A `0.1.x` component (`guest-sdk/wit-0.1`) is bound through its own
//! generated bindings, and [`Guest`] converts at the call: 0.1 has no null header value, so a
//! null value reaches a 0.1 guest as an empty one, and its outputs' headers come back as
//! values; 0.1 has no event time, so a 0.1 guest sees neither the event time nor the watermark
//! of a record, and has no timers. Nothing past this module knows which version a component
//! targets, except that the operator looks for due timers of 0.2 components only.
//!
//! A 0.2 component of the `packed-transform` world (the Rust SDK's) also exports
//! the `packed` interface, whose `process-packed` [`Guest::call_process`] calls instead of
//! `process`, with a [`RecordBatch`]'s buffers as they are.

use wasmtime::Store;
use wasmtime::component::{HasSelf, InstancePre, Linker};

use super::host::HostState;
use crate::record::{Columns, Outputs, RecordBatch};

/// The current contract, `weir:transform@0.2.x`.
pub(crate) mod current {
    wasmtime::component::bindgen!({
        path: "../guest-sdk/wit",
        world: "transform",
        // Host functions may trap: a state backend failure or an exceeded deadline ends the call.
        imports: { default: trappable },
    });
}

/// The `packed-transform` world of the current contract: the `transform` world's exports and
/// the `packed` interface. Its imports are the current contract's.
pub(crate) mod packed {
    wasmtime::component::bindgen!({
        path: "../guest-sdk/wit",
        world: "packed-transform",
        with: {
            "weir:transform/types": crate::wasm::bindings::current::weir::transform::types,
            "weir:transform/state": crate::wasm::bindings::current::weir::transform::state,
            "weir:transform/log": crate::wasm::bindings::current::weir::transform::log,
            "weir:transform/timers": crate::wasm::bindings::current::weir::transform::timers,
        },
    });
}

/// The previous contract, `weir:transform@0.1.x`, still accepted.
pub(crate) mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../guest-sdk/wit-0.1",
        world: "transform",
        imports: { default: trappable },
    });
}

use current::weir::transform::types::{Header, InputRecord, OutputRecord, Timer, TransformError};
use packed::exports::weir::transform::packed::OutputBatch;
use v0_1::weir::transform::types as old;

/// A contract version the host accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Version {
    /// `weir:transform@0.1.x`.
    V0_1,
    /// `weir:transform@0.2.x`.
    V0_2,
}

/// Adds the imports of every accepted contract version to `linker` (their names carry the
/// version, so they do not clash).
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    current::Transform::add_to_linker::<HostState, HasSelf<HostState>>(linker, |state| state)?;
    v0_1::Transform::add_to_linker::<HostState, HasSelf<HostState>>(linker, |state| state)
}

/// The export that makes a 0.2 component one of the `packed-transform` world, less its version.
const PACKED_INTERFACE: &str = "weir:transform/packed@";

/// A pre-instantiated component of one contract version.
pub(crate) enum GuestPre {
    V0_1(v0_1::TransformPre<HostState>),
    V0_2(current::TransformPre<HostState>),
    Packed(packed::PackedTransformPre<HostState>),
}

impl GuestPre {
    /// Checks `pre`'s exports against the world of `version`: `packed-transform` for a 0.2
    /// component that exports the `packed` interface (whose types must then match), else
    /// `transform`.
    pub(crate) fn new(version: Version, pre: InstancePre<HostState>) -> wasmtime::Result<Self> {
        let engine = pre.engine();
        let packed =
            pre.component().component_type().exports(engine).any(|(name, _)| name.starts_with(PACKED_INTERFACE));
        Ok(match version {
            Version::V0_1 => Self::V0_1(v0_1::TransformPre::new(pre)?),
            Version::V0_2 if packed => Self::Packed(packed::PackedTransformPre::new(pre)?),
            Version::V0_2 => Self::V0_2(current::TransformPre::new(pre)?),
        })
    }

    pub(crate) fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::V0_1(pre) => pre.engine(),
            Self::V0_2(pre) => pre.engine(),
            Self::Packed(pre) => pre.engine(),
        }
    }

    pub(crate) fn instantiate(&self, store: &mut Store<HostState>) -> wasmtime::Result<Guest> {
        Ok(match self {
            Self::V0_1(pre) => Guest::V0_1(pre.instantiate(store)?),
            Self::V0_2(pre) => Guest::V0_2(pre.instantiate(store)?),
            Self::Packed(pre) => Guest::Packed(pre.instantiate(store)?),
        })
    }
}

/// A live instance, called with the current contract's types whatever its version.
pub(crate) enum Guest {
    V0_1(v0_1::Transform),
    V0_2(current::Transform),
    Packed(packed::PackedTransform),
}

impl Guest {
    pub(crate) fn call_init(
        &self,
        store: &mut Store<HostState>,
        config: &[(String, String)],
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Self::V0_1(guest) => guest.call_init(store, config),
            Self::V0_2(guest) => guest.call_init(store, config),
            Self::Packed(guest) => guest.call_init(store, config),
        }
    }

    /// Calls `process-packed` with `batch` as it is, or `process` with its records.
    ///
    /// # Errors
    /// A trap, a [`crate::record::MalformedBatch`] when a packed guest's output batch does
    /// not frame, or a [`super::outputs::NegativeTimestamp`] from a plain guest.
    pub(crate) fn call_process(
        &mut self,
        store: &mut Store<HostState>,
        batch: &RecordBatch,
    ) -> wasmtime::Result<Result<Outputs, TransformError>> {
        let outputs = match self {
            Self::Packed(guest) => {
                // `batch`'s own columns, lowered as the `input-batch` they are laid out as.
                let process = guest.weir_transform_packed().func_process_packed();
                let process = process.func().typed::<(&Columns,), (Result<OutputBatch, TransformError>,)>(&*store)?;
                let (result,) = process.call(&mut *store, (batch.columns(),))?;
                return match result {
                    Ok(outputs) => Ok(Ok(Outputs::from_packed(outputs)?)),
                    Err(error) => Ok(Err(error)),
                };
            }
            Self::V0_1(guest) => {
                let batch: Vec<old::InputRecord> = batch.to_records().iter().map(to_v0_1).collect();
                guest
                    .call_process(store, &batch)?
                    .map(|outputs| outputs.into_iter().map(from_v0_1).collect::<Vec<_>>())
                    .map_err(|e| TransformError { message: e.message, offset: e.offset })
            }
            Self::V0_2(guest) => guest.call_process(store, &batch.to_records())?,
        };
        from_guest(outputs)
    }

    pub(crate) fn call_snapshot(&self, store: &mut Store<HostState>) -> wasmtime::Result<Vec<u8>> {
        match self {
            Self::V0_1(guest) => guest.call_snapshot(store),
            Self::V0_2(guest) => guest.call_snapshot(store),
            Self::Packed(guest) => guest.call_snapshot(store),
        }
    }

    pub(crate) fn call_restore(
        &self,
        store: &mut Store<HostState>,
        snapshot: &[u8],
    ) -> wasmtime::Result<Result<(), String>> {
        match self {
            Self::V0_1(guest) => guest.call_restore(store, snapshot),
            Self::V0_2(guest) => guest.call_restore(store, snapshot),
            Self::Packed(guest) => guest.call_restore(store, snapshot),
        }
    }

    /// Calls `on-timer`; a 0.1 guest has no timers, so none are ever due for it.
    pub(crate) fn call_on_timer(
        &self,
        store: &mut Store<HostState>,
        timers: &[Timer],
    ) -> wasmtime::Result<Result<Outputs, TransformError>> {
        let outputs = match self {
            Self::V0_1(_) => return Ok(Ok(Outputs::default())),
            Self::V0_2(guest) => guest.call_on_timer(store, timers)?,
            Self::Packed(guest) => guest.call_on_timer(store, timers)?,
        };
        from_guest(outputs)
    }
}

/// A plain guest's outputs, packed and checked ([`Outputs::from_guest`]).
fn from_guest(outputs: Result<Vec<OutputRecord>, TransformError>) -> wasmtime::Result<Result<Outputs, TransformError>> {
    Ok(match outputs {
        Ok(outputs) => Ok(Outputs::from_guest(&outputs)?),
        Err(error) => Err(error),
    })
}

/// An input record as a 0.1 guest sees it: a null header value becomes an empty one, event time
/// and watermark are left out.
fn to_v0_1(record: &InputRecord) -> old::InputRecord {
    old::InputRecord {
        key: record.key.clone(),
        value: record.value.clone(),
        headers: record
            .headers
            .iter()
            .map(|h| old::Header { key: h.key.clone(), value: h.value.clone().unwrap_or_default() })
            .collect(),
        timestamp: record.timestamp,
        topic: record.topic.clone(),
        partition: record.partition,
        offset: record.offset,
    }
}

/// A 0.1 guest's output record in the current shapes.
fn from_v0_1(record: old::OutputRecord) -> OutputRecord {
    OutputRecord {
        key: record.key,
        value: record.value,
        headers: record.headers.into_iter().map(|h| Header { key: h.key, value: Some(h.value) }).collect(),
        timestamp: record.timestamp,
        output: record.output,
    }
}
