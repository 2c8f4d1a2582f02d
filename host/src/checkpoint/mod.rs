//! The exactly-once protocol: the coordinator of a process's epochs, the phases of a
//! checkpoint, and recovery with its restore from the changelog.
//!
//! [`coordinator`] owns the epochs and the sink's delivery guarantee and drives each
//! checkpoint, whose commit under exactly-once runs on a thread of its own ([`commit`]) while the
//! next epoch processes; [`protocol`] holds one function per phase, in the order of DESIGN.md
//! ("Exactly-once protocol"); [`recovery`] is what a start runs, in order, and what every
//! assignment runs for its partitions; [`restore`] brings RocksDB up to the changelog;
//! [`savepoint`] copies a pipeline's state out of Kafka and back; [`fault`] lets tests abort the
//! process between phases.

pub mod commit;
pub mod coordinator;
pub mod fault;
pub mod protocol;
pub mod recovery;
pub mod restore;
pub mod savepoint;

pub use coordinator::{Coordinator, Parts};
