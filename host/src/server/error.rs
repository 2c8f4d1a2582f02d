//! [`ApiError`]: every refusal of the API, as JSON `{code, message, field?}`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::spec::SpecError;

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
        Self { status, body: ErrorBody { code, message: message.into(), field: None } }
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
        error.body.field = Some(field.into()).filter(|f: &String| !f.is_empty());
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
        let message =
            if error.field.is_empty() { error.message } else { format!("`{}`: {}", error.field, error.message) };
        Self::invalid(error.field, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}
