//! The HTTP API under `/v1` (JSON; errors `{code, message, field?}`), its OpenAPI description at
//! `GET /v1/openapi.json` (generated from these handlers by utoipa), the dashboard at `/`, its
//! data at `/api/pipelines`, the metrics at `/metrics`, liveness at `/healthz` and the node's
//! readiness at `/readyz`.
//!
//! Every route but the description and the probes checks the bearer token, before it reads any
//! of the request's body: a missing or wrong one gets 401, a tenant on an admin route 403,
//! another tenant's object 404 (tenants only ever see their own). `/api/pipelines` and
//! `/metrics` show a tenant its own pipelines, their series and log lines, the admin and metrics
//! tokens every tenant's ([`super::scope`]); the metrics token reads nothing else. `/` answers
//! the page (static, no data) with 401 without a token: the page asks for one and sends it to
//! `api/pipelines`. `/healthz` and `/readyz` take no token (probes send none); `/readyz` names
//! the pipelines only to the admin token, and answers anyone else with counts by reason.
//!
//! Bodies are bounded per route: a component upload by `max_upload_mb`, a pipeline spec or a
//! new tenant by [`MAX_SPEC_BYTES`]; the other routes read none.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde::Deserialize;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{IntoParams, Modify, OpenApi};

use super::error::ErrorBody;
use super::registry::{Desired, Transform};
use super::scope::Scope;
use super::{ApiError, Caller, NewTenant, PipelineStatus, Server, TenantView, TokenView, Uploaded};
use crate::metrics::{NumberedLine, PipelineReadiness, Readiness, Reason};

/// Largest pipeline spec (TOML or JSON) or new-tenant request, in bytes (413 above).
pub const MAX_SPEC_BYTES: usize = 1 << 20;

/// The routes over `server` (see the module's documentation).
pub fn router(server: Arc<Server>) -> Router {
    let v1 = Router::new()
        .route("/tenants", get(list_tenants).post(create_tenant))
        .route("/tenants/{tenant}", axum::routing::delete(delete_tenant))
        .route("/tenants/{tenant}/token", post(rotate_token).delete(revoke_token))
        .route("/transforms", get(list_transforms))
        // Uploads read their body themselves, capped at max_upload_mb (`read_capped`).
        .route(
            "/transforms/{name}",
            put(upload_transform).layer(DefaultBodyLimit::disable()).get(show_transform).delete(delete_transform),
        )
        .route("/pipelines", get(list_pipelines))
        .route("/pipelines/{name}", put(deploy_pipeline).get(show_pipeline).delete(delete_pipeline))
        .route("/pipelines/{name}/stop", post(stop_pipeline))
        .route("/pipelines/{name}/start", post(start_pipeline))
        .route("/pipelines/{name}/logs", get(pipeline_logs))
        // Before any extractor of the routes above reads the body.
        .route_layer(middleware::from_fn_with_state(server.clone(), authenticate))
        .route("/openapi.json", get(openapi))
        .fallback(|| async { ApiError::not_found("no such route: see GET /v1/openapi.json") })
        .layer(DefaultBodyLimit::max(MAX_SPEC_BYTES))
        .with_state(server.clone());
    let observed = Router::new()
        .route("/api/pipelines", get(dashboard_data))
        .route("/metrics", get(prometheus))
        .route_layer(middleware::from_fn_with_state(server.clone(), authenticate))
        .route("/", get(dashboard))
        .route("/readyz", get(readyz))
        .route("/healthz", get(crate::http::routes::healthz))
        .with_state(server);
    Router::new().nest("/v1", v1).merge(observed)
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Weir hosting API", description = "Tenants upload transforms (WebAssembly components) and deploy exactly-once Kafka pipelines."),
    paths(
        create_tenant, list_tenants, delete_tenant, rotate_token, revoke_token,
        upload_transform, list_transforms, show_transform, delete_transform,
        deploy_pipeline, list_pipelines, show_pipeline, stop_pipeline, start_pipeline, delete_pipeline, pipeline_logs,
        dashboard, dashboard_data, prometheus, crate::http::routes::healthz, readyz,
    ),
    components(schemas(
        ErrorBody, NewTenant, TenantView, TokenView, Uploaded, Transform, PipelineStatus, NumberedLine, Desired,
        Readiness, PipelineReadiness, Reason,
    )),
    modifiers(&BearerAuth),
    security(("bearer" = [])),
)]
struct ApiDoc;

