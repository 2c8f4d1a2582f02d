//! `serve.toml`: the settings of one `weir serve` node.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::config::{ClusterConfig, DEFAULT_DEADLINE, DEFAULT_MEMORY_LIMIT_BYTES, MAX_NAME_LEN};

/// The environment variable holding the admin token (or `admin_token_file`).
pub const ADMIN_TOKEN_ENV: &str = "WEIR_ADMIN_TOKEN";
/// Shortest admin token accepted, in bytes.
pub const MIN_ADMIN_TOKEN_LEN: usize = 16;
/// Default `max_upload_mb`: the largest component an upload may carry.
pub const DEFAULT_MAX_UPLOAD_MB: u64 = 32;
/// Default `compile_timeout_ms`: a cold Python component (20 MB) takes about 40 s here.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(120);
/// Default `max_identical_failures`.
pub const DEFAULT_MAX_IDENTICAL_FAILURES: u32 = 5;
/// Default registry topic.
pub const DEFAULT_REGISTRY_TOPIC: &str = "_weir-registry";
/// Default `max_connections`: connections the API keeps open at once.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Default `header_timeout_ms`: a TLS handshake or a request's head must arrive within it.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Default `body_timeout_ms`: a request's body must arrive within it (32 MiB at 1 MB/s).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// A parsed `serve.toml`, with defaults filled in and the admin token read.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// `listen`: the HTTP API's address, e.g. `127.0.0.1:7070` (port 0 picks a free one).
    pub listen: String,
    /// The cluster every pipeline and the registry use: `[kafka]` (`bootstrap.servers` and the
    /// client-security properties, secrets as references, as a pipeline file's `[kafka]`), or
    /// `brokers`, its shorthand for `bootstrap.servers` alone.
    pub cluster: ClusterConfig,
    /// The `[kafka]` table as written (references unresolved): what the server gives each
    /// pipeline spec, so that no resolved secret is ever stored in a spec or the registry.
    pub kafka: toml::Table,
    /// `data_dir`: components (`components/<sha256>.wasm`), compiled code and pipeline state
    /// (`state/<tenant>-<tenant id>/<pipeline>-<pipeline id>`); relative to the file's
    /// directory. Everything in it can be rebuilt from the registry topic and the changelogs.
    pub data_dir: PathBuf,
    /// `node_id`: this node's instance id in every pipeline's consumer group (`--instance` of
    /// `weir run`); default the host name. Keep it across restarts.
    pub node_id: Option<String>,
    /// `registry_topic`: the compacted topic holding tenants, token hashes, transforms and
    /// pipeline specs. Default `_weir-registry`.
    pub registry_topic: String,
    /// `max_upload_mb`: largest component accepted, in MiB. Default 32.
    pub max_upload_bytes: usize,
    /// The API listener: TLS (`tls_cert`, `tls_key`: PEM files, relative to the file),
    /// `max_connections`, `header_timeout_ms` and `body_timeout_ms`.
    pub transport: super::listen::Transport,
    /// `compile_timeout_ms`: an upload whose compilation takes longer is refused. Default 120000.
    pub compile_timeout: Duration,
    /// `compiled_cache_max_mb`: most compiled code kept in `data_dir/compiled`, in MiB; past
    /// it, the least recently used compilations are removed (recompiled when next needed).
    /// Default 2048.
    pub compiled_cache_max_bytes: u64,
    /// `max_identical_failures`: a pipeline that fails this many times in a row with the same
    /// error (after back-off; a run that commits a checkpoint before it fails starts the count
    /// again) goes to `failed` instead of retrying. Default 5.
    pub max_identical_failures: u32,
    /// `[tenant_defaults]`: quotas of a tenant created without its own.
    pub tenant_defaults: Quotas,
    /// The admin token: `$WEIR_ADMIN_TOKEN`, else the contents of `admin_token_file` (never
    /// in the file itself, nor on the command line).
    pub admin_token: String,
    /// `metrics_token`: the hex SHA-256 of a token that reads `/`, `/metrics` and
    /// `/api/pipelines` of every tenant (a Prometheus scraper's) and nothing else; `None`
    /// without one (the admin token reads them too). Written in the file as a reference,
    /// `${env:NAME}` or `${file:/path}`, at least [`MIN_ADMIN_TOKEN_LEN`] bytes; only its hash
    /// is kept.
    pub metrics_token_sha256: Option<String>,
    /// `[tenant_principals]`: each tenant's pipelines connect as the tenant's own SCRAM user,
    /// holding only ACLs on the tenant's prefixes ([`super::principals`]); `None` (the
    /// default): they connect as the server's principal.
    pub tenant_principals: Option<super::principals::TenantPrincipals>,
    /// `on_tenant_delete`: what a tenant's deletion does with its topics and consumer groups.
    /// Default [`TenantDeletion::Delete`].
    pub on_tenant_delete: TenantDeletion,
}

