//! The file format: a pipeline file's TOML keys (`_ms`, `_mb`, optional values) read into a
//! [`PipelineConfig`], with every error found on the way rather than the first one.
//!
//! The user documentation of each key is on the resolved struct's field.
//!
//! # Errors, all of them
//! A syntax error ends the reading (with every other syntax error the TOML parser recovers
//! from): the rest of the file cannot be trusted. Anything else does not: an unknown key, a
//! missing key or a value of the wrong type is recorded, the key takes its default (or, when it
//! is required, an empty stand-in), and reading goes on. The [`Draft`] remembers which keys hold
//! such stand-ins and which defaults were derived from another key (`sink.brokers` from
//! `source.brokers`), so that [`Draft::finish`] reports the rules of
//! [`PipelineConfig::broken_rules`] that a file breaks, but none that only a stand-in or a
//! default derived from a faulty key breaks.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use toml::Spanned;
use toml::de::{DeTable, DeValue, ValueDeserializer};

use super::cluster::ClusterConfig;
use super::error::ConfigError;
use super::pipeline::*;
use super::secret;

/// Reads `text` (from `file`, when given), resolving relative paths against `base_dir`.
///
/// # Errors
/// The syntax errors, when `text` is not TOML.
pub(super) fn read(text: &str, file: Option<&Path>, base_dir: &Path) -> Result<Draft, ConfigError> {
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        let errors = syntax
            .into_iter()
            .map(|error| ConfigError::Parse {
                path: file.map(Path::to_path_buf),
                key_path: String::new(),
                line: None,
                message: error.to_string(),
            })
            .collect();
        return Err(ConfigError::from_list(file, errors).expect_err("at least one syntax error"));
    }
    let reader = Reader { text, file: file.map(Path::to_path_buf), notes: RefCell::default() };
    let config = pipeline(Table::new(&reader, String::new(), root.into_inner()), base_dir);
    Ok(Draft { config, file: reader.file, notes: reader.notes.into_inner() })
}

/// A file read to its end: the configuration, with stand-ins where a key was faulty, and what
/// reading found.
pub(super) struct Draft {
    config: PipelineConfig,
    file: Option<PathBuf>,
    notes: Notes,
}

/// What reading found besides the values.
#[derive(Default)]
struct Notes {
    /// Unknown, missing and mistyped keys.
    errors: Vec<ConfigError>,
    /// Keys whose value is a stand-in for a faulty one (a whole table's key for a faulty table).
    stand_ins: BTreeSet<String>,
    /// Keys left out whose default is another key's value → that key.
    derived: BTreeMap<String, String>,
    /// Line of each key read.
    lines: BTreeMap<String, usize>,
}

impl Draft {
    /// The configuration, if the file breaks no rule and `check` finds nothing wrong with it;
    /// else every error, in file order.
    ///
    /// `check` runs on the configuration even when it has errors (so that one run reports them
    /// all), but what it says about a key that already has an error, or holds a stand-in, is
    /// left out.
    pub(super) fn finish(
        self,
        check: impl FnOnce(&PipelineConfig) -> Vec<ConfigError>,
    ) -> Result<PipelineConfig, ConfigError> {
        let Draft { config, file, mut notes } = self;
        let mut errors = std::mem::take(&mut notes.errors);
        let rules = config.broken_rules();
        let faulty: BTreeSet<String> =
            errors.iter().chain(&rules).filter_map(|e| e.key_path().map(str::to_owned)).collect();
        // Left out: what a stand-in breaks, and what a default taken from a faulty key breaks
        // (that key's error again).
        let left_out = |key: Option<&str>| {
            key.is_some_and(|key| {
                notes.holds_stand_in(key)
                    || notes
                        .derived
                        .get(key)
                        .is_some_and(|origin| notes.holds_stand_in(origin) || faulty.contains(origin))
            })
        };
        errors.extend(rules.into_iter().filter(|e| !left_out(e.key_path())));
        for error in check(&config) {
            let key = error.key_path();
            if !left_out(key) && !errors.iter().any(|e| key.is_some() && e.key_path() == key) {
                errors.push(error);
            }
        }
        let mut errors: Vec<ConfigError> = errors
            .into_iter()
            .map(|e| {
                let line = e.key_path().and_then(|key| notes.line_of(key));
                e.or_line(line)
            })
            .collect();
        // Stable: errors of one line stay in the order found.
        errors.sort_by_key(|e| e.line().unwrap_or(usize::MAX));
        ConfigError::from_list(file.as_deref(), errors).map(|()| config)
    }
}

