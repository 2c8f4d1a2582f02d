//! Bytes of a record's key or value: owned, or a range of a packed batch's buffer.

use std::fmt;
use std::sync::Arc;

/// A key or value. The records of a packed batch point into the batch's one buffer instead of
/// each owning a copy, and an output that forwards a record points there too; the buffer is
/// freed when the last record or output that points into it is dropped.
#[derive(Clone)]
pub(crate) enum Bytes {
    Owned(Vec<u8>),
    Shared { buffer: Arc<Vec<u8>>, start: usize, end: usize },
}

impl Bytes {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Owned(bytes) => bytes,
            Bytes::Shared { buffer, start, end } => &buffer[*start..*end],
        }
    }

    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Bytes::Owned(bytes) => bytes,
            shared => shared.as_slice().to_vec(),
        }
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Bytes {}
