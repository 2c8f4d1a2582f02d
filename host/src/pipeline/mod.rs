//! Running a pipeline: tasks run the operator chain over their partition's records; the runner
//! polls the source, feeds tasks, sends output to the sink and drives checkpoints.
//!
//! # Delivery
//! Under `exactly-once`, an epoch's output is written in the transaction of its producer slot
//! and becomes visible, together with the epoch's source offsets, when the checkpoint commits
//! (see [`crate::checkpoint::protocol`]). Under `at-least-once` the sink is flushed at each
//! barrier before the checkpoint is written, so a crash replays (and duplicates) at most one
//! epoch. Under `none` nothing waits for the sink: a crash may lose output.
//!
//! # Scale-out
//! Every `weir run` of a pipeline is a static member of its consumer group (`--instance`); the
//! group hands each process its partitions, and the runner recovers, runs and gives up their
//! tasks as the group rebalances (KIP-447 fencing: offsets are sent with the live group
//! metadata). Each process has its own transactional ids and state directory.
//!
//! # Failure
//! A retriable failure (Kafka, an operator under `on_error = "fail"`, a checkpoint timeout)
//! drops everything and runs recovery again, with exponential back-off; anything else stops
//! `weir run` with the error.
//!
//! # Shutdown
//! On SIGINT or SIGTERM the runner finishes the open epoch, commits it and returns.

mod dead_letter;
mod output;
mod run;
mod runner;
mod task;
mod workers;

pub use run::{RunOptions, check_instance, default_instance, run};
