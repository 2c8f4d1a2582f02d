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
//! # Failure
//! A retriable failure (Kafka, an operator under `on_error = "fail"`, a checkpoint timeout)
//! drops everything and runs recovery again, with exponential back-off; anything else stops
//! `weir run` with the error.
//!
//! # Shutdown
//! On SIGINT or SIGTERM the runner finishes the open epoch, commits it and returns.

mod runner;
mod task;

pub use runner::{RunOptions, run};
pub use task::{DeadLetter, Task};
