//! `weir serve`: multi-tenant hosting. Tenants upload transforms and deploy pipelines over an
//! HTTP JSON API; the server runs the pipelines with the same runner as `weir run`.
//!
//! - [`config`] reads `serve.toml`.
//! - [`auth`]: bearer tokens (admin; tenants' random tokens, stored as SHA-256).
//! - [`registry`] and [`store`]: tenants, transforms and pipeline specs, in memory and in a
//!   compacted Kafka topic (so a restart, or another node, sees them).
//! - [`spec`]: a tenant's pipeline spec → a pipeline configuration (server-owned keys, topic
//!   prefix, quotas).
//! - [`supervisor`]: one thread per running pipeline.
//! - [`api`]: the routes and their OpenAPI description; [`Server`] does the work behind them.
//! - [`scope`]: what a caller sees of `/`, `/metrics` and `/api/pipelines`: a tenant its own
//!   pipelines, the admin and metrics tokens every one.
//! - [`listen`]: the accept loop: TLS, the connection limit, header and body timeouts.
//! - [`principals`]: each tenant's own Kafka principal and ACLs (`[tenant_principals]`).
//! - [`purge`]: deleting a deleted tenant's topics and groups, a deleted pipeline's changelog
//!   and group.
//!
//! Data flows one way: request → [`api`] → [`Server`] → registry/store, supervisor → pipeline.

mod admit;
pub mod api;
pub mod auth;
pub mod config;
pub mod error;
mod follow;
pub mod listen;
pub mod names;
pub mod principals;
pub mod purge;
pub mod registry;
mod scope;
mod shares;
pub mod spec;
pub mod store;
pub mod supervisor;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::{Mutex, MutexGuard, Semaphore};
use utoipa::ToSchema;

pub use config::{Quotas, ServeConfig};
pub use error::ApiError;

use crate::metrics::{Metrics, NumberedLine, PipelineLog, PipelineReadiness, PipelineState, Readiness};
use crate::wasm::{EngineConfig, WasmEngine};
use registry::{
    Desired, Pipeline, Registry, Retired, Tenant, TenantEntry, Transform, TransformVersion, component_path,
};
use store::Store;
use supervisor::Supervisor;

/// Longest tenant name; tenant names are `a-z 0-9 -` (no dot: see [`spec::qualified_name`]).
pub const MAX_TENANT_LEN: usize = 63;
/// Longest transform or pipeline name; they are `A-Z a-z 0-9 _ -`.
pub const MAX_OBJECT_LEN: usize = 100;
/// Longest a change waits to be read back from the registry topic before the API answers 503.
pub const REGISTRY_WAIT: Duration = Duration::from_secs(10);
/// Longest a logs request waits for a new line.
pub const MAX_LOG_WAIT: Duration = Duration::from_secs(30);

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The holder of the admin token.
    Admin,
    /// The holder of tenant `0`'s token.
    Tenant(String),
    /// The holder of the metrics token (`metrics_token`): reads `/`, `/metrics` and
    /// `/api/pipelines` of every tenant, nothing else.
    Metrics,
}

/// `POST /v1/tenants`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewTenant {
    /// 1 to 63 of `a-z 0-9 -`.
    pub name: String,
    /// Every topic of the tenant's pipelines starts with it, e.g. `acme.`; 1 to 100 topic-name
    /// characters, not starting with `_`, and no prefix of another tenant's (nor the reverse),
    /// nor of the server's own topics ([`names`]).
    pub topic_prefix: String,
    /// The tenant's limits; each one missing is the server's `[tenant_defaults]` one.
    #[schema(value_type = Option<Quotas>)]
    pub quotas: Option<serde_json::Map<String, serde_json::Value>>,
}

/// A tenant as the admin sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct TenantView {
    /// Its name.
    pub name: String,
    /// Its topic prefix.
    pub topic_prefix: String,
    /// Its limits.
    pub quotas: Quotas,
    /// How many pipelines it has.
    pub pipelines: usize,
    /// Whether it has a token (false once revoked).
    pub token_active: bool,
}

/// A new tenant token: shown once, never again (only its hash is kept).
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenView {
    /// The tenant.
    pub tenant: String,
    /// `weir_<tenant>_<random>`: send as `Authorization: Bearer <token>`.
    pub token: String,
}

/// A pipeline as its tenant sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PipelineStatus {
    /// Its name.
    pub name: String,
    /// Whether it should run.
    pub desired: Desired,
    /// `starting`, `running`, `recovering`, `failed` or `stopped`.
    pub state: String,
    /// The spec as deployed, each transform's version pinned.
    #[schema(value_type = Object)]
    pub spec: toml::Table,
    /// The last failure's message, also after recovery healed it.
    pub last_error: Option<String>,
    /// Source records per second over the last second sampled.
    pub records_per_second: Option<f64>,
    /// The live figures: records, lag per partition, last checkpoint (docs/observability.md's
    /// pipeline object, without the history); `null` before the first start on this node.
    #[schema(value_type = Object)]
    pub metrics: Option<crate::metrics::PipelineView>,
}

/// A transform version just uploaded.
#[derive(Debug, Serialize, ToSchema)]
pub struct Uploaded {
    /// The transform.
    pub name: String,
    /// The new version.
    #[serde(flatten)]
    pub version: TransformVersion,
}

/// The server: its configuration, engine, registry and running pipelines.
pub struct Server {
    config: ServeConfig,
    engine: Arc<WasmEngine>,
    store: Store,
    registry: Mutex<Registry>,
    supervisor: Arc<Supervisor>,
    /// One compilation at a time: a hostile upload cannot take every core.
    compiling: Arc<Semaphore>,
    /// One lock per pipeline (qualified name), held through each deploy, start, stop and delete
    /// of it, including the wait for the old run to stop: two concurrent requests on one
    /// pipeline could otherwise each start a run. Other pipelines' requests do not wait.
    pipeline_locks: LockTable,
    components: PathBuf,
    /// Set when the server shuts down: waiting log requests answer at once.
    closing: std::sync::atomic::AtomicBool,
    /// The registry topic's offset up to which the registry holds what the follower read (the
    /// offset after the last record applied).
    applied: tokio::sync::watch::Sender<i64>,
    /// The follower's thread, woken when a request waits for its write to be read back.
    follower: std::sync::OnceLock<std::thread::Thread>,
}

