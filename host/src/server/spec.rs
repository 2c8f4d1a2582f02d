//! A tenant's pipeline spec → a [`PipelineConfig`]: the pipeline-file schema, where a transform
//! names an uploaded transform (`transform = "name"`, optional `version = N`) instead of a
//! `wasm` file, minus the keys the server owns ([`SERVER_OWNED`]), which it derives from the
//! tenant and pipeline names. Every topic must start with the tenant's prefix; operators'
//! memory and deadlines stay within its quotas.

use std::path::{Path, PathBuf};

use toml::{Table, Value};

use super::config::ServeConfig;
use super::registry::{Tenant, TenantEntry, component_path};
use crate::config::{ConfigError, DEFAULT_DEADLINE, DEFAULT_MEMORY_LIMIT_BYTES, PipelineConfig};

/// Keys a spec may not set: the server derives them ([`derived`]: group id and transactional id
/// prefix `weir-<tenant>-<tenant id>.<pipeline>.<pipeline id>`, state directory, changelog topic
/// `<prefix>weir-<tenant id>-<pipeline>-<pipeline id>-changelog`) so that tenants cannot reach
/// each other's, and a tenant or pipeline created again under its name never resumes the old
/// one's offsets or state.
/// `""` is the top level: the cluster (`[kafka]`, with its credentials) is the server's.
pub const SERVER_OWNED: [(&str, &str); 8] = [
    ("", "kafka"),
    ("source", "brokers"),
    ("source", "group_id"),
    ("sink", "brokers"),
    ("sink", "kafka"),
    ("sink", "transactional_id_prefix"),
    ("state", "dir"),
    ("state", "changelog_topic"),
];

/// A refused spec: the dotted key at fault and why.
#[derive(Debug, PartialEq, Eq)]
pub struct SpecError {
    /// Dotted key path, e.g. `sink.topic` or `transforms[0].transform`; empty for the whole body.
    pub field: String,
    /// What is wrong and what to do.
    pub message: String,
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { field: field.into(), message: message.into() }
    }
}

impl From<ConfigError> for SpecError {
    /// Without line numbers: they would be of the spec as the server rebuilt it, not of the body.
    fn from(error: ConfigError) -> Self {
        let error = error.without_lines();
        Self::new(error.key_path().unwrap_or_default(), error.to_string())
    }
}

/// Parses a request body: JSON when `json`, else TOML.
///
/// # Errors
/// When the body is not a table of that format.
pub fn parse_body(body: &[u8], json: bool) -> Result<Table, SpecError> {
    if json {
        serde_json::from_slice(body).map_err(|e| SpecError::new("", format!("the body is not a JSON object: {e}")))
    } else {
        let text = std::str::from_utf8(body).map_err(|_| SpecError::new("", "the body is not UTF-8 TOML"))?;
        text.parse().map_err(|e| SpecError::new("", format!("the body is not TOML: {e}")))
    }
}

/// The name a pipeline runs under inside the server (its metrics, logs and derived Kafka
/// names): `<tenant>.<pipeline>`, unambiguous because neither name contains a dot.
pub fn qualified_name(tenant: &str, pipeline: &str) -> String {
    format!("{tenant}.{pipeline}")
}

/// What the server derives for one incarnation of a pipeline (its id fixed at its first deploy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Derived {
    /// The consumer group id, also the transactional id prefix.
    pub group_id: String,
    /// The changelog topic (under the tenant's prefix).
    pub changelog: String,
    /// The state directory on each node.
    pub state_dir: PathBuf,
}

/// The start of every group id and transactional id of `tenant`'s pipelines:
/// `weir-<tenant>-<tenant id>.`.
pub fn group_prefix(tenant: &Tenant) -> String {
    format!("weir-{}-{}.", tenant.name, tenant.id)
}

/// The names and directory of incarnation `id` of pipeline `name` of `tenant`.
pub fn derived(tenant: &Tenant, name: &str, id: &str, serve: &ServeConfig) -> Derived {
    Derived {
        group_id: format!("{}{name}.{id}", group_prefix(tenant)),
        changelog: format!("{}weir-{}-{name}-{id}-changelog", tenant.topic_prefix, tenant.id),
        state_dir: serve
            .data_dir
            .join("state")
            .join(format!("{}-{}", tenant.name, tenant.id))
            .join(format!("{name}-{id}")),
    }
}

