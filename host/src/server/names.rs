//! Which Kafka names belong to whom: each tenant's topic prefix must keep clear of every other
//! tenant's and of the server's own topics, or a tenant's pipeline could write another's
//! records, or the registry itself (a `tenant/<name>` record there takes over that account).
//!
//! Tenants name topics only: group ids and transactional ids are derived by the server
//! ([`super::spec`]), so the server's topics are what a prefix must not reach.

use super::config::ServeConfig;

/// Whether two topic prefixes (or a prefix and a topic name) overlap: one starts with the
/// other once `.` and `_` are made equal (Kafka refuses a topic whose name differs from an
/// existing one only there, as they collide in metric names).
pub fn overlaps(a: &str, b: &str) -> bool {
    let (a, b) = (a.replace('.', "_"), b.replace('.', "_"));
    a.starts_with(&b) || b.starts_with(&a)
}

/// The server's own topics, each with the `serve.toml` key naming it.
pub fn server_topics(config: &ServeConfig) -> [(&'static str, &str); 1] {
    [("registry_topic", config.registry_topic.as_str())]
}

/// The first server topic that `prefix` overlaps, as a message naming both and what to do.
pub fn server_topic_overlap(config: &ServeConfig, prefix: &str) -> Option<String> {
    let (key, topic) = server_topics(config).into_iter().find(|(_, topic)| overlaps(prefix, topic))?;
    Some(format!(
        "topic prefix {prefix:?} overlaps the server's `{key}` {topic:?}: a tenant's pipeline could write the \
         server's own records; give the tenant another prefix, or the server a `{key}` outside every tenant \
         prefix (one starting with `_`, such as the default, never overlaps)"
    ))
}

/// Checks, at start, that no tenant of the registry has a prefix overlapping a server topic.
///
/// # Errors
/// The first such tenant, by name, and the server key it overlaps.
pub fn check_tenants<'a>(
    config: &ServeConfig,
    tenants: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> anyhow::Result<()> {
    for (tenant, prefix) in tenants {
        if let Some(why) = server_topic_overlap(config, prefix) {
            anyhow::bail!("tenant {tenant}: {why}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_overlap_when_one_starts_with_the_other_with_dot_and_underscore_equal() {
        let table = [
            ("acme.", "acme.", true),
            ("acme.", "acme.registry", true),
            ("acme.registry", "acme.", true),
            ("acme", "acme.x", true),
            ("acme_", "acme.registry", true),
            ("acme.", "acme_registry", true),
            ("acme.", "acmf.", false),
            ("acme.", "acme-registry", false),
            ("acme.a", "acme.b", false),
            ("b.", "_weir-registry", false),
        ];
        for (a, b, expected) in table {
            assert_eq!(overlaps(a, b), expected, "{a:?} vs {b:?}");
        }
    }

    fn config(registry_topic: &str) -> ServeConfig {
        let text = format!(
            "listen = \"127.0.0.1:0\"\nbrokers = \"b:9092\"\ndata_dir = \"d\"\nregistry_topic = \"{registry_topic}\"\n"
        );
        ServeConfig::from_toml_str(&text, std::path::Path::new("."), Some("a-long-enough-admin-token".into()))
            .expect("config")
    }

    #[test]
    fn a_prefix_reaching_the_registry_topic_is_refused_naming_the_key() {
        let config = config("ops.registry");
        for prefix in ["ops.", "ops_", "o", "ops.registry", "ops.registry.more"] {
            let why = server_topic_overlap(&config, prefix).unwrap_or_else(|| panic!("{prefix:?} overlaps"));
            assert!(why.contains("`registry_topic` \"ops.registry\""), "{why}");
        }
        for prefix in ["acme.", "ops-", "opsx."] {
            assert_eq!(server_topic_overlap(&config, prefix), None, "{prefix:?}");
        }
        // The default starts with `_`, which no tenant prefix may.
        assert_eq!(server_topic_overlap(&self::config("_weir-registry"), "w"), None);
    }

    #[test]
    fn the_start_refuses_an_existing_tenant_whose_prefix_overlaps() {
        let config = config("ops.registry");
        assert!(check_tenants(&config, [("acme", "acme."), ("web", "web.")]).is_ok());
        let error = check_tenants(&config, [("acme", "acme."), ("ops", "ops.")]).expect_err("refused").to_string();
        assert!(
            error.starts_with("tenant ops: topic prefix \"ops.\" overlaps the server's `registry_topic`"),
            "{error}"
        );
    }
}
