use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::pipeline::{
    CheckpointConfig, DEFAULT_BATCH_SIZE, DEFAULT_PARTITION_DISCOVERY_INTERVAL, DEFAULT_TABLE_MAX_BYTES,
    RESERVED_RDKAFKA_KEYS, RuntimeConfig, StateConfig,
};
use super::*;

const MINIMAL: &str = r#"
name = "flight-delays"

[source]
brokers = "localhost:9092"
topics = ["flights"]

[[transforms]]
name = "flight-delays"
wasm = "flight-delays.wasm"

[sink]
topic = "flight-delays"
"#;

fn parse(text: &str) -> Result<PipelineConfig, ConfigError> {
    PipelineConfig::from_toml_str(text, Path::new("/srv/pipelines"))
}

/// Parses `MINIMAL` with `line` added to `[table]` (or at the top for `""`).
fn parse_with(table: &str, line: &str) -> Result<PipelineConfig, ConfigError> {
    let header = if table == "transforms" { "[[transforms]]\n".to_owned() } else { format!("[{table}]\n") };
    let text = if table.is_empty() {
        format!("{line}\n{MINIMAL}")
    } else {
        MINIMAL.replacen(&header, &format!("{header}{line}\n"), 1)
    };
    assert_ne!(text, MINIMAL, "no [{table}] in MINIMAL");
    parse(&text)
}

/// The `(key_path, Display)` of an error, after checking it is the expected variant.
fn invalid(result: Result<PipelineConfig, ConfigError>) -> (String, String) {
    match result {
        Err(e @ ConfigError::Invalid { .. }) => (e.key_path().unwrap().to_owned(), e.to_string()),
        other => panic!("expected ConfigError::Invalid, got {other:?}"),
    }
}

fn parse_error(result: Result<PipelineConfig, ConfigError>) -> (String, String) {
    match result {
        Err(e @ ConfigError::Parse { .. }) => (e.key_path().unwrap_or("").to_owned(), e.to_string()),
        other => panic!("expected ConfigError::Parse, got {other:?}"),
    }
}

#[test]
fn full_example_parses() {
    let text = r#"
        name = "flight-delays"

        [source]
        brokers = "kafka-1:9092,kafka-2:9092"
        topics = ["flights", "flights-2013"]
        start = "timestamp:1357016400000"
        group_id = "delays"
        offset_reset = "earliest"
        partition_discovery_interval_ms = 2500
        consumer = { "fetch.min.bytes" = 1024, "client.id" = "weir", "check.crcs" = true }
        batch_size = 512

        [[transforms]]
        name = "flight-delays"
        wasm = "../../target/plugins/flight-delays.wasm"
        config = { threshold_minutes = 15, label = "late", ratio = 0.5, strict = false }
        memory_limit_mb = 128
        deadline_ms = 250
        on_error = "dead-letter"

        [[transforms]]
        name = "filter"
        wasm = "/opt/weir/json-filter.wasm"

        [sink]
        brokers = "kafka-out:9092"
        topic = "flight-delays"
        outputs = { late = "flight-delays-late" }
        guarantee = "exactly-once"
        transactional_id_prefix = "delays-v1"
        producer_slots = 3
        transaction_timeout_ms = 120000
        producer = { "linger.ms" = 5, "compression.type" = "lz4" }
        dead_letter_topic = "flight-delays-dlq"
        create_topics = true
        partitions = 6

        [checkpoint]
        interval_ms = 2000
        timeout_ms = 60000
        max_epoch_bytes = 33554432

        [state]
        dir = "/var/lib/weir/delays"
        changelog_topic = "delays-state"
        max_bytes = 1073741824

        [runtime]
        workers = 2
        shutdown_grace_ms = 10000
    "#;
    let config = PipelineConfig::from_toml_str(text, Path::new("/srv/pipelines/delays")).unwrap();
    let strings = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    };
    let expected = PipelineConfig {
        name: "flight-delays".into(),
        source: SourceConfig {
            cluster: ClusterConfig::new("kafka-1:9092,kafka-2:9092"),
            topics: vec!["flights".into(), "flights-2013".into()],
            start: StartPosition::Timestamp(1_357_016_400_000),
            group_id: Some("delays".into()),
            offset_reset: OffsetReset::Earliest,
            partition_discovery_interval: Duration::from_millis(2500),
            consumer: strings(&[("fetch.min.bytes", "1024"), ("client.id", "weir"), ("check.crcs", "true")]),
            batch_size: 512,
            watermark: None,
            tables: Vec::new(),
        },
        transforms: vec![
            TransformConfig {
                name: "flight-delays".into(),
                wasm: PathBuf::from("/srv/pipelines/delays/../../target/plugins/flight-delays.wasm"),
                config: vec![
                    ("label".into(), "late".into()),
                    ("ratio".into(), "0.5".into()),
                    ("strict".into(), "false".into()),
                    ("threshold_minutes".into(), "15".into()),
                ],
                memory_limit_bytes: 128 << 20,
                deadline: Duration::from_millis(250),
                on_error: OnError::DeadLetter,
            },
            TransformConfig {
                name: "filter".into(),
                wasm: PathBuf::from("/opt/weir/json-filter.wasm"),
                config: vec![],
                memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
                deadline: DEFAULT_DEADLINE,
                on_error: OnError::Fail,
            },
        ],
        sink: SinkConfig {
            cluster: ClusterConfig::new("kafka-out:9092"),
            topic: Some("flight-delays".into()),
            outputs: strings(&[("late", "flight-delays-late")]),
            guarantee: Guarantee::ExactlyOnce,
            transactional_id_prefix: "delays-v1".into(),
            producer_slots: 3,
            transaction_timeout: Duration::from_secs(120),
            producer: strings(&[("linger.ms", "5"), ("compression.type", "lz4")]),
            dead_letter_topic: Some("flight-delays-dlq".into()),
            create_topics: true,
            partitions: Some(6),
            postgres: None,
        },
        checkpoint: CheckpointConfig {
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(60),
            max_epoch_bytes: 32 << 20,
        },
        state: StateConfig {
            dir: PathBuf::from("/var/lib/weir/delays"),
            changelog_topic: "delays-state".into(),
            max_bytes: Some(1 << 30),
        },
        runtime: RuntimeConfig { workers: Some(2), shutdown_grace: Duration::from_secs(10) },
    };
    assert_eq!(config, expected);
    assert_eq!(config.group_id(), "delays");
}

