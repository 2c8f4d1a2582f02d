//! The exactly-once protocol: barrier → pre-commit → commit → apply, and recovery with its
//! restore from the changelog.
//!
//! [`protocol`] holds one function per phase, in the order of DESIGN.md ("Exactly-once
//! protocol"); [`restore`] brings RocksDB up to the changelog; [`savepoint`] copies a pipeline's
//! state out of Kafka and back; [`fault`] lets tests abort the process between phases.

pub mod fault;
pub mod protocol;
pub mod restore;
pub mod savepoint;