/// Declares the bearer scheme every route but the description and the probes uses: a tenant's
/// token, the admin token, or (for `/`, `/api/pipelines` and `/metrics` only) the metrics token.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The OpenAPI 3.1 description of this API.
pub fn openapi_json() -> String {
    ApiDoc::openapi().to_pretty_json().expect("this is a bug in Weir: the OpenAPI description does not serialise")
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], openapi_json()).into_response()
}

type Result<T> = std::result::Result<T, ApiError>;

/// Readiness of this node: 200 when every pipeline that should run here (desired `running`;
/// one its tenant stopped does not count) is running with its partitions assigned and restored,
/// reaches the broker, and has committed its work within 3 checkpoint intervals (at least
/// 10 s); 503 otherwise. No token needed: the answer then holds the verdict, the first reason
/// and the counts by reason; with the admin token it also lists each pipeline
/// (`<tenant>.<pipeline>`) with its reason and detail.
#[utoipa::path(get, path = "/readyz", tag = "probes", security(()),
    responses((status = 200, body = Readiness, description = "every pipeline is ready"),
        (status = 503, body = Readiness, description = "a pipeline is not ready; `reason` says why")))]
async fn readyz(State(server): State<Arc<Server>>, headers: HeaderMap) -> Readiness {
    let readiness = server.readiness().await;
    match caller(&server, &headers).await {
        Ok(Caller::Admin) => readiness,
        _ => readiness.without_pipelines(),
    }
}

async fn caller(server: &Server, headers: &HeaderMap) -> Result<Caller> {
    server.authenticate(headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())).await
}

/// Checks the token of a `/v1` route before its handler (and so before anything reads the
/// body): 401 at once, the body unread (the server then closes the connection); else the
/// [`Caller`] goes to the handler as an extension.
async fn authenticate(State(server): State<Arc<Server>>, mut request: Request, next: Next) -> Response {
    match caller(&server, request.headers()).await {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(error) => error.into_response(),
    }
}

fn admin(caller: Caller) -> Result<()> {
    match caller {
        Caller::Admin => Ok(()),
        Caller::Tenant(_) | Caller::Metrics => Err(ApiError::forbidden("this route needs the admin token")),
    }
}

fn tenant(caller: Caller) -> Result<String> {
    match caller {
        Caller::Tenant(tenant) => Ok(tenant),
        Caller::Admin | Caller::Metrics => {
            Err(ApiError::forbidden("this route needs a tenant's token: transforms and pipelines belong to tenants"))
        }
    }
}

/// The dashboard: a static page that draws what `api/pipelines` answers. Without a valid token
/// the answer is 401 with the same page, which asks for a token (kept in the tab's
/// `sessionStorage`) and sends it as `Authorization: Bearer`.
#[utoipa::path(get, path = "/", tag = "dashboard",
    responses((status = 200, description = "the dashboard page", body = String, content_type = "text/html"),
        (status = 401, description = "the dashboard page, which asks for a token; no data", body = String, content_type = "text/html")))]
async fn dashboard(State(server): State<Arc<Server>>, headers: HeaderMap) -> Response {
    let status = if caller(&server, &headers).await.is_ok() { StatusCode::OK } else { StatusCode::UNAUTHORIZED };
    (status, Html(crate::http::routes::DASHBOARD)).into_response()
}

/// The dashboard's data (docs/observability.md): the caller's pipelines with their live
/// figures, and their recent log lines (guest lines included). A tenant's token sees its own
/// pipelines; the admin and metrics tokens every tenant's and the process's log.
#[utoipa::path(get, path = "/api/pipelines", tag = "dashboard",
    responses((status = 200, description = "`{pipelines, log}`", body = Object), (status = 401, body = ErrorBody)))]
async fn dashboard_data(State(server): State<Arc<Server>>, Extension(caller): Extension<Caller>) -> Response {
    crate::http::routes::dashboard_json(Scope::of(caller).dashboard(server.metrics()))
}