#[test]
fn defaults_are_filled() {
    let config = parse(MINIMAL).unwrap();
    assert_eq!(config.source.start, StartPosition::Earliest);
    assert_eq!(config.source.group_id, None);
    assert_eq!(config.group_id(), "weir-flight-delays");
    assert!(config.source.consumer.is_empty());
    assert_eq!(config.source.batch_size, DEFAULT_BATCH_SIZE);
    assert_eq!(config.source.batch_size, 256);

    let t = &config.transforms[0];
    assert!(t.config.is_empty());
    assert_eq!(t.memory_limit_bytes, 64 << 20);
    assert_eq!(t.deadline, Duration::from_millis(1000));
    assert_eq!(t.on_error, OnError::Fail);

    let sink = &config.sink;
    assert_eq!(sink.cluster, ClusterConfig::new("localhost:9092"));
    assert!(sink.outputs.is_empty());
    assert_eq!(sink.guarantee, Guarantee::ExactlyOnce);
    assert_eq!(sink.transactional_id_prefix, "flight-delays");
    assert_eq!(sink.producer_slots, 2);
    assert_eq!(sink.transaction_timeout, Duration::from_millis(60_000));
    assert!(sink.producer.is_empty());
    assert_eq!(sink.dead_letter_topic, None);
    assert!(!sink.create_topics);
    assert_eq!(sink.partitions, None);

    assert_eq!(config.checkpoint, CheckpointConfig::default());
    assert_eq!(config.checkpoint.interval, Duration::from_millis(1000));
    assert_eq!(config.checkpoint.timeout, Duration::from_millis(30_000));
    assert_eq!(config.checkpoint.max_epoch_bytes, 64 << 20);
    assert_eq!(config.state.dir, Path::new("/srv/pipelines/weir-state/flight-delays"));
    assert_eq!(config.state.changelog_topic, "flight-delays-changelog");
    assert_eq!(config.runtime.shutdown_grace, Duration::from_millis(25_000));
}

#[test]
fn a_changelog_topic_must_be_valid_and_of_its_own() {
    let (key_path, message) = invalid(parse(&format!("{MINIMAL}\n[state]\nchangelog_topic = \"a b\"\n")));
    assert_eq!(key_path, "state.changelog_topic");
    assert!(message.contains("not a valid Kafka topic name"), "{message}");
    for topic in ["flights", "flight-delays"] {
        let (key_path, message) = invalid(parse(&format!("{MINIMAL}\n[state]\nchangelog_topic = \"{topic}\"\n")));
        assert_eq!(key_path, "state.changelog_topic");
        assert!(message.contains("topic of its own"), "{message}");
    }
}

#[test]
fn start_positions() {
    for (text, expected) in [
        ("earliest", StartPosition::Earliest),
        ("latest", StartPosition::Latest),
        ("group", StartPosition::Group),
        ("timestamp:0", StartPosition::Timestamp(0)),
    ] {
        let config = parse_with("source", &format!("start = {text:?}")).unwrap();
        assert_eq!(config.source.start, expected);
        assert_eq!(expected.to_string(), text);
    }
    for bad in ["\"first\"", "\"timestamp:\"", "\"timestamp:-1\"", "\"timestamp:soon\"", "0"] {
        let (key_path, message) = parse_error(parse_with("source", &format!("start = {bad}")));
        assert_eq!(key_path, "source.start", "{message}");
        assert!(message.contains("\"timestamp:<ms>\""), "{message}");
    }
}

#[test]
fn offset_reset_and_partition_discovery() {
    let config = parse_with("source", "").unwrap();
    assert_eq!(config.source.offset_reset, OffsetReset::Fail, "never a silent jump by default");
    assert_eq!(config.source.partition_discovery_interval, DEFAULT_PARTITION_DISCOVERY_INTERVAL);
    let config = parse_with("source", "offset_reset = \"earliest\"").unwrap();
    assert_eq!(config.source.offset_reset, OffsetReset::Earliest);
    let (key_path, message) = parse_error(parse_with("source", "offset_reset = \"latest\""));
    assert_eq!(key_path, "source.offset_reset", "{message}");
    let (key_path, message) = invalid(parse_with("source", "partition_discovery_interval_ms = 5"));
    assert_eq!(key_path, "source.partition_discovery_interval_ms", "{message}");
    let (key_path, message) = invalid(parse_with("source", "consumer = { \"auto.offset.reset\" = \"latest\" }"));
    assert!(
        key_path.starts_with("source.consumer") && message.contains("source.offset_reset"),
        "{key_path}: {message}"
    );
}