impl Server {
    /// Opens the registry topic, rebuilds the registry from it (writing components to
    /// `data_dir`), and starts every pipeline whose desired state is running.
    ///
    /// # Errors
    /// When the engine cannot be built, the broker cannot be reached, the registry topic does
    /// not parse, or a tenant's topic prefix overlaps the server's own topics.
    pub async fn open(config: ServeConfig, metrics: Arc<Metrics>) -> anyhow::Result<Arc<Self>> {
        let engine = Arc::new(WasmEngine::new(&EngineConfig {
            cache_dir: Some(config.data_dir.join("compiled")),
            cache_max_bytes: config.compiled_cache_max_bytes,
        })?);
        let spool = config.data_dir.join("registry-chunks");
        let store::Opened { store, values, end } = Store::open(&config.cluster, &config.registry_topic, spool).await?;
        let components = config.data_dir.join("components");
        let registry = Registry::load(&values, &components, store.spool())?;
        names::check_tenants(
            &config,
            registry.tenants.values().map(|e| (e.tenant.name.as_str(), e.tenant.topic_prefix.as_str())),
        )?;
        if let Some(principals) = &config.tenant_principals {
            // Written again at every start: a tenant created before [tenant_principals] was set
            // gets its principal, and a new secret rotates every password.
            let tenants = registry.tenants.values().map(|e| e.tenant.clone()).collect();
            principals.provision(&config.cluster, tenants).await.map_err(|e| {
                anyhow::anyhow!("[tenant_principals]: cannot make the tenants' Kafka principals: {e:#}")
            })?;
        }
        let supervisor =
            Arc::new(Supervisor::new(engine.clone(), metrics, config.node_id.clone(), config.max_identical_failures));
        supervisor
            .metrics()
            .register(supervisor.pool_metrics())
            .map_err(|e| anyhow::anyhow!("cannot register the tenant metrics: {e}"))?;
        let server = Arc::new(Self {
            config,
            engine,
            store,
            registry: Mutex::new(registry),
            supervisor,
            compiling: Arc::new(Semaphore::new(1)),
            pipeline_locks: Default::default(),
            components,
            closing: Default::default(),
            applied: tokio::sync::watch::Sender::new(end),
            follower: std::sync::OnceLock::new(),
        });
        let registry = server.registry.lock().await;
        for entry in registry.tenants.values() {
            for pipeline in entry.pipelines.values().filter(|p| p.desired == Desired::Running) {
                match spec::resolve(pipeline.spec.clone(), entry, &pipeline.name, &pipeline.id, &server.config) {
                    Ok((_, run)) => server.supervisor.start(run, server.supervisor.pool(&entry.tenant))?,
                    Err(error) => tracing::error!(
                        tenant = %entry.tenant.name, pipeline = %pipeline.name, field = %error.field, error = %error.message,
                        "cannot resume the pipeline"
                    ),
                }
            }
        }
        drop(registry);
        let follower = follow::spawn(server.clone(), values, end)?;
        let _ = server.follower.set(follower.thread().clone());
        Ok(server)
    }

    /// The metrics of the node's pipelines (`/metrics`, `/api/pipelines`).
    pub fn metrics(&self) -> &Metrics {
        self.supervisor.metrics()
    }

    /// The server's configuration.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// Ends the requests waiting for log lines, so that a graceful shutdown of the HTTP server
    /// does not wait for them.
    pub fn closing(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stops every pipeline, each committing its open epoch.
    pub fn shutdown(&self) {
        self.supervisor.stop_all();
    }

    /// Who sends `authorization` (the `Authorization` header's value).
    ///
    /// # Errors
    /// [`ApiError::unauthorized`] for a missing, malformed, unknown or revoked token.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, ApiError> {
        let token = authorization.and_then(auth::bearer).ok_or_else(ApiError::unauthorized)?;
        if auth::matches(token, &auth::hash(&self.config.admin_token)) {
            return Ok(Caller::Admin);
        }
        if self.config.metrics_token_sha256.as_deref().is_some_and(|stored| auth::matches(token, stored)) {
            return Ok(Caller::Metrics);
        }
        let tenant = auth::claimed_tenant(token).ok_or_else(ApiError::unauthorized)?;
        let registry = self.registry.lock().await;
        let stored = registry.tenants.get(tenant).and_then(|e| e.tenant.token_sha256.as_deref());
        match stored {
            Some(stored) if auth::matches(token, stored) => Ok(Caller::Tenant(tenant.to_owned())),
            _ => Err(ApiError::unauthorized()),
        }
    }

    // --- tenants (admin) ---

    /// Creates a tenant and returns its first token.
    ///
    /// # Errors
    /// 400 naming `name` or `topic_prefix` (also when the prefix overlaps another tenant's, a
    /// deleted tenant's that stays blocked ([`Retired`]) or the server's `registry_topic`, or
    /// when topics exist under it on the broker); 409 when the tenant exists, or a deletion
    /// of a tenant of that name has not finished; 503 when the broker cannot be reached, or
    /// the registry topic cannot be written, or not read back within [`REGISTRY_WAIT`].
    ///
    /// Checked here against this node's registry, then decided by the registry topic: the
    /// tenant is written, and the answer waits until the follower has read it back and shows
    /// whether it came first ([`admit::admit`]): two nodes asked at the same moment for one
    /// name or overlapping prefixes answer one `201` between them.
    pub async fn create_tenant(&self, request: NewTenant) -> Result<TokenView, ApiError> {
        check_tenant_name(&request.name)?;
        check_prefix(&request.topic_prefix)?;
        if let Some(why) = names::server_topic_overlap(&self.config, &request.topic_prefix) {
            return Err(ApiError::invalid("topic_prefix", format!("`topic_prefix`: {why}")));
        }
        check_new_tenant(&*self.registry.lock().await, &request.name, &request.topic_prefix)?;
        // Outside the registry's lock (it asks the broker); the registry topic decides races.
        self.check_prefix_empty(&request.topic_prefix).await?;
        let registry = self.registry.lock().await;
        check_new_tenant(&registry, &request.name, &request.topic_prefix)?;
        let mut quotas = serde_json::to_value(self.config.tenant_defaults).map_err(ApiError::internal)?;
        if let (Some(defaults), Some(given)) = (quotas.as_object_mut(), request.quotas) {
            defaults.extend(given);
        }
        let quotas: Quotas =
            serde_json::from_value(quotas).map_err(|e| ApiError::invalid("quotas", format!("`quotas`: {e}")))?;
        quotas
            .check()
            .map_err(|(key, why)| ApiError::invalid(format!("quotas.{key}"), format!("`quotas.{key}`: {why}")))?;
        let (token, hash) = auth::new_token(&request.name).map_err(ApiError::internal)?;
        let tenant = Tenant {
            name: request.name.clone(),
            id: registry::new_id(),
            topic_prefix: request.topic_prefix,
            quotas,
            token_sha256: Some(hash),
        };
        let offset = self.put_tenant(&tenant).await?;
        drop(registry);
        match self.decided(&Registry::tenant_key(&tenant.name), offset).await {
            Ok(()) => {
                tracing::info!(tenant = %request.name, "tenant created");
                if let Some(principals) = &self.config.tenant_principals {
                    principals.provision(&self.config.cluster, vec![tenant]).await.map_err(|e| {
                        ApiError::unavailable(anyhow::anyhow!(
                            "tenant {} is created, but its Kafka principal is not: {e:#}; every node makes it again \
                             at its start, or delete the tenant and create it again",
                            request.name
                        ))
                    })?;
                }
                Ok(TokenView { tenant: request.name, token })
            }
            // Lost to a tenant written first through another node: tell a lost prefix from a
            // lost name, as one node alone does.
            Err(lost) if lost.status() == axum::http::StatusCode::CONFLICT => {
                let registry = self.registry.lock().await;
                check_not_retired(&registry, &tenant.name, &tenant.topic_prefix)?;
                let other = registry.tenants.values().find(|e| {
                    e.tenant.name != tenant.name && names::overlaps(&e.tenant.topic_prefix, &tenant.topic_prefix)
                });
                match other {
                    Some(other) => Err(ApiError::invalid(
                        "topic_prefix",
                        format!(
                            "`topic_prefix`: {:?} overlaps tenant {}'s prefix {:?}, created at the same moment through another node: each tenant's topics must be its own",
                            tenant.topic_prefix, other.tenant.name, other.tenant.topic_prefix
                        ),
                    )),
                    None => Err(ApiError::conflict(format!(
                        "tenant {:?} exists: created at the same moment through another node",
                        request.name
                    ))),
                }
            }
            Err(error) => Err(error),
        }
    }

