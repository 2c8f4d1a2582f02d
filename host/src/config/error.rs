//! [`ConfigError`]: why a pipeline file was refused.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Longest key path an error quotes, in bytes: a key a file made up may be long, and is cut with
/// a marker so that the error still says what is wrong after it.
const MAX_QUOTED_KEY_BYTES: usize = 256;

/// A pipeline file that cannot be used. Every variant but [`ConfigError::Read`] names the key at
/// fault in TOML dotted form (`sink.guarantee`, `transforms[0].on_error`,
/// `source.consumer."group.id"`), and the line of the file where it is when it is there.
///
/// A file with several errors is refused with all of them at once: [`ConfigError::Several`].
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
    #[error("invalid pipeline file{}: {}", in_file(path.as_deref()), self.detail())]
    Parse {
        /// The file, when the text came from one.
        path: Option<PathBuf>,
        /// Dotted path of the key at fault; empty for a syntax error.
        key_path: String,
        /// Line of the key in the file (1 for the first); `None` for a syntax error, whose
        /// message shows its line and column.
        line: Option<usize>,
        /// What is wrong: the TOML parser's message for a syntax error (with line, column and
        /// the offending line), else the expected type or values, or the keys allowed.
        message: String,
    },
    /// A value is well-formed but not allowed, alone or together with others.
    #[error("invalid pipeline configuration: {}", self.detail())]
    Invalid {
        /// Dotted path of the key at fault.
        key_path: String,
        /// Line of the key in the file, when the configuration came from a file that has it
        /// (a default has none).
        line: Option<usize>,
        /// What is wrong, the allowed values and, where there is one, the fix.
        message: String,
    },
    /// Every error found in one file (two or more), each a [`ConfigError::Parse`] or a
    /// [`ConfigError::Invalid`], in the order of their lines in the file (those without a line
    /// last).
    #[error("invalid pipeline file{}: {} errors:{}", in_file(path.as_deref()), errors.len(), list(errors))]
    Several {
        /// The file, when the text came from one.
        path: Option<PathBuf>,
        /// The errors.
        errors: Vec<ConfigError>,
    },
}

impl ConfigError {
    /// A value that is well-formed but not allowed: `key_path` in TOML dotted form, `message`
    /// saying what is wrong and what to do.
    pub fn invalid(key_path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid { key_path: key_path.into(), line: None, message: message.into() }
    }

    /// Dotted path of the key at fault, if the error names one; of the first error for
    /// [`ConfigError::Several`].
    pub fn key_path(&self) -> Option<&str> {
        match self {
            ConfigError::Parse { key_path, .. } | ConfigError::Invalid { key_path, .. } if !key_path.is_empty() => {
                Some(key_path)
            }
            ConfigError::Several { errors, .. } => errors.first().and_then(ConfigError::key_path),
            _ => None,
        }
    }

    /// The single errors this one is made of: the list of [`ConfigError::Several`], else this
    /// one alone.
    pub fn errors(&self) -> &[ConfigError] {
        match self {
            ConfigError::Several { errors, .. } => errors,
            other => std::slice::from_ref(other),
        }
    }

    /// `Ok` for no errors, the error itself for one, [`ConfigError::Several`] for more.
    pub(crate) fn from_list(path: Option<&Path>, mut errors: Vec<ConfigError>) -> Result<(), ConfigError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(ConfigError::Several { path: path.map(Path::to_path_buf), errors }),
        }
    }

    /// The error without line numbers: for a configuration whose text is not what its author
    /// wrote (`weir serve` rebuilds a spec from the body it was sent, with keys of its own), where
    /// the lines would point elsewhere.
    pub fn without_lines(self) -> Self {
        match self {
            ConfigError::Parse { path, key_path, message, .. } => {
                ConfigError::Parse { path, key_path, line: None, message }
            }
            ConfigError::Invalid { key_path, message, .. } => ConfigError::Invalid { key_path, line: None, message },
            ConfigError::Several { path, errors } => {
                ConfigError::Several { path, errors: errors.into_iter().map(Self::without_lines).collect() }
            }
            read @ ConfigError::Read { .. } => read,
        }
    }

    /// Line of the key at fault in the file, when known.
    pub(crate) fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Parse { line, .. } | ConfigError::Invalid { line, .. } => *line,
            _ => None,
        }
    }

    /// Sets the line of the key at fault, unless it has one.
    pub(crate) fn or_line(mut self, at: Option<usize>) -> Self {
        if let ConfigError::Parse { line, .. } | ConfigError::Invalid { line, .. } = &mut self {
            *line = line.or(at);
        }
        self
    }

    /// The error without the file: `` `key` (line N): message ``, or the message alone.
    fn detail(&self) -> String {
        match self {
            ConfigError::Parse { key_path, line, message, .. } | ConfigError::Invalid { key_path, line, message } => {
                let mut out = String::new();
                if !key_path.is_empty() {
                    out.push_str(&format!("`{}`", crate::wasm::truncate_line(key_path, MAX_QUOTED_KEY_BYTES)));
                }
                if let Some(line) = line {
                    out.push_str(&format!(" (line {line})"));
                }
                if !out.is_empty() {
                    out.push_str(": ");
                }
                out.push_str(message.trim_end());
                out
            }
            other => other.to_string(),
        }
    }
}

fn in_file(path: Option<&Path>) -> String {
    path.map(|p| format!(" {}", p.display())).unwrap_or_default()
}

/// One error a line, each under the one before it (a syntax error's own lines indented further).
fn list(errors: &[ConfigError]) -> String {
    let mut out = String::new();
    for error in errors {
        let _ = write!(out, "\n  - {}", error.detail().replace('\n', "\n    "));
    }
    out
}
