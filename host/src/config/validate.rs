//! [`PipelineConfig::validate`]: every rule a pipeline file must keep, in one place.

use std::collections::BTreeSet;
use std::str::FromStr;
use std::time::Duration;

use super::cluster::is_connection_key;
use super::error::ConfigError;
use super::pipeline::*;
use super::raw::push_key;

const MIB: usize = 1 << 20;
const NAME_CHARS: &str = "ASCII letters, digits, '.', '_' and '-'";
/// Longest operator or table name: each is a label of every metric series of its own (and an
/// operator's prefixes its state keys), so a name a tenant made up must not be large.
const MAX_LABEL_NAME_LEN: usize = 128;

impl PipelineConfig {
    /// Checks every rule of the configuration reference (`docs/configuration.md`) and returns
    /// every broken one. [`from_file`] and [`from_toml_str`] call it; call it again after
    /// changing a configuration in code.
    ///
    /// Not checked here: that the wasm files are `weir:transform` components (`weir validate`
    /// and the start-up check them) and the broker's `transaction.max.timeout.ms` (at
    /// start-up).
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] naming the key at fault, the allowed values and the fix; or
    /// [`ConfigError::Several`] of them when several rules are broken.
    ///
    /// [`from_file`]: PipelineConfig::from_file
    /// [`from_toml_str`]: PipelineConfig::from_toml_str
    pub fn validate(&self) -> Result<(), ConfigError> {
        ConfigError::from_list(None, self.broken_rules())
    }

    /// Every rule the configuration breaks, each a [`ConfigError::Invalid`], in the order of
    /// the reference.
    pub(super) fn broken_rules(&self) -> Vec<ConfigError> {
        let mut broken = Broken::default();
        broken.check(check_name(
            "name",
            &self.name,
            Some(MAX_NAME_LEN),
            "it becomes part of group and transactional ids",
        ));
        self.validate_source(&mut broken);
        self.validate_transforms(&mut broken);
        self.validate_sink(&mut broken);
        self.validate_tables(&mut broken);
        self.validate_runtime(&mut broken);
        self.validate_checkpoint(&mut broken);
        broken.0
    }

    fn validate_source(&self, broken: &mut Broken) {
        let source = &self.source;
        broken.check(check_not_blank(
            "source.brokers",
            source.cluster.bootstrap_servers(),
            "e.g. \"localhost:9092\", or `bootstrap.servers` in [kafka]",
        ));
        check_reserved(broken, "kafka", source.cluster.properties(), true);
        if source.topics.is_empty() {
            broken.push("source.topics", "must name at least one topic");
        }
        let mut seen = BTreeSet::new();
        for (i, topic) in source.topics.iter().enumerate() {
            let key_path = format!("source.topics[{i}]");
            if broken.check(check_topic(&key_path, topic)) && !seen.insert(topic) {
                broken.push(key_path, format!("topic {topic:?} is listed twice"));
            }
        }
        if let Some(group_id) = &source.group_id {
            broken.check(check_not_blank("source.group_id", group_id, "or leave it out to use \"weir-<name>\""));
        }
        check_reserved(broken, "source.consumer", &source.consumer, false);
        broken.check(check_duration(
            "source.partition_discovery_interval_ms",
            source.partition_discovery_interval,
            MIN_PARTITION_DISCOVERY_INTERVAL,
            Duration::MAX,
        ));
        broken.check(check_range("source.batch_size", source.batch_size, 1, MAX_BATCH_SIZE, "records"));
        if let Some(watermark) = &source.watermark {
            if let Some(field) = &watermark.field {
                broken.check(check_not_blank(
                    "source.watermark.field",
                    field,
                    "name the JSON field, or leave it out to use the record timestamp",
                ));
            } else if watermark.format != TimeFormat::default() {
                broken.push(
                    "source.watermark.format",
                    "applies only to source.watermark.field; set the field too, or leave the format out",
                );
            }
            // i64 milliseconds: the watermark arithmetic must not overflow.
            let most = Duration::from_millis(i64::MAX as u64 / 4);
            broken.check(check_duration(
                "source.watermark.max_out_of_orderness_ms",
                watermark.max_out_of_orderness,
                Duration::ZERO,
                most,
            ));
            if let Some(idle) = watermark.idle_timeout {
                broken.check(check_duration("source.watermark.idle_timeout_ms", idle, Duration::from_millis(1), most));
            }
            if let Some(future) = watermark.max_future {
                broken.check(check_duration("source.watermark.max_future_ms", future, Duration::ZERO, most));
            }
        }
    }

    fn validate_tables(&self, broken: &mut Broken) {
        let sink = &self.sink;
        let mut names = BTreeSet::new();
        for (i, table) in self.source.tables.iter().enumerate() {
            let key = |field: &str| format!("source.tables[{i}].{field}");
            if broken.check(check_name(
                &key("name"),
                &table.name,
                Some(MAX_LABEL_NAME_LEN),
                "it names the header joined records get",
            )) && !names.insert(&table.name)
            {
                broken.push(key("name"), format!("{:?} names another table too", table.name));
            }
            broken.check(check_topic(&key("topic"), &table.topic));
            let named = self.source.topics.iter().chain(sink.topic.iter()).chain(sink.outputs.values());
            if named
                .chain(sink.dead_letter_topic.iter())
                .chain([&self.state.changelog_topic])
                .any(|t| *t == table.topic)
            {
                broken.push(
                    key("topic"),
                    format!(
                        "{:?} is also a source, sink, output, dead-letter or changelog topic; a table needs a topic of its own",
                        table.topic
                    ),
                );
            }
            if table.key_fields.is_empty() {
                broken.push(
                    key("key_fields"),
                    "must name at least one field of the source records' JSON value, e.g. [\"origin\", \"time_hour\"]",
                );
            }
            for (j, field) in table.key_fields.iter().enumerate() {
                broken.check(check_not_blank(
                    &format!("source.tables[{i}].key_fields[{j}]"),
                    field,
                    "name a top-level JSON field",
                ));
            }
            broken.check(check_range(&key("max_mb"), table.max_bytes / MIB, 1, MAX_MEMORY_LIMIT_BYTES / MIB, "MiB"));
        }
    }

    fn validate_transforms(&self, broken: &mut Broken) {
        if self.transforms.is_empty() {
            broken.push("transforms", "the pipeline needs at least one [[transforms]] table");
        }
        let mut seen = BTreeSet::new();
        for (i, t) in self.transforms.iter().enumerate() {
            let key = |field: &str| format!("transforms[{i}].{field}");
            if broken.check(check_name(
                &key("name"),
                &t.name,
                Some(MAX_LABEL_NAME_LEN),
                "operators are named by it in state, logs and metric labels",
            )) && !seen.insert(&t.name)
            {
                broken.push(
                    key("name"),
                    format!("{:?} names another transform too; operator names must be unique in the pipeline", t.name),
                );
            }
            if t.wasm.extension().is_none_or(|ext| ext != "wasm") {
                broken.push(
                    key("wasm"),
                    format!("{} is not a WebAssembly component: the path must end in \".wasm\"", t.wasm.display()),
                );
            }
            let bytes = t.memory_limit_bytes;
            if !(MIB..=MAX_MEMORY_LIMIT_BYTES).contains(&bytes) {
                let got = match bytes {
                    usize::MAX => "a larger value".to_owned(), // saturated by the parser
                    _ if bytes % MIB == 0 => format!("{}", bytes / MIB),
                    _ => format!("{bytes} bytes"),
                };
                broken.push(
                    key("memory_limit_mb"),
                    format!("must be within 1..={} (MiB), got {got}", MAX_MEMORY_LIMIT_BYTES / MIB),
                );
            }
            broken.check(check_duration(&key("deadline_ms"), t.deadline, Duration::from_millis(1), MAX_DEADLINE));
            if t.on_error == OnError::DeadLetter && self.sink.dead_letter_topic.is_none() {
                broken.push(
                    key("on_error"),
                    format!(
                        "transform {:?} sends failing records to a dead-letter topic, but sink.dead_letter_topic is not \
                         set: set sink.dead_letter_topic, or use on_error = \"fail\"",
                        t.name
                    ),
                );
            }
        }
    }

    /// Refuses an output topic that is also a source topic on the same brokers: the pipeline
    /// would read its own output back and write it again, for ever.
    fn check_not_source(&self, key_path: &str, topic: &str) -> Result<(), ConfigError> {
        if self.sink.cluster.bootstrap_servers() != self.source.cluster.bootstrap_servers() {
            return Ok(()); // another cluster: mirroring a topic under its own name
        }
        match self.source.topics.iter().position(|t| t == topic) {
            Some(i) => Err(ConfigError::invalid(
                key_path,
                format!(
                    "{topic:?} is also source.topics[{i}]: the pipeline would read its own output back and write it \
                     again without end; write to another topic"
                ),
            )),
            None => Ok(()),
        }
    }

    /// `[sink.postgres]`: where to connect (without the password), the table and key as plain
    /// lower-case identifiers, the output it takes, and its error policy.
    fn validate_postgres(&self, postgres: &PostgresSinkConfig, broken: &mut Broken) {
        match postgres::Config::from_str(&postgres.url) {
            Ok(url) if url.get_password().is_some() => broken.push(
                "sink.postgres.url",
                "holds a password: remove it, and give it as sink.postgres.password = \"${env:NAME}\" (or ${file:/path})",
            ),
            Ok(url) if !matches!(url.get_ssl_mode(), postgres::config::SslMode::Disable | postgres::config::SslMode::Prefer) => {
                broken.push("sink.postgres.url", "asks for TLS (sslmode), which the PostgreSQL sink cannot do yet: use sslmode=disable (or prefer), on a trusted network")
            }
            Ok(url) if url.get_dbname().is_none() => {
                broken.push("sink.postgres.url", "names no database: add it, e.g. postgresql://weir@127.0.0.1:5432/weir")
            }
            Ok(_) => {}
            Err(e) => broken.push(
                "sink.postgres.url",
                format!(
                    "is not a PostgreSQL connection string ({e}): write postgresql://user@host:port/dbname or host=… port=… user=… dbname=…"
                ),
            ),
        }
        let parts: Vec<&str> = postgres.table.split('.').collect();
        if parts.len() > 2 || !parts.iter().all(|p| is_sql_identifier(p)) {
            broken.push(
                "sink.postgres.table",
                format!("{:?} must be a table name, optionally schema-qualified, of {SQL_IDENTIFIER}", postgres.table),
            );
        }
        for (i, column) in postgres.key.iter().enumerate() {
            if postgres.key[..i].contains(column) {
                broken.push(format!("sink.postgres.key[{i}]"), format!("{column:?} is named twice"));
            } else if !is_sql_identifier(column) {
                broken.push(
                    format!("sink.postgres.key[{i}]"),
                    format!("{column:?} must be a column name of {SQL_IDENTIFIER}"),
                );
            }
        }
        match (postgres.mode, postgres.key.is_empty()) {
            (WriteMode::Upsert, true) => broken.push(
                "sink.postgres.key",
                "is required with mode = \"upsert\": the columns of the table's primary key or a unique index, e.g. [\"origin\", \"carrier\"]",
            ),
            (WriteMode::Insert, false) => {
                broken.push("sink.postgres.key", "applies to mode = \"upsert\" only: remove it, or set the mode")
            }
            _ => {}
        }
        match &postgres.output {
            Some(output) if !is_name(output) => {
                broken.push("sink.postgres.output", format!("output name {output:?} must be made of {NAME_CHARS}"))
            }
            Some(output) if self.sink.outputs.contains_key(output) => broken.push(
                "sink.postgres.output",
                format!("output {output:?} goes to a topic in sink.outputs already: an output has one destination"),
            ),
            None if self.sink.topic.is_some() => broken.push(
                "sink.postgres.output",
                "is missing, so the table takes the default output, which sink.topic names too: an output has one destination; set sink.postgres.output to a named output, or remove sink.topic",
            ),
            _ => {}
        }
        if postgres.on_error == OnError::DeadLetter && self.sink.dead_letter_topic.is_none() {
            broken.push(
                "sink.postgres.on_error",
                "is \"dead-letter\", but sink.dead_letter_topic is not set: set it, or use on_error = \"fail\"",
            );
        }
    }

    fn validate_sink(&self, broken: &mut Broken) {
        let sink = &self.sink;
        broken.check(check_not_blank(
            "sink.brokers",
            sink.cluster.bootstrap_servers(),
            "or leave it out to use the source's cluster",
        ));
        if sink.cluster != self.source.cluster {
            check_reserved(broken, "sink.kafka", sink.cluster.properties(), true);
        }
        if let Some(topic) = &sink.topic
            && broken.check(check_topic("sink.topic", topic))
        {
            broken.check(self.check_not_source("sink.topic", topic));
        }
        if let Some(postgres) = &sink.postgres {
            self.validate_postgres(postgres, broken);
        }
        for (output, topic) in &sink.outputs {
            let mut key_path = String::from("sink.outputs");
            push_key(&mut key_path, output);
            if !is_name(output) {
                broken.push(&key_path, format!("output name {output:?} must be made of {NAME_CHARS}"));
            } else if broken.check(check_topic(&key_path, topic)) {
                broken.check(self.check_not_source(&key_path, topic));
            }
        }
        broken.check(check_name(
            "sink.transactional_id_prefix",
            &sink.transactional_id_prefix,
            Some(MAX_NAME_LEN),
            "transactional ids are \"<prefix>-<instance>-<slot>\"",
        ));
        let min_slots = if sink.guarantee == Guarantee::ExactlyOnce { 2 } else { 1 };
        if sink.producer_slots < min_slots || sink.producer_slots > MAX_PRODUCER_SLOTS {
            let why = if sink.guarantee == Guarantee::ExactlyOnce {
                " (at least 2 with sink.guarantee = \"exactly-once\": one epoch awaits its commit while the next runs)"
            } else {
                ""
            };
            broken.push(
                "sink.producer_slots",
                format!("must be within {min_slots}..={MAX_PRODUCER_SLOTS}{why}, got {}", sink.producer_slots),
            );
        }
        broken.check(check_duration(
            "sink.transaction_timeout_ms",
            sink.transaction_timeout,
            MIN_TRANSACTION_TIMEOUT,
            MAX_TRANSACTION_TIMEOUT,
        ));
        check_reserved(broken, "sink.producer", &sink.producer, false);
        broken.check(check_producer_queue(&sink.producer));
        if let Some(dead) = &sink.dead_letter_topic
            && broken.check(check_topic("sink.dead_letter_topic", dead))
        {
            let clash = if sink.topic.as_ref() == Some(dead) {
                Some("sink.topic".to_owned())
            } else if let Some(i) = self.source.topics.iter().position(|t| t == dead) {
                Some(format!("source.topics[{i}]"))
            } else {
                sink.outputs.iter().find(|(_, topic)| *topic == dead).map(|(output, _)| {
                    let mut key_path = String::from("sink.outputs");
                    push_key(&mut key_path, output);
                    key_path
                })
            };
            if let Some(other) = clash {
                broken.push(
                    "sink.dead_letter_topic",
                    format!("{dead:?} is also {other}; dead letters need a topic of their own"),
                );
            }
        }
        if self.state.max_bytes == Some(0) {
            broken.push("state.max_bytes", "must be at least 1; leave it out for no limit");
        }
        let changelog = &self.state.changelog_topic;
        let named = self.source.topics.iter().chain(sink.topic.iter()).chain(sink.outputs.values());
        if broken.check(check_topic("state.changelog_topic", changelog))
            && named.chain(sink.dead_letter_topic.iter()).any(|t| t == changelog)
        {
            broken.push(
                "state.changelog_topic",
                format!(
                    "{changelog:?} is also a source, sink, output or dead-letter topic; the changelog needs a topic of its own"
                ),
            );
        }
        if let Some(partitions) = sink.partitions
            && partitions < 1
        {
            broken.push(
                "sink.partitions",
                format!("must be at least 1, got {partitions}; or leave it out to match the source"),
            );
        }
    }

    fn validate_runtime(&self, broken: &mut Broken) {
        if let Some(workers) = self.runtime.workers
            && !(1..=MAX_WORKERS).contains(&workers)
        {
            broken.push(
                "runtime.workers",
                format!("must be 1 to {MAX_WORKERS}, got {workers}; or leave it out for one per available core"),
            );
        }
        let grace = self.runtime.shutdown_grace;
        broken.check(check_duration("runtime.shutdown_grace_ms", grace, MIN_SHUTDOWN_GRACE, MAX_SHUTDOWN_GRACE));
    }

    fn validate_checkpoint(&self, broken: &mut Broken) {
        let checkpoint = &self.checkpoint;
        broken.check(check_duration(
            "checkpoint.interval_ms",
            checkpoint.interval,
            MIN_CHECKPOINT_INTERVAL,
            Duration::MAX,
        ));
        broken.check(check_duration(
            "checkpoint.timeout_ms",
            checkpoint.timeout,
            MIN_CHECKPOINT_TIMEOUT,
            Duration::MAX,
        ));
        if checkpoint.max_epoch_bytes < MIN_MAX_EPOCH_BYTES {
            broken.push(
                "checkpoint.max_epoch_bytes",
                format!("must be at least {MIN_MAX_EPOCH_BYTES} (1 MiB), got {}", checkpoint.max_epoch_bytes),
            );
        }
        let (interval, timeout) = (checkpoint.interval, checkpoint.timeout);
        let transaction_timeout = self.sink.transaction_timeout;
        if self.sink.guarantee == Guarantee::ExactlyOnce && interval.saturating_add(timeout) >= transaction_timeout {
            broken.push(
                "sink.transaction_timeout_ms",
                format!(
                    "with sink.guarantee = \"exactly-once\", checkpoint.interval_ms ({}) + checkpoint.timeout_ms ({}) \
                     = {} must be less than sink.transaction_timeout_ms ({}), or the broker may abort a transaction \
                     before its checkpoint completes: lower checkpoint.interval_ms or checkpoint.timeout_ms, or \
                     raise sink.transaction_timeout_ms (which must itself stay at or below the broker's \
                     transaction.max.timeout.ms, {} by default)",
                    interval.as_millis(),
                    timeout.as_millis(),
                    interval.saturating_add(timeout).as_millis(),
                    transaction_timeout.as_millis(),
                    BROKER_DEFAULT_MAX_TRANSACTION_TIMEOUT.as_millis(),
                ),
            );
        }
    }
}

