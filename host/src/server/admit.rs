//! The registry topic's one serialization point: whether a record, read next from the topic,
//! takes effect. The topic has one partition, so every node reads the same order; deciding each
//! record against the last admitted value of every key before it ([`admit`]) makes the first
//! writer win on every node alike, with no compare-and-set in Kafka. A node that wrote a record
//! reads it back and learns whether it won ([`super::store::Store::refusal`]).
//!
//! The rules, each closing a race of two nodes that each checked their own copy:
//! - a tenant record: it is not a change of a tenant deleted before it, its name holds no other
//!   tenant (another `id`), its prefix overlaps no other
//!   tenant's, nor a deleted (or being deleted) tenant's that stays blocked ([`Retired`]);
//! - a tenant's deletion: it has no transform and no pipeline left (one deployed or uploaded
//!   through another node as it was deleted);
//! - a transform record: its tenant exists, and it keeps every version admitted before, unchanged
//!   (two uploads at once would otherwise both be version N, with different bytes);
//! - a transform's deletion: no pipeline pins it;
//! - a pipeline record: its tenant exists, every transform version it pins exists, and its key
//!   holds no other incarnation (another `id`: a first deploy of the name through another node
//!   at the same moment; a pipeline deleted first has no record left).
//!
//! A refused record stays in the topic as its key's last value until the loser writes the key's
//! admitted value again ([`super::Server::decide`]); compaction would otherwise keep the loser's.

use std::collections::BTreeMap;

use super::registry::{Pipeline, Retired, Tenant, Transform};

/// The last admitted value of every key read so far (tombstoned keys absent).
pub type Values = BTreeMap<String, Vec<u8>>;

/// Whether the record `key` = `value` (`None`: a tombstone), read next from the registry topic,
/// takes effect on `values`. Records that do not parse, blobs and unknown kinds pass:
/// [`super::registry::Registry::load`] reports what does not parse.
///
/// # Errors
/// Why the record is refused, e.g. `transform "fd" is used by pipelines ["delays"]`.
pub fn admit(values: &Values, key: &str, value: Option<&[u8]>) -> Result<(), String> {
    let mut parts = key.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next(), value) {
        (Some("tenant"), Some(name), None, Some(value)) => match serde_json::from_slice::<Tenant>(value) {
            Ok(new) => tenant(values, name, &new),
            Err(_) => Ok(()),
        },
        (Some("tenant"), Some(name), None, None) => tenant_deletion(values, name),
        (Some("transform"), Some(tenant), Some(name), Some(value)) => {
            match serde_json::from_slice::<Transform>(value) {
                Ok(new) => transform(values, tenant, key, &new).map_err(|why| format!("transform {name:?}: {why}")),
                Err(_) => Ok(()),
            }
        }
        (Some("transform"), Some(tenant), Some(name), None) => transform_deletion(values, tenant, name),
        (Some("pipeline"), Some(tenant), Some(name), Some(value)) => match serde_json::from_slice::<Pipeline>(value) {
            Ok(new) => pipeline(values, tenant, key, &new).map_err(|why| format!("pipeline {name:?}: {why}")),
            Err(_) => Ok(()),
        },
        _ => Ok(()),
    }
}

fn tenant(values: &Values, name: &str, new: &Tenant) -> Result<(), String> {
    // A change (a token rotated or revoked) of a tenant whose deletion came first: its
    // `retired/` record names its id until its data is gone.
    let deleted = parsed::<Retired>(values, "retired/").any(|old| old.tenant_id == new.id);
    if deleted && !values.contains_key(&format!("tenant/{name}")) {
        return Err(format!("tenant {name} was deleted (at the same moment)"));
    }
    for old in parsed::<Tenant>(values, "tenant/") {
        if old.name == name && old.id != new.id {
            return Err(format!("tenant {name} exists (created first, id {})", old.id));
        }
        if old.name != name && super::names::overlaps(&old.topic_prefix, &new.topic_prefix) {
            return Err(format!(
                "topic prefix {:?} overlaps tenant {}'s prefix {:?}",
                new.topic_prefix, old.name, old.topic_prefix
            ));
        }
    }
    // A tenant whose deletion has not taken effect (yet) keeps its own prefix.
    for old in parsed::<Retired>(values, "retired/").filter(|old| old.tenant_id != new.id) {
        if super::names::overlaps(&old.topic_prefix, &new.topic_prefix) {
            return Err(format!(
                "topic prefix {:?} overlaps {:?}, the prefix of deleted tenant {}, which stays blocked",
                new.topic_prefix, old.topic_prefix, old.tenant
            ));
        }
    }
    Ok(())
}