    /// Waits until the follower has applied the registry topic past `offset` (a write of this
    /// node), at most [`REGISTRY_WAIT`].
    ///
    /// # Errors
    /// 503 when it has not by then.
    async fn read_back(&self, offset: i64) -> Result<(), ApiError> {
        let mut applied = self.applied.subscribe();
        if let Some(follower) = self.follower.get() {
            follower.unpark();
        }
        match tokio::time::timeout(REGISTRY_WAIT, applied.wait_for(|end| *end > offset)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(ApiError::unavailable(anyhow::anyhow!(
                "the registry topic {} was written but not read back within {} s, so whether the change won \
                 over another node's is unknown: look (GET) before trying again",
                self.config.registry_topic,
                REGISTRY_WAIT.as_secs()
            ))),
        }
    }

    /// Waits until the follower has read back this node's write of `key` at `offset` (without
    /// the registry's lock, which the follower needs to apply it; the registry then holds the
    /// topic's truth). The topic's order decides whether the write took effect
    /// ([`admit::admit`]); when it lost, writes the key's admitted value again, so that
    /// compaction keeps that and not the losing record.
    ///
    /// # Errors
    /// 409 with why when a change written first through another node made the write lose; 503
    /// as [`Server::read_back`], or when the registry topic cannot be written.
    async fn decided(&self, key: &str, offset: i64) -> Result<(), ApiError> {
        self.read_back(offset).await?;
        let Some(why) = self.store.refusal(offset) else { return Ok(()) };
        let registry = self.registry.lock().await;
        let admitted = registry.value_of(key).map_err(ApiError::internal)?;
        self.store.put(key, admitted.as_deref()).await.map_err(ApiError::registry_write)?;
        Err(ApiError::conflict(format!(
            "{why}: a change made through another node at the same moment came first; look (GET) before trying again"
        )))
    }

    /// Every tenant.
    pub async fn tenants(&self) -> Vec<TenantView> {
        let registry = self.registry.lock().await;
        registry
            .tenants
            .values()
            .map(|e| TenantView {
                name: e.tenant.name.clone(),
                topic_prefix: e.tenant.topic_prefix.clone(),
                quotas: e.tenant.quotas,
                pipelines: e.pipelines.len(),
                token_active: e.tenant.token_sha256.is_some(),
            })
            .collect()
    }

    /// Replaces a tenant's token (`rotate`: returns the new one) or removes it (`revoke`).
    ///
    /// # Errors
    /// 404 for an unknown tenant; 503 when the registry topic cannot be written.
    pub async fn replace_token(&self, tenant: &str, rotate: bool) -> Result<Option<TokenView>, ApiError> {
        let mut registry = self.registry.lock().await;
        let entry = registry.tenants.get_mut(tenant).ok_or_else(|| no_tenant(tenant))?;
        let mut updated = entry.tenant.clone();
        let token = if rotate {
            let (token, hash) = auth::new_token(tenant).map_err(ApiError::internal)?;
            updated.token_sha256 = Some(hash);
            Some(TokenView { tenant: tenant.to_owned(), token })
        } else {
            updated.token_sha256 = None;
            None
        };
        let offset = self.put_tenant(&updated).await?;
        entry.tenant = updated;
        drop(registry);
        self.decided(&Registry::tenant_key(tenant), offset).await?;
        tracing::info!(tenant, rotate, "tenant token replaced");
        Ok(token)
    }

    /// Deletes a tenant and its transforms, and then, as `on_tenant_delete` says, every topic
    /// under its prefix and every consumer group of its pipelines (answering once the broker
    /// no longer lists them), or nothing (the prefix is retired for good). Its prefix is blocked
    /// ([`Retired`]) before its record goes, and stays blocked until its topics and groups
    /// are gone: for good when they are kept. Called again for a tenant whose deletion failed
    /// half way, it finishes it.
    ///
    /// # Errors
    /// 404 for an unknown tenant; 409 while it has pipelines; 503 when the registry topic
    /// cannot be written, or the broker refuses or cannot be reached (the tenant is deleted,
    /// its prefix stays blocked; call again to finish).
    pub async fn delete_tenant(&self, tenant: &str) -> Result<(), ApiError> {
        let mut registry = self.registry.lock().await;
        let Some(entry) = registry.tenants.get(tenant) else {
            let unfinished = registry.retired.values().find(|r| r.tenant == tenant && !r.kept).cloned();
            drop(registry);
            return match unfinished {
                Some(retired) => self.purge_tenant(&retired).await,
                None => Err(no_tenant(tenant)),
            };
        };
        if !entry.pipelines.is_empty() {
            let names: Vec<&str> = entry.pipelines.keys().map(String::as_str).collect();
            return Err(ApiError::conflict(format!(
                "tenant {tenant} still has pipelines {names:?}: delete them first"
            )));
        }
        if let Some(principals) = &self.config.tenant_principals {
            // First: a failure leaves the tenant as it was, to be deleted again.
            principals.retire(&self.config.cluster, &entry.tenant).await.map_err(|e| {
                ApiError::unavailable(anyhow::anyhow!(
                    "tenant {tenant}'s Kafka principal {} cannot be deleted: {e:#}; delete the tenant again",
                    principals::principal(&entry.tenant)
                ))
            })?;
        }
        let retired = Retired {
            tenant: tenant.to_owned(),
            tenant_id: entry.tenant.id.clone(),
            topic_prefix: entry.tenant.topic_prefix.clone(),
            kept: self.config.on_tenant_delete == config::TenantDeletion::Retire,
        };
        let transforms: Vec<String> = entry.transforms.keys().cloned().collect();
        let owner = entry.tenant.clone();
        self.put_retired(&mut registry, &retired).await?;
        drop(registry);
        if let Err(error) = self.remove_tenant_records(tenant, transforms).await {
            // The deletion lost (a pipeline deployed through another node came first: the
            // prefix is the tenant's own again) or its outcome is unknown (the prefix stays
            // blocked until a DELETE again finishes): the tenant goes on, so its principal must
            // too.
            if error.status() == axum::http::StatusCode::CONFLICT {
                self.unblock(&retired.topic_prefix).await?;
            }
            if let Some(principals) = &self.config.tenant_principals
                && let Err(e) = principals.provision(&self.config.cluster, vec![owner]).await
            {
                let error = format!("{e:#}");
                tracing::error!(
                    tenant,
                    error,
                    "cannot make the tenant's Kafka principal again; every node makes it at its start"
                );
            }
            return Err(error);
        }
        self.supervisor.forget_pool(&retired.tenant_id);
        tracing::info!(tenant, kept = retired.kept, "tenant deleted");
        if retired.kept { Ok(()) } else { self.purge_tenant(&retired).await }
    }

