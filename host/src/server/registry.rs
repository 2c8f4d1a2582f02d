//! What a server knows: tenants (with their token hashes), their transforms' versions and their
//! pipelines' specs. Held in memory, written through to the registry topic ([`super::store`])
//! under the keys [`Registry::tenant_key`] and friends, rebuilt from it at start-up.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::config::Quotas;
use super::store::Spool;

/// A tenant. `token_sha256` is never shown by the API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tenant {
    /// 1 to 63 of `a-z 0-9 -`.
    pub name: String,
    /// 12 random hex digits fixed at creation: part of the Kafka names derived for its
    /// pipelines (group and transactional ids, changelog), so that a tenant deleted and created
    /// again under the same name never inherits the old one's offsets or state.
    pub id: String,
    /// Every topic the tenant's pipelines name starts with it, e.g. `acme.`.
    pub topic_prefix: String,
    /// The tenant's limits.
    pub quotas: Quotas,
    /// Hex SHA-256 of the tenant's token; `None` once revoked.
    pub token_sha256: Option<String>,
}

/// One uploaded version of a transform.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TransformVersion {
    /// 1, 2, … in upload order.
    pub version: u32,
    /// Hex SHA-256 of the component's bytes: its name in the content-addressed store.
    pub sha256: String,
    /// The component's size in bytes.
    pub size: u64,
    /// The contract version it was built against, e.g. `weir:transform@0.2.0`.
    pub contract: String,
    /// Imported names with their kind.
    pub imports: Vec<String>,
    /// Exported names with their kind.
    pub exports: Vec<String>,
    /// Upload time, in milliseconds since the Unix epoch.
    pub uploaded_at_ms: u64,
}

/// A transform: its versions, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Transform {
    /// Its name, unique per tenant.
    pub name: String,
    /// Every version, oldest first.
    pub versions: Vec<TransformVersion>,
}

impl Transform {
    /// Version `version`, or the latest with `None`.
    pub fn version(&self, version: Option<u32>) -> Option<&TransformVersion> {
        match version {
            Some(v) => self.versions.iter().find(|t| t.version == v),
            None => self.versions.last(),
        }
    }
}

/// Whether a pipeline should run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Desired {
    /// Run it (also after a restart of the server).
    Running,
    /// Keep it stopped.
    Stopped,
}

/// A deployed pipeline: the tenant's spec with every transform's version pinned.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pipeline {
    /// Its name, unique per tenant.
    pub name: String,
    /// 12 random hex digits fixed at its first deploy and kept by redeploys, stops and starts:
    /// part of the names derived for it (group and transactional ids, changelog, state
    /// directory), so that a pipeline deleted and deployed again under its name starts from
    /// scratch instead of resuming the old one's offsets and state.
    pub id: String,
    /// The spec as deployed (pipeline-file keys, without those the server owns).
    pub spec: toml::Table,
    /// Whether it should run.
    pub desired: Desired,
}

/// One tenant's objects.
#[derive(Debug, Clone)]
pub struct TenantEntry {
    /// The tenant.
    pub tenant: Tenant,
    /// Its transforms, by name.
    pub transforms: BTreeMap<String, Transform>,
    /// Its pipelines, by name.
    pub pipelines: BTreeMap<String, Pipeline>,
}

/// The topic prefix of a deleted tenant that no new tenant may have (nor one overlapping it):
/// for good when the operator keeps deleted tenants' data (`on_tenant_delete = "retire"`),
/// else until everything under it is deleted. Written before the tenant's record is removed,
/// so that a deletion that fails half way leaves the prefix blocked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retired {
    /// The deleted tenant's name.
    pub tenant: String,
    /// The deleted tenant's id (its group ids start with `weir-<tenant>-<id>.`).
    pub tenant_id: String,
    /// Its topic prefix.
    pub topic_prefix: String,
    /// `true`: its topics and groups are kept and the prefix is retired for good; `false`: they
    /// are being deleted (or their deletion failed: `DELETE /v1/tenants/<tenant>` again).
    pub kept: bool,
}

/// Every tenant, by name.
#[derive(Debug, Default)]
pub struct Registry {
    /// The tenants.
    pub tenants: BTreeMap<String, TenantEntry>,
    /// The prefixes of deleted tenants that stay blocked, by prefix.
    pub retired: BTreeMap<String, Retired>,
}

impl Registry {
    /// The registry key of tenant `name`.
    pub fn tenant_key(name: &str) -> String {
        format!("tenant/{name}")
    }

    /// The registry key of a tenant's transform.
    pub fn transform_key(tenant: &str, name: &str) -> String {
        format!("transform/{tenant}/{name}")
    }

    /// The registry key of a tenant's pipeline.
    pub fn pipeline_key(tenant: &str, name: &str) -> String {
        format!("pipeline/{tenant}/{name}")
    }

    /// The registry key of a deleted tenant's blocked topic prefix ([`Retired`]).
    pub fn retired_key(prefix: &str) -> String {
        format!("retired/{prefix}")
    }