fn tenant_deletion(values: &Values, name: &str) -> Result<(), String> {
    let left = |kind: &str| -> Vec<String> {
        let prefix = format!("{kind}/{name}/");
        keys(values, &prefix).map(|key| key[prefix.len()..].to_owned()).collect()
    };
    let (transforms, pipelines) = (left("transform"), left("pipeline"));
    if transforms.is_empty() && pipelines.is_empty() {
        return Ok(());
    }
    Err(format!(
        "tenant {name} still has transforms {transforms:?} and pipelines {pipelines:?} (uploaded or deployed at the same moment)"
    ))
}

fn transform(values: &Values, tenant: &str, key: &str, new: &Transform) -> Result<(), String> {
    let quotas = exists(values, tenant)?.quotas;
    let old = values.get(key).and_then(|v| serde_json::from_slice::<Transform>(v).ok());
    if new.versions.len() > old.as_ref().map_or(0, |o| o.versions.len()) {
        // Uploads through two nodes at once must not pass the storage quotas together.
        let prefix = format!("transform/{tenant}/");
        let others = parsed::<Transform>(values, &prefix).filter(|t| t.name != new.name);
        let versions: Vec<u64> = others.flat_map(|t| t.versions).chain(new.versions.clone()).map(|v| v.size).collect();
        if versions.len() as u64 > u64::from(quotas.max_transform_versions) {
            return Err(format!(
                "the tenant's quota of {} versions (max_transform_versions)",
                quotas.max_transform_versions
            ));
        }
        if versions.iter().sum::<u64>() > quotas.max_transform_mb << 20 {
            return Err(format!("the tenant's quota of {} MiB (max_transform_mb)", quotas.max_transform_mb));
        }
    }
    let Some(old) = old else { return Ok(()) };
    let kept = old.versions.len() <= new.versions.len()
        && old.versions.iter().zip(&new.versions).all(|(o, n)| o.version == n.version && o.sha256 == n.sha256);
    if kept {
        return Ok(());
    }
    let last = old.versions.last().map_or(0, |v| v.version);
    Err(format!("it has versions up to {last} uploaded first, which this record does not keep"))
}

fn transform_deletion(values: &Values, tenant: &str, name: &str) -> Result<(), String> {
    let users: Vec<String> = parsed::<Pipeline>(values, &format!("pipeline/{tenant}/"))
        .filter(|p| pins(p).any(|(t, _)| t == name))
        .map(|p| p.name)
        .collect();
    if users.is_empty() {
        return Ok(());
    }
    Err(format!("transform {name:?} is used by pipelines {users:?} (deployed at the same moment)"))
}

fn pipeline(values: &Values, tenant: &str, key: &str, new: &Pipeline) -> Result<(), String> {
    let quotas = exists(values, tenant)?.quotas;
    let count = keys(values, &format!("pipeline/{tenant}/")).count();
    // Deploys through two nodes at once must not pass the quota together.
    if !values.contains_key(key) && count >= quotas.max_pipelines as usize {
        return Err(format!("the tenant has {count} pipelines, its quota (max_pipelines)"));
    }
    if let Some(old) = values.get(key).and_then(|v| serde_json::from_slice::<Pipeline>(v).ok())
        && old.id != new.id
    {
        return Err(format!("it exists (deployed first, id {}): another incarnation", old.id));
    }
    for (name, version) in pins(new) {
        let transform =
            values.get(&format!("transform/{tenant}/{name}")).and_then(|v| serde_json::from_slice::<Transform>(v).ok());
        let found = transform.is_some_and(|t| version.is_none_or(|v| t.version(Some(v)).is_some()));
        if !found {
            let version = version.map_or_else(String::new, |v| format!(" version {v}"));
            return Err(format!("transform {name:?}{version} does not exist (deleted at the same moment)"));
        }
    }
    Ok(())
}

/// The tenant's record.
fn exists(values: &Values, tenant: &str) -> Result<Tenant, String> {
    let record = values.get(&format!("tenant/{tenant}")).and_then(|v| serde_json::from_slice(v).ok());
    record.ok_or_else(|| format!("tenant {tenant} does not exist (deleted at the same moment)"))
}

/// The transforms a pipeline's stored spec names, with the version it pins.
pub fn pins(pipeline: &Pipeline) -> impl Iterator<Item = (&str, Option<u32>)> {
    let transforms = pipeline.spec.get("transforms").and_then(toml::Value::as_array);
    transforms.into_iter().flatten().filter_map(|t| {
        let version = t.get("version").and_then(toml::Value::as_integer).and_then(|v| u32::try_from(v).ok());
        Some((t.get("transform")?.as_str()?, version))
    })
}

/// The keys starting with `prefix`.
fn keys<'a>(values: &'a Values, prefix: &'a str) -> impl Iterator<Item = &'a String> {
    values.range(prefix.to_owned()..).map(|(key, _)| key).take_while(move |key| key.starts_with(prefix))
}