/// Checks `spec` for pipeline `name` (incarnation `id`) of `entry`'s tenant and resolves it. Returns the spec to
/// store (each transform's `version` pinned, the latest when not given) and the configuration to
/// run.
///
/// # Errors
/// [`SpecError`] naming the key: a server-owned key, a `wasm` path, an unknown transform or
/// version, a topic outside the tenant's prefix, a quota exceeded, or anything
/// [`PipelineConfig`] refuses.
pub fn resolve(
    mut spec: Table,
    entry: &TenantEntry,
    name: &str,
    id: &str,
    serve: &ServeConfig,
) -> Result<(Table, PipelineConfig), SpecError> {
    let tenant = &entry.tenant;
    match spec.remove("name") {
        None => {}
        Some(Value::String(given)) if given == name => {}
        Some(given) => {
            return Err(SpecError::new("name", format!("is {given}, but the pipeline is deployed as {name:?}")));
        }
    }
    for (table, key) in SERVER_OWNED {
        let owner = if table.is_empty() { Some(&spec) } else { spec.get(table).and_then(Value::as_table) };
        if owner.is_some_and(|t| t.contains_key(key)) {
            let key = if table.is_empty() { key.to_owned() } else { format!("{table}.{key}") };
            return Err(SpecError::new(
                key.clone(),
                format!(
                    "`{key}` is set by the server (weir serve derives it from the tenant and pipeline names, or from \
                     its own [kafka]); remove it"
                ),
            ));
        }
    }
    let mut run = spec.clone();
    let Some(Value::Array(transforms)) = spec.get_mut("transforms") else {
        return Err(SpecError::new("transforms", "missing: a pipeline needs at least one [[transforms]] table"));
    };
    let Some(Value::Array(run_transforms)) = run.get_mut("transforms") else { unreachable!("cloned above") };
    let components = serve.data_dir.join("components");
    for (index, (stored, resolved)) in transforms.iter_mut().zip(run_transforms.iter_mut()).enumerate() {
        let at = |key: &str| format!("transforms[{index}].{key}");
        let (Value::Table(stored), Value::Table(resolved)) = (stored, resolved) else {
            return Err(SpecError::new(format!("transforms[{index}]"), "must be a table"));
        };
        if stored.contains_key("wasm") {
            return Err(SpecError::new(
                at("wasm"),
                "files on the server are not reachable: upload the component (PUT /v1/transforms/<name>, \
                 or `weir deploy`) and name it with `transform = \"<name>\"`",
            ));
        }
        let transform_name = match stored.get("transform") {
            Some(Value::String(t)) => t.clone(),
            _ => {
                return Err(SpecError::new(
                    at("transform"),
                    "missing: name an uploaded transform, e.g. transform = \"flight-delays\"",
                ));
            }
        };
        let version = match stored.get("version") {
            None => None,
            Some(Value::Integer(v)) if *v > 0 && *v <= u32::MAX as i64 => Some(*v as u32),
            Some(other) => {
                return Err(SpecError::new(at("version"), format!("must be a version number (1, 2, …), got {other}")));
            }
        };
        let transform = entry.transforms.get(&transform_name).ok_or_else(|| {
            SpecError::new(
                at("transform"),
                format!("no transform {transform_name:?}: upload it first (PUT /v1/transforms/{transform_name})"),
            )
        })?;
        let pinned = transform.version(version).ok_or_else(|| {
            SpecError::new(
                at("version"),
                format!("transform {transform_name:?} has no version {}", version.unwrap_or(0)),
            )
        })?;
        stored.insert("version".into(), Value::Integer(pinned.version.into()));
        resolved.remove("transform");
        resolved.remove("version");
        let wasm = component_path(&components, &pinned.sha256);
        resolved.insert("wasm".into(), Value::String(wasm.to_string_lossy().into_owned()));
        within_quota(
            resolved,
            "memory_limit_mb",
            tenant.quotas.max_memory_mb,
            (DEFAULT_MEMORY_LIMIT_BYTES >> 20) as u64,
            &at,
        )?;
        within_quota(resolved, "deadline_ms", tenant.quotas.max_deadline_ms, DEFAULT_DEADLINE.as_millis() as u64, &at)?;
    }
    let derived = derived(tenant, name, id, serve);
    run.insert("name".into(), Value::String(qualified_name(&tenant.name, name)));
    run.insert("kafka".into(), Value::Table(serve.kafka.clone()));
    table(&mut run, "source")?.insert("group_id".into(), Value::String(derived.group_id.clone()));
    table(&mut run, "sink")?.insert("transactional_id_prefix".into(), Value::String(derived.group_id));
    let max_workers = tenant.quotas.max_workers.into();
    within_quota(table(&mut run, "runtime")?, "workers", max_workers, max_workers, &|key| format!("runtime.{key}"))?;
    let state = table(&mut run, "state")?;
    let max_state_bytes = tenant.quotas.max_state_mb << 20;
    within_quota(state, "max_bytes", max_state_bytes, max_state_bytes, &|key| format!("state.{key}"))?;
    state.insert("dir".into(), Value::String(derived.state_dir.to_string_lossy().into_owned()));
    state.insert("changelog_topic".into(), Value::String(derived.changelog));
    let text = toml::to_string(&run).map_err(|e| SpecError::new("", format!("cannot be written as TOML: {e}")))?;
    let mut config = PipelineConfig::from_toml_str(&text, Path::new(&serve.data_dir))?;
    if let Some(principals) = &serve.tenant_principals {
        // The sink's cluster is the source's: a spec cannot set `[sink.kafka]`.
        config.source.cluster = principals.cluster_of(&config.source.cluster, tenant);
        config.sink.cluster = config.source.cluster.clone();
    }
    check_topics(&config, &tenant.topic_prefix, &tenant.name)?;
    check_client_properties(&config)?;
    check_buffers(&config, tenant.quotas.max_total_memory_mb)?;
    if config.sink.postgres.is_some() {
        // A connection string would let a tenant reach any host the server can.
        return Err(SpecError::new(
            "sink.postgres",
            "the PostgreSQL sink is not available to hosted pipelines: write to a topic of your prefix",
        ));
    }
    Ok((spec, config))
}

