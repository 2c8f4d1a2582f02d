//! Kafka's authorizer as the second wall between tenants (`[tenant_principals]` of
//! `serve.toml`): each tenant's pipelines connect to the cluster as the tenant's own SCRAM user,
//! which holds only `PREFIXED` ACLs on the tenant's topic prefix and on its consumer-group and
//! transactional-id prefix, so that a spec slipping past Weir's own checks is still refused by
//! the broker. The server's own principal (`[kafka]`) keeps the registry and creates, and on
//! tenant deletion deletes, these users and ACLs ([`crate::kafka::acl`]).
//!
//! A tenant's password is derived, never stored: HMAC-SHA256 of the user name keyed by the
//! configured secret, in hex. Every node derives the same one, and a new secret (with a restart
//! of every node, each of which writes every tenant's credential again) rotates them all.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::registry::Tenant;
use crate::config::ClusterConfig;
use crate::kafka::{AclOperation, AclResource, Admin, PrefixedAcl, ScramMechanism};

/// Shortest `[tenant_principals] secret` accepted, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// `[tenant_principals]`: how tenants' principals are made.
#[derive(Debug, Clone)]
pub struct TenantPrincipals {
    /// `mechanism`: `SCRAM-SHA-512` (default) or `SCRAM-SHA-256`; the cluster's SASL listener
    /// must enable it.
    pub mechanism: ScramMechanism,
    /// `secret`: the key tenants' passwords are derived from; written as a reference
    /// (`${env:NAME}` or `${file:/path}`), at least [`MIN_SECRET_LEN`] bytes, the same on every
    /// node.
    pub secret: String,
}

/// The SCRAM user of `tenant`'s pipelines: `weir-<tenant>-<tenant id>`, the stem of its
/// consumer groups and transactional ids (`weir-<tenant>-<tenant id>.<pipeline>`).
pub fn user(tenant: &Tenant) -> String {
    format!("weir-{}-{}", tenant.name, tenant.id)
}

/// The Kafka principal of `tenant`'s pipelines: `User:` [`user`].
pub fn principal(tenant: &Tenant) -> String {
    format!("User:{}", user(tenant))
}

/// What a pipeline of `tenant` needs, and no more: on topics under its prefix Read, Write,
/// Describe, Create (changelogs, `create_topics`) and DescribeConfigs (the start's checks); on
/// consumer groups and transactional ids under `weir-<tenant>-<id>.`, Read and Describe, Write
/// and Describe. No cluster right: Kafka 3.0 and later need none for transactions, and without
/// DescribeConfigs on the cluster a start skips only its comparison of transaction timeouts.
pub fn acls(tenant: &Tenant) -> Vec<PrefixedAcl> {
    use AclOperation::{Create, Describe, DescribeConfigs, Read, Write};
    let names = format!("{}.", user(tenant));
    let rights: [(AclResource, &str, &[AclOperation]); 3] = [
        (AclResource::Topic, &tenant.topic_prefix, &[Read, Write, Describe, Create, DescribeConfigs]),
        (AclResource::Group, &names, &[Read, Describe]),
        (AclResource::TransactionalId, &names, &[Write, Describe]),
    ];
    rights
        .into_iter()
        .flat_map(|(resource, prefix, operations)| {
            operations.iter().map(move |&operation| PrefixedAcl { resource, prefix: prefix.to_owned(), operation })
        })
        .collect()
}

impl TenantPrincipals {
    /// The password of SCRAM user `user`: hex HMAC-SHA256(secret, user).
    pub fn password(&self, user: &str) -> String {
        hmac_sha256(self.secret.as_bytes(), user.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// `cluster` as `tenant`'s principal: what the tenant's pipelines connect with.
    pub fn cluster_of(&self, cluster: &ClusterConfig, tenant: &Tenant) -> ClusterConfig {
        let user = user(tenant);
        cluster.as_user(self.mechanism.name(), &user, &self.password(&user))
    }

    /// Creates (or writes again) the SCRAM credential and ACLs of each of `tenants`, as the
    /// server's principal on `cluster`.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses (the server's principal needs Alter on the
    /// cluster), naming the tenant.
    pub async fn provision(&self, cluster: &ClusterConfig, tenants: Vec<Tenant>) -> anyhow::Result<()> {
        if tenants.is_empty() {
            return Ok(());
        }
        let (this, cluster) = (self.clone(), cluster.clone());
        blocking(move || {
            let admin = admin(&cluster)?;
            let users: Vec<(String, String)> = tenants.iter().map(|t| (user(t), this.password(&user(t)))).collect();
            let pairs: Vec<(&str, &str)> = users.iter().map(|(u, p)| (u.as_str(), p.as_str())).collect();
            admin.upsert_scram(this.mechanism, &pairs)?;
            for tenant in &tenants {
                admin
                    .create_acls(&principal(tenant), &acls(tenant))
                    .map_err(|e| anyhow::anyhow!("tenant {}: {e}", tenant.name))?;
            }
            Ok(())
        })
        .await
    }

    /// Deletes `tenant`'s ACLs and SCRAM credential.
    ///
    /// # Errors
    /// When the cluster cannot be reached or refuses.
    pub async fn retire(&self, cluster: &ClusterConfig, tenant: &Tenant) -> anyhow::Result<()> {
        let (mechanism, cluster, tenant) = (self.mechanism, cluster.clone(), tenant.clone());
        blocking(move || {
            let admin = admin(&cluster)?;
            admin.delete_acls(&principal(&tenant))?;
            admin.delete_scram(mechanism, &user(&tenant))
        })
        .await
    }
}

fn admin(cluster: &ClusterConfig) -> anyhow::Result<Admin> {
    Admin::new(cluster, &BTreeMap::new()).map_err(|e| anyhow::anyhow!("cannot make an admin client: {e}"))
}

async fn blocking(work: impl FnOnce() -> anyhow::Result<()> + Send + 'static) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(work).await.map_err(|e| anyhow::anyhow!("the admin request panicked: {e}"))?
}

/// HMAC-SHA256 (RFC 2104) of `message` keyed by `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut block = [0u8; BLOCK];
    if key.len() > BLOCK {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(message).finalize();
    Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::config::Quotas;

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let hex = |bytes: [u8; 32]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
        // Test case 2, and test case 6 (a key longer than the block).
        assert_eq!(
            hex(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex(hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_tenant_holds_prefixed_rights_on_its_own_names_only() {
        let tenant = Tenant {
            name: "acme".into(),
            id: "0123456789ab".into(),
            topic_prefix: "acme.".into(),
            quotas: Quotas::default(),
            token_sha256: None,
        };
        assert_eq!(principal(&tenant), "User:weir-acme-0123456789ab");
        let acls = acls(&tenant);
        assert!(acls.iter().all(|a| match a.resource {
            AclResource::Topic => a.prefix == "acme.",
            _ => a.prefix == "weir-acme-0123456789ab.",
        }));
        assert_eq!(acls.len(), 9);
        let principals = TenantPrincipals { mechanism: ScramMechanism::Sha512, secret: "s".repeat(32) };
        let password = principals.password(&user(&tenant));
        assert_eq!(password.len(), 64);
        assert_ne!(password, principals.password("weir-other-0123456789ab"));
    }
}
