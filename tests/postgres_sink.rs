//! The PostgreSQL sink (`[sink.postgres]`, docs/sinks.md) end to end, on a real PostgreSQL
//! (`scripts/postgres.sh`) and broker: the flight-delays aggregates upserted exactly once
//! through a SIGKILL at each crash point of the two-phase commit, an insert-only log of every
//! output row without duplicate or gap through kills and a database restart, rows the table
//! refuses, a database that is down, a server without room for prepared transactions, and an
//! instance that takes over a departed one's partitions and its prepared transaction.

use std::process::Child;
use std::time::{Duration, Instant};

use serde_json::Value;
use weir::Row;
use weir_tests::flights::{expected_finals, same_json};
use weir_tests::pipeline::{RUN_TIMEOUT, Spec, TestPipeline, keyed, produce, wait_exit};
use weir_tests::postgres::{
    Cluster, DELAYS_COLUMNS, PASSWORD, PASSWORD_ENV, execute, port, prepared, scalar, sink_table, table_name, wait_for,
};
use weir_tests::records::read_raw;
use weir_tests::{create_topic, flight_rows};

const PARTITIONS: i32 = 4;

/// What `weir run` logs once the group assigned it partitions.
const JOINED: &str = "partitions assigned by the consumer group";

/// Records per wave of [`feed_until_exit`].
const WAVE: usize = 500;

/// A flight-delays pipeline whose default output goes to `table` on the cluster at `port`.
fn delays_pipeline(prefix: &str, port: u16, table: &str, mode: &str, extra: &str) -> TestPipeline {
    let mut spec = Spec::new("flight-delays");
    spec.sink_topic = false;
    spec.sink = sink_table(port, table, mode, extra);
    TestPipeline::new(prefix, &spec)
}

/// Creates `table` with the flight-delays columns, keyed by origin and carrier for upserts.
fn create_table(port: u16, table: &str, keyed_by_origin_carrier: bool, extra: &str) {
    let key = if keyed_by_origin_carrier { ", PRIMARY KEY (origin, carrier)" } else { "" };
    execute(port, &format!("CREATE TABLE {table} ({DELAYS_COLUMNS}{key}{extra})"));
}

fn env(fault: Option<&str>) -> Vec<(&'static str, String)> {
    let mut env = vec![(PASSWORD_ENV, PASSWORD.to_owned())];
    if let Some(fault) = fault {
        env.push(("WEIR_FAULT", fault.to_owned()));
    }
    env
}

fn spawn(pipeline: &TestPipeline, args: &[&str], fault: Option<&str>) -> Child {
    let env = env(fault);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pipeline.spawn_with(args, &env)
}

fn spawn_instance(pipeline: &TestPipeline, instance: &str, fault: Option<&str>) -> Child {
    let env = env(fault);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    pipeline.spawn_instance(instance, &env)
}