/// The librdkafka properties a tenant may set in `source.consumer` and `sink.producer`: tuning
/// only. Others reach the server itself (`plugin.library.paths` and `ssl.engine.location` load
/// libraries into it, `sasl.kerberos.kinit.cmd` runs a command, `*.location` read its files,
/// OAuth endpoints make it send requests).
pub const TENANT_CLIENT_PROPERTIES: [&str; 18] = [
    "batch.num.messages",
    "batch.size",
    "compression.codec",
    "compression.level",
    "compression.type",
    "fetch.max.bytes",
    "fetch.min.bytes",
    "fetch.wait.max.ms",
    "heartbeat.interval.ms",
    "linger.ms",
    "max.partition.fetch.bytes",
    "max.poll.interval.ms",
    "message.max.bytes",
    "queue.buffering.max.kbytes",
    "queue.buffering.max.messages",
    "queued.max.messages.kbytes",
    "queued.min.messages",
    "session.timeout.ms",
];

fn check_client_properties(config: &PipelineConfig) -> Result<(), SpecError> {
    let set = config
        .source
        .consumer
        .keys()
        .map(|k| ("source.consumer", k))
        .chain(config.sink.producer.keys().map(|k| ("sink.producer", k)));
    for (table, key) in set {
        if !TENANT_CLIENT_PROPERTIES.contains(&key.as_str()) {
            return Err(SpecError::new(
                format!("{table}.{key:?}"),
                format!(
                    "librdkafka property {key:?} is not open to tenants of weir serve; allowed: {}",
                    TENANT_CLIENT_PROPERTIES.join(", ")
                ),
            ));
        }
    }
    Ok(())
}