/// The values under keys starting with `prefix` that parse as `T`.
fn parsed<'a, T: serde::de::DeserializeOwned>(values: &'a Values, prefix: &'a str) -> impl Iterator<Item = T> + 'a {
    keys(values, prefix).filter_map(|key| serde_json::from_slice(&values[key]).ok())
}

#[cfg(test)]
mod tests {
    use super::super::config::Quotas;
    use super::super::registry::{Desired, Registry, TransformVersion};
    use super::super::store::Spool;
    use super::*;

    fn tenant(name: &str, id: &str, prefix: &str) -> Vec<u8> {
        let tenant = Tenant {
            name: name.into(),
            id: id.into(),
            topic_prefix: prefix.into(),
            quotas: Quotas::default(),
            token_sha256: Some(format!("hash-of-{id}")),
        };
        serde_json::to_vec(&tenant).expect("JSON")
    }

    fn transform(name: &str, hashes: &[&str]) -> Vec<u8> {
        let versions = hashes
            .iter()
            .enumerate()
            .map(|(i, sha256)| TransformVersion {
                version: i as u32 + 1,
                sha256: (*sha256).into(),
                size: 1,
                contract: "weir:transform@0.2.0".into(),
                imports: vec![],
                exports: vec![],
                uploaded_at_ms: 0,
            })
            .collect();
        serde_json::to_vec(&Transform { name: name.into(), versions }).expect("JSON")
    }

    fn pipeline(name: &str, transform: &str, version: i64) -> Vec<u8> {
        incarnation(name, "111111111111", transform, version)
    }

    fn incarnation(name: &str, id: &str, transform: &str, version: i64) -> Vec<u8> {
        let spec: toml::Table =
            toml::from_str(&format!("[[transforms]]\ntransform = \"{transform}\"\nversion = {version}\n"))
                .expect("TOML");
        let pipeline = Pipeline { name: name.into(), id: id.into(), spec, desired: Desired::Running };
        serde_json::to_vec(&pipeline).expect("JSON")
    }

    /// A record (key, value) and the outcome expected: admitted, or refused with these words.
    type Case<'a> = (&'a str, Option<Vec<u8>>, Result<(), &'a str>);

