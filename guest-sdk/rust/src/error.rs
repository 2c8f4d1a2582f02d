use std::fmt;

use crate::bindings::weir::transform::types::TransformError as RawTransformError;

/// A failure a transform reports for a record instead of trapping.
///
/// Returned from [`Transform::process`](crate::Transform::process), it fails the whole batch;
/// the host logs the message and, with the `dead-letter` policy, writes the offending record to
/// the dead-letter topic with the message in its headers. When the error has no offset, the SDK
/// fills in the offset of the record being processed.
///
/// Anything that displays converts with `?` through `From<String>` / `From<&str>`; JSON errors
/// convert through `From<serde_json::Error>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformError {
    message: String,
    offset: Option<i64>,
}

impl TransformError {
    /// An error with `message` and no offset.
    pub fn new(message: impl Into<String>) -> Self {
        TransformError { message: message.into(), offset: None }
    }

    /// Sets the offset of the offending input record.
    pub fn with_offset(mut self, offset: i64) -> Self {
        self.offset = Some(offset);
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The offset of the offending input record, if known.
    pub fn offset(&self) -> Option<i64> {
        self.offset
    }

    /// Sets the offset unless one is set already.
    pub(crate) fn or_offset(mut self, offset: i64) -> Self {
        self.offset.get_or_insert(offset);
        self
    }
}

impl fmt::Display for TransformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TransformError {}

impl From<String> for TransformError {
    fn from(message: String) -> Self {
        TransformError::new(message)
    }
}

impl From<&str> for TransformError {
    fn from(message: &str) -> Self {
        TransformError::new(message)
    }
}

impl From<serde_json::Error> for TransformError {
    fn from(e: serde_json::Error) -> Self {
        TransformError::new(format!("JSON error: {e}"))
    }
}

impl From<TransformError> for RawTransformError {
    fn from(e: TransformError) -> Self {
        RawTransformError { message: e.message, offset: e.offset }
    }
}