    /// Deletes a tenant's transforms, then its record, each decided by the registry topic's
    /// order ([`Server::decided`]), then the components no one else uses. When a change through
    /// another node made the deletion lose, writes the transforms it deleted again: a refused
    /// deletion leaves the tenant as it was.
    async fn remove_tenant_records(&self, tenant: &str, transforms: Vec<String>) -> Result<(), ApiError> {
        let mut removed = Vec::new();
        let outcome = async {
            for name in &transforms {
                removed.extend(self.remove_transform_record(tenant, name).await?);
            }
            let key = Registry::tenant_key(tenant);
            let mut registry = self.registry.lock().await;
            let offset = self.store.put(&key, None).await.map_err(ApiError::registry_write)?;
            registry.tenants.remove(tenant);
            drop(registry);
            self.decided(&key, offset).await
        }
        .await;
        match outcome {
            Ok(()) => self.forget_unused(removed.into_iter().flat_map(|t| t.versions).collect()).await,
            Err(lost) if lost.status() == axum::http::StatusCode::CONFLICT => {
                for transform in &removed {
                    let value = serde_json::to_vec(transform).map_err(ApiError::internal)?;
                    let key = Registry::transform_key(tenant, &transform.name);
                    self.store.put(&key, Some(&value)).await.map_err(ApiError::registry_write)?;
                }
                Err(lost)
            }
            Err(error) => Err(error),
        }
    }

    /// Blocks `retired`'s prefix for new tenants: written to the registry topic before the
    /// tenant's record goes.
    async fn put_retired(&self, registry: &mut MutexGuard<'_, Registry>, retired: &Retired) -> Result<(), ApiError> {
        let value = serde_json::to_vec(retired).map_err(ApiError::internal)?;
        let key = Registry::retired_key(&retired.topic_prefix);
        self.store.put(&key, Some(&value)).await.map_err(ApiError::registry_write)?;
        registry.retired.insert(retired.topic_prefix.clone(), retired.clone());
        Ok(())
    }

    /// Unblocks `prefix` ([`Server::put_retired`]).
    async fn unblock(&self, prefix: &str) -> Result<(), ApiError> {
        let mut registry = self.registry.lock().await;
        self.store.put(&Registry::retired_key(prefix), None).await.map_err(ApiError::registry_write)?;
        registry.retired.remove(prefix);
        Ok(())
    }