#[test]
fn unknown_key_names_its_path() {
    let (key_path, message) = parse_error(parse_with("sink", "guarantees = \"x\""));
    assert_eq!(key_path, "sink.guarantees");
    assert!(message.contains("`sink.guarantees`"), "{message}");
    assert!(message.contains("unknown key; did you mean `guarantee`?"), "{message}");
    assert!(message.contains("(line 13)"), "the key's line expected: {message}");

    let (key_path, message) = parse_error(parse_with("", "nme = \"x\""));
    assert_eq!(key_path, "nme");
    assert!(message.contains("did you mean `name`?"), "{message}");
    // Nothing near: the message lists the table's keys.
    let (_, message) = parse_error(parse(&format!("{MINIMAL}\n[checkpoint]\nevery = 1\n")));
    assert!(message.contains("remove it; the keys of [checkpoint] are interval_ms, timeout_ms"), "{message}");
    let (key_path, _) = parse_error(parse_with("transforms", "memory_limit = 3"));
    assert_eq!(key_path, "transforms[0].memory_limit");
    let (key_path, _) = parse_error(parse(&format!("{MINIMAL}\n[state]\ndirectory = \"x\"\n")));
    assert_eq!(key_path, "state.directory");
    // A long made-up key is quoted cut, so that the message stays short and still says why.
    let long = "k".repeat(100_000);
    let (key_path, message) = parse_error(parse(&format!("{MINIMAL}\n[state]\n{long} = 1\n")));
    assert_eq!(key_path.len(), "state.".len() + long.len(), "the key path itself is whole");
    assert!(message.len() < 1024 && message.contains("more bytes]`") && message.contains("unknown key"), "{message}");
}

#[test]
fn an_operator_name_labels_metrics_so_it_is_short() {
    let at_most = MINIMAL.replace("name = \"flight-delays\"\nwasm", &format!("name = \"{}\"\nwasm", "o".repeat(128)));
    assert!(parse(&at_most).is_ok());
    let (key_path, message) = invalid(parse(&at_most.replace(&"o".repeat(128), &"o".repeat(129))));
    assert_eq!(key_path, "transforms[0].name");
    assert!(message.contains("1 to 128 characters") && message.contains("metric labels"), "{message}");
}

#[test]
fn bad_values_name_key_and_allowed_values() {
    let (key_path, message) = parse_error(parse_with("sink", "guarantee = \"exactly_once\""));
    assert_eq!(key_path, "sink.guarantee");
    assert!(message.contains("`exactly-once`, `at-least-once`, `none`"), "{message}");

    let (key_path, message) = parse_error(parse_with("transforms", "on_error = \"skip\""));
    assert_eq!(key_path, "transforms[0].on_error");
    assert!(message.contains("`fail` or `dead-letter`"), "{message}");

    let (key_path, _) = parse_error(parse_with("source", "batch_size = -1"));
    assert_eq!(key_path, "source.batch_size");
    let (key_path, _) = parse_error(parse_with("transforms", "config = { nested = { a = 1 } }"));
    assert_eq!(key_path, "transforms[0].config.nested");
    let (key_path, _) = parse_error(parse_with("source", "consumer = { \"fetch.min.bytes\" = [1] }"));
    assert_eq!(key_path, "source.consumer.\"fetch.min.bytes\"");
    let (key_path, message) = parse_error(parse("name = ["));
    assert_eq!(key_path, "");
    assert!(message.contains("line 1"), "{message}");
}

#[test]
fn a_postgres_sink_is_checked_before_any_connection() {
    let pg = |lines: &str| MINIMAL.replace("[sink]\n", &format!("[sink.postgres]\n{lines}\n[sink]\n"));
    let ok = parse(&pg("url = \"postgresql://weir@db:5432/weir\"\ntable = \"delays\"\noutput = \"rows\"")).unwrap();
    let postgres = ok.sink.postgres.as_ref().unwrap();
    assert_eq!((postgres.mode, postgres.output.as_deref()), (WriteMode::Insert, Some("rows")));
    assert!(ok.sink.to_postgres(Some("rows")) && !ok.sink.to_postgres(None));
    for (lines, key_path, says) in [
        (
            "url = \"postgresql://weir:hunter2@db/weir\"\ntable = \"t\"\noutput = \"o\"",
            "sink.postgres.url",
            "holds a password",
        ),
        ("url = \"postgresql://weir@db\"\ntable = \"t\"\noutput = \"o\"", "sink.postgres.url", "names no database"),
        (
            "url = \"postgresql://weir@db/weir?sslmode=require\"\ntable = \"t\"\noutput = \"o\"",
            "sink.postgres.url",
            "TLS",
        ),
        (
            "url = \"postgresql://weir@db/weir\"\ntable = \"t\"\nmode = \"upsert\"\nkey = [\"a\", \"a\"]\noutput = \"o\"",
            "sink.postgres.key[1]",
            "named twice",
        ),
        (
            "url = \"postgresql://weir@db/weir\"\ntable = \"Delays\"\noutput = \"o\"",
            "sink.postgres.table",
            "lower-case",
        ),
        (
            "url = \"postgresql://weir@db/weir\"\ntable = \"t\"\nmode = \"upsert\"\noutput = \"o\"",
            "sink.postgres.key",
            "required",
        ),
        ("url = \"postgresql://weir@db/weir\"\ntable = \"t\"", "sink.postgres.output", "one destination"),
        (
            "url = \"postgresql://weir@db/weir\"\ntable = \"t\"\npassword = \"hunter2\"\noutput = \"o\"",
            "sink.postgres.password",
            "must not be written",
        ),
    ] {
        let (found, message) = match parse(&pg(lines)) {
            Err(e) => (e.key_path().unwrap_or("").to_owned(), e.to_string()),
            Ok(_) => panic!("{lines} was accepted"),
        };
        assert_eq!(found, key_path, "{lines}: {message}");
        assert!(message.contains(says), "{lines}: {message}");
    }
}