impl Notes {
    /// Whether `key` or a table it is in holds a stand-in.
    fn holds_stand_in(&self, key: &str) -> bool {
        ancestors(key).any(|key| self.stand_ins.contains(key))
    }

    /// Line of `key`, or of the nearest table holding it that is in the file.
    fn line_of(&self, key: &str) -> Option<usize> {
        ancestors(key).find_map(|key| self.lines.get(key).copied())
    }
}

/// `key` and the keys of the tables holding it, innermost first: `sink.outputs.late`,
/// `sink.outputs`, `sink`; `transforms[0].wasm`, `transforms[0]`, `transforms`.
fn ancestors(key: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(key), |key| key.rfind(['.', '[']).map(|at| &key[..at]))
}

/// Appends `.key` (or `."key"`) to a dotted key path.
pub(super) fn push_key(out: &mut String, key: &str) {
    if !out.is_empty() {
        out.push('.');
    }
    let bare = !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        out.push_str(key);
    } else {
        out.push_str(&format!("{key:?}"));
    }
}

/// The file being read and what reading found so far, shared by its [`Table`]s.
struct Reader<'i> {
    text: &'i str,
    file: Option<PathBuf>,
    notes: RefCell<Notes>,
}

impl Reader<'_> {
    fn line(&self, offset: usize) -> usize {
        self.text.get(..offset).unwrap_or(self.text).matches('\n').count() + 1
    }

    /// Records that `key_path` is faulty: `message` says why; its value is a stand-in.
    fn fault(&self, key_path: &str, offset: Option<usize>, message: String) {
        let mut notes = self.notes.borrow_mut();
        notes.stand_ins.insert(key_path.to_owned());
        // Nothing to say about a key of a table that is itself faulty (missing, say).
        if ancestors(key_path).skip(1).any(|key| notes.stand_ins.contains(key)) {
            return;
        }
        notes.errors.push(ConfigError::Parse {
            path: self.file.clone(),
            key_path: key_path.to_owned(),
            line: offset.map(|offset| self.line(offset)),
            message,
        });
    }
}

/// One TOML table of the file: its known keys are taken out of it one by one, and those left
/// at the end are unknown.
struct Table<'r, 'i> {
    reader: &'r Reader<'i>,
    /// Key path of the table: empty for the top level, `sink`, `transforms[0]`.
    path: String,
    entries: DeTable<'i>,
    /// The keys asked for, to name them when one is unknown.
    known: Vec<&'static str>,
}

impl<'r, 'i> Table<'r, 'i> {
    fn new(reader: &'r Reader<'i>, path: String, entries: DeTable<'i>) -> Self {
        Self { reader, path, entries, known: Vec::new() }
    }

    fn key_path(&self, key: &str) -> String {
        let mut path = self.path.clone();
        push_key(&mut path, key);
        path
    }

    /// How messages name the table: `[sink]`, `[[transforms]]`, the top level.
    fn header(&self) -> String {
        match self.path.strip_suffix(']').and_then(|p| p.rsplit_once('[')) {
            _ if self.path.is_empty() => "the top level".to_owned(),
            Some((array, _)) => format!("[[{array}]]"),
            None => format!("[{}]", self.path),
        }
    }