/// The rules a configuration breaks, in the order they are found.
#[derive(Default)]
struct Broken(Vec<ConfigError>);

impl Broken {
    fn push(&mut self, key_path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError::invalid(key_path, message));
    }

    /// Records the error of `result`; returns whether there was none (so that a rule that
    /// needs a valid value can be checked only then).
    fn check(&mut self, result: Result<(), ConfigError>) -> bool {
        let ok = result.is_ok();
        self.0.extend(result.err());
        ok
    }
}

/// `[A-Za-z0-9._-]+`.
/// What [`is_sql_identifier`] accepts, for messages.
const SQL_IDENTIFIER: &str = "lower-case letters, digits and '_', starting with a letter or '_', at most 63 bytes";

/// Whether `s` is a PostgreSQL identifier that reads the same quoted and unquoted (so that
/// Weir's quoted SQL names what the user's `CREATE TABLE` made): at most 63 bytes
/// (`NAMEDATALEN` − 1).
fn is_sql_identifier(s: &str) -> bool {
    s.len() <= 63
        && s.bytes().next().is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn check_name(key_path: &str, value: &str, max_len: Option<usize>, why: &str) -> Result<(), ConfigError> {
    let too_long = max_len.is_some_and(|max| value.len() > max);
    if !is_name(value) || too_long || value == "." || value == ".." {
        let length = max_len.map_or(String::from("1 or more"), |max| format!("1 to {max}"));
        return Err(ConfigError::invalid(
            key_path,
            format!("must be {length} characters among {NAME_CHARS}, and not \".\" or \"..\" ({why}); got {value:?}"),
        ));
    }
    Ok(())
}

/// Whether `topic` is a valid Kafka topic name: 1 to 249 of `[A-Za-z0-9._-]`, not `.` or `..`
/// (Kafka's `Topic.validate`).
pub fn is_topic_name(topic: &str) -> bool {
    is_name(topic) && topic.len() <= MAX_TOPIC_LEN && topic != "." && topic != ".."
}

fn check_topic(key_path: &str, topic: &str) -> Result<(), ConfigError> {
    if !is_topic_name(topic) {
        return Err(ConfigError::invalid(
            key_path,
            format!(
                "{topic:?} is not a valid Kafka topic name: use 1 to {MAX_TOPIC_LEN} characters among {NAME_CHARS}, \
                 and not \".\" or \"..\""
            ),
        ));
    }
    Ok(())
}

fn check_not_blank(key_path: &str, value: &str, hint: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty() {
        return Err(ConfigError::invalid(key_path, format!("must not be empty ({hint})")));
    }
    Ok(())
}

fn check_range(key_path: &str, value: usize, min: usize, max: usize, unit: &str) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError::invalid(key_path, format!("must be within {min}..={max} ({unit}), got {value}")));
    }
    Ok(())
}