    /// Deletes every topic under a deleted tenant's prefix and every group of its pipelines,
    /// then unblocks the prefix.
    async fn purge_tenant(&self, retired: &Retired) -> Result<(), ApiError> {
        let owner = Tenant {
            name: retired.tenant.clone(),
            id: retired.tenant_id.clone(),
            topic_prefix: retired.topic_prefix.clone(),
            quotas: Quotas::default(),
            token_sha256: None,
        };
        if let Err(error) =
            purge::tenant(&self.config.cluster, &retired.topic_prefix, &spec::group_prefix(&owner)).await
        {
            return Err(ApiError::unavailable(anyhow::anyhow!(
                "tenant {} is deleted, but not all its data yet: {error:#}; its topic prefix {:?} stays blocked \
                 until DELETE /v1/tenants/{} (again) finishes",
                retired.tenant,
                retired.topic_prefix,
                retired.tenant
            )));
        }
        self.unblock(&retired.topic_prefix).await?;
        tracing::info!(tenant = %retired.tenant, prefix = %retired.topic_prefix, "the deleted tenant's topics and groups are deleted");
        Ok(())
    }
    /// Refuses `prefix` while topics exist under it on the broker: a deleted tenant's kept
    /// (or not yet deleted) data, or topics the operator made; a new tenant would read them.
    async fn check_prefix_empty(&self, prefix: &str) -> Result<(), ApiError> {
        let cluster = self.config.cluster.clone();
        let owned = prefix.to_owned();
        let topics = tokio::task::spawn_blocking(move || purge::topics_under(&cluster, &owned))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::unavailable)?;
        if topics.is_empty() {
            return Ok(());
        }
        let shown: Vec<&str> = topics.iter().take(5).map(String::as_str).collect();
        Err(ApiError::invalid(
            "topic_prefix",
            format!(
                "`topic_prefix`: {} topics exist under {prefix:?} on the broker ({}{}): a new tenant would read them; \
                 delete them first, or give the tenant another prefix",
                topics.len(),
                shown.join(", "),
                if topics.len() > shown.len() { ", …" } else { "" }
            ),
        ))
    }

    async fn put_tenant(&self, tenant: &Tenant) -> Result<i64, ApiError> {
        let value = serde_json::to_vec(tenant).map_err(ApiError::internal)?;
        self.store.put(&Registry::tenant_key(&tenant.name), Some(&value)).await.map_err(ApiError::registry_write)
    }

    // --- transforms ---

    /// Validates and compiles `bytes` (as `weir transform check` does) within
    /// `compile_timeout_ms`, stores it content-addressed and adds it as the transform's next
    /// version.
    ///
    /// # Errors
    /// 400 for a bad name; 403 `quota` beyond `max_transform_versions` or `max_transform_mb`;
    /// 409 when another version was uploaded through another node at the same moment; 413
    /// above `max_upload_mb`; 422 for bytes that are not a Weir component or do not compile in
    /// time; 503 when the registry topic cannot be written.
    pub async fn upload(&self, tenant: &str, name: &str, bytes: Vec<u8>) -> Result<Uploaded, ApiError> {
        check_object_name("transform", name)?;
        if bytes.len() > self.config.max_upload_bytes {
            return Err(ApiError::too_large(format!(
                "the component is {} bytes, above the server's limit of {} (max_upload_mb)",
                bytes.len(),
                self.config.max_upload_bytes
            )));
        }
        crate::wasm::check_header(&bytes).map_err(|e| ApiError::unusable(format!("not a Weir transform: {e}")))?;
        // Checked before the compilation too, which a tenant over its quota must not get.
        within_storage(entry(&*self.registry.lock().await, tenant)?, bytes.len())?;
        let sha256 = auth::hash_bytes(&bytes);
        let description = self.compile(&sha256, &bytes).await?;
        let mut registry = self.registry.lock().await;
        let stored_before = registry.uses_blob(&sha256);
        within_storage(entry(&registry, tenant)?, bytes.len())?;
        let entry = registry.tenants.get_mut(tenant).ok_or_else(|| no_tenant(tenant))?;
        let mut transform = entry
            .transforms
            .get(name)
            .cloned()
            .unwrap_or_else(|| Transform { name: name.to_owned(), versions: vec![] });
        let version = TransformVersion {
            version: transform.versions.last().map_or(1, |v| v.version + 1),
            sha256: sha256.clone(),
            size: bytes.len() as u64,
            contract: description.contract.clone(),
            imports: description.imports.clone(),
            exports: description.exports.clone(),
            uploaded_at_ms: now_ms(),
        };
        transform.versions.push(version.clone());
        if !stored_before {
            self.store.put_blob(&sha256, &bytes).await.map_err(ApiError::registry_write)?;
        }
        let value = serde_json::to_vec(&transform).map_err(ApiError::internal)?;
        let key = Registry::transform_key(tenant, name);
        let offset = self.store.put(&key, Some(&value)).await.map_err(ApiError::registry_write)?;
        entry.transforms.insert(name.to_owned(), transform);
        drop(registry);
        if let Err(lost) = self.decided(&key, offset).await {
            self.forget_unused(vec![version]).await?;
            return Err(lost);
        }
        tracing::info!(tenant, transform = name, version = version.version, %sha256, "transform uploaded");
        Ok(Uploaded { name: name.to_owned(), version })
    }

    /// Writes the component to the content-addressed store and compiles it on a thread of its
    /// own, waiting at most `compile_timeout_ms` (the thread finishes anyway, holding the one
    /// compilation permit, so hostile uploads queue instead of piling up).
    async fn compile(&self, sha256: &str, bytes: &[u8]) -> Result<crate::wasm::ComponentDescription, ApiError> {
        let path = component_path(&self.components, sha256);
        let existed = path.exists();
        if !existed {
            registry::write_atomically(&path, bytes).map_err(ApiError::internal)?;
        }
        let permit = self.compiling.clone().acquire_owned().await.map_err(ApiError::internal)?;
        let (done, outcome) = tokio::sync::oneshot::channel();
        let (engine, at) = (self.engine.clone(), path.clone());
        std::thread::Builder::new()
            .name("weir-compile".into())
            .spawn(move || {
                let loaded = engine.load(&at).map(|component| component.description().clone());
                drop(permit);
                let _ = done.send(loaded);
            })
            .map_err(ApiError::internal)?;
        let timeout = self.config.compile_timeout;
        let refused = |message: String| {
            if !existed {
                let _ = std::fs::remove_file(&path);
            }
            ApiError::unusable(message)
        };
        match tokio::time::timeout(timeout, outcome).await {
            Ok(Ok(Ok(description))) => Ok(description),
            Ok(Ok(Err(error))) => {
                // The server's own path means nothing to the tenant.
                let message = error.to_string().replace(&path.display().to_string(), "the component");
                Err(refused(format!("not a usable Weir transform: {message}")))
            }
            Ok(Err(_)) => Err(ApiError::internal("the compilation thread ended without an answer")),
            Err(_) => Err(refused(format!(
                "the component did not compile within {} ms (the server's compile_timeout_ms)",
                timeout.as_millis()
            ))),
        }
    }

    /// The tenant's transforms.
    ///
    /// # Errors
    /// 404 for an unknown tenant.
    pub async fn transforms(&self, tenant: &str) -> Result<Vec<Transform>, ApiError> {
        let registry = self.registry.lock().await;
        Ok(entry(&registry, tenant)?.transforms.values().cloned().collect())
    }

    /// One transform with its versions.
    ///
    /// # Errors
    /// 404 for an unknown transform.
    pub async fn transform(&self, tenant: &str, name: &str) -> Result<Transform, ApiError> {
        let registry = self.registry.lock().await;
        entry(&registry, tenant)?.transforms.get(name).cloned().ok_or_else(|| no_transform(name))
    }

    /// Deletes a transform and every version.
    ///
    /// # Errors
    /// 404 for an unknown transform; 409 while a pipeline uses it; 503 when the registry topic
    /// cannot be written.
    pub async fn delete_transform(&self, tenant: &str, name: &str) -> Result<(), ApiError> {
        let registry = self.registry.lock().await;
        let entry = entry(&registry, tenant)?;
        entry.transforms.get(name).ok_or_else(|| no_transform(name))?;
        let users: Vec<&str> = entry
            .pipelines
            .values()
            .filter(|p| transform_names(&p.spec).any(|t| t == name))
            .map(|p| p.name.as_str())
            .collect();
        if !users.is_empty() {
            return Err(ApiError::conflict(format!(
                "transform {name:?} is used by pipelines {users:?}: delete them or deploy them with another transform first"
            )));
        }
        drop(registry);
        let removed = self.remove_transform_record(tenant, name).await?;
        self.forget_unused(removed.map(|t| t.versions).unwrap_or_default()).await
    }

    /// Removes a transform from the registry and the topic once the topic's order says that no
    /// pipeline deployed through another node took it first; returns it.
    async fn remove_transform_record(&self, tenant: &str, name: &str) -> Result<Option<Transform>, ApiError> {
        let key = Registry::transform_key(tenant, name);
        let mut registry = self.registry.lock().await;
        let offset = self.store.put(&key, None).await.map_err(ApiError::registry_write)?;
        let removed = registry.tenants.get_mut(tenant).and_then(|e| e.transforms.remove(name));
        drop(registry);
        self.decided(&key, offset).await?;
        tracing::info!(tenant, transform = name, "transform deleted");
        Ok(removed)
    }

    /// Deletes the components of `versions` that no transform uses (any more) from the topic
    /// and the content-addressed store.
    async fn forget_unused(&self, versions: Vec<TransformVersion>) -> Result<(), ApiError> {
        let registry = self.registry.lock().await;
        for version in versions {
            if !registry.uses_blob(&version.sha256) {
                let chunks = (version.size as usize).div_ceil(store::CHUNK_BYTES);
                for index in 0..chunks {
                    self.store
                        .put(&store::blob_key(&version.sha256, index), None)
                        .await
                        .map_err(ApiError::registry_write)?;
                }
                let _ = std::fs::remove_file(component_path(&self.components, &version.sha256));
            }
        }
        Ok(())
    }

    // --- pipelines ---

    /// Deploys (or redeploys: an upgrade, at a checkpoint boundary, keeping state) pipeline
    /// `name` from `body` (TOML, or JSON when `json`) and starts it. Returns its status and
    /// whether it is new.
    ///
    /// A new pipeline gets a new incarnation id; every deploy starts only once the registry
    /// topic shows that its record came first ([`Server::decided`]).
    ///
    /// # Errors
    /// 400 naming the field (see [`spec::resolve`]); 403 `quota` beyond `max_pipelines`; 409
    /// when another node's first deploy of the name, or a deletion of the tenant or of a
    /// transform version it pins, came first; 413 when its record would not fit the registry
    /// topic ([`store::RecordTooLarge`]); 503 when the registry topic cannot be written, or not
    /// read back within [`REGISTRY_WAIT`].
    pub async fn deploy(
        &self,
        tenant: &str,
        name: &str,
        body: &[u8],
        json: bool,
    ) -> Result<(PipelineStatus, bool), ApiError> {
        check_object_name("pipeline", name)?;
        let _turn = self.lock_pipeline(tenant, name).await;
        let spec = spec::parse_body(body, json)?;
        let mut registry = self.registry.lock().await;
        let entry = registry.tenants.get_mut(tenant).ok_or_else(|| no_tenant(tenant))?;
        let new = !entry.pipelines.contains_key(name);
        if new && entry.pipelines.len() >= entry.tenant.quotas.max_pipelines as usize {
            return Err(ApiError::quota(
                "max_pipelines",
                format!("tenant {tenant} has {} pipelines, its quota (max_pipelines)", entry.pipelines.len()),
            ));
        }
        // A redeploy keeps the incarnation (its offsets and state); a new pipeline gets one.
        let id = entry.pipelines.get(name).map_or_else(registry::new_id, |p| p.id.clone());
        let (stored, run) = spec::resolve(spec, entry, name, &id, &self.config)?;
        let pipeline = Pipeline { name: name.to_owned(), id: id.clone(), spec: stored, desired: Desired::Running };
        let offset = self.put_pipeline(tenant, &pipeline).await?;
        entry.pipelines.insert(name.to_owned(), pipeline);
        let pool = self.supervisor.pool(&entry.tenant);
        drop(registry);
        self.decided(&Registry::pipeline_key(tenant, name), offset).await?;
        self.start_blocking(run, pool).await?;
        tracing::info!(tenant, pipeline = name, new, "pipeline deployed");
        Ok((self.pipeline(tenant, name).await?, new))
    }

    /// Stops (`desired` stopped: commits the open epoch) or starts a deployed pipeline.
    ///
    /// # Errors
    /// 404 for an unknown pipeline; 400 when its spec no longer resolves; 503 when the registry
    /// topic cannot be written.
    pub async fn set_desired(&self, tenant: &str, name: &str, desired: Desired) -> Result<PipelineStatus, ApiError> {
        check_object_name("pipeline", name)?;
        let _turn = self.lock_pipeline(tenant, name).await;
        let mut registry = self.registry.lock().await;
        let entry = registry.tenants.get_mut(tenant).ok_or_else(|| no_tenant(tenant))?;
        let mut pipeline = entry.pipelines.get(name).cloned().ok_or_else(|| no_pipeline(name))?;
        let run = match desired {
            Desired::Running => Some(spec::resolve(pipeline.spec.clone(), entry, name, &pipeline.id, &self.config)?.1),
            Desired::Stopped => None,
        };
        pipeline.desired = desired;
        let offset = self.put_pipeline(tenant, &pipeline).await?;
        entry.pipelines.insert(name.to_owned(), pipeline);
        let pool = self.supervisor.pool(&entry.tenant);
        drop(registry);
        self.decided(&Registry::pipeline_key(tenant, name), offset).await?;
        match run {
            Some(run) => self.start_blocking(run, pool).await?,
            None => self.stop_blocking(spec::qualified_name(tenant, name), false).await?,
        }
        self.pipeline(tenant, name).await
    }

    /// Stops and deletes a pipeline, with what the server derived for it: its metrics, log
    /// lines and state directory on this node (other nodes forget theirs as they follow the
    /// registry), and, in the background, its changelog topic and consumer group (which waits
    /// for the group's members to leave: [`purge::GROUP_WAIT`]). Its input and output topics
    /// stay. A pipeline deployed again under the name is a new incarnation, starting from
    /// scratch.
    ///
    /// # Errors
    /// 404 for an unknown pipeline; 503 when the registry topic cannot be written.
    pub async fn delete_pipeline(&self, tenant: &str, name: &str) -> Result<(), ApiError> {
        check_object_name("pipeline", name)?;
        let _turn = self.lock_pipeline(tenant, name).await;
        let mut registry = self.registry.lock().await;
        let entry = registry.tenants.get_mut(tenant).ok_or_else(|| no_tenant(tenant))?;
        let pipeline = entry.pipelines.get(name).ok_or_else(|| no_pipeline(name))?;
        let derived = spec::derived(&entry.tenant, name, &pipeline.id, &self.config);
        self.store.put(&Registry::pipeline_key(tenant, name), None).await.map_err(ApiError::registry_write)?;
        entry.pipelines.remove(name);
        drop(registry);
        self.end_incarnation(spec::qualified_name(tenant, name), &derived).await?;
        let cluster = self.config.cluster.clone();
        let qualified = spec::qualified_name(tenant, name);
        tokio::spawn(async move {
            match purge::pipeline(&cluster, &derived.changelog, &derived.group_id).await {
                Ok(()) => {
                    tracing::info!(pipeline = %qualified, "the deleted pipeline's changelog and group are deleted")
                }
                Err(error) => tracing::warn!(
                    pipeline = %qualified, error = %format!("{error:#}"),
                    "cannot delete the deleted pipeline's changelog or group; the tenant's deletion will"
                ),
            }
        });
        tracing::info!(tenant, pipeline = name, "pipeline deleted");
        Ok(())
    }

    /// Stops this node's run of an ended pipeline incarnation and forgets it: its log lines,
    /// metrics and state directory `derived.state_dir`.
    async fn end_incarnation(&self, qualified: String, derived: &spec::Derived) -> Result<(), ApiError> {
        self.stop_blocking(qualified, true).await?;
        match std::fs::remove_dir_all(&derived.state_dir) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(error) => Err(ApiError::internal(format!(
                "cannot remove the deleted pipeline's state directory {}: {error}",
                derived.state_dir.display()
            ))),
        }
    }

    /// A pipeline's spec, state and live figures.
    ///
    /// # Errors
    /// 404 for an unknown pipeline.
    pub async fn pipeline(&self, tenant: &str, name: &str) -> Result<PipelineStatus, ApiError> {
        let registry = self.registry.lock().await;
        let entry = entry(&registry, tenant)?;
        let pipeline = entry.pipelines.get(name).ok_or_else(|| no_pipeline(name))?;
        Ok(self.status(&entry.tenant, pipeline))
    }

    /// The tenant's pipelines.
    ///
    /// # Errors
    /// 404 for an unknown tenant.
    pub async fn pipelines(&self, tenant: &str) -> Result<Vec<PipelineStatus>, ApiError> {
        let registry = self.registry.lock().await;
        let entry = entry(&registry, tenant)?;
        Ok(entry.pipelines.values().map(|p| self.status(&entry.tenant, p)).collect())
    }

    /// A pipeline's first `limit` log lines numbered above `after`; waits up to `wait` (at most
    /// [`MAX_LOG_WAIT`]) for one when there is none yet (a follow is a loop of these).
    ///
    /// # Errors
    /// 404 for an unknown pipeline.
    pub async fn logs(
        &self,
        tenant: &str,
        name: &str,
        after: u64,
        wait: Duration,
        limit: usize,
    ) -> Result<Vec<NumberedLine>, ApiError> {
        self.pipeline(tenant, name).await?;
        let qualified = spec::qualified_name(tenant, name);
        let until = tokio::time::Instant::now() + wait.min(MAX_LOG_WAIT);
        loop {
            let lines = PipelineLog::global().after(&qualified, after, limit);
            let closing = self.closing.load(std::sync::atomic::Ordering::Relaxed);
            if !lines.is_empty() || closing || tokio::time::Instant::now() >= until {
                return Ok(lines);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether this node's pipelines are ready (`GET /readyz`; the rules: [`Readiness`]): those
    /// whose desired state is running, each judged by its metrics; one that has not started on
    /// this node yet is `starting`. A pipeline its tenant stopped does not count, nor does a
    /// deleted one.
    pub async fn readiness(&self) -> Readiness {
        let registry = self.registry.lock().await;
        let live = self.supervisor.metrics().pipelines();
        let judged = registry
            .tenants
            .values()
            .flat_map(|entry| {
                entry
                    .pipelines
                    .values()
                    .filter(|p| p.desired == Desired::Running)
                    .map(|p| spec::qualified_name(&entry.tenant.name, &p.name))
            })
            .map(|name| match live.iter().find(|p| p.name() == name) {
                Some(pipeline) => pipeline.readiness(),
                None => PipelineReadiness::not_started(name),
            })
            .collect();
        Readiness::of(judged)
    }

    fn status(&self, tenant: &Tenant, pipeline: &Pipeline) -> PipelineStatus {
        let qualified = spec::qualified_name(&tenant.name, &pipeline.name);
        let live = self.supervisor.metrics().pipelines().into_iter().find(|p| p.name() == qualified).map(|p| p.view());
        let started = self.supervisor.is_started(&qualified);
        let state = match (&live, pipeline.desired, started) {
            (Some(view), _, _) if view.state == PipelineState::Failed => "failed",
            (_, Desired::Stopped, false) => "stopped",
            (Some(view), _, _) => view.state.name(),
            (None, _, _) => "starting",
        };
        let records_per_second = live.as_ref().and_then(|v| v.history.last()).map(|s| s.records_in_per_second);
        let last_error = live.as_ref().and_then(|v| v.last_error.as_ref()).map(|e| self.explain(tenant, &e.message));
        PipelineStatus {
            name: pipeline.name.clone(),
            desired: pipeline.desired,
            state: state.to_owned(),
            spec: pipeline.spec.clone(),
            last_error,
            records_per_second,
            metrics: live.map(|mut view| {
                view.history.clear();
                view
            }),
        }
    }

    /// `message` of a pipeline of `tenant`, and when the broker refused one of its resources
    /// (librdkafka's "Topic authorization failed", "Group authorization failed", "Transactional
    /// Id authorization failed") under `[tenant_principals]`, which principal it ran as, what
    /// that principal may use, and what to do.
    fn explain(&self, tenant: &Tenant, message: &str) -> String {
        let refused = message.to_ascii_lowercase().contains("authorization failed");
        match (refused, &self.config.tenant_principals) {
            (true, Some(_)) => format!(
                "{message}; weir serve runs this pipeline as Kafka principal {}, which may use only topics under \
                 {:?} and consumer groups and transactional ids under \"{}.\": name only topics of your prefix; if \
                 they are, the tenant's ACLs are missing: ask the operator (every node writes them again at its start)",
                principals::principal(tenant),
                tenant.topic_prefix,
                principals::user(tenant),
            ),
            _ => message.to_owned(),
        }
    }

    /// Waits for pipeline `name` of `tenant` to be free of other deploys, starts, stops and
    /// deletes, and holds it until the turn drops.
    async fn lock_pipeline(&self, tenant: &str, name: &str) -> Turn<'_> {
        self.pipeline_locks.turn(spec::qualified_name(tenant, name)).await
    }

    /// Writes a pipeline's record; returns its offset, for [`Server::decided`].
    async fn put_pipeline(&self, tenant: &str, pipeline: &Pipeline) -> Result<i64, ApiError> {
        let value = serde_json::to_vec(pipeline).map_err(ApiError::internal)?;
        self.store
            .put(&Registry::pipeline_key(tenant, &pipeline.name), Some(&value))
            .await
            .map_err(ApiError::registry_write)
    }

    /// Starts `run` (stopping its running predecessor first, which commits its open epoch).
    async fn start_blocking(
        &self,
        run: crate::config::PipelineConfig,
        pool: Arc<crate::wasm::ResourcePool>,
    ) -> Result<(), ApiError> {
        let supervisor = self.supervisor.clone();
        tokio::task::spawn_blocking(move || supervisor.start(run, pool))
            .await
            .map_err(ApiError::internal)?
            .map_err(ApiError::internal)
    }

    async fn stop_blocking(&self, qualified: String, remove: bool) -> Result<(), ApiError> {
        let supervisor = self.supervisor.clone();
        tokio::task::spawn_blocking(
            move || if remove { supervisor.remove(&qualified) } else { supervisor.stop(&qualified) },
        )
        .await
        .map_err(ApiError::internal)
    }
}

/// The per-pipeline locks: an entry lives only while a request holds or waits for its lock, so
/// requests on names that do not exist (or no longer) leave nothing behind.
#[derive(Default)]
struct LockTable(std::sync::Mutex<HashMap<String, Entry>>);

/// A pipeline's lock and how many requests hold or wait for it.
type Entry = (Arc<Mutex<()>>, usize);

impl LockTable {
    /// Waits for `key`'s lock and holds it until the turn drops (also when the wait is
    /// cancelled: the turn exists, counted, before the wait).
    async fn turn(&self, key: String) -> Turn<'_> {
        let lock = {
            let mut table = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let (lock, users) = table.entry(key.clone()).or_insert_with(|| (Arc::default(), 0));
            *users += 1;
            lock.clone()
        };
        let mut turn = Turn { guard: None, table: self, key };
        turn.guard = Some(lock.lock_owned().await);
        turn
    }

    /// How many pipelines have an entry.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }
}

