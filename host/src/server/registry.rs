//! What a server knows: tenants (with their token hashes), their transforms' versions and their
//! pipelines' specs. Held in memory, written through to the registry topic ([`super::store`])
//! under the keys [`Registry::tenant_key`] and friends, rebuilt from it at start-up.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::config::Quotas;

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

/// Every tenant, by name.
#[derive(Debug, Default)]
pub struct Registry {
    /// The tenants.
    pub tenants: BTreeMap<String, TenantEntry>,
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

    /// Rebuilds the registry from the registry topic's last values, and writes each transform
    /// version's component to `components` (`<sha256>.wasm`) when missing there.
    ///
    /// # Errors
    /// A value that does not parse, or a component whose chunks are missing or do not hash to
    /// its name: the registry topic was written by something else, or damaged.
    pub fn load(values: &BTreeMap<String, Vec<u8>>, components: &Path) -> anyhow::Result<Self> {
        let mut registry = Registry::default();
        let parse_error =
            |key: &str, e: serde_json::Error| anyhow::anyhow!("registry record {key} does not parse: {e}");
        for (key, value) in values {
            if let Some(name) = key.strip_prefix("tenant/") {
                let tenant: Tenant = serde_json::from_slice(value).map_err(|e| parse_error(key, e))?;
                let entry = TenantEntry { tenant, transforms: BTreeMap::new(), pipelines: BTreeMap::new() };
                registry.tenants.insert(name.to_owned(), entry);
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
                        materialize(values, components, &version.sha256)?;
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

/// The path of the component with content `sha256`.
pub fn component_path(components: &Path, sha256: &str) -> std::path::PathBuf {
    components.join(format!("{sha256}.wasm"))
}

/// Writes blob `sha256` from its chunks in `values` to `components`, unless already there.
fn materialize(values: &BTreeMap<String, Vec<u8>>, components: &Path, sha256: &str) -> anyhow::Result<()> {
    let path = component_path(components, sha256);
    if path.exists() {
        return Ok(());
    }
    let prefix = format!("blob/{sha256}/");
    let bytes: Vec<u8> = values
        .range(prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&prefix))
        .flat_map(|(_, v)| v.clone())
        .collect();
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