/// Produces `input` in waves of [`WAVE`] while `child` runs, each once `progress` (a scalar
/// query of the table) shows every record of the waves before, so that each wave needs a
/// checkpoint of its own; returns how many were produced when `child` exited.
async fn feed_until_exit(
    pipeline: &TestPipeline,
    child: &mut Child,
    input: &[(Option<String>, String)],
    port: u16,
    progress: &str,
) -> usize {
    let mut produced = 0;
    let started = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        assert!(started.elapsed() < RUN_TIMEOUT, "weir run never exited; log:\n{}", pipeline.log_text());
        if produced < input.len() && scalar(port, progress).unwrap_or(-1) >= produced as i64 {
            let wave = &input[produced..input.len().min(produced + WAVE)];
            produce(&pipeline.source, PARTITIONS, wave).await;
            produced += wave.len();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    produced
}

/// Runs `pipeline` until the table holds every one of `expected` flights, then stops it.
fn run_until_table_holds(pipeline: &TestPipeline, port: u16, progress: &str, expected: usize, args: &[&str]) {
    // The table may hold every flight already (a crash after the last commit): the run is stopped
    // once it has joined the group, so that its stop is a clean one.
    let joins = || pipeline.log_text().matches(JOINED).count();
    let before = joins();
    let mut child = spawn(pipeline, args, None);
    wait_for(port, progress, expected as i64, RUN_TIMEOUT, || pipeline.log_text());
    let started = Instant::now();
    while joins() == before {
        assert!(started.elapsed() < RUN_TIMEOUT, "weir run never joined the group:\n{}", pipeline.log_text());
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(status.success(), "weir run exited with {status}; log:\n{}", pipeline.log_text());
}

/// The table holds exactly the aggregates computed directly from `rows` (keys outside `keep`
/// left out).
fn assert_aggregates(port: u16, table: &str, rows: &[Row], keep: impl Fn(&str) -> bool, log: &str) {
    let finals = expected_finals(rows, 15);
    let mut want: Vec<(String, Value)> =
        finals.iter().filter(|(key, _)| keep(key)).map(|(key, aggregate)| (key.clone(), aggregate.to_json())).collect();
    want.sort_by(|a, b| a.0.cmp(&b.0));
    let got: Vec<(String, Value)> = weir_tests::postgres::rows(port, table, "origin, carrier")
        .into_iter()
        .map(|row| (format!("{}|{}", row["origin"].as_str().unwrap(), row["carrier"].as_str().unwrap()), row))
        .collect();
    assert_eq!(got.len(), want.len(), "one row per origin|carrier; log:\n{log}");
    for ((key, row), (want_key, aggregate)) in got.iter().zip(&want) {
        assert_eq!(key, want_key);
        assert!(same_json(row, aggregate), "{key}: table {row} != computed {aggregate}; log:\n{log}");
    }
}

/// `weir txn <command> --force` on the pipeline's transactions and prepared transactions, with
/// `--output json` for `list`; returns its standard output.
fn weir_txn(command: &str, pipeline: &TestPipeline, port: u16) -> String {
    let (brokers, url) = (weir_tests::bootstrap(), weir_tests::postgres::url(port));
    let mut args = vec!["txn", command, "--prefix", &pipeline.name, "--brokers", &brokers, "--postgres", &url];
    args.extend(["--source-topic", &pipeline.source, "--force"]);
    if command == "list" {
        args.extend(["--output", "json"]);
    }
    let output = std::process::Command::new(weir_tests::weir_binary())
        .args(&args)
        .env("WEIR_POSTGRES_PASSWORD", PASSWORD)
        .output()
        .expect("run weir txn");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "weir {args:?}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
    stdout
}

/// Kills the pipeline at `fault` (its process aborts there), checks through PostgreSQL that the
/// crash left a prepared transaction or not (`prepared_left`), and what `weir txn list` says the
/// group's offsets decide for it (`decision`; `weir txn abort` carries out a rollback), then
/// recovers and checks the upserted aggregates against a direct computation.
async fn killed_at(fault: &str, prepared_left: bool, decision: Option<&str>) {
    let port = port();
    let table = table_name("weir_pg_kill");
    create_table(port, &table, true, "");
    let pipeline = delays_pipeline("weir-pg-kill", port, &table, "upsert", "");
    let rows = flight_rows(3_000);
    let input = keyed(&rows);
    create_topic(&pipeline.source, PARTITIONS).await;
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    let mut child = spawn(&pipeline, &[], Some(fault));
    let produced = feed_until_exit(&pipeline, &mut child, &input, port, &progress).await;
    let log = pipeline.log_text();
    assert!(log.contains("WEIR_FAULT: aborting"), "no abort at {fault}:\n{log}");
    let left = prepared(port, &pipeline.name);
    assert_eq!(!left.is_empty(), prepared_left, "prepared transactions after a kill at {fault}: {left:?}\n{log}");
    if let Some(decision) = decision {
        let listed: Value = serde_json::from_str(&weir_txn("list", &pipeline, port)).expect("weir txn list JSON");
        assert_eq!(listed["prepared"][0]["gid"], Value::from(left[0].as_str()), "{listed}");
        assert_eq!(listed["prepared"][0]["decision"], Value::from(decision), "{listed}");
        if decision == "rollback" {
            let aborted = weir_txn("abort", &pipeline, port);
            assert!(aborted.contains("rolled back (ROLLBACK PREPARED)"), "{aborted}");
            assert_eq!(prepared(port, &pipeline.name), Vec::<String>::new());
        }
    }
    produce(&pipeline.source, PARTITIONS, &input[produced..]).await;

    run_until_table_holds(&pipeline, port, &progress, rows.len(), &[]);
    let log = pipeline.log_text();
    assert_eq!(prepared(port, &pipeline.name), Vec::<String>::new(), "all resolved:\n{log}");
    if decision == Some("commit") {
        assert!(log.contains("resolved a prepared transaction of the PostgreSQL sink"), "{log}");
    }
    assert_aggregates(port, &table, &rows, |_| true, &log);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_before_prepare_loses_and_duplicates_nothing() {
    killed_at("before-prepare", false, None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_after_prepare_rolls_the_prepared_rows_back() {
    killed_at("after-prepare", true, Some("rollback")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_after_the_kafka_commit_commits_the_prepared_rows() {
    // Checkpoint 1 commits the start positions; 2 is the first with rows.
    killed_at("after-commit@2", true, Some("commit")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_kill_after_commit_prepared_loses_and_duplicates_nothing() {
    killed_at("after-commit-prepared", false, None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_instance_taking_over_a_departed_ones_partitions_commits_its_prepared_rows() {
    let port = port();
    let table = table_name("weir_pg_takeover");
    create_table(port, &table, true, "");
    let mut spec = Spec::new("flight-delays");
    spec.sink_topic = false;
    spec.sink = sink_table(port, &table, "upsert", "");
    // The group notices instance a gone after 6 s (the broker's group.min.session.timeout.ms).
    spec.source =
        "batch_size = 64\n[source.consumer]\n\"session.timeout.ms\" = \"6000\"\n\"heartbeat.interval.ms\" = \"500\""
            .into();
    let pipeline = TestPipeline::new("weir-pg-takeover", &spec);
    let rows = flight_rows(3_000);
    let input = keyed(&rows);
    create_topic(&pipeline.source, PARTITIONS).await;
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    let mut a = spawn_instance(&pipeline, "a", Some("after-commit@2"));
    let produced = feed_until_exit(&pipeline, &mut a, &input, port, &progress).await;
    assert!(pipeline.instance_log("a").contains("WEIR_FAULT: aborting"), "{}", pipeline.instance_log("a"));
    let left = prepared(port, &pipeline.name);
    assert!(left.len() == 1 && left[0].contains(":a:2:"), "instance a's epoch 2 is left prepared: {left:?}");
    produce(&pipeline.source, PARTITIONS, &input[produced..]).await;

    // Instance a never comes back: b gets its partitions once the group drops it.
    let mut b = spawn_instance(&pipeline, "b", None);
    wait_for(port, &progress, rows.len() as i64, RUN_TIMEOUT, || pipeline.instance_log("b"));
    let status = pipeline.stop(&mut b, Duration::from_secs(60));
    let log = pipeline.instance_log("b");
    assert!(status.success(), "{log}");
    assert!(log.contains("resolved a prepared transaction of the PostgreSQL sink"), "{log}");
    assert_eq!(prepared(port, &pipeline.name), Vec::<String>::new(), "{log}");
    assert_aggregates(port, &table, &rows, |_| true, &log);
}

#[tokio::test(flavor = "multi_thread")]
async fn at_least_once_upserts_converge_on_the_aggregates_after_a_kill() {
    let port = port();
    let table = table_name("weir_pg_alo");
    create_table(port, &table, true, "");
    let mut spec = Spec::new("flight-delays");
    spec.sink_topic = false;
    spec.sink = format!("guarantee = \"at-least-once\"\n{}", sink_table(port, &table, "upsert", ""));
    let pipeline = TestPipeline::new("weir-pg-alo", &spec);
    let rows = flight_rows(3_000);
    let input = keyed(&rows);
    create_topic(&pipeline.source, PARTITIONS).await;
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    // Killed once a checkpoint of the second wave committed: the rest is written again.
    produce(&pipeline.source, PARTITIONS, &input[..1_500]).await;
    let mut child = spawn(&pipeline, &[], None);
    wait_for(port, &progress, 1_500, RUN_TIMEOUT, || pipeline.log_text());
    produce(&pipeline.source, PARTITIONS, &input[1_500..]).await;
    wait_for(port, &progress, 1_501, RUN_TIMEOUT, || pipeline.log_text());
    child.kill().expect("SIGKILL");
    child.wait().expect("wait");
    run_until_table_holds(&pipeline, port, &progress, rows.len(), &[]);
    assert_eq!(prepared(port, &pipeline.name), Vec::<String>::new(), "at-least-once prepares nothing");
    assert_aggregates(port, &table, &rows, |_| true, &pipeline.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn numbers_reach_the_table_as_written_and_upserts_merge_fields_in_order() {
    // passthrough: each input record is an output row.
    let port = port();
    let table = table_name("weir_pg_exact");
    execute(port, &format!("CREATE TABLE {table} (id bigint PRIMARY KEY, n numeric, b bigint, c int DEFAULT 7)"));
    let mut spec = Spec::new("passthrough");
    spec.sink_topic = false;
    spec.sink = sink_table(port, &table, "upsert", "").replace("[\"origin\", \"carrier\"]", "[\"id\"]");
    let pipeline = TestPipeline::new("weir-pg-exact", &spec);
    let record = |value: &str| (Some("k".to_owned()), value.to_owned());
    let input = [
        record(r#"{"id": 1, "n": 123456789012345678901234567890.123456789, "b": -0}"#),
        record(r#"{"id": 2, "n": 3.141592653589793238462643383279, "b": 9223372036854775807, "c": 1}"#),
        // Same key, fewer fields: as if upserted one after the other.
        record(r#"{"id": 2, "b": -9223372036854775808}"#),
    ];
    produce(&pipeline.source, 1, &input).await;
    let mut child = spawn(&pipeline, &[], None);
    wait_for(port, &format!("SELECT count(*) FROM {table} WHERE b < 0"), 1, RUN_TIMEOUT, || pipeline.log_text());
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{}", pipeline.log_text());
    let sql = format!("SELECT id, n::text, b, c FROM {table} ORDER BY id");
    let rows: Vec<(i64, String, i64, i32)> = weir_tests::postgres::with_client(port, |client| {
        client.query(&sql, &[]).expect("read").iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
    });
    assert_eq!(
        rows,
        [
            (1, "123456789012345678901234567890.123456789".to_owned(), 0, 7),
            (2, "3.141592653589793238462643383279".to_owned(), i64::MIN, 1),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_locked_by_a_foreign_prepared_transaction_is_waited_out_and_named() {
    let port = port();
    let table = table_name("weir_pg_locked");
    create_table(port, &table, true, "");
    // Another pipeline's crash left a prepared transaction holding EWR|UA's row.
    let gid = format!("other-{table}");
    execute(
        port,
        &format!("BEGIN; INSERT INTO {table} (origin, carrier) VALUES ('EWR', 'UA'); PREPARE TRANSACTION '{gid}'"),
    );
    let mut spec = Spec::new("flight-delays");
    spec.sink_topic = false;
    spec.sink = sink_table(port, &table, "upsert", "");
    spec.checkpoint = "interval_ms = 200\ntimeout_ms = 2000".into();
    let pipeline = TestPipeline::new("weir-pg-locked", &spec);
    let rows = flight_rows(2_000);
    assert!(rows.iter().any(|r| r.key.as_deref() == Some("EWR|UA")));
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    let mut child = spawn(&pipeline, &[], None);
    pipeline.wait_for_log("a row is locked by another transaction", RUN_TIMEOUT);
    execute(port, &format!("ROLLBACK PREPARED '{gid}'"));
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    wait_for(port, &progress, rows.len() as i64, RUN_TIMEOUT, || pipeline.log_text());
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{}", pipeline.log_text());
    assert_aggregates(port, &table, &rows, |_| true, &pipeline.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_named_output_goes_to_the_table_and_the_rest_to_the_topic() {
    // flights-hourly: hourly windows to the sink topic, flights too late for their hour to the
    // `late` output, which the table takes.
    let port = port();
    let table = table_name("weir_pg_late");
    execute(port, &format!("CREATE TABLE {table} (origin text, time_hour timestamptz, dep_delay bigint)"));
    let mut spec = Spec::new("flights-hourly");
    spec.source = "batch_size = 256\n[source.watermark]\nfield = \"time_hour\"\nformat = \"rfc3339\"".into();
    spec.transform = "config = { late_output = \"late\" }".into();
    spec.sink = sink_table(port, &table, "insert", "output = \"late\"\n");
    let pipeline = TestPipeline::new("weir-pg-late", &spec);
    let flight = |origin: &str, hour: u32, dep_delay: i64| {
        let value = serde_json::json!({"origin": origin, "time_hour": format!("2013-01-01T{hour}:00:00Z"), "dep_delay": dep_delay});
        (Some(origin.to_owned()), value.to_string())
    };
    // The 11:00 flight closes the 10:00 hour; the next 10:00 flight is late.
    let input = [
        flight("EWR", 10, 5),
        flight("JFK", 10, 1),
        flight("EWR", 11, 2),
        flight("EWR", 10, 100),
        flight("LGA", 12, 4),
    ];
    produce(&pipeline.source, 1, &input).await;
    let mut child = spawn(&pipeline, &[], None);
    wait_for(port, &format!("SELECT count(*) FROM {table}"), 1, RUN_TIMEOUT, || pipeline.log_text());
    let windows = read_raw(&pipeline.sink, 1, 3, RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(status.success(), "{}", pipeline.log_text());
    let late = weir_tests::postgres::rows(port, &table, "time_hour");
    assert_eq!(late.len(), 1, "{late:?}");
    assert_eq!((late[0]["origin"].as_str(), late[0]["dep_delay"].as_i64()), (Some("EWR"), Some(100)));
    assert!(late[0]["time_hour"].as_str().unwrap().starts_with("2013-01-01T10:00:00"), "{late:?}");
    assert_eq!(windows.len(), 3, "EWR and JFK at 10:00, EWR at 11:00 on the topic");
}

/// Every output row, inserted, exactly once: per origin|carrier the running `flights` counts
/// are 1, 2, … n without a duplicate or a gap.
fn assert_insert_log(port: u16, table: &str, rows: &[Row], log: &str) {
    let finals = expected_finals(rows, 15);
    let sql = format!(
        "SELECT origin || '|' || carrier, count(*), count(DISTINCT flights), max(flights) FROM {table} GROUP BY 1"
    );
    let counts: Vec<(String, i64, i64, i64)> = weir_tests::postgres::with_client(port, |client| {
        let rows = client.query(&sql, &[]).expect("count rows");
        rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect()
    });
    assert_eq!(counts.len(), finals.len(), "every key; log:\n{log}");
    for (key, rows, distinct, max) in counts {
        let want = finals[&key].to_json()["flights"].as_i64().unwrap();
        assert_eq!((rows, distinct, max), (want, want, want), "{key}: rows, distinct counts, last count; log:\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_insert_log_has_every_row_once_through_kills_and_a_database_restart() {
    let cluster = Cluster::start(port() + 8);
    let table = table_name("weir_pg_chaos");
    create_table(cluster.port, &table, false, "");
    let pipeline = delays_pipeline("weir-pg-chaos", cluster.port, &table, "insert", "");
    let rows = flight_rows(6_000);
    let input = keyed(&rows);
    create_topic(&pipeline.source, PARTITIONS).await;
    let progress = format!("SELECT count(*) FROM {table}");
    let mut produced = 0;
    let next_wave = async |produced: &mut usize, size: usize| {
        let wave = &input[*produced..input.len().min(*produced + size)];
        produce(&pipeline.source, PARTITIONS, wave).await;
        *produced += wave.len();
    };
    for round in 0..5 {
        let before = scalar(cluster.port, &progress).unwrap_or(0);
        next_wave(&mut produced, 1_000).await;
        let mut child = spawn(&pipeline, &[], None);
        // A checkpoint of the wave committed: the kill lands with work on both sides of it.
        wait_for(cluster.port, &progress, before + 1, RUN_TIMEOUT, || pipeline.log_text());
        if round == 2 {
            // The sink's connection breaks under the next rows: the pipeline recovers, goes on.
            cluster.script("restart");
            let before = scalar(cluster.port, &progress).unwrap_or(0);
            next_wave(&mut produced, 500).await;
            pipeline.wait_for_log("error=postgres:", RUN_TIMEOUT);
            wait_for(cluster.port, &progress, before + 1, RUN_TIMEOUT, || pipeline.log_text());
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");
    }
    produce(&pipeline.source, PARTITIONS, &input[produced..]).await;
    run_until_table_holds(&pipeline, cluster.port, &progress, rows.len(), &[]);
    let log = pipeline.log_text();
    assert_eq!(prepared(cluster.port, &pipeline.name), Vec::<String>::new(), "{log}");
    assert_insert_log(cluster.port, &table, &rows, &log);
}

#[tokio::test(flavor = "multi_thread")]
async fn rows_the_table_refuses_go_to_dead_letters_or_stop_the_pipeline_and_nothing_else_is_lost() {
    let port = port();
    let rows = flight_rows(2_000);
    let input = keyed(&rows);
    let lga = rows.iter().filter(|r| r.key.as_deref().is_some_and(|k| k.starts_with("LGA|"))).count();
    assert!(lga > 0);

    // Dead letters: the table refuses LGA's rows (a CHECK constraint); they go to the
    // dead-letter topic with PostgreSQL's reason, the rest to the table.
    let table = table_name("weir_pg_refuse");
    create_table(port, &table, true, ", CONSTRAINT no_lga CHECK (origin <> 'LGA')");
    let pipeline = delays_pipeline("weir-pg-dlq", port, &table, "upsert", "on_error = \"dead-letter\"\n");
    produce(&pipeline.source, PARTITIONS, &input).await;
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    run_until_table_holds(&pipeline, port, &progress, rows.len() - lga, &[]);
    let log = pipeline.log_text();
    assert_aggregates(port, &table, &rows, |key| !key.starts_with("LGA|"), &log);
    let dead = read_raw(&pipeline.dead_letters, PARTITIONS, 1, RUN_TIMEOUT);
    assert!(!dead.is_empty(), "dead letters; log:\n{log}");
    for letter in &dead {
        let header = |name: &str| {
            let found = letter.record.headers.iter().find(|(key, _)| key == name.as_bytes());
            found.and_then(|(_, value)| value.clone()).map(|v| String::from_utf8_lossy(&v).into_owned())
        };
        let value = String::from_utf8_lossy(letter.record.value.as_deref().unwrap_or_default()).into_owned();
        assert!(value.contains("\"origin\":\"LGA\""), "only LGA's rows are refused: {value}");
        let reason = header("weir.error").unwrap_or_default();
        assert!(reason.contains("no_lga"), "the reason names the constraint: {reason}");
        assert_eq!(header("weir.sink"), Some(format!("postgres:{table}")));
    }

    // Fail: the first refused row stops the pipeline, its epoch uncommitted; once the
    // constraint is dropped, a restart writes everything exactly once.
    let table = table_name("weir_pg_fail");
    create_table(port, &table, true, ", CONSTRAINT no_lga CHECK (origin <> 'LGA')");
    let pipeline = delays_pipeline("weir-pg-fail", port, &table, "upsert", "");
    produce(&pipeline.source, PARTITIONS, &input).await;
    let mut child = spawn(&pipeline, &[], None);
    let status = wait_exit(&mut child, RUN_TIMEOUT).expect("weir run stops on a refused row");
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    assert!(log.contains(&format!("table {table} refused the output of")) && log.contains("no_lga"), "{log}");
    assert_eq!(prepared(port, &pipeline.name), Vec::<String>::new());
    execute(port, &format!("ALTER TABLE {table} DROP CONSTRAINT no_lga"));
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    run_until_table_holds(&pipeline, port, &progress, rows.len(), &[]);
    assert_aggregates(port, &table, &rows, |_| true, &pipeline.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_database_that_is_down_is_retried_then_stops_clearly_and_nothing_is_lost() {
    let cluster = Cluster::start(port() + 9);
    let table = table_name("weir_pg_down");
    create_table(cluster.port, &table, true, "");
    let pipeline = delays_pipeline("weir-pg-down", cluster.port, &table, "upsert", "");
    let rows = flight_rows(3_000);
    let input = keyed(&rows);
    let progress = format!("SELECT sum(flights)::bigint FROM {table}");
    create_topic(&pipeline.source, PARTITIONS).await;

    // No room for prepared transactions: the start is refused, naming the setting.
    cluster.script("stop");
    cluster.script_with("start", &[("WEIR_POSTGRES_MAX_PREPARED", "0")]);
    let mut child = spawn(&pipeline, &[], None);
    let status = wait_exit(&mut child, RUN_TIMEOUT).expect("refused");
    let log = pipeline.log_text();
    assert!(!status.success() && log.contains("max_prepared_transactions = 0"), "{log}");
    cluster.script("restart");

    // Half the flights in, then the database goes away: recovery retries, then stops.
    produce(&pipeline.source, PARTITIONS, &input[..1_500]).await;
    let mut child = spawn(&pipeline, &["--max-identical-failures", "3"], None);
    wait_for(cluster.port, &progress, 1_500, RUN_TIMEOUT, || pipeline.log_text());
    cluster.script("stop");
    produce(&pipeline.source, PARTITIONS, &input[1_500..]).await;
    let status = wait_exit(&mut child, RUN_TIMEOUT).expect("weir run gives up");
    let log = pipeline.log_text();
    assert!(!status.success(), "{log}");
    assert!(log.contains("recovering after back-off"), "retried first:\n{log}");
    assert!(log.contains("is PostgreSQL running and reachable at sink.postgres.url?"), "{log}");
    assert!(log.contains("failed the same way 3 times in a row"), "{log}");

    cluster.script("start");
    run_until_table_holds(&pipeline, cluster.port, &progress, rows.len(), &[]);
    assert_aggregates(cluster.port, &table, &rows, |_| true, &pipeline.log_text());
}