/// The librdkafka buffers a tenant may size (`table`, property, bytes per unit): host memory its
/// pipelines take outside the guests', so each may hold at most the tenant's
/// `max_total_memory_mb`. Weir's defaults are far below ([`crate::CONSUMER_DEFAULTS`], 8 MiB
/// for a producer).
const TENANT_BUFFERS: [(&str, &str, u64); 6] = [
    ("source.consumer", "queued.max.messages.kbytes", 1024),
    ("source.consumer", "fetch.max.bytes", 1),
    ("source.consumer", "max.partition.fetch.bytes", 1),
    ("sink.producer", "queue.buffering.max.kbytes", 1024),
    ("sink.producer", "message.max.bytes", 1),
    ("sink.producer", "batch.size", 1),
];

/// Refuses a [`TENANT_BUFFERS`] property above `quota_mb` MiB.
fn check_buffers(config: &PipelineConfig, quota_mb: u64) -> Result<(), SpecError> {
    for (table, key, unit) in TENANT_BUFFERS {
        let properties = if table == "source.consumer" { &config.source.consumer } else { &config.sink.producer };
        let Some(text) = properties.get(key) else { continue };
        // librdkafka also reads hexadecimal and octal: a number of another form is refused, not
        // read otherwise than librdkafka does.
        let Ok(value) = text.parse::<u64>() else {
            return Err(SpecError::new(format!("{table}.{key:?}"), format!("must be a decimal number, got {text:?}")));
        };
        if value.saturating_mul(unit) > quota_mb << 20 {
            return Err(SpecError::new(
                format!("{table}.{key:?}"),
                format!(
                    "{value} is above the tenant's quota: a buffer of the pipeline may hold at most its max_total_memory_mb ({quota_mb} MiB)"
                ),
            ));
        }
    }
    Ok(())
}

/// The table `key` of `spec`, created when missing.
fn table<'a>(spec: &'a mut Table, key: &str) -> Result<&'a mut Table, SpecError> {
    spec.entry(key)
        .or_insert_with(|| Value::Table(Table::new()))
        .as_table_mut()
        .ok_or_else(|| SpecError::new(key, "must be a table"))
}

/// Refuses `key` above `quota`; sets it to `min(default, quota)` when missing.
fn within_quota(
    transform: &mut Table,
    key: &str,
    quota: u64,
    default: u64,
    at: &dyn Fn(&str) -> String,
) -> Result<(), SpecError> {
    match transform.get(key) {
        None => {
            transform.insert(key.into(), Value::Integer(default.min(quota) as i64));
        }
        Some(Value::Integer(value)) if *value as u64 > quota => {
            return Err(SpecError::new(at(key), format!("{value} is above the tenant's quota of {quota}")));
        }
        Some(_) => {}
    }
    Ok(())
}