/// What happens to a deleted tenant's data (`on_tenant_delete` in `serve.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TenantDeletion {
    /// `"delete"`: every topic under its prefix (its changelogs and dead-letter topics too) and
    /// every consumer group of its pipelines is deleted; the deletion answers once the broker
    /// no longer lists them, and the prefix can be given to a new tenant after that.
    #[default]
    Delete,
    /// `"retire"`: they are kept, and the prefix (and every prefix overlapping it) is never
    /// given to a tenant again.
    Retire,
}

/// `[tenant_principals]` as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalsFile {
    mechanism: Option<String>,
    secret: String,
}

/// A tenant's limits, enforced when it deploys a pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Quotas {
    /// Pipelines the tenant may have (running or stopped). Default 10.
    #[serde(default = "default_max_pipelines")]
    pub max_pipelines: u32,
    /// Largest `memory_limit_mb` of one operator instance, in MiB; also the default of a
    /// transform that sets none (when below Weir's 64). Default 64.
    #[serde(default = "default_max_memory_mb")]
    pub max_memory_mb: u64,
    /// Largest `deadline_ms` of one guest call, in milliseconds; also the default of a transform
    /// that sets none (when below Weir's 1000). Default 1000.
    #[serde(default = "default_max_deadline_ms")]
    pub max_deadline_ms: u64,
    /// Most state one pipeline may hold on a node, in MiB (its `state.max_bytes`, which a spec
    /// may set lower). Default 1024.
    #[serde(default = "default_max_state_mb")]
    pub max_state_mb: u64,
    /// Memory all the tenant's pipelines on a node may hold together, in MiB: their operator
    /// instances' linear memory (a growth past it fails the call like `memory_limit_mb` does),
    /// uncommitted state, tables and records read ([`crate::wasm::ResourcePool`]). Default 512.
    #[serde(default = "default_max_total_memory_mb")]
    pub max_total_memory_mb: u64,
    /// Most CPU time the tenant's pipelines may use on a node (their threads' work, see
    /// [`crate::wasm::ResourcePool`]), in percent of one core (100 = one core); their work
    /// waits while the tenant is over it. Default: none, a fair share (`FairShares` in
    /// `server::shares`): the node's cores divided among the tenants using CPU on it, weighted
    /// by the part of their charge that bought work (failures cost tenfold), or what the node
    /// leaves idle, whichever is more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_percent: Option<u32>,
    /// Transform versions the tenant may store, all its transforms together (every node keeps
    /// each one on disk). Default 50.
    #[serde(default = "default_max_transform_versions")]
    pub max_transform_versions: u32,
    /// Bytes of all the tenant's stored transform versions together, in MiB (each version
    /// counted at its size, even when another holds the same bytes). Default 256.
    #[serde(default = "default_max_transform_mb")]
    pub max_transform_mb: u64,
    /// Most `runtime.workers` of one pipeline (threads running its transforms on a node); also
    /// its default. Default 2.
    #[serde(default = "default_max_workers")]
    pub max_workers: u32,
}

fn default_max_pipelines() -> u32 {
    10
}
fn default_max_memory_mb() -> u64 {
    (DEFAULT_MEMORY_LIMIT_BYTES >> 20) as u64
}
fn default_max_deadline_ms() -> u64 {
    DEFAULT_DEADLINE.as_millis() as u64
}
fn default_max_state_mb() -> u64 {
    1024
}
fn default_max_total_memory_mb() -> u64 {
    512
}
fn default_max_transform_versions() -> u32 {
    50
}
fn default_max_transform_mb() -> u64 {
    256
}
fn default_max_workers() -> u32 {
    2
}

