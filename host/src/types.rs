//! Vocabulary shared by every stage of the data path (see DESIGN.md, "Vocabulary").

use std::fmt;

/// Number of a checkpoint, and of the epoch it closes: epoch N is the records between barrier
/// N-1 and barrier N. Starts at 1 and never goes back, across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The checkpoint after this one.
    pub fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One parallel unit of a pipeline. In v1 a task owns exactly one source partition.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId {
    /// Source topic.
    pub topic: String,
    /// Source partition.
    pub partition: i32,
}

impl TaskId {
    /// The task of `partition` of source topic `topic`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self { topic: topic.into(), partition }
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.topic, self.partition)
    }
}
