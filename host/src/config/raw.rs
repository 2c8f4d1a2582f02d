//! The file format: serde structs that mirror the TOML keys (`_ms`, `_mb`, optional values),
//! parsed with the path of a failing key, then resolved into [`PipelineConfig`].
//!
//! The user documentation of each key is on the resolved struct's field.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::error::ConfigError;
use super::pipeline::*;

/// Parses a pipeline file, naming the failing key on error.
pub(super) fn parse(text: &str, file: Option<&Path>) -> Result<PipelineFile, ConfigError> {
    let parse_error = |key_path: String, error: toml::de::Error| ConfigError::Parse {
        path: file.map(Path::to_path_buf),
        key_path,
        message: error.to_string(),
    };
    let deserializer = toml::Deserializer::parse(text).map_err(|e| parse_error(String::new(), e))?;
    serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key_path = key_path(e.path());
        parse_error(key_path, e.into_inner())
    })
}

/// `transforms[0].config.threshold`, quoting keys that are not TOML bare keys:
/// `source.consumer."fetch.min.bytes"`.
fn key_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            Segment::Map { key } | Segment::Enum { variant: key } => push_key(&mut out, key),
            Segment::Unknown => push_key(&mut out, "?"),
        }
    }
    out
}

/// Appends `.key` (or `."key"`) to a dotted key path.
pub(super) fn push_key(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    let bare = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare || key == "?" {
        out.push_str(key);
    } else {
        out.push_str(&format!("{key:?}"));
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PipelineFile {
    name: String,
    source: SourceFile,
    transforms: Vec<TransformFile>,
    sink: SinkFile,
    #[serde(default)]
    checkpoint: CheckpointFile,
    #[serde(default)]
    state: StateFile,
    #[serde(default)]
    runtime: RuntimeFile,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceFile {
    brokers: String,
    topics: Vec<String>,
    start: Option<StartPosition>,
    offset_reset: Option<OffsetReset>,
    partition_discovery_interval_ms: Option<u64>,
    group_id: Option<String>,
    #[serde(default)]
    consumer: BTreeMap<String, Scalar>,
    batch_size: Option<usize>,
    watermark: Option<WatermarkFile>,
    #[serde(default)]
    tables: Vec<TableFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TableFile {
    name: String,
    topic: String,
    key_fields: Vec<String>,
    max_mb: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatermarkFile {
    field: Option<String>,
    format: Option<TimeFormat>,
    max_out_of_orderness_ms: Option<u64>,
    idle_timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TransformFile {
    name: String,
    wasm: PathBuf,
    #[serde(default)]
    config: ScalarTable,
    memory_limit_mb: Option<u64>,
    deadline_ms: Option<u64>,
    on_error: Option<OnError>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SinkFile {
    brokers: Option<String>,
    topic: String,
    #[serde(default)]
    outputs: BTreeMap<String, String>,
    guarantee: Option<Guarantee>,
    transactional_id_prefix: Option<String>,
    producer_slots: Option<usize>,
    transaction_timeout_ms: Option<u64>,
    #[serde(default)]
    producer: BTreeMap<String, Scalar>,
    dead_letter_topic: Option<String>,
    create_topics: Option<bool>,
    partitions: Option<i32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CheckpointFile {
    interval_ms: Option<u64>,
    timeout_ms: Option<u64>,
    max_epoch_bytes: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RuntimeFile {
    workers: Option<usize>,
    shutdown_grace_ms: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct StateFile {
    dir: Option<PathBuf>,
    changelog_topic: Option<String>,
    max_bytes: Option<u64>,
}

impl PipelineFile {
    /// Fills in defaults and resolves relative paths against `base_dir`. Validates nothing.
    pub(super) fn resolve(self, base_dir: &Path) -> PipelineConfig {
        let PipelineFile { name, source, transforms, sink, checkpoint, state, runtime } = self;
        let source = SourceConfig {
            brokers: source.brokers,
            topics: source.topics,
            start: source.start.unwrap_or_default(),
            offset_reset: source.offset_reset.unwrap_or_default(),
            partition_discovery_interval: source
                .partition_discovery_interval_ms
                .map_or(DEFAULT_PARTITION_DISCOVERY_INTERVAL, Duration::from_millis),
            group_id: source.group_id,
            consumer: strings(source.consumer),
            batch_size: source.batch_size.unwrap_or(DEFAULT_BATCH_SIZE),
            watermark: source.watermark.map(|w| WatermarkConfig {
                field: w.field,
                format: w.format.unwrap_or_default(),
                max_out_of_orderness: Duration::from_millis(w.max_out_of_orderness_ms.unwrap_or(0)),
                idle_timeout: w.idle_timeout_ms.map(Duration::from_millis),
            }),
            tables: source
                .tables
                .into_iter()
                .map(|t| TableConfig {
                    name: t.name,
                    topic: t.topic,
                    key_fields: t.key_fields,
                    max_bytes: t.max_mb.map_or(DEFAULT_TABLE_MAX_BYTES, mib_to_bytes),
                })
                .collect(),
        };
        let transforms = transforms
            .into_iter()
            .map(|t| TransformConfig {
                name: t.name,
                wasm: base_dir.join(t.wasm),
                config: t.config.0,
                memory_limit_bytes: t.memory_limit_mb.map_or(DEFAULT_MEMORY_LIMIT_BYTES, mib_to_bytes),
                deadline: t.deadline_ms.map_or(DEFAULT_DEADLINE, Duration::from_millis),
                on_error: t.on_error.unwrap_or_default(),
            })
            .collect();
        let sink = SinkConfig {
            brokers: sink.brokers.unwrap_or_else(|| source.brokers.clone()),
            topic: sink.topic,
            outputs: sink.outputs,
            guarantee: sink.guarantee.unwrap_or_default(),
            transactional_id_prefix: sink.transactional_id_prefix.unwrap_or_else(|| name.clone()),
            producer_slots: sink.producer_slots.unwrap_or(DEFAULT_PRODUCER_SLOTS),
            transaction_timeout: sink.transaction_timeout_ms.map_or(DEFAULT_TRANSACTION_TIMEOUT, Duration::from_millis),
            producer: strings(sink.producer),
            dead_letter_topic: sink.dead_letter_topic,
            create_topics: sink.create_topics.unwrap_or(false),
            partitions: sink.partitions,
        };
        let checkpoint = CheckpointConfig {
            interval: checkpoint.interval_ms.map_or(DEFAULT_CHECKPOINT_INTERVAL, Duration::from_millis),
            timeout: checkpoint.timeout_ms.map_or(DEFAULT_CHECKPOINT_TIMEOUT, Duration::from_millis),
            max_epoch_bytes: checkpoint.max_epoch_bytes.unwrap_or(DEFAULT_MAX_EPOCH_BYTES),
        };
        let dir = state.dir.unwrap_or_else(|| Path::new(DEFAULT_STATE_PARENT).join(&name));
        let changelog_topic = state.changelog_topic.unwrap_or_else(|| format!("{name}-changelog"));
        let state = StateConfig { dir: base_dir.join(dir), changelog_topic, max_bytes: state.max_bytes };
        let runtime = RuntimeConfig {
            workers: runtime.workers,
            shutdown_grace: runtime.shutdown_grace_ms.map_or(DEFAULT_SHUTDOWN_GRACE, Duration::from_millis),
        };
        PipelineConfig { name, source, transforms, sink, checkpoint, state, runtime }
    }
}

/// MiB to bytes, saturating (so that `validate` refuses an absurd value instead of wrapping).
fn mib_to_bytes(mib: u64) -> usize {
    usize::try_from(mib).ok().and_then(|m| m.checked_mul(1 << 20)).unwrap_or(usize::MAX)
}

fn strings(map: BTreeMap<String, Scalar>) -> BTreeMap<String, String> {
    map.into_iter().map(|(k, v)| (k, v.0)).collect()
}

const SCALAR: &str = "a string, integer, float or boolean";

/// A TOML string, integer, float or boolean, as a string (`15`, `"15"` → `"15"`).
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(SCALAR)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
                Ok(Scalar(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
                Ok(Scalar(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
                Ok(Scalar(v.to_string()))
            }
        }
        deserializer.deserialize_any(ScalarVisitor)
    }
}

/// A table of scalars, as `(key, value)` pairs in the order the TOML parser yields them (sorted
/// by key unless the `toml` crate's `preserve_order` feature is on).
#[derive(Default)]
struct ScalarTable(Vec<(String, String)>);

impl<'de> Deserialize<'de> for ScalarTable {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TableVisitor;
        impl<'de> Visitor<'de> for TableVisitor {
            type Value = ScalarTable;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a table whose values are each {SCALAR}")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ScalarTable, A::Error> {
                let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((key, Scalar(value))) = map.next_entry::<String, Scalar>()? {
                    entries.push((key, value));
                }
                Ok(ScalarTable(entries))
            }
        }
        deserializer.deserialize_map(TableVisitor)
    }
}