impl Quotas {
    /// Checks each quota against its range: `max_pipelines` 1–1000, `max_memory_mb` 1–4096 (a
    /// transform's own `memory_limit_mb` range), `max_deadline_ms` 1–600000 (`deadline_ms`'s),
    /// `max_state_mb` 1–1048576 (1 TiB), `max_total_memory_mb` from `max_memory_mb` to 1048576,
    /// `cpu_percent` 1–100000, `max_transform_versions` 1–10000, `max_transform_mb` 1–1048576,
    /// `max_workers` 1–1024 (`runtime.workers`' range).
    ///
    /// # Errors
    /// The first quota out of range: its key and why.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let ranges: [(&'static str, u64, u64, u64); 9] = [
            ("max_pipelines", self.max_pipelines.into(), 1, 1000),
            ("max_memory_mb", self.max_memory_mb, 1, 4096),
            ("max_deadline_ms", self.max_deadline_ms, 1, 600_000),
            ("max_state_mb", self.max_state_mb, 1, 1 << 20),
            ("max_total_memory_mb", self.max_total_memory_mb, self.max_memory_mb, 1 << 20),
            ("cpu_percent", self.cpu_percent.map_or(1, u64::from), 1, 100_000),
            ("max_transform_versions", self.max_transform_versions.into(), 1, 10_000),
            ("max_transform_mb", self.max_transform_mb, 1, 1 << 20),
            ("max_workers", self.max_workers.into(), 1, crate::config::MAX_WORKERS as u64),
        ];
        match ranges.into_iter().find(|(_, value, low, high)| !(low..=high).contains(&value)) {
            Some((key, value, low, high)) => Err((key, format!("must be {low} to {high}, got {value}"))),
            None => Ok(()),
        }
    }
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            max_pipelines: default_max_pipelines(),
            max_memory_mb: default_max_memory_mb(),
            max_deadline_ms: default_max_deadline_ms(),
            max_state_mb: default_max_state_mb(),
            max_total_memory_mb: default_max_total_memory_mb(),
            cpu_percent: None,
            max_transform_versions: default_max_transform_versions(),
            max_transform_mb: default_max_transform_mb(),
            max_workers: default_max_workers(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeFile {
    listen: String,
    brokers: Option<String>,
    kafka: Option<toml::Table>,
    data_dir: PathBuf,
    node_id: Option<String>,
    registry_topic: Option<String>,
    admin_token_file: Option<PathBuf>,
    metrics_token: Option<String>,
    max_upload_mb: Option<u64>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    max_connections: Option<usize>,
    header_timeout_ms: Option<u64>,
    body_timeout_ms: Option<u64>,
    compile_timeout_ms: Option<u64>,
    compiled_cache_max_mb: Option<u64>,
    max_identical_failures: Option<u32>,
    #[serde(default)]
    on_tenant_delete: TenantDeletion,
    #[serde(default)]
    tenant_defaults: Quotas,
    tenant_principals: Option<PrincipalsFile>,
}

impl ServeConfig {
    /// Reads `serve.toml` at `path`; the admin token from `$WEIR_ADMIN_TOKEN` or
    /// `admin_token_file`.
    ///
    /// # Errors
    /// The file cannot be read, is not TOML of this shape (the message names the key), or no
    /// admin token of at least [`MIN_ADMIN_TOKEN_LEN`] bytes is given.
    pub fn from_file(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read the server configuration {}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::from_toml_str(&text, base, std::env::var(ADMIN_TOKEN_ENV).ok())
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    /// Parses `text` (relative paths against `base`), with `env_token` the value of
    /// `$WEIR_ADMIN_TOKEN`.
    ///
    /// # Errors
    /// As [`ServeConfig::from_file`].
    pub fn from_toml_str(text: &str, base: &Path, env_token: Option<String>) -> anyhow::Result<Self> {
        let deserializer = toml::Deserializer::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        let file: ServeFile = serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            anyhow::anyhow!("`{path}`: {}", e.into_inner().message())
        })?;
        let admin_token = match (env_token.filter(|t| !t.is_empty()), &file.admin_token_file) {
            (Some(token), _) => token,
            (None, Some(file_path)) => {
                let at = base.join(file_path);
                std::fs::read_to_string(&at)
                    .map_err(|e| anyhow::anyhow!("`admin_token_file`: cannot read {}: {e}", at.display()))?
                    .trim()
                    .to_owned()
            }
            (None, None) => anyhow::bail!("no admin token: set {ADMIN_TOKEN_ENV} or `admin_token_file`"),
        };
        if admin_token.len() < MIN_ADMIN_TOKEN_LEN {
            anyhow::bail!("the admin token is shorter than {MIN_ADMIN_TOKEN_LEN} bytes: use a long random one");
        }
        // Like every resolved secret: the log writes it as [REDACTED], a debug print of this
        // configuration included.
        crate::config::secret::remember(&admin_token);
        let metrics_token_sha256 = file.metrics_token.as_deref().map(metrics_token).transpose()?;
        if let Some(node_id) = &file.node_id {
            crate::pipeline::check_instance(node_id).map_err(|why| anyhow::anyhow!("`node_id`: {why}"))?;
        }
        let registry_topic = file.registry_topic.unwrap_or_else(|| DEFAULT_REGISTRY_TOPIC.into());
        if registry_topic.is_empty() || registry_topic.len() > MAX_NAME_LEN {
            anyhow::bail!("`registry_topic`: must be a Kafka topic name");
        }
        let max_upload_mb = file.max_upload_mb.unwrap_or(DEFAULT_MAX_UPLOAD_MB);
        if !(1..=1024).contains(&max_upload_mb) {
            anyhow::bail!("`max_upload_mb`: must be 1 to 1024, got {max_upload_mb}");
        }
        let tls = match (&file.tls_cert, &file.tls_key) {
            (Some(cert), Some(key)) => Some(super::listen::tls_config(&base.join(cert), &base.join(key))?),
            (None, None) => None,
            _ => anyhow::bail!("`tls_cert` and `tls_key` go together: give both (PEM files) or neither"),
        };
        let max_connections = file.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if !(1..=1_000_000).contains(&max_connections) {
            anyhow::bail!("`max_connections`: must be 1 to 1000000, got {max_connections}");
        }
        let timeout = |key: &str, value: Option<u64>, default: Duration| match value {
            None => Ok(default),
            Some(ms @ 1..=3_600_000) => Ok(Duration::from_millis(ms)),
            Some(ms) => Err(anyhow::anyhow!("`{key}`: must be 1 to 3600000 (an hour), got {ms}")),
        };
        let transport = super::listen::Transport {
            tls,
            max_connections,
            header_timeout: timeout("header_timeout_ms", file.header_timeout_ms, DEFAULT_HEADER_TIMEOUT)?,
            body_timeout: timeout("body_timeout_ms", file.body_timeout_ms, DEFAULT_BODY_TIMEOUT)?,
        };
        let compiled_cache_max_bytes = match file.compiled_cache_max_mb {
            Some(mb) => {
                crate::wasm::parse_cache_max_mb(mb).map_err(|why| anyhow::anyhow!("`compiled_cache_max_mb`: {why}"))?
            }
            None => crate::wasm::DEFAULT_CACHE_MAX_BYTES,
        };
        file.tenant_defaults.check().map_err(|(key, why)| anyhow::anyhow!("`tenant_defaults.{key}`: {why}"))?;
        let kafka = match (file.kafka, file.brokers) {
            (Some(_), Some(_)) => anyhow::bail!("`brokers`: [kafka] gives the cluster already; remove one of them"),
            (Some(kafka), None) => kafka,
            (None, Some(brokers)) => toml::Table::from_iter([("bootstrap.servers".to_owned(), brokers.into())]),
            (None, None) => {
                anyhow::bail!("missing `brokers` (or a [kafka] table): the cluster of the registry and pipelines")
            }
        };
        let cluster = ClusterConfig::from_table(kafka.clone(), "[kafka]")?;
        if cluster.bootstrap_servers().trim().is_empty() {
            anyhow::bail!("[kafka] has no `bootstrap.servers`: add it");
        }
        let tenant_principals = file.tenant_principals.map(|p| tenant_principals(p, &cluster)).transpose()?;
        Ok(Self {
            listen: file.listen,
            cluster,
            kafka,
            // Absolute: pipeline specs resolve their paths against it, and the working
            // directory is not theirs (`--config serve.toml` makes `base` empty).
            data_dir: std::path::absolute(base.join(&file.data_dir))
                .map_err(|e| anyhow::anyhow!("`data_dir`: {}: {e}", file.data_dir.display()))?,
            node_id: file.node_id,
            registry_topic,
            max_upload_bytes: (max_upload_mb as usize) << 20,
            transport,
            compile_timeout: file.compile_timeout_ms.map_or(DEFAULT_COMPILE_TIMEOUT, Duration::from_millis),
            compiled_cache_max_bytes,
            max_identical_failures: file.max_identical_failures.unwrap_or(DEFAULT_MAX_IDENTICAL_FAILURES).max(1),
            tenant_defaults: file.tenant_defaults,
            admin_token,
            metrics_token_sha256,
            tenant_principals,
            on_tenant_delete: file.on_tenant_delete,
        })
    }
}