/// Prometheus metrics, text format 0.0.4, every pipeline's series with a `tenant` label. A
/// tenant's token sees the series of its own tenant; the admin and metrics tokens every one.
#[utoipa::path(get, path = "/metrics", tag = "dashboard",
    responses((status = 200, description = "the series the caller sees", body = String, content_type = "text/plain"),
        (status = 401, body = ErrorBody)))]
async fn prometheus(State(server): State<Arc<Server>>, Extension(caller): Extension<Caller>) -> Response {
    crate::http::routes::prometheus_text(Scope::of(caller).prometheus(server.metrics()))
}

/// Create a tenant; answers its token, once. Refused (400, `topic_prefix`) when the prefix
/// overlaps another tenant's, a deleted tenant's still blocked one, or the server's topics, or
/// when topics exist under it on the broker; 409 when the name exists or a deletion of a tenant
/// of that name has not finished. With `[tenant_principals]`, also its Kafka principal (503 when
/// the cluster refuses it: the tenant exists, and every node makes the principal again at its
/// start).
#[utoipa::path(post, path = "/v1/tenants", request_body = NewTenant,
    responses((status = 201, body = TokenView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn create_tenant(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<TokenView>)> {
    admin(caller)?;
    let body = small_body(body, "the request")?;
    let request: NewTenant = serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(&body))
        .map_err(|e| ApiError::invalid(e.path().to_string(), format!("`{}`: {}", e.path(), e.inner())))?;
    Ok((StatusCode::CREATED, Json(server.create_tenant(request).await?)))
}

/// A body of at most [`MAX_SPEC_BYTES`] (`what` names it in the 413), or why it could not be
/// read (too large, or not all there within `body_timeout_ms`).
fn small_body(body: std::result::Result<Bytes, BytesRejection>, what: &str) -> Result<Bytes> {
    body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => {
            ApiError::too_large(format!("{what} is above the server's limit of {MAX_SPEC_BYTES} bytes (1 MiB)"))
        }
        _ => ApiError::invalid("", rejection.body_text()),
    })
}

/// List tenants.
#[utoipa::path(get, path = "/v1/tenants", responses((status = 200, body = [TenantView]), (status = 401, body = ErrorBody)))]
async fn list_tenants(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<TenantView>>> {
    admin(caller)?;
    Ok(Json(server.tenants().await))
}

/// Delete a tenant (refused while it has pipelines), its transforms and, as the server's
/// `on_tenant_delete` says, every topic under its prefix and its consumer groups (`delete`,
/// answering once the broker lists none of them) or nothing (`retire`: the prefix is never
/// given again). 503 when its data could not all be deleted: the prefix stays blocked, and the
/// same call again finishes the deletion. With `[tenant_principals]`, first its Kafka
/// principal's ACLs and SCRAM credential (503 when the cluster refuses: the tenant stays).
#[utoipa::path(delete, path = "/v1/tenants/{tenant}", params(("tenant" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn delete_tenant(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    admin(caller)?;
    server.delete_tenant(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Replace a tenant's token; answers the new one, once. The old one stops working at once.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/token", params(("tenant" = String, Path)),
    responses((status = 200, body = TokenView), (status = 404, body = ErrorBody)))]
