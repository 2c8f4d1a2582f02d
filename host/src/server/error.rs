//! [`ApiError`]: every refusal of the API, as JSON `{code, message, field?}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::spec::SpecError;
use super::store::RecordTooLarge;
use crate::wasm::truncate_line;

/// Longest message an error answer carries, in bytes, about: it may quote what the caller sent
/// (an unknown key, a value), so a longer one is cut in its middle with a marker, keeping its end
/// (what was expected, what to do) rather than sending the quote back whole.
const MAX_MESSAGE_BYTES: usize = 4096;
/// Longest `field` an error answer names, in bytes (a key the caller made up may be long).
const MAX_FIELD_BYTES: usize = 256;

/// The body of every error answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// Stable machine-readable code: `unauthorized`, `forbidden`, `not_found`, `conflict`,
    /// `invalid`, `too_large`, `quota`, `unavailable`, `internal`.
    pub code: &'static str,
    /// What is wrong and what to do, naming the field or object.
    pub message: String,
    /// The offending field (a dotted key path of the body) when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// A refused request: an HTTP status and its [`ErrorBody`].
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        let message = cut_middle(message.into(), MAX_MESSAGE_BYTES);
        Self { status, body: ErrorBody { code, message, field: None } }
    }

    /// 401: no token, or not a valid one.
    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid bearer token: send `Authorization: Bearer <token>`",
        )
    }

    /// 403: a valid token that may not do this (a tenant on an admin route).
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 404: no such object (or another tenant's).
    pub fn not_found(what: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    /// 409: the object's state forbids it.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 400 about `field`.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::BAD_REQUEST, "invalid", message);
        error.body.field = Some(cut(field.into(), MAX_FIELD_BYTES)).filter(|f| !f.is_empty());
        error
    }

    /// 413: a body over the limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", message)
    }

    /// 422: a component that cannot be used.
    pub fn unusable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid", message)
    }

    /// 429 / quota: a tenant limit reached.
    pub fn quota(field: &str, message: impl Into<String>) -> Self {
        let mut error = Self::new(StatusCode::FORBIDDEN, "quota", message);
        error.body.field = Some(field.into());
        error
    }

    /// 503: the broker (registry topic) did not answer.
    pub fn unavailable(error: anyhow::Error) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("{error:#}"))
    }

    /// A failed write to the registry topic: 413 for a change too large for one of its records
    /// ([`RecordTooLarge`]), else [`ApiError::unavailable`].
    pub fn registry_write(error: anyhow::Error) -> Self {
        match error.downcast_ref::<RecordTooLarge>() {
            Some(too_large) => Self::too_large(too_large.to_string()),
            None => Self::unavailable(error),
        }
    }

    /// 500: a bug or a local failure (disk).
    pub fn internal(error: impl std::fmt::Display) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", error.to_string())
    }

    /// The status.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.body.message)
    }
}

impl From<SpecError> for ApiError {
    fn from(error: SpecError) -> Self {
        // Cut where it is quoted, so that the message keeps what is wrong.
        let message = if error.field.is_empty() {
            error.message
        } else {
            format!("`{}`: {}", truncate_line(&error.field, MAX_FIELD_BYTES), error.message)
        };
        Self::invalid(error.field, message)
    }
}

/// `text` cut to `max` bytes with a marker ([`truncate_line`]).
fn cut(text: String, max: usize) -> String {
    match truncate_line(&text, max) {
        std::borrow::Cow::Borrowed(_) => text,
        cut => cut.into_owned(),
    }
}

/// `text` cut to about `max` bytes by leaving out the middle (at character boundaries), with a
/// marker saying how much: its first three quarters and its last quarter stay.
fn cut_middle(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let head = text.floor_char_boundary(max / 4 * 3);
    let tail = text.ceil_char_boundary(text.len() - max / 4);
    format!("{} [cut: {} bytes] {}", &text[..head], tail - head, &text[tail..])
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_quotes_little_of_the_request_and_a_record_too_large_is_413() {
        let spec = SpecError { field: format!("source.{}", "k".repeat(10_000)), message: "unknown key".into() };
        let error = ApiError::from(spec);
        assert_eq!(error.status(), StatusCode::BAD_REQUEST);
        let field = error.body.field.as_deref().unwrap_or_default();
        assert!(field.len() < MAX_FIELD_BYTES + 64 && field.ends_with("more bytes]"), "{field}");
        assert!(error.body.message.ends_with("more bytes]`: unknown key"), "{}", error.body.message);
        let long = ApiError::internal("é".repeat(10_000));
        assert!(long.body.message.len() < MAX_MESSAGE_BYTES + 64, "{}", long.body.message.len());
        // A long value quoted in the middle: what was expected, at the end, stays.
        let quoted = ApiError::invalid(
            "sink.partitions",
            format!("invalid type: string {:?}, expected i32", "K".repeat(90_000)),
        );
        let message = &quoted.body.message;
        assert!(
            message.len() < MAX_MESSAGE_BYTES + 64 && message.starts_with("invalid type: string \"KKK"),
            "{message}"
        );
        assert!(message.contains(" [cut: ") && message.ends_with("KKK\", expected i32"), "{message}");
        let record = RecordTooLarge { key: "pipeline/a/p".into(), bytes: 2_000_000 };
        let too_large = ApiError::registry_write(record.into());
        assert_eq!((too_large.status(), too_large.body.code), (StatusCode::PAYLOAD_TOO_LARGE, "too_large"));
        assert!(too_large.body.message.contains("pipeline/a/p"), "{}", too_large.body.message);
        let down = ApiError::registry_write(anyhow::anyhow!("no broker"));
        assert_eq!(down.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