/// Every topic the pipeline reads or writes starts with `prefix`.
fn check_topics(config: &PipelineConfig, prefix: &str, tenant: &str) -> Result<(), SpecError> {
    let mut topics: Vec<(String, &str)> =
        config.source.topics.iter().enumerate().map(|(i, t)| (format!("source.topics[{i}]"), t.as_str())).collect();
    topics.extend(
        config.source.tables.iter().enumerate().map(|(i, t)| (format!("source.tables[{i}].topic"), t.topic.as_str())),
    );
    topics.extend(config.sink.topic.iter().map(|t| ("sink.topic".to_owned(), t.as_str())));
    topics.extend(config.sink.outputs.iter().map(|(name, topic)| (format!("sink.outputs.{name}"), topic.as_str())));
    topics.extend(config.sink.dead_letter_topic.iter().map(|t| ("sink.dead_letter_topic".to_owned(), t.as_str())));
    match topics.into_iter().find(|(_, topic)| !topic.starts_with(prefix)) {
        Some((field, topic)) => Err(SpecError::new(
            field,
            format!("topic {topic:?} is outside tenant {tenant}'s topic prefix {prefix:?}: name topics {prefix}…"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::server::config::Quotas;
    use crate::server::registry::{Tenant, Transform, TransformVersion};

    fn entry() -> TenantEntry {
        let version = |version| TransformVersion {
            version,
            sha256: format!("{version:064}"),
            size: 1,
            contract: "weir:transform@0.2.0".into(),
            imports: vec![],
            exports: vec![],
            uploaded_at_ms: 0,
        };
        let transform = Transform { name: "fd".into(), versions: vec![version(1), version(2)] };
        TenantEntry {
            tenant: Tenant {
                name: "acme".into(),
                id: "0123456789ab".into(),
                topic_prefix: "acme.".into(),
                quotas: Quotas::default(),
                token_sha256: None,
            },
            transforms: BTreeMap::from([("fd".into(), transform)]),
            pipelines: BTreeMap::new(),
        }
    }

    fn serve() -> ServeConfig {
        let text = "listen = \"127.0.0.1:0\"\nbrokers = \"k:9092\"\ndata_dir = \"/srv/weir\"\n";
        ServeConfig::from_toml_str(text, Path::new("/"), Some("0123456789abcdef".into())).unwrap()
    }

    const SPEC: &str = "[source]\ntopics = [\"acme.in\"]\n[[transforms]]\nname = \"fd\"\ntransform = \"fd\"\n[sink]\ntopic = \"acme.out\"\n";

    fn resolve_text(text: &str) -> Result<(Table, PipelineConfig), SpecError> {
        resolve(parse_body(text.as_bytes(), false)?, &entry(), "delays", "fedcba987654", &serve())
    }

    #[test]
    fn with_tenant_principals_the_pipeline_connects_as_the_tenant_s_user() {
        let mut serve = serve();
        let (_, config) =
            resolve(parse_body(SPEC.as_bytes(), false).unwrap(), &entry(), "delays", "fedcba987654", &serve).unwrap();
        assert!(!config.source.cluster.display_properties().contains_key("sasl.username"));
        let principals = crate::server::principals::TenantPrincipals {
            mechanism: crate::kafka::ScramMechanism::Sha256,
            secret: "s".repeat(32),
        };
        serve.tenant_principals = Some(principals.clone());
        let (_, config) =
            resolve(parse_body(SPEC.as_bytes(), false).unwrap(), &entry(), "delays", "fedcba987654", &serve).unwrap();
        for cluster in [&config.source.cluster, &config.sink.cluster] {
            let shown = cluster.display_properties();
            assert_eq!(shown.get("sasl.username"), Some(&"weir-acme-0123456789ab"));
            assert_eq!(shown.get("sasl.mechanism"), Some(&"SCRAM-SHA-256"));
            assert_eq!(cluster.bootstrap_servers(), "k:9092");
        }
        assert_eq!(
            config.source.cluster.properties().get("sasl.password"),
            Some(&principals.password("weir-acme-0123456789ab"))
        );
    }

    #[test]
    fn derives_the_server_owned_keys_and_pins_the_latest_version() {
        let (stored, config) = resolve_text(SPEC).unwrap();
        let tuned = format!("{SPEC}[source.consumer]\n\"fetch.min.bytes\" = 1000\n");
        assert!(resolve_text(&tuned).is_ok(), "tuning properties are open to tenants");
        assert_eq!(stored["transforms"][0]["version"].as_integer(), Some(2));
        assert!(!stored.contains_key("name"), "the stored spec is the tenant's");
        assert_eq!(config.name, "acme.delays");
        assert_eq!(config.group_id(), "weir-acme-0123456789ab.delays.fedcba987654");
        assert_eq!(config.sink.transactional_id_prefix, "weir-acme-0123456789ab.delays.fedcba987654");
        assert_eq!(config.source.cluster.bootstrap_servers(), "k:9092");
        assert_eq!(config.state.dir, Path::new("/srv/weir/state/acme-0123456789ab/delays-fedcba987654"));
        assert_eq!(config.state.changelog_topic, "acme.weir-0123456789ab-delays-fedcba987654-changelog");
        assert_eq!(config.transforms[0].wasm, Path::new(&format!("/srv/weir/components/{:064}.wasm", 2)));
        assert_eq!(config.runtime.workers, Some(2), "the tenant's max_workers");
        let within =
            format!("{SPEC}[runtime]\nworkers = 1\n[sink.producer]\n\"queue.buffering.max.kbytes\" = 524288\n");
        assert_eq!(resolve_text(&within).unwrap().1.runtime.workers, Some(1));
        let (_, pinned) = resolve_text(&SPEC.replace("transform = \"fd\"", "transform = \"fd\"\nversion = 1")).unwrap();
        assert_eq!(pinned.transforms[0].wasm, Path::new(&format!("/srv/weir/components/{:064}.wasm", 1)));
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (SPEC.replace("[source]\n", "[source]\nbrokers = \"x:1\"\n"), "source.brokers"),
            (format!("{SPEC}[kafka]\n\"bootstrap.servers\" = \"x:1\"\n"), "kafka"),
            (format!("{SPEC}[sink.kafka]\n\"bootstrap.servers\" = \"x:1\"\n"), "sink.kafka"),
            (SPEC.replace("[source]\n", "[source]\ngroup_id = \"g\"\n"), "source.group_id"),
            (format!("{SPEC}[state]\nchangelog_topic = \"acme.c\"\n"), "state.changelog_topic"),
            (
                SPEC.replace("topic = \"acme.out\"", "topic = \"acme.out\"\ntransactional_id_prefix = \"p\""),
                "sink.transactional_id_prefix",
            ),
            (SPEC.replace("acme.out", "globex.out"), "sink.topic"),
            (SPEC.replace("acme.in", "other"), "source.topics[0]"),
            (
                SPEC.replace("topic = \"acme.out\"", "topic = \"acme.out\"\ndead_letter_topic = \"dlq\""),
                "sink.dead_letter_topic",
            ),
            (SPEC.replace("transform = \"fd\"", "wasm = \"/etc/passwd\""), "transforms[0].wasm"),
            (SPEC.replace("transform = \"fd\"", "transform = \"fd\"\nversion = 3"), "transforms[0].version"),
            (SPEC.replace("transform = \"fd\"", "transform = \"fd\"\ndeadline_ms = 5000"), "transforms[0].deadline_ms"),
            (format!("name = \"other\"\n{SPEC}"), "name"),
            (SPEC.replace("[sink]", "[sink]\nbogus = 1"), "sink.bogus"),
            (
                format!("{SPEC}[source.consumer]\n\"plugin.library.paths\" = \"/tmp/x.so\"\n"),
                "source.consumer.\"plugin.library.paths\"",
            ),
            (
                format!("{SPEC}[sink.producer]\n\"sasl.kerberos.kinit.cmd\" = \"touch /tmp/x\"\n"),
                "sink.producer.\"sasl.kerberos.kinit.cmd\"",
            ),
            // Host memory and threads beyond the tenant's quotas (512 MiB, 2 workers).
            (format!("{SPEC}[runtime]\nworkers = 3\n"), "runtime.workers"),
            (
                format!("{SPEC}[source.consumer]\n\"queued.max.messages.kbytes\" = 524289\n"),
                "source.consumer.\"queued.max.messages.kbytes\"",
            ),
            (
                format!("{SPEC}[sink.producer]\n\"queue.buffering.max.kbytes\" = \"2097151\"\n"),
                "sink.producer.\"queue.buffering.max.kbytes\"",
            ),
            (
                format!("{SPEC}[source.consumer]\n\"fetch.max.bytes\" = 600000000\n"),
                "source.consumer.\"fetch.max.bytes\"",
            ),
            (
                format!("{SPEC}[source.consumer]\n\"fetch.max.bytes\" = \"0x7ff00000\"\n"),
                "source.consumer.\"fetch.max.bytes\"",
            ),
            (
                format!("{SPEC}[sink.producer]\n\"queue.buffering.max.kbytes\" = \" 1024\"\n"),
                "sink.producer.\"queue.buffering.max.kbytes\"",
            ),
        ];
        for (text, field) in cases {
            let error = resolve_text(&text).unwrap_err();
            assert_eq!(error.field, field, "{}", error.message);
        }
    }
}