/// `[tenant_principals]` checked: a SASL cluster, a SCRAM mechanism, a long secret reference.
fn tenant_principals(
    file: PrincipalsFile,
    cluster: &ClusterConfig,
) -> anyhow::Result<super::principals::TenantPrincipals> {
    use super::principals::MIN_SECRET_LEN;
    if !cluster.security_protocol().starts_with("sasl_") {
        anyhow::bail!(
            "`tenant_principals`: the cluster does not authenticate clients (security.protocol is {:?}): tenants' \
             principals need a SASL listener, `\"security.protocol\" = \"SASL_SSL\"` (or SASL_PLAINTEXT) in [kafka]; \
             or remove [tenant_principals]",
            cluster.security_protocol()
        );
    }
    let name = file.mechanism.as_deref().unwrap_or("SCRAM-SHA-512");
    let mechanism = crate::kafka::ScramMechanism::parse(name).ok_or_else(|| {
        anyhow::anyhow!("`tenant_principals.mechanism`: {name:?} is not SCRAM-SHA-512 or SCRAM-SHA-256")
    })?;
    if !file.secret.starts_with("${") {
        anyhow::bail!(
            "`tenant_principals.secret`: a secret must not be written in the file: write a reference, `${{env:NAME}}` or `${{file:/path}}`"
        );
    }
    let secret = crate::config::secret::resolve("tenant_principals.secret", &file.secret)
        .map_err(|e| anyhow::anyhow!("`tenant_principals.secret`: {e}"))?;
    let secret = secret.trim().to_owned();
    if secret.len() < MIN_SECRET_LEN {
        anyhow::bail!(
            "`tenant_principals.secret`: the secret is shorter than {MIN_SECRET_LEN} bytes: use a long random one"
        );
    }
    crate::config::secret::remember(&secret);
    Ok(super::principals::TenantPrincipals { mechanism, secret })
}