    /// The blocked prefix of a deleted tenant that `prefix` overlaps, if any.
    pub fn retired_overlap(&self, prefix: &str) -> Option<&Retired> {
        self.retired.values().find(|r| super::names::overlaps(&r.topic_prefix, prefix))
    }

    /// Rebuilds the registry from the registry topic's last values, and writes each transform
    /// version's component to `components` (`<sha256>.wasm`) when missing there, from its
    /// chunks in `spool`.
    ///
    /// # Errors
    /// A value that does not parse, or a component whose chunks are missing or do not hash to
    /// its name: the registry topic was written by something else, or damaged.
    pub fn load(values: &BTreeMap<String, Vec<u8>>, components: &Path, spool: &Spool) -> anyhow::Result<Self> {
        let mut registry = Registry::default();
        let parse_error =
            |key: &str, e: serde_json::Error| anyhow::anyhow!("registry record {key} does not parse: {e}");
        for (key, value) in values {
            if let Some(name) = key.strip_prefix("tenant/") {
                let tenant: Tenant = serde_json::from_slice(value).map_err(|e| parse_error(key, e))?;
                let entry = TenantEntry { tenant, transforms: BTreeMap::new(), pipelines: BTreeMap::new() };
                registry.tenants.insert(name.to_owned(), entry);
            } else if let Some(prefix) = key.strip_prefix("retired/") {
                let retired: Retired = serde_json::from_slice(value).map_err(|e| parse_error(key, e))?;
                registry.retired.insert(prefix.to_owned(), retired);
            }
        }
        for (key, value) in values {
            let mut parts = key.splitn(3, '/');
            let (Some(kind), Some(tenant), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
                continue;
            };
            let Some(entry) = registry.tenants.get_mut(tenant) else { continue };
            match kind {
                "transform" => {
                    let transform: Transform = serde_json::from_slice(value).map_err(|e| parse_error(key, e))?;
                    for version in &transform.versions {
                        materialize(values, components, spool, &version.sha256)?;
                    }
                    entry.transforms.insert(name.to_owned(), transform);
                }
                "pipeline" => {
                    let pipeline: Pipeline = serde_json::from_slice(value).map_err(|e| parse_error(key, e))?;
                    entry.pipelines.insert(name.to_owned(), pipeline);
                }
                _ => {}
            }
        }
        Ok(registry)
    }

    /// The value the registry topic holds for `key` (`tenant/…`, `transform/…/…` or
    /// `pipeline/…/…`) as this registry has it; `None` for none.
    ///
    /// # Errors
    /// Only when JSON cannot be written, which does not happen for these types.
    pub fn value_of(&self, key: &str) -> serde_json::Result<Option<Vec<u8>>> {
        let mut parts = key.splitn(3, '/');
        let (kind, tenant, name) = (parts.next(), parts.next().and_then(|t| self.tenants.get(t)), parts.next());
        match (kind, tenant, name) {
            (Some("tenant"), Some(entry), None) => serde_json::to_vec(&entry.tenant).map(Some),
            (Some("transform"), Some(entry), Some(name)) => {
                entry.transforms.get(name).map(serde_json::to_vec).transpose()
            }
            (Some("pipeline"), Some(entry), Some(name)) => {
                entry.pipelines.get(name).map(serde_json::to_vec).transpose()
            }
            _ => Ok(None),
        }
    }

    /// Whether any tenant's transform has a version with this content.
    pub fn uses_blob(&self, sha256: &str) -> bool {
        self.tenants
            .values()
            .flat_map(|entry| entry.transforms.values())
            .any(|t| t.versions.iter().any(|v| v.sha256 == sha256))
    }
}

/// 12 random hex digits: the id of a new tenant or pipeline incarnation.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
}

/// The path of the component with content `sha256`.
pub fn component_path(components: &Path, sha256: &str) -> std::path::PathBuf {
    components.join(format!("{sha256}.wasm"))
}

/// Writes blob `sha256` from its chunks (keys in `values`, bytes in `spool`) to `components`,
/// unless already there.
fn materialize(
    values: &BTreeMap<String, Vec<u8>>,
    components: &Path,
    spool: &Spool,
    sha256: &str,
) -> anyhow::Result<()> {
    let path = component_path(components, sha256);
    if path.exists() {
        return Ok(());
    }
    let prefix = format!("blob/{sha256}/");
    let mut bytes = Vec::new();
    for (key, _) in values.range(prefix.clone()..).take_while(|(k, _)| k.starts_with(&prefix)) {
        bytes.extend(spool.get(key).unwrap_or_default());
    }
    if super::auth::hash_bytes(&bytes) != sha256 {
        anyhow::bail!("the registry topic's chunks of component {sha256} are missing or damaged");
    }
    write_atomically(&path, &bytes)
}

/// Writes `bytes` to `path` through a temporary file, so that a crash never leaves half a file.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
    let temporary = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
    std::fs::write(&temporary, bytes)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}