    fn check(values: &Values, table: &[Case]) {
        for (key, value, expected) in table {
            match (admit(values, key, value.as_deref()), expected) {
                (Ok(()), Ok(())) => {}
                (Err(why), Err(words)) => assert!(why.contains(words), "{key}: {why}"),
                (admitted, expected) => panic!("{key}: {admitted:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn a_tenant_record_is_admitted_only_when_it_came_first_for_its_name_and_prefix() {
        let values = Values::from([("tenant/acme".to_owned(), tenant("acme", "111111111111", "acme."))]);
        check(
            &values,
            &[
                // A new tenant beside acme.
                ("tenant/web", Some(tenant("web", "222222222222", "web.")), Ok(())),
                // acme again, created at the same moment through another node: another id.
                ("tenant/acme", Some(tenant("acme", "333333333333", "other.")), Err("tenant acme exists")),
                // acme's own record again: a rotated or revoked token.
                ("tenant/acme", Some(tenant("acme", "111111111111", "acme.")), Ok(())),
                // Another name on an overlapping prefix, either way round, `.` and `_` alike.
                ("tenant/b", Some(tenant("b", "444444444444", "acme.")), Err("overlaps tenant acme's prefix")),
                ("tenant/b", Some(tenant("b", "444444444444", "acme.x.")), Err("overlaps tenant acme's prefix")),
                ("tenant/b", Some(tenant("b", "444444444444", "acm")), Err("overlaps tenant acme's prefix")),
                ("tenant/b", Some(tenant("b", "444444444444", "acme_")), Err("overlaps tenant acme's prefix")),
                // acme's deletion, with nothing left of it; blobs pass.
                ("tenant/acme", None, Ok(())),
                ("blob/00/000000", Some(b"bytes".to_vec()), Ok(())),
            ],
        );
        // Once acme is deleted (its key gone), its name and prefix are free again.
        check(&Values::new(), &[("tenant/acme", Some(tenant("acme", "333333333333", "acme.")), Ok(()))]);
    }

    #[test]
    fn a_retired_prefix_refuses_every_tenant_overlapping_it() {
        let retired = Retired {
            tenant: "acme".into(),
            tenant_id: "111111111111".into(),
            topic_prefix: "acme.".into(),
            kept: true,
        };
        let values = Values::from([("retired/acme.".to_owned(), serde_json::to_vec(&retired).expect("JSON"))]);
        let refused = Err("the prefix of deleted tenant acme");
        check(
            &values,
            &[
                // A change (a token rotated) of acme, whose deletion came first.
                ("tenant/acme", Some(tenant("acme", "111111111111", "acme.")), Err("tenant acme was deleted")),
                ("tenant/acme", Some(tenant("acme", "2", "acme.")), refused),
                ("tenant/b", Some(tenant("b", "2", "acme.x.")), refused),
                ("tenant/b", Some(tenant("b", "2", "acm")), refused),
                ("tenant/b", Some(tenant("b", "2", "acme_")), refused),
                ("tenant/b", Some(tenant("b", "2", "acmf.")), Ok(())),
            ],
        );
        let spool = tempfile::tempdir().unwrap();
        let registry = Registry::load(&values, std::path::Path::new("/nonexistent"), &Spool::for_test(spool.path()))
            .expect("loads");
        assert_eq!(registry.retired_overlap("acme.y").map(|r| r.tenant.as_str()), Some("acme"));
    }

    #[test]
    fn records_through_two_nodes_at_once_do_not_pass_the_quotas_together() {
        let mut small = serde_json::from_slice::<Tenant>(&tenant("acme", "111111111111", "acme.")).expect("JSON");
        small.quotas.max_pipelines = 1;
        small.quotas.max_transform_versions = 3;
        small.quotas.max_transform_mb = 1;
        let values = Values::from([
            ("tenant/acme".to_owned(), serde_json::to_vec(&small).expect("JSON")),
            ("transform/acme/fd".to_owned(), transform("fd", &["aa", "bb"])),
            ("pipeline/acme/delays".to_owned(), pipeline("delays", "fd", 2)),
        ]);
        let mut big: Transform = serde_json::from_slice(&transform("big", &["dd"])).expect("JSON");
        big.versions[0].size = 2 << 20;
        check(
            &values,
            &[
                ("pipeline/acme/other", Some(pipeline("other", "fd", 1)), Err("its quota (max_pipelines)")),
                ("pipeline/acme/delays", Some(pipeline("delays", "fd", 1)), Ok(())),
                ("transform/acme/x", Some(transform("x", &["cc"])), Ok(())),
                ("transform/acme/x", Some(transform("x", &["cc", "dd"])), Err("(max_transform_versions)")),
                ("transform/acme/fd", Some(transform("fd", &["aa", "bb", "cc"])), Ok(())),
                ("transform/acme/big", Some(serde_json::to_vec(&big).expect("JSON")), Err("(max_transform_mb)")),
            ],
        );
    }

    #[test]
    fn deletions_lose_to_what_was_deployed_or_uploaded_first_and_records_to_deletions_before_them() {
        let values = Values::from([
            ("tenant/acme".to_owned(), tenant("acme", "111111111111", "acme.")),
            ("transform/acme/fd".to_owned(), transform("fd", &["aa", "bb"])),
            ("transform/acme/spare".to_owned(), transform("spare", &["cc"])),
            ("pipeline/acme/delays".to_owned(), pipeline("delays", "fd", 2)),
        ]);
        check(
            &values,
            &[
                // A transform a pipeline pins cannot go; one no pipeline pins can.
                ("transform/acme/fd", None, Err("used by pipelines [\"delays\"]")),
                ("transform/acme/spare", None, Ok(())),
                // A tenant with transforms or pipelines left cannot go.
                ("tenant/acme", None, Err("still has transforms [\"fd\", \"spare\"] and pipelines [\"delays\"]")),
                // A pipeline needs its tenant and every version it pins.
                ("pipeline/acme/p", Some(pipeline("p", "fd", 1)), Ok(())),
                ("pipeline/acme/p", Some(pipeline("p", "fd", 3)), Err("transform \"fd\" version 3 does not exist")),
                ("pipeline/acme/p", Some(pipeline("p", "gone", 1)), Err("transform \"gone\" version 1 does not exist")),
                ("pipeline/web/p", Some(pipeline("p", "fd", 1)), Err("tenant web does not exist")),
                ("pipeline/acme/delays", None, Ok(())),
                // A pipeline's own incarnation passes; another (a first deploy at the same moment
                // through another node) is refused.
                ("pipeline/acme/delays", Some(incarnation("delays", "111111111111", "fd", 1)), Ok(())),
                (
                    "pipeline/acme/delays",
                    Some(incarnation("delays", "222222222222", "fd", 1)),
                    Err("another incarnation"),
                ),
                // A transform record keeps every version admitted before it.
                ("transform/acme/fd", Some(transform("fd", &["aa", "bb", "dd"])), Ok(())),
                ("transform/acme/fd", Some(transform("fd", &["aa", "bb"])), Ok(())),
                ("transform/acme/fd", Some(transform("fd", &["aa", "xx"])), Err("versions up to 2 uploaded first")),
                ("transform/acme/fd", Some(transform("fd", &["aa"])), Err("versions up to 2 uploaded first")),
                ("transform/acme/new", Some(transform("new", &["ee"])), Ok(())),
                ("transform/web/new", Some(transform("new", &["ee"])), Err("tenant web does not exist")),
            ],
        );
    }
}