/// A request's turn on one pipeline ([`LockTable::turn`]).
struct Turn<'a> {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    table: &'a LockTable,
    key: String,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut table = self.table.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, users)) = table.get_mut(&self.key) {
            *users -= 1;
            if *users == 0 {
                table.remove(&self.key);
            }
        }
    }
}

fn entry<'a>(registry: &'a Registry, tenant: &str) -> Result<&'a TenantEntry, ApiError> {
    registry.tenants.get(tenant).ok_or_else(|| no_tenant(tenant))
}

/// Whether the tenant may store one more transform version of `size` bytes: its
/// `max_transform_versions` and `max_transform_mb` quotas.
///
/// # Errors
/// 403 `quota` naming the quota, with what the tenant holds.
fn within_storage(entry: &TenantEntry, size: usize) -> Result<(), ApiError> {
    let versions = entry.transforms.values().flat_map(|t| &t.versions);
    let (count, bytes) = versions.fold((0u64, 0u64), |(count, bytes), v| (count + 1, bytes + v.size));
    let quotas = &entry.tenant.quotas;
    let tenant = &entry.tenant.name;
    if count >= u64::from(quotas.max_transform_versions) {
        return Err(ApiError::quota(
            "max_transform_versions",
            format!(
                "tenant {tenant} stores {count} transform versions, its quota (max_transform_versions): delete a transform it no longer uses"
            ),
        ));
    }
    if bytes + size as u64 > quotas.max_transform_mb << 20 {
        return Err(ApiError::quota(
            "max_transform_mb",
            format!(
                "tenant {tenant} stores {bytes} bytes of transforms; {size} more would pass its quota of {} MiB (max_transform_mb): delete a transform it no longer uses",
                quotas.max_transform_mb
            ),
        ));
    }
    Ok(())
}

