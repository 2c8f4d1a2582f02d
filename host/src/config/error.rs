//! [`ConfigError`]: why a pipeline file was refused.

use std::path::{Path, PathBuf};

/// A pipeline file that cannot be used. Every variant but [`ConfigError::Read`] names the key at
/// fault in TOML dotted form (`sink.guarantee`, `transforms[0].on_error`,
/// `source.consumer."group.id"`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read pipeline file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The text is not TOML, or does not have the shape of a pipeline file: a syntax error, an
    /// unknown key, a missing key or a value of the wrong type.
    #[error("{}", describe_parse(path.as_deref(), key_path, message))]
    Parse {
        /// The file, when the text came from one.
        path: Option<PathBuf>,
        /// Dotted path of the key at fault; empty for a syntax error or a key missing at the
        /// top level.
        key_path: String,
        /// The TOML parser's message, with line, column and the offending line when known.
        message: String,
    },
    /// A value is well-formed but not allowed, alone or together with others.
    #[error("invalid pipeline configuration: `{key_path}`: {message}")]
    Invalid {
        /// Dotted path of the key at fault.
        key_path: String,
        /// What is wrong, the allowed values and, where there is one, the fix.
        message: String,
    },
}

impl ConfigError {
    /// Dotted path of the key at fault, if the error names one.
    pub fn key_path(&self) -> Option<&str> {
        match self {
            ConfigError::Parse { key_path, .. } | ConfigError::Invalid { key_path, .. } if !key_path.is_empty() => {
                Some(key_path)
            }
            _ => None,
        }
    }

    pub(crate) fn invalid(key_path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid { key_path: key_path.into(), message: message.into() }
    }
}

fn describe_parse(path: Option<&Path>, key_path: &str, message: &str) -> String {
    let mut out = String::from("invalid pipeline file");
    if let Some(path) = path {
        out.push_str(&format!(" {}", path.display()));
    }
    if !key_path.is_empty() {
        out.push_str(&format!(" at `{key_path}`"));
    }
    out.push_str(": ");
    out.push_str(message.trim_end());
    out
}