    /// Takes `key` out of the table, noting its line.
    fn take(&mut self, key: &'static str) -> Option<Spanned<DeValue<'i>>> {
        self.known.push(key);
        let (name, value) = self.entries.remove_entry(key)?;
        let line = self.reader.line(name.span().start);
        self.reader.notes.borrow_mut().lines.insert(self.key_path(key), line);
        Some(value)
    }

    /// `value` as a `T`, else `None` with the error recorded at `key_path`.
    fn parse<T: DeserializeOwned>(&self, key_path: &str, value: Spanned<DeValue<'i>>) -> Option<T> {
        let offset = value.span().start;
        T::deserialize(ValueDeserializer::from(value))
            .map_err(|e| {
                self.reader.fault(key_path, Some(e.span().map_or(offset, |s| s.start)), e.message().to_owned())
            })
            .ok()
    }

    /// `key`'s value, when it is there and a `T`.
    fn optional<T: DeserializeOwned>(&mut self, key: &'static str) -> Option<T> {
        let value = self.take(key)?;
        self.parse(&self.key_path(key), value)
    }

    /// `key`'s value; a missing or faulty one is recorded, and stands in as `T::default()`.
    fn required<T: DeserializeOwned + Default>(&mut self, key: &'static str) -> T {
        match self.take(key) {
            Some(value) => self.parse(&self.key_path(key), value),
            None => {
                self.missing(key, &format!("`{key}`"));
                None
            }
        }
        .unwrap_or_default()
    }

    fn missing(&self, key: &str, what: &str) {
        let message = format!("missing {what}, which is required: add it to {}", self.header());
        self.reader.fault(&self.key_path(key), None, message);
    }

    /// The table `key`, when it is there; a value that is not a table is recorded and reads as
    /// an empty one.
    fn table(&mut self, key: &'static str) -> Option<Table<'r, 'i>> {
        let value = self.take(key)?;
        Some(self.as_table(self.key_path(key), value))
    }

    /// The table `key`, or an empty one when it is not there (its keys all optional).
    fn table_or_empty(&mut self, key: &'static str) -> Table<'r, 'i> {
        self.table(key).unwrap_or_else(|| Table::new(self.reader, self.key_path(key), DeTable::new()))
    }

    /// The table `key`; a missing one is recorded and reads as an empty one.
    fn required_table(&mut self, key: &'static str) -> Table<'r, 'i> {
        self.table(key).unwrap_or_else(|| {
            self.missing(key, &format!("table [{}]", self.key_path(key)));
            Table::new(self.reader, self.key_path(key), DeTable::new())
        })
    }

    /// The tables of the array of tables `key`, when it is there; a value that is not an array
    /// is recorded and reads as an empty one, an item that is not a table as an empty table.
    fn tables(&mut self, key: &'static str) -> Option<Vec<Table<'r, 'i>>> {
        let value = self.take(key)?;
        let key_path = self.key_path(key);
        let offset = value.span().start;
        Some(match value.into_inner() {
            DeValue::Array(items) => {
                items.into_iter().enumerate().map(|(i, item)| self.as_table(format!("{key_path}[{i}]"), item)).collect()
            }
            other => {
                let message = format!("must be an array of tables ([[{key_path}]]), got {}", other.type_str());
                self.reader.fault(&key_path, Some(offset), message);
                Vec::new()
            }
        })
    }

    fn as_table(&self, key_path: String, value: Spanned<DeValue<'i>>) -> Table<'r, 'i> {
        let offset = value.span().start;
        match value.into_inner() {
            DeValue::Table(entries) => Table::new(self.reader, key_path, entries),
            other => {
                self.reader.fault(&key_path, Some(offset), format!("must be a table, got {}", other.type_str()));
                Table::new(self.reader, key_path, DeTable::new())
            }
        }
    }

    /// `value`, the default of `key` (left out) taken from the key `origin`, which is noted.
    fn derived(&self, key: &str, origin: &str, value: &str) -> String {
        let mut notes = self.reader.notes.borrow_mut();
        notes.derived.insert(self.key_path(key), origin.to_owned());
        value.to_owned()
    }

    /// The table `key` as `(name, value)` pairs in key order, each value a `T`; a faulty value is
    /// recorded at `key.name` and left out.
    fn map<T: DeserializeOwned>(&mut self, key: &'static str) -> Vec<(String, T)> {
        self.table(key).map(|mut table| table.drain()).unwrap_or_default()
    }

    /// Every entry of this table as `(name, value)` in key order, each value a `T`; a faulty
    /// value is recorded and left out. None is left unknown.
    fn drain<T: DeserializeOwned>(&mut self) -> Vec<(String, T)> {
        let entries = std::mem::take(&mut self.entries);
        entries
            .into_iter()
            .filter_map(|(name, value)| {
                let name = name.into_inner().into_owned();
                let parsed = self.parse(&self.key_path(&name), value)?;
                Some((name, parsed))
            })
            .collect()
    }

    /// Records every key left in the table as unknown, naming the nearest known one.
    fn finish(self) {
        for (name, _) in self.entries.iter() {
            let offset = name.span().start;
            let name: &str = name.get_ref();
            let nearest = self.known.iter().filter_map(|k| Some((distance(name, k)?, *k))).min();
            let message = match nearest {
                Some((_, known)) => format!("unknown key; did you mean `{known}`?"),
                None => format!("unknown key: remove it; the keys of {} are {}", self.header(), self.known.join(", ")),
            };
            self.reader.fault(&self.key_path(name), Some(offset), message);
        }
    }
}

/// Edit distance between an unknown key and a known one, when it is small enough for a typo
/// (at most 2, or a third of the known key), case and `-`/`_` aside.
fn distance(unknown: &str, known: &str) -> Option<usize> {
    let fold =
        |s: &str| -> Vec<char> { s.chars().map(|c| if c == '-' { '_' } else { c.to_ascii_lowercase() }).collect() };
    let (a, b) = (fold(unknown), fold(known));
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    let d = row[b.len()];
    (d <= 2.max(b.len() / 3)).then_some(d)
}

fn pipeline(mut top: Table<'_, '_>, base_dir: &Path) -> PipelineConfig {
    let name: String = top.required("name");
    let kafka = top.table("kafka").map(cluster);
    let source = source(top.required_table("source"), kafka);
    let transforms = top.tables("transforms").unwrap_or_else(|| {
        top.missing("transforms", "[[transforms]]");
        Vec::new()
    });
    let transforms = transforms.into_iter().map(|t| transform(t, base_dir)).collect();
    let sink = sink(top.required_table("sink"), &name, &source.cluster);
    let checkpoint = checkpoint(top.table_or_empty("checkpoint"));
    let state = state(top.table_or_empty("state"), &name, base_dir);
    let runtime = runtime(top.table_or_empty("runtime"));
    top.finish();
    PipelineConfig { name, source, transforms, sink, checkpoint, state, runtime }
}

/// A cluster's table (`[kafka]`, `[sink.kafka]`).
fn cluster(t: Table<'_, '_>) -> ClusterConfig {
    ClusterConfig::from_properties(properties(Some(t)))
}

/// A table of librdkafka properties (`[kafka]`, `source.consumer`, `sink.producer`): values as
/// strings, secret references resolved ([`secret::resolve`]); a value that cannot be resolved is
/// recorded at its key, naming the reference.
fn properties(t: Option<Table<'_, '_>>) -> BTreeMap<String, String> {
    let Some(mut t) = t else { return BTreeMap::new() };
    t.drain::<Scalar>()
        .into_iter()
        .filter_map(|(key, Scalar(value))| match secret::resolve(&key, &value) {
            Ok(value) => Some((key, value)),
            Err(e) => {
                t.reader.fault(&t.key_path(&key), None, e.to_string());
                None
            }
        })
        .collect()
}

/// The cluster of `[source]` or `[sink]`: `table` (`[kafka]`, `[sink.kafka]`) or the shorthand
/// `brokers` key of `t`, not both; `default` when neither is there (else `brokers` is missing).
fn cluster_of(
    t: &mut Table<'_, '_>,
    table: Option<ClusterConfig>,
    default: Option<&ClusterConfig>,
    table_name: &str,
) -> ClusterConfig {
    let brokers: Option<String> = t.optional("brokers");
    match (table, brokers) {
        (Some(cluster), Some(_)) => {
            let message = format!("{table_name} gives the cluster already: remove this key, or the table");
            t.reader.fault(&t.key_path("brokers"), None, message);
            cluster
        }
        (Some(cluster), None) => cluster,
        (None, Some(brokers)) => ClusterConfig::new(&brokers),
        (None, None) => match default {
            Some(cluster) => {
                t.derived("brokers", "source.brokers", cluster.bootstrap_servers());
                cluster.clone()
            }
            None => {
                t.missing("brokers", &format!("`brokers` (or a {table_name} table)"));
                ClusterConfig::default()
            }
        },
    }
}

fn source(mut t: Table<'_, '_>, kafka: Option<ClusterConfig>) -> SourceConfig {
    let cluster = cluster_of(&mut t, kafka, None, "[kafka]");
    let source = SourceConfig {
        cluster,
        topics: t.required("topics"),
        start: t.optional("start").unwrap_or_default(),
        offset_reset: t.optional("offset_reset").unwrap_or_default(),
        partition_discovery_interval: t
            .optional("partition_discovery_interval_ms")
            .map_or(DEFAULT_PARTITION_DISCOVERY_INTERVAL, Duration::from_millis),
        group_id: t.optional("group_id"),
        consumer: properties(t.table("consumer")),
        batch_size: t.optional("batch_size").unwrap_or(DEFAULT_BATCH_SIZE),
        watermark: t.table("watermark").map(watermark),
        tables: t.tables("tables").unwrap_or_default().into_iter().map(table).collect(),
    };
    t.finish();
    source
}

fn watermark(mut t: Table<'_, '_>) -> WatermarkConfig {
    let watermark = WatermarkConfig {
        field: t.optional("field"),
        format: t.optional("format").unwrap_or_default(),
        max_out_of_orderness: Duration::from_millis(t.optional("max_out_of_orderness_ms").unwrap_or(0)),
        idle_timeout: t.optional("idle_timeout_ms").map(Duration::from_millis),
        max_future: t.optional("max_future_ms").map(Duration::from_millis),
    };
    t.finish();
    watermark
}

fn table(mut t: Table<'_, '_>) -> TableConfig {
    let table = TableConfig {
        name: t.required("name"),
        topic: t.required("topic"),
        key_fields: t.required("key_fields"),
        max_bytes: t.optional("max_mb").map_or(DEFAULT_TABLE_MAX_BYTES, mib_to_bytes),
    };
    t.finish();
    table
}

fn transform(mut t: Table<'_, '_>, base_dir: &Path) -> TransformConfig {
    let transform = TransformConfig {
        name: t.required("name"),
        wasm: base_dir.join(t.required::<PathBuf>("wasm")),
        config: t.map("config").into_iter().map(|(key, Scalar(value))| (key, value)).collect(),
        memory_limit_bytes: t.optional("memory_limit_mb").map_or(DEFAULT_MEMORY_LIMIT_BYTES, mib_to_bytes),
        deadline: t.optional("deadline_ms").map_or(DEFAULT_DEADLINE, Duration::from_millis),
        on_error: t.optional("on_error").unwrap_or_default(),
    };
    t.finish();
    transform
}

/// `[sink]`; `name` and `source` (the source's cluster) give the defaults derived from them.
fn sink(mut t: Table<'_, '_>, name: &str, source: &ClusterConfig) -> SinkConfig {
    let kafka = t.table("kafka").map(cluster);
    let cluster = cluster_of(&mut t, kafka, Some(source), "[sink.kafka]");
    let sink = SinkConfig {
        cluster,
        topic: t.optional("topic"),
        outputs: t.map("outputs").into_iter().collect(),
        guarantee: t.optional("guarantee").unwrap_or_default(),
        transactional_id_prefix: t
            .optional("transactional_id_prefix")
            .unwrap_or_else(|| t.derived("transactional_id_prefix", "name", name)),
        producer_slots: t.optional("producer_slots").unwrap_or(DEFAULT_PRODUCER_SLOTS),
        transaction_timeout: t
            .optional("transaction_timeout_ms")
            .map_or(DEFAULT_TRANSACTION_TIMEOUT, Duration::from_millis),
        producer: properties(t.table("producer")),
        dead_letter_topic: t.optional("dead_letter_topic"),
        create_topics: t.optional("create_topics").unwrap_or(false),
        partitions: t.optional("partitions"),
        postgres: t.table("postgres").map(postgres),
    };
    if sink.topic.is_none() && sink.postgres.as_ref().is_none_or(|pg| pg.output.is_some()) {
        t.missing("topic", "`topic` (or a [sink.postgres] table without `output`, taking the default output)");
    }
    t.finish();
    sink
}

/// `[sink.postgres]`; its password is a secret reference ([`secret::resolve`]).
fn postgres(mut t: Table<'_, '_>) -> PostgresSinkConfig {
    let password = t.optional::<String>("password").and_then(|value| match secret::resolve("password", &value) {
        Ok(password) => Some(password),
        Err(e) => {
            t.reader.fault(&t.key_path("password"), None, e.to_string());
            None
        }
    });
    let postgres = PostgresSinkConfig {
        url: t.required("url"),
        password,
        table: t.required("table"),
        mode: t.optional("mode").unwrap_or_default(),
        key: t.optional("key").unwrap_or_default(),
        output: t.optional("output"),
        on_error: t.optional("on_error").unwrap_or_default(),
    };
    t.finish();
    postgres
}

fn checkpoint(mut t: Table<'_, '_>) -> CheckpointConfig {
    let checkpoint = CheckpointConfig {
        interval: t.optional("interval_ms").map_or(DEFAULT_CHECKPOINT_INTERVAL, Duration::from_millis),
        timeout: t.optional("timeout_ms").map_or(DEFAULT_CHECKPOINT_TIMEOUT, Duration::from_millis),
        max_epoch_bytes: t.optional("max_epoch_bytes").unwrap_or(DEFAULT_MAX_EPOCH_BYTES),
    };
    t.finish();
    checkpoint
}

/// `[state]`, whose defaults derive from the pipeline's `name`.
fn state(mut t: Table<'_, '_>, name: &str, base_dir: &Path) -> StateConfig {
    let dir = t.optional::<PathBuf>("dir").unwrap_or_else(|| Path::new(DEFAULT_STATE_PARENT).join(name));
    let state = StateConfig {
        dir: base_dir.join(dir),
        changelog_topic: t
            .optional("changelog_topic")
            .unwrap_or_else(|| t.derived("changelog_topic", "name", &format!("{name}-changelog"))),
        max_bytes: t.optional("max_bytes"),
    };
    t.finish();
    state
}

fn runtime(mut t: Table<'_, '_>) -> RuntimeConfig {
    let runtime = RuntimeConfig {
        workers: t.optional("workers"),
        shutdown_grace: t.optional("shutdown_grace_ms").map_or(DEFAULT_SHUTDOWN_GRACE, Duration::from_millis),
    };
    t.finish();
    runtime
}

/// MiB to bytes, saturating (so that `validate` refuses an absurd value instead of wrapping).
fn mib_to_bytes(mib: u64) -> usize {
    usize::try_from(mib).ok().and_then(|m| m.checked_mul(1 << 20)).unwrap_or(usize::MAX)
}

/// A TOML string, integer, float or boolean, as a string (`15`, `"15"` → `"15"`).
struct Scalar(String);

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ScalarVisitor;
        impl Visitor<'_> for ScalarVisitor {
            type Value = Scalar;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string, integer, float or boolean")
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