/// `min..=max`, in milliseconds; `Duration::MAX` means no upper bound.
fn check_duration(key_path: &str, value: Duration, min: Duration, max: Duration) -> Result<(), ConfigError> {
    if value < min || value > max {
        let allowed = if max == Duration::MAX {
            format!("at least {}", min.as_millis())
        } else {
            format!("within {}..={}", min.as_millis(), max.as_millis())
        };
        return Err(ConfigError::invalid(
            key_path,
            format!("must be {allowed} (milliseconds), got {}", value.as_millis()),
        ));
    }
    Ok(())
}

/// An explicit `queue.buffering.max.kbytes` must hold one record of `message.max.bytes`:
/// librdkafka waits for room forever, however empty the queue, for a larger record (which is why
/// the Kafka connector's default bound, `producer_queue_kbytes`, holds one). A value that is not
/// a number is librdkafka's to refuse.
fn check_producer_queue(producer: &std::collections::BTreeMap<String, String>) -> Result<(), ConfigError> {
    let Some(kbytes) = producer.get("queue.buffering.max.kbytes").and_then(|v| v.parse::<u64>().ok()) else {
        return Ok(());
    };
    let record = super::producer_message_max_bytes(producer);
    if kbytes.saturating_mul(1024) >= record {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "sink.producer.\"queue.buffering.max.kbytes\"",
        format!(
            "must hold one record of message.max.bytes ({record} bytes): at least {}, got {kbytes} \
             (librdkafka would wait forever for room for a larger record); raise it, or remove it \
             to get Weir's default",
            record.div_ceil(1024)
        ),
    ))
}