/// The `transform` of each `[[transforms]]` table of a stored spec.
fn transform_names(spec: &toml::Table) -> impl Iterator<Item = &str> {
    spec.get("transforms")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("transform").and_then(toml::Value::as_str))
}

fn no_tenant(name: &str) -> ApiError {
    ApiError::not_found(format!("no tenant {name:?}"))
}

fn no_transform(name: &str) -> ApiError {
    ApiError::not_found(format!("no transform {name:?}: upload it with PUT /v1/transforms/{name}"))
}

fn no_pipeline(name: &str) -> ApiError {
    ApiError::not_found(format!("no pipeline {name:?}: deploy it with PUT /v1/pipelines/{name}"))
}

fn check_tenant_name(name: &str) -> Result<(), ApiError> {
    // A leading `-` would read as an option on the command line (`weir tenants rm -x`).
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && name.len() <= MAX_TENANT_LEN
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "name",
            format!("`name`: a tenant name is 1 to {MAX_TENANT_LEN} of a-z 0-9 -, not starting with -, got {name:?}"),
        ))
    }
}

fn check_object_name(kind: &str, name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && name.len() <= MAX_OBJECT_LEN
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "name",
            format!("a {kind} name is 1 to {MAX_OBJECT_LEN} of A-Z a-z 0-9 _ -, not starting with -, got {name:?}"),
        ))
    }
}

