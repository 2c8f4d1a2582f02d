//! The exactly-once protocol: barrier → pre-commit → durable → commit → apply, and recovery.
//!
//! [`protocol`] holds one function per phase, in the order of DESIGN.md ("Exactly-once
//! protocol"); [`fault`] lets tests abort the process between phases.

pub mod fault;
pub mod protocol;
