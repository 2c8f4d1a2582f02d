//! Secret references in configuration values, and their redaction from everything Weir prints.
//!
//! A value of a Kafka property table (`[kafka]`, `[sink.kafka]`, `source.consumer`,
//! `sink.producer`, the `[kafka]` of `serve.toml` and of `--kafka-config`) may be a reference
//! instead of a literal:
//! - `${env:NAME}`: the environment variable `NAME`;
//! - `${file:/path}`: the contents of a file (one trailing newline trimmed), as Kubernetes and
//!   systemd credentials mount secrets.
//!
//! References are resolved once, when the file is read. A missing variable or an unreadable file
//! refuses the file, naming the key and the reference, never a value. The value of a secret key
//! ([`is_secret_key`]: `sasl.password`, `ssl.key.password`, `sasl.oauthbearer.client.secret`,
//! any key containing `password` or `secret`, and `ssl.key.pem`) must be a reference: a literal
//! secret in a file is refused.
//!
//! Every resolved secret is remembered by the process ([`redact`]): the log writer, error
//! messages and Weir's JSON outputs pass through [`redact`], which replaces any of them with
//! [`REDACTED`], so that a secret echoed by a library (a librdkafka error quoting a property,
//! say) is still not printed.

use std::borrow::Cow;
use std::io;
use std::path::Path;
use std::sync::RwLock;

/// What a redacted secret reads as.
pub const REDACTED: &str = "***";

/// Secrets shorter than this are not searched for in output: they would redact ordinary words
/// and digits. They are still never printed as configuration values ([`display_value`]).
const MIN_REDACTED_LEN: usize = 4;

/// Every secret resolved by this process, longest first (so that a secret containing another is
/// replaced whole).
static SECRETS: RwLock<Vec<String>> = RwLock::new(Vec::new());

/// Whether the value of the property `key` is a secret: it is then redacted wherever it could be
/// printed and must be written as a reference. Keys containing `password` or `secret` (librdkafka:
/// `sasl.password`, `ssl.key.password`, `ssl.keystore.password`,
/// `sasl.oauthbearer.client.secret`), and `ssl.key.pem` (a private key given inline).
pub fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password") || key.contains("secret") || key == "ssl.key.pem"
}

/// Why a reference could not be resolved. Its message names the reference, never a value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// `${env:NAME}` with `NAME` unset (or not UTF-8).
    #[error("the environment variable {name} of `{reference}` is not set: set it in the environment of weir")]
    MissingVariable { reference: String, name: String },
    /// `${file:/path}` that cannot be read.
    #[error("cannot read the file of `{reference}`: {source}")]
    UnreadableFile { reference: String, source: io::Error },
    /// `${...}` that is neither form.
    #[error("`{reference}` is not a reference Weir knows: write `${{env:NAME}}` or `${{file:/path}}`")]
    UnknownForm { reference: String },
    /// A literal value for a secret key.
    #[error("a secret must not be written in a file: write a reference, `${{env:NAME}}` or `${{file:/path}}`")]
    Literal,
}

/// `value` with its reference resolved (a value that is not a reference is returned as it is),
/// for the property `key`. A resolved value of a secret key is remembered for [`redact`].
///
/// # Errors
/// [`SecretError`]: a reference that cannot be resolved, or a literal value for a secret key
/// ([`is_secret_key`]).
pub fn resolve(key: &str, value: &str) -> Result<String, SecretError> {
    let Some(inner) = value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) else {
        return if is_secret_key(key) && !value.is_empty() { Err(SecretError::Literal) } else { Ok(value.to_owned()) };
    };
    let reference = value.to_owned();
    let resolved = if let Some(name) = inner.strip_prefix("env:") {
        std::env::var(name).map_err(|_| SecretError::MissingVariable { reference, name: name.to_owned() })?
    } else if let Some(path) = inner.strip_prefix("file:") {
        let mut text = std::fs::read_to_string(Path::new(path))
            .map_err(|source| SecretError::UnreadableFile { reference, source })?;
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        text
    } else {
        return Err(SecretError::UnknownForm { reference });
    };
    if is_secret_key(key) {
        remember(&resolved);
    }
    Ok(resolved)
}

/// How a configuration value is shown: [`REDACTED`] for a secret key, else the value.
pub fn display_value<'a>(key: &str, value: &'a str) -> &'a str {
    if is_secret_key(key) { REDACTED } else { value }
}

/// Remembers `secret` so that [`redact`] replaces it.
pub fn remember(secret: &str) {
    if secret.len() < MIN_REDACTED_LEN {
        return;
    }
    let mut secrets = SECRETS.write().unwrap_or_else(|e| e.into_inner());
    if !secrets.iter().any(|s| s == secret) {
        secrets.push(secret.to_owned());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }
}

/// `text` with every secret this process resolved replaced by [`REDACTED`].
pub fn redact(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(|e| e.into_inner());
    let mut text = Cow::Borrowed(text);
    for secret in secrets.iter() {
        if text.contains(secret.as_str()) {
            text = Cow::Owned(text.replace(secret.as_str(), REDACTED));
        }
    }
    text
}

/// A writer that redacts ([`redact`]) what passes through it: the log's. `tracing`'s formatter
/// writes each event with one `write` call, so a secret is never split between two.
pub struct RedactingWriter<W>(pub W);

impl<W: io::Write> io::Write for RedactingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.0.write_all(redact(text).as_bytes())?,
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_keys_follow_librdkafkas_names() {
        for key in ["sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret"] {
            assert!(is_secret_key(key), "{key}");
        }
        for key in ["sasl.username", "ssl.ca.location", "bootstrap.servers", "sasl.mechanism"] {
            assert!(!is_secret_key(key), "{key}");
        }
    }

    #[test]
    fn references_resolve_and_their_secrets_are_redacted() {
        // SAFETY: the variable's name is this test's own; no other test reads or writes it.
        unsafe { std::env::set_var("WEIR_TEST_SECRET_REF", "hunter2-from-env") };
        assert_eq!(resolve("sasl.password", "${env:WEIR_TEST_SECRET_REF}").unwrap(), "hunter2-from-env");
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, "s3cret-from-file\n").unwrap();
        let reference = format!("${{file:{}}}", file.display());
        assert_eq!(resolve("ssl.key.password", &reference).unwrap(), "s3cret-from-file", "one newline trimmed");

        let line = "auth failed for hunter2-from-env and s3cret-from-file";
        assert_eq!(redact(line), "auth failed for *** and ***");
        let mut out = Vec::new();
        io::Write::write(&mut RedactingWriter(&mut out), line.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "auth failed for *** and ***");
    }

    #[test]
    fn unresolvable_references_name_the_reference_and_literal_secrets_are_refused() {
        let err = resolve("sasl.password", "${env:WEIR_TEST_UNSET_VARIABLE}").unwrap_err();
        assert!(err.to_string().contains("WEIR_TEST_UNSET_VARIABLE"), "{err}");
        let err = resolve("sasl.password", "${file:/nonexistent/weir/password}").unwrap_err();
        assert!(err.to_string().contains("/nonexistent/weir/password"), "{err}");
        assert!(matches!(resolve("sasl.password", "${vault:x}"), Err(SecretError::UnknownForm { .. })));
        assert!(matches!(resolve("sasl.password", "plain-text"), Err(SecretError::Literal)));
        assert_eq!(resolve("sasl.username", "weir").unwrap(), "weir", "not a secret: literal is fine");
        assert_eq!(display_value("sasl.password", "x"), REDACTED);
    }
}