#[test]
fn missing_required_keys() {
    let (key_path, message) = parse_error(parse(&MINIMAL.replace("topic = \"flight-delays\"\n", "")));
    assert_eq!(key_path, "sink.topic");
    assert!(message.contains("missing `topic` (or a [sink.postgres] table"), "{message}");
    let (key_path, message) = parse_error(parse(&MINIMAL.replace("name = \"flight-delays\"\n\n[source]", "[source]")));
    assert_eq!(key_path, "name");
    assert!(message.contains("add it to the top level"), "{message}");
    // A missing table is one error, not one per key of it.
    let (key_path, message) = parse_error(parse(MINIMAL.split("[sink]").next().unwrap()));
    assert_eq!(key_path, "sink");
    assert!(message.contains("missing table [sink]"), "{message}");
}

/// The file's errors, after checking there are several.
fn several(result: Result<PipelineConfig, ConfigError>) -> Vec<(String, String)> {
    match result {
        Err(e @ ConfigError::Several { .. }) => {
            e.errors().iter().map(|e| (e.key_path().unwrap_or("").to_owned(), e.to_string())).collect()
        }
        other => panic!("expected ConfigError::Several, got {other:?}"),
    }
}

#[test]
fn every_error_is_reported_in_file_order() {
    let text = MINIMAL
        .replace("topics = [\"flights\"]", "topics = [\"flights\"]\nbatch_size = \"many\"\nstrat = \"latest\"")
        .replace("[sink]\n", "[sink]\nproducer_slots = 99\n");
    let text = format!("{text}\n[checkpoint]\ninterval_ms = 1\n");
    let errors = several(parse(&text));
    let keys: Vec<&str> = errors.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["source.batch_size", "source.strat", "sink.producer_slots", "checkpoint.interval_ms"]);
    assert!(errors[0].1.contains("(line 7)") && errors[0].1.contains("expected usize"), "{errors:?}");
    assert!(errors[1].1.contains("did you mean `start`?"), "{errors:?}");
    let message = parse(&text).unwrap_err().to_string();
    assert!(message.starts_with("invalid pipeline file: 4 errors:\n  - `source.batch_size` (line 7): "), "{message}");
}

#[test]
fn a_faulty_value_is_reported_once() {
    // A name that is not a string: no second error for the transactional id prefix or the
    // changelog topic, whose defaults derive from it.
    let (key_path, _) = parse_error(parse(&MINIMAL.replacen("name = \"flight-delays\"", "name = 7", 1)));
    assert_eq!(key_path, "name");
    // The same for a name that breaks a rule.
    let (key_path, _) = invalid(parse(&MINIMAL.replacen("name = \"flight-delays\"", "name = \"a b\"", 1)));
    assert_eq!(key_path, "name");
    // A source that is not a table: one error, not one per missing key.
    let text = MINIMAL.replace("[source]\nbrokers = \"localhost:9092\"\ntopics = [\"flights\"]\n", "source = 5\n");
    let (key_path, message) = parse_error(parse(&text));
    assert_eq!(key_path, "source", "{message}");
    // A transform that is not a table keeps the next one's index.
    let rest = MINIMAL.replace("[[transforms]]\nname = \"flight-delays\"\nwasm = \"flight-delays.wasm\"\n", "");
    let errors = several(parse(&format!("transforms = [5, {{ name = \"x\", wasm = \"x.wat\" }}]\n{rest}")));
    let keys: Vec<&str> = errors.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["transforms[0]", "transforms[1].wasm"], "{errors:?}");
}