async fn rotate_token(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<TokenView>> {
    admin(caller)?;
    let token = server.replace_token(&name, true).await?;
    token.map(Json).ok_or_else(|| ApiError::internal("no token was made"))
}

/// Revoke a tenant's token; its pipelines keep running.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/token", params(("tenant" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
async fn revoke_token(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    admin(caller)?;
    server.replace_token(&name, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Upload a component (the body's bytes) as the transform's next version: validated and
/// compiled before the answer.
#[utoipa::path(put, path = "/v1/transforms/{name}", params(("name" = String, Path)),
    request_body(content = Vec<u8>, content_type = "application/wasm"),
    responses((status = 201, body = Uploaded), (status = 403, body = ErrorBody, description = "beyond `max_transform_versions` or `max_transform_mb`"), (status = 409, body = ErrorBody, description = "another version was uploaded through another node at the same moment"), (status = 413, body = ErrorBody), (status = 422, body = ErrorBody)))]
async fn upload_transform(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: Body,
) -> Result<(StatusCode, Json<Uploaded>)> {
    let tenant = tenant(caller)?;
    let bytes = read_capped(body, server.config().max_upload_bytes).await?;
    Ok((StatusCode::CREATED, Json(server.upload(&tenant, &name, bytes).await?)))
}

/// Reads a body of at most `cap` bytes. A longer one is read to its end (up to 4 × `cap` more)
/// and dropped before the 413 answer, so that the client, still sending, reads the answer
/// instead of a broken pipe.
async fn read_capped(body: Body, cap: usize) -> Result<Vec<u8>> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    let mut total = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::invalid("", format!("the body could not be read: {e}")))?;
        total += chunk.len();
        if total <= cap {
            bytes.extend_from_slice(&chunk);
        } else if total > cap.saturating_mul(5) {
            break;
        }
    }
    if total > cap {
        return Err(ApiError::too_large(format!(
            "the component is {}{total} bytes, above the server's limit of {cap} (max_upload_mb)",
            if total > cap.saturating_mul(5) { "over " } else { "" }
        )));
    }
    Ok(bytes)
}

/// List the tenant's transforms.
#[utoipa::path(get, path = "/v1/transforms", responses((status = 200, body = [Transform])))]
async fn list_transforms(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<Transform>>> {
    let tenant = tenant(caller)?;
    Ok(Json(server.transforms(&tenant).await?))
}

/// Show a transform: each version's hash, size, contract, imports and exports.
#[utoipa::path(get, path = "/v1/transforms/{name}", params(("name" = String, Path)),
    responses((status = 200, body = Transform), (status = 404, body = ErrorBody)))]
async fn show_transform(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<Transform>> {
    let tenant = tenant(caller)?;
    Ok(Json(server.transform(&tenant, &name).await?))
}

/// Delete a transform and its versions (refused while a pipeline uses it).
#[utoipa::path(delete, path = "/v1/transforms/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn delete_transform(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    let tenant = tenant(caller)?;
    server.delete_transform(&tenant, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deploy a pipeline (TOML, or JSON with `Content-Type: application/json`) and start it; a
/// redeploy upgrades it at a checkpoint boundary, keeping its state. A new pipeline (also one
/// deleted before) starts from scratch; 409 when another node deployed a new pipeline of the
/// name at the same moment and came first.
#[utoipa::path(put, path = "/v1/pipelines/{name}", params(("name" = String, Path)),
    request_body(content = String, content_type = "application/toml"),
    responses((status = 201, body = PipelineStatus), (status = 200, body = PipelineStatus), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody), (status = 409, body = ErrorBody, description = "its transform or tenant was deleted through another node at the same moment"), (status = 413, body = ErrorBody, description = "the body is above 1 MiB, or the spec as a registry record above 1,000,000 bytes"), (status = 503, body = ErrorBody)))]
async fn deploy_pipeline(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: std::result::Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<PipelineStatus>)> {
    let tenant = tenant(caller)?;
    let body = small_body(body, "the pipeline spec")?;
    let json = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("json"));
    let (status, new) = server.deploy(&tenant, &name, &body, json).await?;
    Ok((if new { StatusCode::CREATED } else { StatusCode::OK }, Json(status)))
}

/// List the tenant's pipelines with their state.
#[utoipa::path(get, path = "/v1/pipelines", responses((status = 200, body = [PipelineStatus])))]
async fn list_pipelines(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Vec<PipelineStatus>>> {
    let tenant = tenant(caller)?;
    Ok(Json(server.pipelines(&tenant).await?))
}

/// Show a pipeline: spec, state, last error, records/s, lag per partition, last checkpoint.
#[utoipa::path(get, path = "/v1/pipelines/{name}", params(("name" = String, Path)),
    responses((status = 200, body = PipelineStatus), (status = 404, body = ErrorBody)))]
