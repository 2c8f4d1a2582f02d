//! Logging into the host's structured log, tagged with the operator's name.
//!
//! The host rate-limits each operator instance; lines over the limit are dropped and counted.
//! The crate-level macros [`trace!`](crate::trace), [`debug!`](crate::debug),
//! [`info!`](crate::info), [`warn!`](crate::warn) and [`error!`](crate::error) take `format!`
//! arguments:
//!
//! ```
//! weir_guest::info!("threshold is {} minutes", 15);
//! weir_guest::log::warn("plain message");
//! ```
//!
//! On targets other than `wasm32` (native unit tests) lines go to stderr.

/// Severity of a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected that the transform handled.
    Warn,
    /// Something failed.
    Error,
}

/// Writes one line at `level`.
pub fn log(level: Level, message: &str) {
    imp(level, message)
}

/// Writes one line at trace level.
pub fn trace(message: &str) {
    log(Level::Trace, message)
}

/// Writes one line at debug level.
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Writes one line at info level.
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Writes one line at warn level.
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Writes one line at error level.
pub fn error(message: &str) {
    log(Level::Error, message)
}

#[cfg(target_arch = "wasm32")]
fn imp(level: Level, message: &str) {
    use crate::bindings::weir::transform::log::{Level as L, log};
    let level = match level {
        Level::Trace => L::Trace,
        Level::Debug => L::Debug,
        Level::Info => L::Info,
        Level::Warn => L::Warn,
        Level::Error => L::Error,
    };
    log(level, message)
}

#[cfg(not(target_arch = "wasm32"))]
fn imp(level: Level, message: &str) {
    eprintln!("[{level:?}] {message}");
}