#[test]
fn checks_add_errors_but_none_for_a_faulty_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pipeline.toml");
    let two = MINIMAL.replace("[sink]", "[[transforms]]\nname = \"second\"\nwasm = \"second.wat\"\n\n[sink]");
    std::fs::write(&file, two.replace("topics = [\"flights\"]", "topics = [\"flights\"]\nbatch_size = 0")).unwrap();
    let wasm = |config: &PipelineConfig| -> Vec<ConfigError> {
        (0..config.transforms.len())
            .map(|i| ConfigError::invalid(format!("transforms[{i}].wasm"), "no such file"))
            .collect()
    };
    let err = PipelineConfig::from_file_with_checks(&file, wasm).unwrap_err();
    let keys: Vec<&str> = err.errors().iter().filter_map(ConfigError::key_path).collect();
    // transforms[1].wasm already breaks a rule (not .wasm): the check's error for it is left out.
    assert_eq!(keys, ["source.batch_size", "transforms[0].wasm", "transforms[1].wasm"], "{err}");
    assert!(err.errors()[1].to_string().contains("(line 11): no such file"), "{err}");
    assert!(err.errors()[2].to_string().contains("must end in \".wasm\""), "{err}");
    assert!(err.to_string().starts_with(&format!("invalid pipeline file {}: 3 errors:", file.display())), "{err}");
}

#[test]
fn syntax_errors_stop_the_reading() {
    let (key_path, message) = parse_error(parse(&format!("{MINIMAL}\nbatch_size = \n")));
    assert_eq!(key_path, "");
    assert!(message.contains("TOML parse error at line 15"), "{message}");
}