async fn show_pipeline(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>> {
    let tenant = tenant(caller)?;
    Ok(Json(server.pipeline(&tenant, &name).await?))
}

/// Stop a pipeline after committing its open epoch; it stays stopped across restarts.
#[utoipa::path(post, path = "/v1/pipelines/{name}/stop", params(("name" = String, Path)),
    responses((status = 200, body = PipelineStatus), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn stop_pipeline(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>> {
    let tenant = tenant(caller)?;
    Ok(Json(server.set_desired(&tenant, &name, Desired::Stopped).await?))
}

/// Start a stopped (or failed) pipeline.
#[utoipa::path(post, path = "/v1/pipelines/{name}/start", params(("name" = String, Path)),
    responses((status = 200, body = PipelineStatus), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn start_pipeline(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<PipelineStatus>> {
    let tenant = tenant(caller)?;
    Ok(Json(server.set_desired(&tenant, &name, Desired::Running).await?))
}

/// Stop and delete a pipeline, with its changelog topic, consumer group, state and metrics (its
/// source and sink topics stay). Deployed again under its name, it starts from scratch.
#[utoipa::path(delete, path = "/v1/pipelines/{name}", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = ErrorBody)))]
async fn delete_pipeline(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode> {
    let tenant = tenant(caller)?;
    server.delete_pipeline(&tenant, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Which log lines to answer.
#[derive(Debug, Deserialize, IntoParams)]
struct LogQuery {
    /// Lines numbered above this (0: every kept line).
    #[serde(default)]
    after: u64,
    /// Wait up to this many milliseconds (at most 30000) for a line when none is there yet.
    #[serde(default)]
    wait_ms: u64,
    /// Answer at most this many lines (1 to 1000, the default): ask again after the last `seq`
    /// for the next ones.
    #[serde(default = "default_log_limit")]
    limit: usize,
}

fn default_log_limit() -> usize {
    1000
}

/// The pipeline's own log lines (host and guest), the last 1000 kept (at most 1 MiB, each line
/// at most 8 KiB), `limit` at a time; page and follow by asking again with `after` = the last
/// `seq` (and a `wait_ms` to follow).
#[utoipa::path(get, path = "/v1/pipelines/{name}/logs", params(("name" = String, Path), LogQuery),
    responses((status = 200, body = [NumberedLine]), (status = 404, body = ErrorBody)))]
async fn pipeline_logs(
    State(server): State<Arc<Server>>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    query: std::result::Result<Query<LogQuery>, QueryRejection>,
) -> Result<Json<Vec<NumberedLine>>> {
    let tenant = tenant(caller)?;
    let Query(query) = query.map_err(|rejection| {
        ApiError::invalid(
            "",
            format!("{}: `after`, `wait_ms` and `limit` are whole numbers of 0 or more", rejection.body_text()),
        )
    })?;
    if !(1..=1000).contains(&query.limit) {
        return Err(ApiError::invalid("limit", format!("`limit`: must be 1 to 1000, got {}", query.limit)));
    }
    let wait = Duration::from_millis(query.wait_ms);
    Ok(Json(server.logs(&tenant, &name, query.after, wait, query.limit).await?))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_description_names_every_route() {
        let description: serde_json::Value = serde_json::from_str(&super::openapi_json()).unwrap();
        let paths = description["paths"].as_object().unwrap();
        for path in [
            "/v1/tenants",
            "/v1/transforms/{name}",
            "/v1/pipelines/{name}/logs",
            "/v1/tenants/{tenant}/token",
            "/healthz",
            "/readyz",
            "/",
            "/api/pipelines",
            "/metrics",
        ] {
            assert!(paths.contains_key(path), "{path} missing from {:?}", paths.keys());
        }
        for guarded in ["/", "/api/pipelines", "/metrics", "/v1/pipelines"] {
            let security = &description["paths"][guarded]["get"]["security"];
            assert!(security.is_null(), "{guarded} takes the document's bearer requirement, not {security}");
        }
        assert_eq!(description["security"], serde_json::json!([{ "bearer": [] }]));
        assert!(description["components"]["securitySchemes"]["bearer"].is_object());
        for probe in ["/healthz", "/readyz"] {
            assert_eq!(
                description["paths"][probe]["get"]["security"],
                serde_json::json!([{}]),
                "{probe} takes no token"
            );
        }
    }
}