/// The hex SHA-256 of the token `metrics_token` refers to.
fn metrics_token(reference: &str) -> anyhow::Result<String> {
    if !reference.starts_with("${") {
        anyhow::bail!(
            "`metrics_token`: a token must not be written in the file: write a reference, `${{env:NAME}}` or `${{file:/path}}`"
        );
    }
    let token = crate::config::secret::resolve("metrics_token", reference)
        .map_err(|e| anyhow::anyhow!("`metrics_token`: {e}"))?;
    let token = token.trim();
    if token.len() < MIN_ADMIN_TOKEN_LEN {
        anyhow::bail!("`metrics_token`: the token is shorter than {MIN_ADMIN_TOKEN_LEN} bytes: use a long random one");
    }
    crate::config::secret::remember(token);
    Ok(super::auth::hash(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "listen = \"127.0.0.1:0\"\nbrokers = \"b:9092\"\ndata_dir = \"data\"\n";

    #[test]
    fn defaults_and_relative_data_dir() {
        let config = ServeConfig::from_toml_str(MINIMAL, Path::new("/srv"), Some("0123456789abcdef".into())).unwrap();
        assert_eq!(config.data_dir, Path::new("/srv/data"));
        assert_eq!(config.max_upload_bytes, 32 << 20);
        assert_eq!(config.compiled_cache_max_bytes, 2 << 30);
        assert_eq!(config.tenant_defaults, Quotas::default());
        assert_eq!(config.registry_topic, DEFAULT_REGISTRY_TOPIC);
        assert!(config.transport.tls.is_none());
        assert_eq!(config.transport.max_connections, DEFAULT_MAX_CONNECTIONS);
        assert_eq!(config.transport.header_timeout, DEFAULT_HEADER_TIMEOUT);
        assert_eq!(config.transport.body_timeout, DEFAULT_BODY_TIMEOUT);
        assert_eq!(config.on_tenant_delete, TenantDeletion::Delete);
        let retire = format!("{MINIMAL}on_tenant_delete = \"retire\"\n");
        let config = ServeConfig::from_toml_str(&retire, Path::new("/srv"), Some("0123456789abcdef".into())).unwrap();
        assert_eq!(config.on_tenant_delete, TenantDeletion::Retire);
        let bad = format!("{MINIMAL}on_tenant_delete = \"keep\"\n");
        let error = ServeConfig::from_toml_str(&bad, Path::new("/srv"), Some("0123456789abcdef".into())).unwrap_err();
        assert!(error.to_string().contains("on_tenant_delete"), "{error}");
        // `weir serve --config serve.toml` in its own directory: the base is empty.
        let config = ServeConfig::from_toml_str(MINIMAL, Path::new(""), Some("0123456789abcdef".into())).unwrap();
        assert_eq!(config.data_dir, std::env::current_dir().unwrap().join("data"));
    }

    #[test]
    fn the_admin_token_is_redacted_from_the_log() {
        let token = "admin-token-never-logged-0123456789";
        let config = ServeConfig::from_toml_str(MINIMAL, Path::new("/srv"), Some(token.into())).unwrap();
        let line = format!("{config:?}");
        assert!(line.contains(token), "the configuration holds the token itself");
        let logged = crate::config::secret::redact(&line);
        assert!(!logged.contains(token), "{logged}");
    }

    #[test]
    fn refuses_missing_or_short_tokens_and_unknown_keys() {
        let error = ServeConfig::from_toml_str(MINIMAL, Path::new("/"), None).unwrap_err();
        assert!(error.to_string().contains(ADMIN_TOKEN_ENV), "{error}");
        let error = ServeConfig::from_toml_str(MINIMAL, Path::new("/"), Some("short".into())).unwrap_err();
        assert!(error.to_string().contains("shorter"), "{error}");
        let text = format!("{MINIMAL}[tenant_defaults]\nmax_pipelinez = 3\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), Some("0123456789abcdef".into())).unwrap_err();
        assert!(error.to_string().contains("tenant_defaults.max_pipelinez"), "{error}");
    }

    #[test]
    fn the_cluster_is_brokers_or_a_kafka_table_with_references_kept_unresolved_for_specs() {
        let token = || Some("0123456789abcdef".into());
        let secured = "listen = \"127.0.0.1:0\"\ndata_dir = \"data\"\n[kafka]\n\"bootstrap.servers\" = \"k:9093\"\n\
                       \"security.protocol\" = \"SASL_SSL\"\n\"sasl.password\" = \"${env:WEIR_SERVE_TEST_PASSWORD}\"\n";
        let error = ServeConfig::from_toml_str(secured, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("sasl.password") && error.contains("WEIR_SERVE_TEST_PASSWORD"), "{error}");
        // SAFETY: this test's own variable; no other test reads or writes it.
        unsafe { std::env::set_var("WEIR_SERVE_TEST_PASSWORD", "serve-test-secret") };
        let config = ServeConfig::from_toml_str(secured, Path::new("/"), token()).unwrap();
        assert_eq!(config.cluster.to_string(), "k:9093 (SASL_SSL)");
        assert_eq!(config.kafka["sasl.password"].as_str(), Some("${env:WEIR_SERVE_TEST_PASSWORD}"), "kept as written");
        assert!(!format!("{config:?}").contains("serve-test-secret"));
        let both = format!("{MINIMAL}[kafka]\n\"bootstrap.servers\" = \"k:9093\"\n");
        let error = ServeConfig::from_toml_str(&both, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("`brokers`"), "{error}");
        let neither = MINIMAL.replace("brokers = \"b:9092\"\n", "");
        let error = ServeConfig::from_toml_str(&neither, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("[kafka]"), "{error}");
    }

    #[test]
    fn tls_needs_both_files_and_readable_ones_and_timeouts_are_bounded() {
        let token = || Some("0123456789abcdef".into());
        let text = format!("{MINIMAL}tls_cert = \"cert.pem\"\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("go together"), "{error}");
        let text = format!("{MINIMAL}tls_cert = \"cert.pem\"\ntls_key = \"key.pem\"\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/nowhere"), token()).unwrap_err().to_string();
        assert!(error.contains("`tls_cert`") && error.contains("/nowhere/cert.pem"), "{error}");
        let text = format!("{MINIMAL}header_timeout_ms = 0\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("`header_timeout_ms`"), "{error}");
        let text = format!("{MINIMAL}max_connections = 4\nbody_timeout_ms = 2500\n");
        let config = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap();
        assert_eq!((config.transport.max_connections, config.transport.body_timeout), (4, Duration::from_millis(2500)));
    }

    #[test]
    fn the_metrics_token_is_a_reference_kept_as_its_hash() {
        let token = || Some("0123456789abcdef".into());
        let text = format!("{MINIMAL}metrics_token = \"scrape-token-0123456789\"\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("`metrics_token`") && error.contains("${env:NAME}"), "{error}");
        let text = format!("{MINIMAL}metrics_token = \"${{env:WEIR_SERVE_TEST_METRICS_TOKEN}}\"\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("WEIR_SERVE_TEST_METRICS_TOKEN"), "{error}");
        // SAFETY: this test's own variable; no other test reads or writes it.
        unsafe { std::env::set_var("WEIR_SERVE_TEST_METRICS_TOKEN", "scrape-token-0123456789\n") };
        let config = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap();
        assert_eq!(config.metrics_token_sha256, Some(crate::server::auth::hash("scrape-token-0123456789")));
        assert!(!format!("{config:?}").contains("scrape-token-0123456789"));
        assert_eq!(ServeConfig::from_toml_str(MINIMAL, Path::new("/"), token()).unwrap().metrics_token_sha256, None);
        // SAFETY: as above.
        unsafe { std::env::set_var("WEIR_SERVE_TEST_METRICS_TOKEN", "short") };
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err().to_string();
        assert!(error.contains("shorter"), "{error}");
    }

    #[test]
    fn tenant_principals_need_a_sasl_cluster_a_scram_mechanism_and_a_long_secret_reference() {
        let token = || Some("0123456789abcdef".into());
        let sasl = "listen = \"127.0.0.1:0\"\ndata_dir = \"data\"\n[kafka]\n\"bootstrap.servers\" = \"k:9093\"\n\
                    \"security.protocol\" = \"SASL_SSL\"\n";
        let with = |cluster: &str, table: &str| format!("{cluster}[tenant_principals]\n{table}");
        // SAFETY: this test's own variable; no other test reads or writes it.
        unsafe { std::env::set_var("WEIR_SERVE_TEST_PRINCIPALS", "principals-secret-0123456789abcdef") };
        let reference = "secret = \"${env:WEIR_SERVE_TEST_PRINCIPALS}\"\n";
        let config = ServeConfig::from_toml_str(&with(sasl, reference), Path::new("/"), token()).unwrap();
        let principals = config.tenant_principals.expect("set");
        assert_eq!(principals.mechanism, crate::kafka::ScramMechanism::Sha512);
        assert!(ServeConfig::from_toml_str(sasl, Path::new("/"), token()).unwrap().tenant_principals.is_none());
        let refused = [
            (with(MINIMAL, reference), "SASL_SSL"),
            (with(sasl, "secret = \"principals-secret-0123456789abcdef\"\n"), "must not be written in the file"),
            (with(sasl, &format!("{reference}mechanism = \"PLAIN\"\n")), "`tenant_principals.mechanism`"),
            (with(sasl, "secret = \"${env:WEIR_SERVE_TEST_NO_SUCH_VARIABLE}\"\n"), "WEIR_SERVE_TEST_NO_SUCH_VARIABLE"),
        ];
        for (text, wanted) in refused {
            let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err().to_string();
            assert!(error.contains("tenant_principals") && error.contains(wanted), "{wanted}: {error}");
        }
    }

    #[test]
    fn bounds_the_compiled_cache() {
        let token = || Some("0123456789abcdef".into());
        let text = format!("{MINIMAL}compiled_cache_max_mb = 512\n");
        let config = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap();
        assert_eq!(config.compiled_cache_max_bytes, 512 << 20);
        let text = format!("{MINIMAL}compiled_cache_max_mb = 0\n");
        let error = ServeConfig::from_toml_str(&text, Path::new("/"), token()).unwrap_err();
        assert!(error.to_string().contains("`compiled_cache_max_mb`: must be 1 to"), "{error}");
    }
}