#[test]
fn transaction_timeout_must_exceed_interval_plus_timeout() {
    let text = format!("{MINIMAL}\n[checkpoint]\ninterval_ms = 5000\ntimeout_ms = 55000\n");
    let (key_path, message) = invalid(parse(&text));
    assert_eq!(key_path, "sink.transaction_timeout_ms");
    for part in [
        "checkpoint.interval_ms (5000)",
        "checkpoint.timeout_ms (55000)",
        "= 60000",
        "sink.transaction_timeout_ms (60000)",
        "raise sink.transaction_timeout_ms",
        "transaction.max.timeout.ms, 900000",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    // Raising the transaction timeout fixes it; so does giving up exactly-once.
    let fixed = text.replace("[sink]\n", "[sink]\ntransaction_timeout_ms = 90000\n");
    assert!(parse(&fixed).is_ok());
    let at_least_once = text.replace("[sink]\n", "[sink]\nguarantee = \"at-least-once\"\n");
    assert!(parse(&at_least_once).is_ok());

    let (key_path, message) = invalid(parse_with("sink", "transaction_timeout_ms = 3600001"));
    assert_eq!(key_path, "sink.transaction_timeout_ms");
    assert!(message.contains("1000..=3600000"), "{message}");
}

#[test]
fn reserved_librdkafka_keys_are_refused() {
    for key in RESERVED_RDKAFKA_KEYS {
        for (table, other) in [("source", "consumer"), ("sink", "producer")] {
            let (key_path, message) = invalid(parse_with(table, &format!("{other} = {{ {key:?} = \"x\" }}")));
            assert_eq!(key_path, format!("{table}.{other}.{key:?}"));
            assert!(message.contains(&format!("[{table}.{other}]")), "{message}");
        }
    }
    let (_, message) = invalid(parse_with("source", "consumer = { \"group.id\" = \"g\" }"));
    assert!(message.contains("use source.group_id"), "{message}");
}

#[test]
fn the_cluster_is_named_once_in_kafka_and_every_connection_key_belongs_there() {
    let text = MINIMAL.replace("brokers = \"localhost:9092\"\n", "");
    // A top-level table must come after the top-level keys: at the end.
    let with_kafka = |body: &str| format!("{text}\n[kafka]\n\"bootstrap.servers\" = \"k:9093\"\n{body}");
    let secured = with_kafka(
        "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
         \"sasl.username\" = \"weir\"\n\"sasl.password\" = \"${env:WEIR_CONFIG_TEST_PASSWORD}\"\n",
    );
    let (key_path, message) = parse_error(parse(&secured));
    assert_eq!(key_path, "kafka.\"sasl.password\"");
    assert!(message.contains("WEIR_CONFIG_TEST_PASSWORD") && message.contains("not set"), "{message}");

    // SAFETY: this test's own variable; no other test reads or writes it.
    unsafe { std::env::set_var("WEIR_CONFIG_TEST_PASSWORD", "config-test-secret") };
    let config = parse(&secured).unwrap();
    assert_eq!(config.source.cluster.bootstrap_servers(), "k:9093");
    assert_eq!(config.sink.cluster, config.source.cluster, "the sink's cluster defaults to the source's");
    assert_eq!(config.source.cluster.properties()["sasl.password"], "config-test-secret");
    assert!(!format!("{config:?}").contains("config-test-secret"), "Debug redacts");

    let literal = secured.replace("${env:WEIR_CONFIG_TEST_PASSWORD}", "plain-text-password");
    let (key_path, message) = parse_error(parse(&literal));
    assert_eq!(key_path, "kafka.\"sasl.password\"");
    assert!(message.contains("reference") && !message.contains("plain-text-password"), "{message}");

    let both = format!("{MINIMAL}\n[kafka]\n\"bootstrap.servers\" = \"k:1\"\n");
    assert_eq!(parse_error(parse(&both)).0, "source.brokers", "[kafka] and source.brokers both");
    let (key_path, message) = parse_error(parse(&text));
    assert_eq!(key_path, "source.brokers");
    assert!(message.contains("[kafka]"), "{message}");

    for (table, other) in [("source", "consumer"), ("sink", "producer")] {
        for key in ["bootstrap.servers", "security.protocol", "sasl.mechanism", "ssl.ca.location"] {
            let (key_path, message) = invalid(parse_with(table, &format!("{other} = {{ {key:?} = \"x\" }}")));
            assert_eq!(key_path, format!("{table}.{other}.{key:?}"));
            assert!(message.contains("move it to [kafka]"), "{message}");
        }
    }
    let (key_path, _) = invalid(parse(&with_kafka("\"group.id\" = \"g\"\n")));
    assert_eq!(key_path, "kafka.\"group.id\"", "[kafka] cannot set what Weir sets");

    let mirror = MINIMAL.replace("[sink]\n", "[sink]\nguarantee = \"at-least-once\"\n");
    let mirror =
        format!("{mirror}\n[sink.kafka]\n\"bootstrap.servers\" = \"out:9093\"\n\"security.protocol\" = \"SSL\"\n");
    let config = parse(&mirror).unwrap();
    assert_eq!(config.sink.cluster.to_string(), "out:9093 (SSL)");
    assert_eq!(config.source.cluster.to_string(), "localhost:9092");
}

#[test]
fn no_output_topic_is_a_source_topic() {
    let text = MINIMAL.replace("topics = [\"flights\"]", "topics = [\"weather\", \"flights\"]");
    let (key_path, message) = invalid(parse(&text.replace("topic = \"flight-delays\"", "topic = \"flights\"")));
    assert_eq!(key_path, "sink.topic");
    assert!(message.contains("source.topics[1]") && message.contains("read its own output back"), "{message}");
    let (key_path, message) = invalid(parse(&format!("{text}\n[sink.outputs]\nlate = \"weather\"\n")));
    assert_eq!(key_path, "sink.outputs.late");
    assert!(message.contains("source.topics[0]"), "{message}");
    parse(&format!("{text}\n[sink.outputs]\nlate = \"flights-late\"\n")).expect("an output of its own");
    // On another cluster, the same name is another topic (mirroring).
    let mirror = text.replace(
        "topic = \"flight-delays\"",
        "topic = \"flights\"\nbrokers = \"mirror:9092\"\nguarantee = \"at-least-once\"",
    );
    parse(&mirror).expect("a topic of the same name on another cluster");
}

#[test]
fn dead_letter_needs_a_topic() {
    let (key_path, message) = invalid(parse_with("transforms", "on_error = \"dead-letter\""));
    assert_eq!(key_path, "transforms[0].on_error");
    assert!(message.contains("sink.dead_letter_topic"), "{message}");

    let text = MINIMAL.replace("[transforms]]\n", "[transforms]]\non_error = \"dead-letter\"\n");
    let config = parse(&text.replace("[sink]\n", "[sink]\ndead_letter_topic = \"dlq\"\n")).unwrap();
    assert_eq!(config.sink.dead_letter_topic.as_deref(), Some("dlq"));

    for clash in ["flights", "flight-delays"] {
        let (key_path, _) = invalid(parse_with("sink", &format!("dead_letter_topic = {clash:?}")));
        assert_eq!(key_path, "sink.dead_letter_topic");
    }
}

#[test]
fn relative_paths_resolve_against_the_file() {
    let dir = std::env::temp_dir().join(format!("weir-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, MINIMAL.replace("[[transforms]]", "[state]\ndir = \"state\"\n\n[[transforms]]")).unwrap();
    let config = PipelineConfig::from_file(&file).unwrap();
    assert_eq!(config.transforms[0].wasm, dir.join("flight-delays.wasm"));
    assert_eq!(config.state.dir, dir.join("state"));

    std::fs::write(&file, MINIMAL).unwrap();
    let config = PipelineConfig::from_file(&file).unwrap();
    assert_eq!(config.state.dir, dir.join("weir-state").join("flight-delays"));

    std::fs::write(&file, MINIMAL.replace("[sink]\n", "[sink]\ntypo = 1\n")).unwrap();
    let err = PipelineConfig::from_file(&file).unwrap_err();
    assert!(matches!(&err, ConfigError::Parse { path: Some(p), .. } if *p == file), "{err:?}");
    assert!(err.to_string().contains("pipeline.toml"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    let err = PipelineConfig::from_file(&dir.join("missing.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");

    // A file given by a bare name resolves against the current directory.
    let config = PipelineConfig::from_toml_str(MINIMAL, Path::new("")).unwrap();
    assert_eq!(config.transforms[0].wasm, Path::new("flight-delays.wasm"));
}

#[test]
fn names_and_topics() {
    for bad in ["\"\"", "\"my pipeline\"", "\"..\"", &format!("\"{}\"", "a".repeat(201))] {
        let (key_path, message) =
            invalid(parse(&MINIMAL.replace("name = \"flight-delays\"\n\n", &format!("name = {bad}\n\n"))));
        assert_eq!(key_path, "name", "{message}");
    }
    let (key_path, _) = invalid(parse(&MINIMAL.replace("[\"flights\"]", "[\"flights\", \"a/b\"]")));
    assert_eq!(key_path, "source.topics[1]");
    let (key_path, message) = invalid(parse(&MINIMAL.replace("[\"flights\"]", "[\"flights\", \"flights\"]")));
    assert_eq!(key_path, "source.topics[1]");
    assert!(message.contains("twice"), "{message}");
    let (key_path, _) = invalid(parse(&MINIMAL.replace("[\"flights\"]", "[]")));
    assert_eq!(key_path, "source.topics");
    let (key_path, _) = invalid(parse_with("sink", &format!("outputs = {{ late = \"{}\" }}", "t".repeat(250))));
    assert_eq!(key_path, "sink.outputs.late");
    let (key_path, _) = invalid(parse_with("sink", "outputs = { \"a b\" = \"t\" }"));
    assert_eq!(key_path, "sink.outputs.\"a b\"");

    let twice = MINIMAL.replace("[sink]", "[[transforms]]\nname = \"flight-delays\"\nwasm = \"b.wasm\"\n\n[sink]");
    let (key_path, _) = invalid(parse(&twice));
    assert_eq!(key_path, "transforms[1].name");
    let (key_path, message) = invalid(parse(&MINIMAL.replace("flight-delays.wasm", "flight-delays.wat")));
    assert_eq!(key_path, "transforms[0].wasm");
    assert!(message.contains(".wasm"), "{message}");
    let (key_path, _) = invalid(parse(
        &format!("transforms = []\n{}", MINIMAL.split("[[transforms]]").next().unwrap())
            .replace("[source]", "[sink]\ntopic = \"out\"\n\n[source]"),
    ));
    assert_eq!(key_path, "transforms");
}

#[test]
fn numeric_ranges() {
    let cases = [
        ("source", "batch_size = 0", "source.batch_size"),
        ("source", "batch_size = 65537", "source.batch_size"),
        ("transforms", "memory_limit_mb = 0", "transforms[0].memory_limit_mb"),
        ("transforms", "memory_limit_mb = 4097", "transforms[0].memory_limit_mb"),
        ("transforms", "deadline_ms = 0", "transforms[0].deadline_ms"),
        ("transforms", "deadline_ms = 600001", "transforms[0].deadline_ms"),
        ("sink", "producer_slots = 1", "sink.producer_slots"),
        ("sink", "producer_slots = 17", "sink.producer_slots"),
        ("sink", "partitions = 0", "sink.partitions"),
        ("checkpoint", "interval_ms = 9", "checkpoint.interval_ms"),
        ("checkpoint", "timeout_ms = 99", "checkpoint.timeout_ms"),
        ("checkpoint", "max_epoch_bytes = 1048575", "checkpoint.max_epoch_bytes"),
        ("runtime", "workers = 0", "runtime.workers"),
        ("runtime", "workers = 1025", "runtime.workers"),
        ("runtime", "shutdown_grace_ms = 99", "runtime.shutdown_grace_ms"),
        ("runtime", "shutdown_grace_ms = 3600001", "runtime.shutdown_grace_ms"),
        ("state", "max_bytes = 0", "state.max_bytes"),
    ];
    let with_checkpoint = format!("{MINIMAL}\n[checkpoint]\n[runtime]\n[state]\n");
    for (table, line, expected) in cases {
        let header = if table == "transforms" { "[[transforms]]\n".to_owned() } else { format!("[{table}]\n") };
        let text = with_checkpoint.replacen(&header, &format!("{header}{line}\n"), 1);
        let (key_path, message) = invalid(parse(&text));
        assert_eq!(key_path, expected, "{message}");
    }
    for (table, line) in [
        ("transforms", "memory_limit_mb = 4096"),
        ("transforms", "deadline_ms = 1"),
        ("source", "batch_size = 65536"),
        ("sink", "producer_slots = 16"),
    ] {
        parse_with(table, line).unwrap();
    }
    parse(&format!("{MINIMAL}\n[runtime]\nworkers = 1\n")).unwrap();
    parse(&format!("{MINIMAL}\n[runtime]\nshutdown_grace_ms = 100\n")).unwrap();
    parse(&format!("{MINIMAL}\n[state]\nmax_bytes = 1\n")).unwrap();
    // One producer slot is enough without transactions.
    parse_with("sink", "guarantee = \"at-least-once\"\nproducer_slots = 1").unwrap();
}

#[test]
fn an_explicit_producer_queue_must_hold_one_record_of_message_max_bytes() {
    let queue = |line: &str| parse_with("sink", &format!("producer = {{ {line} }}"));
    let (key_path, message) = invalid(queue(r#""queue.buffering.max.kbytes" = 976"#));
    assert_eq!(key_path, r#"sink.producer."queue.buffering.max.kbytes""#);
    assert!(message.contains("at least 977, got 976"), "{message}");
    let (_, message) = invalid(queue(r#""queue.buffering.max.kbytes" = 8192, "message.max.bytes" = 10000000"#));
    assert!(message.contains("message.max.bytes (10000000 bytes): at least 9766"), "{message}");
    queue(r#""queue.buffering.max.kbytes" = 977"#).unwrap();
    queue(r#""message.max.bytes" = 10000000"#).unwrap();
}

/// The annotated example of `docs/configuration.md` stays a valid pipeline file.
#[test]
fn documented_example_is_valid() {
    let doc = include_str!("../../../docs/configuration.md");
    let example = doc.split("## Example: flight delays").nth(1).unwrap();
    let example = example.split("```toml\n").nth(1).and_then(|rest| rest.split("```").next()).unwrap();
    let config = PipelineConfig::from_toml_str(example, Path::new("examples/flights")).unwrap();
    assert_eq!(config.name, "flight-delays");
    assert_eq!(config.transforms[0].wasm, Path::new("examples/flights/../../target/plugins/flight-delays.wasm"));
    assert_eq!(config.transforms[0].config, [("threshold_minutes".to_owned(), "15".to_owned())]);
    assert_eq!(config.sink.topic.as_deref(), Some("flight-delays"));
    assert!(config.sink.create_topics);
}

#[test]
fn watermark_strategy() {
    assert_eq!(parse(MINIMAL).unwrap().source.watermark, None);
    // TOML lets the sub-table come after `[sink]`.
    let with = |lines: &str| parse(&format!("{MINIMAL}\n[source.watermark]\n{lines}\n"));
    let config = with("field = \"time_hour\"\nmax_out_of_orderness_ms = 5000\nidle_timeout_ms = 1000").unwrap();
    assert_eq!(
        config.source.watermark,
        Some(WatermarkConfig {
            field: Some("time_hour".into()),
            format: TimeFormat::Rfc3339,
            max_out_of_orderness: Duration::from_secs(5),
            idle_timeout: Some(Duration::from_secs(1)),
            max_future: None,
        })
    );
    let config = with("field = \"t\"\nformat = \"epoch_s\"").unwrap();
    assert_eq!(config.source.watermark.as_ref().map(|w| (w.format, w.idle_timeout)), Some((TimeFormat::EpochS, None)));
    let bounded = with("max_future_ms = 60000").unwrap().source.watermark.unwrap();
    assert_eq!(bounded.max_future, Some(Duration::from_secs(60)));
    let timestamps = with("").unwrap().source.watermark.unwrap();
    assert_eq!((timestamps.field, timestamps.max_out_of_orderness), (None, Duration::ZERO));

    let (key_path, message) = invalid(with("format = \"epoch_ms\""));
    assert_eq!(key_path, "source.watermark.format");
    assert!(message.contains("source.watermark.field"), "{message}");
    let (key_path, _) = invalid(with("field = \" \""));
    assert_eq!(key_path, "source.watermark.field");
    let (key_path, _) = invalid(with("idle_timeout_ms = 0"));
    assert_eq!(key_path, "source.watermark.idle_timeout_ms");
    let (key_path, _) = parse_error(with("field = \"t\"\nformat = \"iso\""));
    assert_eq!(key_path, "source.watermark.format");
    let (key_path, _) = parse_error(with("fields = \"t\""));
    assert_eq!(key_path, "source.watermark.fields");
}

#[test]
fn tables() {
    assert_eq!(parse(MINIMAL).unwrap().source.tables, []);
    let with = |lines: &str| parse(&format!("{MINIMAL}\n[[source.tables]]\n{lines}\n"));
    let config = with("name = \"weather\"\ntopic = \"weather\"\nkey_fields = [\"origin\", \"time_hour\"]").unwrap();
    assert_eq!(
        config.source.tables,
        [TableConfig {
            name: "weather".into(),
            topic: "weather".into(),
            key_fields: vec!["origin".into(), "time_hour".into()],
            max_bytes: DEFAULT_TABLE_MAX_BYTES,
        }]
    );
    let ok = "name = \"weather\"\nkey_fields = [\"origin\"]";
    assert_eq!(with(&format!("{ok}\ntopic = \"w\"\nmax_mb = 8")).unwrap().source.tables[0].max_bytes, 8 << 20);

    let (key_path, message) = invalid(with(&format!("{ok}\ntopic = \"flights\"")));
    assert_eq!(key_path, "source.tables[0].topic");
    assert!(message.contains("a table needs a topic of its own"), "{message}");
    let (key_path, _) = invalid(with(&format!("{ok}\ntopic = \"flight-delays-changelog\"")));
    assert_eq!(key_path, "source.tables[0].topic");
    let (key_path, _) = invalid(with("name = \"weather\"\ntopic = \"w\"\nkey_fields = []"));
    assert_eq!(key_path, "source.tables[0].key_fields");
    let (key_path, _) = invalid(with("name = \"weather\"\ntopic = \"w\"\nkey_fields = [\"\"]"));
    assert_eq!(key_path, "source.tables[0].key_fields[0]");
    let (key_path, _) = invalid(with(&format!("{ok}\ntopic = \"w\"\nmax_mb = 0")));
    assert_eq!(key_path, "source.tables[0].max_mb");
    let (key_path, _) = invalid(with("name = \"w x\"\ntopic = \"w\"\nkey_fields = [\"a\"]"));
    assert_eq!(key_path, "source.tables[0].name");
    let twice = format!("{MINIMAL}\n[[source.tables]]\n{ok}\ntopic = \"a\"\n[[source.tables]]\n{ok}\ntopic = \"b\"\n");
    let (key_path, _) = invalid(parse(&twice));
    assert_eq!(key_path, "source.tables[1].name");
    let (key_path, _) = parse_error(with(&format!("{ok}\ntopic = \"w\"\nkeys = 1")));
    assert_eq!(key_path, "source.tables[0].keys");
}