/// Refuses a new tenant `name` with `prefix` when the name exists, the prefix overlaps another
/// tenant's, or [`check_not_retired`] refuses it.
fn check_new_tenant(registry: &Registry, name: &str, prefix: &str) -> Result<(), ApiError> {
    if registry.tenants.contains_key(name) {
        return Err(ApiError::conflict(format!("tenant {name:?} exists")));
    }
    if let Some(other) = registry.tenants.values().find(|e| names::overlaps(&e.tenant.topic_prefix, prefix)) {
        return Err(ApiError::invalid(
            "topic_prefix",
            format!(
                "`topic_prefix`: {prefix:?} overlaps tenant {}'s prefix {:?}: each tenant's topics must be its own",
                other.tenant.name, other.tenant.topic_prefix
            ),
        ));
    }
    check_not_retired(registry, name, prefix)
}

/// Refuses a new tenant `name` with `prefix` while a deleted tenant blocks the prefix (or one
/// overlapping it), or a deletion of a tenant of that name has not finished.
fn check_not_retired(registry: &Registry, name: &str, prefix: &str) -> Result<(), ApiError> {
    if let Some(unfinished) = registry.retired.values().find(|r| r.tenant == name && !r.kept) {
        return Err(ApiError::conflict(format!(
            "the deletion of the former tenant {name} (prefix {:?}) has not finished: DELETE /v1/tenants/{name} \
             to finish it first",
            unfinished.topic_prefix
        )));
    }
    match registry.retired_overlap(prefix) {
        None => Ok(()),
        Some(retired) if retired.kept => Err(ApiError::invalid(
            "topic_prefix",
            format!(
                "`topic_prefix`: {prefix:?} overlaps {:?}, the prefix of deleted tenant {}, retired for good \
                 (on_tenant_delete = \"retire\" keeps its topics): give the tenant another prefix",
                retired.topic_prefix, retired.tenant
            ),
        )),
        Some(retired) => Err(ApiError::invalid(
            "topic_prefix",
            format!(
                "`topic_prefix`: {prefix:?} overlaps {:?}, the prefix of deleted tenant {}, whose topics are not all \
                 deleted yet: DELETE /v1/tenants/{} to finish, or give the tenant another prefix",
                retired.topic_prefix, retired.tenant, retired.tenant
            ),
        )),
    }
}

fn check_prefix(prefix: &str) -> Result<(), ApiError> {
    let ok = !prefix.is_empty()
        && prefix.len() <= 100
        && !prefix.starts_with('_')
        && prefix.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "topic_prefix",
            format!(
                "`topic_prefix`: 1 to 100 of A-Z a-z 0-9 . _ -, not starting with _ (Kafka's internal topics), got {prefix:?}"
            ),
        ))
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_lock_table_keeps_an_entry_only_while_a_request_holds_or_waits_for_it() {
        let table = LockTable::default();
        let first = table.turn("acme.a".into()).await;
        assert_eq!(table.len(), 1);
        // A second request on the same pipeline waits; cancelled, it leaves the entry to the first.
        let waiting = tokio::time::timeout(Duration::from_millis(20), table.turn("acme.a".into())).await;
        assert!(waiting.is_err(), "the second turn waits for the first");
        assert_eq!(table.len(), 1);
        let other = table.turn("acme.b".into()).await;
        assert_eq!(table.len(), 2);
        drop(first);
        drop(other);
        assert_eq!(table.len(), 0);
        for i in 0..100 {
            drop(table.turn(format!("acme.unknown-{i}")).await);
        }
        assert_eq!(table.len(), 0);
    }
}