/// Refuses librdkafka keys that Weir sets itself, naming the typed option to use instead, and
/// (unless `cluster`: the table is `[kafka]` or `[sink.kafka]`) connection keys
/// ([`super::CONNECTION_KEYS`]), which belong in the cluster's table so that every client of the
/// cluster connects the same way.
fn check_reserved(
    broken: &mut Broken,
    table: &str,
    properties: &std::collections::BTreeMap<String, String>,
    cluster: bool,
) {
    for key in properties.keys() {
        if is_connection_key(key) {
            if !cluster {
                let mut key_path = table.to_owned();
                push_key(&mut key_path, key);
                broken.push(
                    key_path,
                    format!(
                        "{key:?} says how to reach the cluster, which every client of the pipeline shares: move it \
                         to [kafka] ([sink.kafka] for a separate output cluster)"
                    ),
                );
            }
            continue;
        }
        let Some(reserved) = RESERVED_RDKAFKA_KEYS.iter().find(|r| key.trim().eq_ignore_ascii_case(r)) else {
            continue;
        };
        let instead = match *reserved {
            "group.id" => "use source.group_id",
            "transaction.timeout.ms" => "use sink.transaction_timeout_ms",
            "transactional.id" => "use sink.transactional_id_prefix",
            "auto.offset.reset" => "use source.start and source.offset_reset",
            "group.instance.id" => "use weir run --instance",
            "partition.assignment.strategy" => "the group's rebalances need cooperative-sticky",
            "topic.metadata.refresh.interval.ms" => "use source.partition_discovery_interval_ms",
            _ => "sink.guarantee decides it",
        };
        let mut key_path = table.to_owned();
        push_key(&mut key_path, key);
        broken.push(
            key_path,
            format!(
                "Weir sets the librdkafka property {reserved:?} itself, for exactly-once to hold; remove it from \
                 [{table}] ({instead}). Reserved: {}",
                RESERVED_RDKAFKA_KEYS.join(", ")
            ),
        );
    }
}
