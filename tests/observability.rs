//! Observability (issue 16) on the real broker with real components: `weir run --metrics`
//! serves Prometheus metrics and a dashboard that a real headless Chromium shows live, liveness
//! and readiness probes (issue 47) that follow a restore and a failing pipeline, and
//! `weir status --json` carries the text form's facts and the records open transactions hold
//! back. The broker-stopped readiness case is in
//! `chaos_flights.rs`, the binary allowed to stop the broker; `weir serve`'s probes in
//! `hosting.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::producer::{BaseRecord, Producer};
use serde_json::Value;
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, http_get, poll_until, produce, run_to_completion};
use weir_tests::webdriver::{Browser, artifact};
use weir_tests::{Isolation, create_topic};

/// Generous: the machine may be busy with builds; conditions are waited for, never slept on.
const PAGE_TIMEOUT: Duration = Duration::from_secs(180);

/// GET `url`'s body as text.
fn get(url: &str) -> String {
    ureq::get(url)
        .call()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .body_mut()
        .read_to_string()
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// The value of the series `name{labels}` (labels as Prometheus prints them, sorted), if any.
fn series(metrics: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    metrics.lines().find_map(|line| line.strip_prefix(&prefix)).map(|v| v.parse().expect("a number"))
}

/// Waits until `/metrics` at `address` satisfies `done`; returns that scrape.
fn wait_for_metrics(address: &str, what: &str, done: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let metrics = get(&format!("http://{address}/metrics"));
        if done(&metrics) {
            return metrics;
        }
        assert!(started.elapsed() < PAGE_TIMEOUT, "/metrics never showed {what}; last scrape:\n{metrics}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// What the dashboard shows of pipeline `name`, read from the rendered page (not the JSON):
/// `{state, throughput, lag, records_in, error, dead_letters, late, timers, operators (each
/// operator node's text), dead_letter_node, dead_letter, failures, checkpoints (rows),
/// partitions (each row's cells), activity (each activity's share)}`, or null before its card
/// appears.
fn card_script(name: &str) -> String {
    format!(
        r#"const card = [...document.querySelectorAll("article.pipeline")].find((c) => c.dataset.pipeline === {name:?});
           if (!card) return null;
           const text = (field) => card.querySelector(`[data-field="${{field}}"]`).textContent;
           const number = (field) => Number(text(field).replaceAll(",", ""));
           const shown = (section, field) => card.querySelector(`[data-section="${{section}}"]`).hidden ? null : text(field);
           const error = card.querySelector('[data-field="error"]');
           const rows = (table) => [...card.querySelectorAll(`[data-table="${{table}}"] tbody tr`)]
             .map((row) => [...row.cells].map((cell) => cell.textContent));
           return {{ state: text("state"), throughput: number("throughput"), lag: number("lag"),
                    records_in: number("records-in"), error: error.hidden ? null : error.textContent,
                    dead_letters: number("dead-letters"), late: number("late"), timers: text("timers"),
                    operators: [...card.querySelectorAll('[data-node="operator"]')].map((n) => n.textContent),
                    dead_letter_node: card.querySelector('[data-node="dead-letter"]')?.textContent ?? null,
                    dead_letter: shown("dead-letter", "dead-letter"),
                    failures: [...card.querySelectorAll('[data-field="failures"] li')].map((li) => li.textContent),
                    checkpoints: rows("checkpoints"), partitions: rows("partitions"),
                    activity: Object.fromEntries(["guest", "producer", "poll", "checkpoint"].map((key) =>
                      [key, card.querySelector(`[data-activity="${{key}}"]`).textContent])) }};"#
    )
}

/// The `n`th number in `text` (digits with thousands separators), e.g. an operator node's
/// "in 1,234 · out 1,200".
fn nth_number(text: &str, n: usize) -> Option<u64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == ','))
        .filter(|part| part.chars().any(|c| c.is_ascii_digit()))
        .nth(n)
        .and_then(|part| part.replace(',', "").parse().ok())
}

/// A flight for flights-hourly: keyed by `origin`, at hour `time_hour` (RFC 3339).
fn flight(origin: &str, time_hour: &str, dep_delay: i64) -> (Option<String>, String) {
    let value = serde_json::json!({"origin": origin, "time_hour": time_hour, "dep_delay": dep_delay});
    (Some(origin.to_owned()), value.to_string())
}

/// flights-hourly with a watermark on `time_hour` (no out-of-orderness) under `on_error`, its
/// late flights to a named output.
fn hourly(prefix: &str, on_error: &str) -> TestPipeline {
    let late = weir_tests::unique_name(&format!("{prefix}-late"));
    TestPipeline::new(
        prefix,
        &Spec {
            source: "batch_size = 256\n[source.watermark]\nfield = \"time_hour\"\nformat = \"rfc3339\"\n\
                     max_out_of_orderness_ms = 0"
                .into(),
            transform: format!("on_error = \"{on_error}\"\nconfig = {{ late_output = \"late\" }}"),
            sink: format!("outputs = {{ late = \"{late}\" }}"),
            checkpoint: "interval_ms = 200\ntimeout_ms = 10000".into(),
            ..Spec::new("flights-hourly")
        },
    )
}

fn field<'a>(card: &'a Value, name: &str) -> &'a Value {
    &card[name]
}

/// Produces plain values to partition 0 of `topic` every few milliseconds until `stop`; counts
/// them in `sent` once flushed.
fn keep_producing(topic: String, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let producer = weir_tests::admin::producer(&[("linger.ms", "5")]);
        let mut queued = 0;
        while !stop.load(Ordering::Relaxed) {
            let value = format!("record {queued}");
            weir_tests::admin::send_waiting(&producer, BaseRecord::<str, str>::to(&topic).partition(0).payload(&value));
            queued += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        producer.flush(Duration::from_secs(60)).expect("flush");
        sent.store(queued, Ordering::Relaxed);
    })
}

/// The dashboard in a real browser: a pipeline shown running with a throughput above zero, its
/// lag rising while its guest is stuck and going back to zero, and a failing pipeline's error.
#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_a_live_pipeline_its_lag_going_to_zero_and_a_failing_pipelines_error() {
    // misbehave forwards plain values; `sleep` holds the runner 30 s (within the deadline), so
    // the records produced meanwhile provably wait; `error` fails the batch (on_error = fail).
    let live = TestPipeline::new(
        "weir-dash-live",
        &Spec {
            transform: "deadline_ms = 45000".into(),
            checkpoint: "interval_ms = 200\ntimeout_ms = 10000".into(),
            ..Spec::new("misbehave")
        },
    );
    let failing = TestPipeline::new("weir-dash-failing", &Spec::new("misbehave"));
    create_topic(&live.source, 1).await;
    produce(&failing.source, 1, &[(None, "fine".into()), (None, "error".into()), (None, "after".into())]).await;
    let metrics_args = ["--metrics", "127.0.0.1:0"];
    let mut live_run = live.spawn_with(&metrics_args, &[]);
    let mut failing_run = failing.spawn_with(&metrics_args, &[]);
    let live_address = live.metrics_address(&mut live_run);
    let failing_address = failing.metrics_address(&mut failing_run);

    let browser = Browser::start();
    browser.open(&format!("http://{live_address}/"));
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let producing = keep_producing(live.source.clone(), stop.clone(), sent.clone());
    let card = card_script(&live.name);
    browser.wait_for("the pipeline running with a throughput above 0", &card, PAGE_TIMEOUT, |c| {
        field(c, "state") == "running" && field(c, "throughput").as_f64().is_some_and(|t| t > 0.0)
    });

    // Stall the guest: what is produced from now on waits, and the page shows the lag.
    weir_tests::admin::produce_to(&live.source, 0, &["sleep".to_owned()]);
    browser.wait_for("a lag above 0 while the guest sleeps", &card, PAGE_TIMEOUT, |c| {
        field(c, "lag").as_f64().is_some_and(|lag| lag > 0.0)
    });
    stop.store(true, Ordering::Relaxed);
    producing.join().expect("producer thread");
    let produced = sent.load(Ordering::Relaxed) + 1;
    let caught_up = browser.wait_for("the lag back at 0 with every record processed", &card, PAGE_TIMEOUT, |c| {
        field(c, "lag").as_f64() == Some(0.0) && field(c, "records_in").as_u64().is_some_and(|n| n >= produced)
    });
    assert_eq!(field(&caught_up, "state"), "running");
    assert_eq!(field(&caught_up, "error"), &Value::Null, "no failure: {caught_up}");
    // The chain as a graph: the one operator took every record and forwarded each.
    let operator = field(&caught_up, "operators")[0].as_str().expect("the operator's node");
    assert!(operator.starts_with("misbehave"), "{caught_up}");
    assert!(nth_number(operator, 0).is_some_and(|n| n >= produced), "records in: {operator}");
    assert!(nth_number(operator, 1).is_some_and(|n| n >= produced), "records out: {operator}");
    assert_eq!(nth_number(operator, 2), Some(0), "no error: {operator}");
    // The dead-letter node's text ends with its count (its topic's name has digits too).
    let node = field(&caught_up, "dead_letter_node").as_str().expect("the dead-letter topic in the graph");
    assert!(node.ends_with(&format!("{}0 records", live.dead_letters)), "{node}");
    let checkpoints = field(&caught_up, "checkpoints").as_array().expect("checkpoint rows");
    assert!(checkpoints.len() >= 2, "a checkpoint history: {caught_up}");
    let ids: Vec<u64> = checkpoints.iter().map(|row| nth_number(row[0].as_str().unwrap(), 0).unwrap()).collect();
    assert!(ids.windows(2).all(|pair| pair[0] > pair[1]), "newest first: {ids:?}");
    let activity = field(&caught_up, "activity");
    assert!(
        ["guest", "producer", "poll", "checkpoint"]
            .iter()
            .all(|k| activity[k].as_str().is_some_and(|s| s.ends_with('%'))),
        "each activity's share: {activity}"
    );
    let shot = artifact("dashboard-live.png");
    browser.screenshot(&shot);
    println!("screenshot of the live pipeline's dashboard: {}", shot.display());

    browser.open(&format!("http://{failing_address}/"));
    let card = card_script(&failing.name);
    // A pipeline failing on a record keeps recovering: between two failures it is briefly
    // `running` again, so the page is watched until it shows the error while recovering.
    let shown = browser.wait_for("the failing pipeline's error while it recovers", &card, PAGE_TIMEOUT, |c| {
        field(c, "error").as_str().is_some_and(|e| e.contains("misbehave: error at offset 1"))
            && matches!(field(c, "state").as_str(), Some("recovering" | "starting"))
    });
    let failures = field(&shown, "failures").as_array().expect("the failure history");
    assert!(
        failures
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.contains("[recovering]") && f.contains("error at offset 1"))),
        "the failure history shows the failure and that it is retried: {shown}"
    );
    let shot = artifact("dashboard-failing.png");
    browser.screenshot(&shot);
    println!("screenshot of the failing pipeline's dashboard: {}", shot.display());
}

/// Issue 49: what the dashboard explains besides throughput, in a real browser. A pipeline that
/// dead-letters a record shows the count, the reason and the record's source position; an
/// event-time pipeline its watermark per partition (behind the clock and behind the newest
/// event), its late records and its open windows' timers; and a pipeline stopped by an error
/// that needs a human stays on the page with `--keep-serving` (state failed, the failure in its
/// history, `/readyz` 503) until SIGTERM, after which `weir run` exits with a failure status.
#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_explains_dead_letters_event_time_and_a_pipeline_that_failed() {
    let dead_letters = TestPipeline::new(
        "weir-dash-dlq",
        &Spec { transform: "on_error = \"dead-letter\"".into(), ..Spec::new("misbehave") },
    );
    let event_time = hourly("weir-dash-evt", "dead-letter");
    let failed = hourly("weir-dash-failed", "fail");
    produce(&dead_letters.source, 1, &[(None, "fine".into()), (None, "error".into()), (None, "after".into())]).await;
    let flights = [
        flight("EWR", "2013-01-01T10:00:00Z", 5),
        flight("JFK", "2013-01-01T10:00:00Z", 1),
        // Moves the watermark to 10:59:59.999: the 10:00 hour is over.
        flight("EWR", "2013-01-01T11:00:00Z", 2),
        // Late: its hour closed before it arrived.
        flight("EWR", "2013-01-01T10:00:00Z", 100),
        // Moves the watermark to 11:59:59.999; the 12:00 hour stays open.
        flight("LGA", "2013-01-01T12:00:00Z", 4),
    ];
    produce(&event_time.source, 1, &flights).await;
    // No event time: under on_error = "fail" the pipeline stops (it would be the same next time).
    produce(&failed.source, 1, &[(Some("EWR".into()), r#"{"origin": "EWR", "dep_delay": 3}"#.into())]).await;
    let mut dead_letters_run = dead_letters.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let mut event_time_run = event_time.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let mut failed_run = failed.spawn_with(&["--metrics", "127.0.0.1:0", "--keep-serving"], &[]);
    let browser = Browser::start();

    browser.open(&format!("http://{}/", dead_letters.metrics_address(&mut dead_letters_run)));
    let card = card_script(&dead_letters.name);
    let shown = browser.wait_for("one dead letter with its reason and position", &card, PAGE_TIMEOUT, |c| {
        field(c, "dead_letters").as_u64() == Some(1) && field(c, "records_in").as_u64() == Some(3)
    });
    let reason = field(&shown, "dead_letter").as_str().expect("the last dead letter shown");
    assert!(
        reason.contains(&format!("{}[0]@1", dead_letters.source)) && reason.contains("error at offset 1"),
        "{reason}"
    );
    let node = field(&shown, "dead_letter_node").as_str().expect("the dead-letter topic in the graph");
    assert!(node.ends_with(&format!("{}1 records", dead_letters.dead_letters)), "{node}");
    let operator = field(&shown, "operators")[0].as_str().unwrap();
    assert_eq!(
        (nth_number(operator, 0), nth_number(operator, 1), nth_number(operator, 2)),
        (Some(3), Some(2), Some(1)),
        "{operator}"
    );
    assert_eq!(field(&shown, "state"), "running", "a dead letter does not stop the pipeline: {shown}");
    browser.screenshot(&artifact("dashboard-dead-letters.png"));

    let address = event_time.metrics_address(&mut event_time_run);
    browser.open(&format!("http://{address}/"));
    let card = card_script(&event_time.name);
    let shown = browser.wait_for("the watermark, a late record and an open window", &card, PAGE_TIMEOUT, |c| {
        field(c, "late").as_u64() == Some(1) && field(c, "timers").as_str().is_some_and(|t| t != "–" && t != "0")
    });
    let row = &field(&shown, "partitions")[0];
    assert_eq!(row[5], "2013-01-01T11:59:59.999Z", "the watermark: {shown}");
    assert_eq!(row[7], "1 ms", "behind the newest event (12:00) by the bound plus 1 ms: {shown}");
    assert!(row[6].as_str().is_some_and(|d| d.ends_with(" h")), "13 years behind the clock: {shown}");
    assert_eq!(row[8], "active");
    let (_, view) = http_get(&format!("http://{address}/api/pipelines"));
    let partition = &view["pipelines"][0]["partitions"][0];
    assert_eq!(partition["newest_event_ms"], 1_357_041_600_000_i64, "12:00 on 1 January 2013: {partition}");
    assert_eq!(partition["watermark_behind_newest_ms"], 1);
    assert_eq!(view["pipelines"][0]["late_records"], 1);
    browser.screenshot(&artifact("dashboard-event-time.png"));

    let address = failed.metrics_address(&mut failed_run);
    browser.open(&format!("http://{address}/"));
    let card = card_script(&failed.name);
    let shown = browser
        .wait_for("the pipeline failed, its page still served", &card, PAGE_TIMEOUT, |c| field(c, "state") == "failed");
    let error = field(&shown, "error").as_str().expect("the failure shown");
    assert!(error.contains("time_hour"), "{error}");
    let failures = field(&shown, "failures").as_array().unwrap();
    assert!(failures[0].as_str().is_some_and(|f| f.contains("[failed]")), "{shown}");
    let (status, _) = http_get(&format!("http://{address}/readyz"));
    assert_eq!(status, 503);
    browser.screenshot(&artifact("dashboard-failed.png"));
    assert!(failed_run.try_wait().expect("try_wait").is_none(), "--keep-serving keeps the process up");
    let status = failed.stop(&mut failed_run, RUN_TIMEOUT);
    assert!(!status.success(), "the failure's status after SIGTERM: {status}; log:\n{}", failed.log_text());
    for (pipeline, run) in [(&dead_letters, &mut dead_letters_run), (&event_time, &mut event_time_run)] {
        assert!(pipeline.stop(run, RUN_TIMEOUT).success(), "{}", pipeline.log_text());
    }
}

/// `/metrics` counts what the pipeline did, in Prometheus' text format: records and bytes in
/// and out per partition, checkpoints, lag 0 once caught up, and a failing guest's errors by
/// kind, its recoveries and its lag.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_records_checkpoints_lag_and_guest_errors() {
    let good = TestPipeline::new("weir-metrics-good", &Spec::new("passthrough"));
    let values: Vec<(Option<String>, String)> =
        (0..500).map(|i| (Some(format!("k{}", i % 7)), format!("v{i}"))).collect();
    produce(&good.source, 2, &values).await;
    let mut run = good.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let address = good.metrics_address(&mut run);
    let name = &good.name;
    let partition = |p: i32| format!("partition=\"{}[{p}]\",pipeline=\"{name}\"", good.source);
    let metrics = wait_for_metrics(&address, "500 records in, lag measured 0", |m| {
        let sum = |metric: &str| (0..2).map(|p| series(m, metric, &partition(p)).unwrap_or(0.0)).sum::<f64>();
        let lags: Option<Vec<f64>> = (0..2).map(|p| series(m, "weir_source_lag_records", &partition(p))).collect();
        sum("weir_records_in_total") == 500.0 && sum("weir_source_position") == 500.0 && lags == Some(vec![0.0, 0.0])
    });
    let sum = |metric: &str| (0..2).map(|p| series(&metrics, metric, &partition(p)).expect(metric)).sum::<f64>();
    assert_eq!(sum("weir_records_out_total"), 500.0);
    let bytes: usize = values.iter().map(|(k, v)| k.as_ref().map_or(0, String::len) + v.len()).sum();
    assert_eq!(sum("weir_bytes_in_total"), bytes as f64);
    assert_eq!(sum("weir_bytes_out_total"), bytes as f64);
    let pipeline = format!("pipeline=\"{name}\"");
    assert!(series(&metrics, "weir_committed_checkpoint_id", &pipeline).expect("checkpoint id") >= 1.0);
    let epochs = series(&metrics, "weir_checkpoint_duration_seconds_count", &format!("phase=\"commit\",{pipeline}"));
    assert!(epochs.expect("commit phase histogram") >= 1.0, "{metrics}");
    assert_eq!(series(&metrics, "weir_pipeline_state", &format!("{pipeline},state=\"running\"")), Some(1.0));
    assert!(
        series(&metrics, "weir_guest_call_duration_seconds_count", &format!("operator=\"passthrough\",{pipeline}"))
            .is_some_and(|n| n >= 1.0)
    );
    assert!(metrics.contains("# TYPE weir_batch_duration_seconds histogram"), "{metrics}");

    let failing = TestPipeline::new("weir-metrics-failing", &Spec::new("misbehave"));
    produce(&failing.source, 1, &[(None, "panic".into()), (None, "after".into())]).await;
    let mut run = failing.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let address = failing.metrics_address(&mut run);
    let labels = format!("kind=\"panic\",operator=\"misbehave\",pipeline=\"{}\"", failing.name);
    let pipeline = format!("pipeline=\"{}\"", failing.name);
    let lag = format!("partition=\"{}[0]\",{pipeline}", failing.source);
    let metrics = wait_for_metrics(&address, "a panic counted, a recovery, and the lag", |m| {
        series(m, "weir_guest_errors_total", &labels).is_some_and(|n| n >= 1.0)
            && series(m, "weir_recoveries_total", &pipeline).is_some_and(|n| n >= 1.0)
            && series(m, "weir_source_lag_records", &lag) == Some(2.0)
    });
    assert_eq!(series(&metrics, "weir_records_in_total", &lag), Some(0.0), "the failing batch is not counted");

    // Every metric the docs and the Grafana dashboard name is one Weir exports.
    let exported: Vec<&str> = metrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
    for file in ["docs/observability.md", "examples/observability/grafana-dashboard.json"] {
        let text = std::fs::read_to_string(weir_tests::repo_root().join(file)).expect(file);
        let named = metric_names(&text);
        assert!(named.len() >= 10, "{file} names only {named:?}");
        for name in named {
            assert!(exported.contains(&name.as_str()), "{file} names {name}, which Weir does not export: {exported:?}");
        }
    }
}

/// An operator after one that dropped every record of a batch is not called (the contract
/// calls no guest with an empty batch): its call count stays 0 while the first operator's
/// grows, and becomes exactly 1 once one record gets through.
#[tokio::test(flavor = "multi_thread")]
async fn an_operator_after_one_that_dropped_a_whole_batch_is_not_called() {
    let mut spec = Spec::new("json-filter");
    spec.transform = format!(
        "config = {{ field = \"keep\", operator = \"exists\" }}\n\n\
         [[transforms]]\nname = \"passthrough\"\nwasm = \"{}\"",
        weir_tests::plugin("passthrough").display()
    );
    let pipeline = TestPipeline::new("weir-metrics-chain", &spec);
    let dropped: Vec<(Option<String>, String)> = (0..300).map(|i| (None, format!("{{\"n\":{i}}}"))).collect();
    produce(&pipeline.source, 1, &dropped).await;
    let mut run = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let address = pipeline.metrics_address(&mut run);
    let name = &pipeline.name;
    let records = format!("partition=\"{}[0]\",pipeline=\"{name}\"", pipeline.source);
    let calls = |metrics: &str, operator: &str| {
        let labels = format!("operator=\"{operator}\",pipeline=\"{name}\"");
        series(metrics, "weir_guest_call_duration_seconds_count", &labels).unwrap_or(0.0)
    };
    let metrics =
        wait_for_metrics(&address, "300 records in", |m| series(m, "weir_records_in_total", &records) == Some(300.0));
    assert!(calls(&metrics, "json-filter") >= 1.0, "{metrics}");
    assert_eq!(calls(&metrics, "passthrough"), 0.0, "called with empty batches: {metrics}");

    produce(&pipeline.source, 1, &[(None, r#"{"keep":true}"#.into())]).await;
    let metrics =
        wait_for_metrics(&address, "1 record out", |m| series(m, "weir_records_out_total", &records) == Some(1.0));
    assert_eq!(calls(&metrics, "passthrough"), 1.0, "{metrics}");
}

/// The metric names (`weir_…`, without a histogram's `_bucket`, `_sum`, `_count`) in `text`.
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (start, _) in text.match_indices("weir_") {
        let rest = &text[start..];
        let end = rest.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(rest.len());
        let name = &rest[..end];
        let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
        names.insert(base.to_owned());
    }
    names
}

/// On a source written in transactions the end sits after a commit marker (and aborted records
/// end in an abort marker): the lag still reaches 0, because the position steps over markers.
#[tokio::test(flavor = "multi_thread")]
async fn lag_reaches_zero_after_transaction_markers_and_aborted_records() {
    let pipeline = TestPipeline::new("weir-lag-txn", &Spec::new("passthrough"));
    create_topic(&pipeline.source, 1).await;
    let values = |prefix: &str, n: usize| (0..n).map(|i| format!("{prefix}{i}")).collect::<Vec<_>>();
    // Offsets 0-49, commit marker 50, aborted 51-60, abort marker 61: the end is 62.
    weir_tests::admin::produce_in_transaction(&pipeline.source, 0, &values("kept", 50), true);
    weir_tests::admin::produce_in_transaction(&pipeline.source, 0, &values("aborted", 10), false);
    let mut run = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let address = pipeline.metrics_address(&mut run);
    let started = Instant::now();
    // When the position was first seen at the end: a sample taken after it must show lag 0.
    let mut at_end: Option<u64> = None;
    loop {
        let view: Value = serde_json::from_str(&get(&format!("http://{address}/api/pipelines"))).expect("JSON");
        let shown = &view["pipelines"][0];
        if at_end.is_none() && shown["records_in"] == 50 && shown["partitions"][0]["position"] == 62 {
            at_end = Some(now_ms());
        }
        let sampled_after = |s: &Value| at_end.is_some_and(|at| s["at_ms"].as_u64().is_some_and(|t| t > at));
        let samples = shown["history"].as_array().cloned().unwrap_or_default();
        if let Some(sample) = samples.iter().find(|s| sampled_after(s)) {
            assert_eq!(sample["lag_records"], 0, "lag past the markers: {shown}");
            break;
        }
        assert!(started.elapsed() < PAGE_TIMEOUT, "the lag never reached 0 past the markers: {shown}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Milliseconds since the Unix epoch, as the samples' `at_ms`.
fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock after 1970").as_millis() as u64
}

/// `--metrics` at an address already in use stops `weir run` at once, naming the flag and the
/// address; a malformed address is refused by the argument parser.
#[test]
fn a_metrics_address_in_use_or_malformed_is_refused() {
    let pipeline = TestPipeline::new("weir-metrics-in-use", &Spec::new("passthrough"));
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("address").to_string();
    for (value, expected) in [
        (address.as_str(), format!("cannot serve metrics at {address} (--metrics)")),
        ("127.0.0.1", "expected HOST:PORT, e.g. 127.0.0.1:9464".to_owned()),
    ] {
        let (ok, _, stderr) =
            weir_tests::run_weir(&["run".as_ref(), pipeline.file.as_os_str(), "--metrics".as_ref(), value.as_ref()]);
        assert!(!ok, "weir run --metrics {value} started");
        assert!(stderr.contains(&expected), "--metrics {value}: {stderr}");
    }
}

/// `weir status --json` has the text form's facts under the documented field names.
#[tokio::test(flavor = "multi_thread")]
async fn status_json_has_the_facts_of_the_text_form() {
    let pipeline = TestPipeline::new("weir-status-json", &Spec::new("passthrough"));
    let values: Vec<(Option<String>, String)> =
        (0..300).map(|i| (Some(format!("k{}", i % 5)), format!("v{i}"))).collect();
    produce(&pipeline.source, 2, &values).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, values.len(), &[]);
    // Records the pipeline has not read: lag the status must show.
    weir_tests::admin::produce_to(&pipeline.source, 1, &["late-1".to_owned(), "late-2".to_owned()]);

    let output = std::process::Command::new(weir_tests::weir_binary())
        .args(["status", "--json"])
        .arg(&pipeline.file)
        .output()
        .expect("weir status --json");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: Value = serde_json::from_slice(&output.stdout).expect("weir status --json prints JSON");
    let text = pipeline.status();

    assert_eq!(json["pipeline"], pipeline.name.as_str());
    assert!(json["state_dir"].as_str().expect("state_dir").ends_with("state"), "{json}");
    let committed = json["committed_checkpoint"].as_u64().expect("committed_checkpoint");
    assert!(committed >= 1);
    assert!(text.contains(&format!("last committed checkpoint: {committed}\n")), "{text}");
    assert_eq!(json["changelog_topic"], format!("{}-changelog", pipeline.name));
    let partitions = json["partitions"].as_array().expect("partitions");
    assert_eq!(partitions.len(), 2);
    let mut total = 0;
    for (index, p) in partitions.iter().enumerate() {
        assert_eq!(p["topic"], pipeline.source.as_str());
        assert_eq!(p["partition"], index as i64);
        let (checkpoint, end, lag) = (p["checkpoint_offset"].as_i64(), p["end_offset"].as_i64(), p["lag"].as_i64());
        let (checkpoint, end, lag) =
            (checkpoint.expect("checkpoint_offset"), end.expect("end_offset"), lag.expect("lag"));
        assert_eq!(p["group_offset"].as_i64(), Some(checkpoint), "Weir commits the group's offsets with checkpoints");
        assert_eq!(lag, end - checkpoint);
        let row = format!("{}[{index}]", pipeline.source);
        let line = text.lines().find(|l| l.starts_with(&row)).unwrap_or_else(|| panic!("no row {row} in:\n{text}"));
        let cells: Vec<&str> = line.split_whitespace().collect();
        let instance = p["instance"].as_str().expect("the instance that committed the partition").to_owned();
        // The stopped process stays the group's member (static) until its session times out.
        let unknown = if json["owners_known"] == true { "-" } else { "(rebalancing)" };
        let owner = p["owner"].as_str().unwrap_or(unknown).to_owned();
        assert!(owner == instance || owner == unknown, "owner {owner} of {row}, committed by {instance}");
        assert_eq!(
            cells[1..],
            [
                checkpoint.to_string(),
                checkpoint.to_string(),
                end.to_string(),
                lag.to_string(),
                "0".to_owned(),
                instance,
                owner
            ]
        );
        assert_eq!(p["held_back"], 0, "no open transaction");
        total += lag;
    }
    assert_eq!(partitions[1]["lag"], 2, "the two records produced after the run");
    assert_eq!(json["total_lag"], total);
    assert!(text.contains(&format!("total lag: {total} ")), "{text}");
    assert_eq!(json["total_held_back"], 0);
}

/// `weir status --output json` of `pipeline`, parsed.
fn status_json(pipeline: &TestPipeline) -> Value {
    let output = std::process::Command::new(weir_tests::weir_binary())
        .args(["status", "--output", "json"])
        .arg(&pipeline.file)
        .output()
        .expect("weir status --output json");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("weir status --output json prints JSON")
}

/// Another producer's open transaction of 50 records on a source partition: `weir status`
/// shows them held back (high watermark minus last stable offset, as the broker reports them),
/// not as lag, which stays 0; once the transaction commits they are lag and nothing is held
/// back; an aborted one leaves neither.
#[tokio::test(flavor = "multi_thread")]
async fn status_shows_records_held_back_by_an_open_transaction() {
    let pipeline = TestPipeline::new("weir-status-held", &Spec::new("passthrough"));
    let values: Vec<(Option<String>, String)> = (0..20).map(|i| (Some(format!("k{i}")), format!("v{i}"))).collect();
    produce(&pipeline.source, 2, &values).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, values.len(), &[]);
    let held = |json: &Value, partition: usize| json["partitions"][partition]["held_back"].as_i64().expect("held_back");
    let lag = |json: &Value, partition: usize| json["partitions"][partition]["lag"].as_i64().expect("lag");

    // Offsets past the last checkpoint (the pipeline is stopped): what `lag` must say.
    let mut unread = 0;
    for commit in [true, false] {
        let records: Vec<String> = (0..50).map(|i| format!("open-{commit}-{i}")).collect();
        let transaction = weir_tests::admin::open_transaction(&pipeline.source, 1, &records);
        let (_, stable) = weir_tests::admin::watermarks(&pipeline.source, 1, "read_committed");
        let (_, high) = weir_tests::admin::watermarks(&pipeline.source, 1, "read_uncommitted");
        assert_eq!(high - stable, 50, "the broker holds 50 records back");
        let json = status_json(&pipeline);
        assert_eq!(held(&json, 1), 50, "{json}");
        assert_eq!(held(&json, 0), 0, "{json}");
        assert_eq!(json["total_held_back"], 50, "{json}");
        assert_eq!(lag(&json, 1), unread, "held-back records are not lag: {json}");
        let text = pipeline.status();
        assert!(text.contains("held back by open transactions: 50 "), "{text}");

        if commit {
            transaction.commit_transaction(Duration::from_secs(30)).expect("commit_transaction");
        } else {
            transaction.abort_transaction(Duration::from_secs(30)).expect("abort_transaction");
        }
        // The coordinator writes the markers after it answers the commit or abort.
        let started = Instant::now();
        while weir_tests::admin::open_transaction_in(&pipeline.source, 2) {
            assert!(started.elapsed() < PAGE_TIMEOUT, "the broker still holds records back");
            std::thread::sleep(Duration::from_millis(50));
        }
        let json = status_json(&pipeline);
        assert_eq!(json["total_held_back"], 0, "{json}");
        // The 50 records and the commit or abort marker are offsets past the last checkpoint
        // now, as `lag` counts them (a read_committed reader skips aborted ones).
        unread += 51;
        assert_eq!(lag(&json, 1), unread, "{json}");
    }
}

/// `/readyz` of a `weir run` whose state directory was deleted: 503 `restoring` while the state
/// comes back from a changelog of 20,000 keys, then 200; `/healthz` 200 throughout. The restore
/// is stalled 5 s (`WEIR_FAULT=restore:sleep=5000`) so that polling sees it however fast the
/// machine restores.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_is_restoring_while_the_state_comes_back_from_the_changelog_then_ready() {
    const KEYS: usize = 20_000;
    let mut spec = Spec::new("dedup");
    // Every key is new, so every record goes out and leaves one state entry.
    spec.transform = "config = { window_records = \"1000000\" }".into();
    let pipeline = TestPipeline::new("weir-ready-restore", &spec);
    let values: Vec<(Option<String>, String)> = (0..KEYS).map(|i| (Some(format!("k{i}")), format!("v{i}"))).collect();
    produce(&pipeline.source, 2, &values).await;
    let mut reader = Reader::new(&pipeline.sink, 2, Isolation::ReadCommitted);
    run_to_completion(&pipeline, &mut reader, KEYS, &[]);
    std::fs::remove_dir_all(pipeline.dir().join("state")).expect("delete the state directory");

    let mut run = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &[("WEIR_FAULT", "restore:sleep=5000")]);
    let address = pipeline.metrics_address(&mut run);
    let readyz = format!("http://{address}/readyz");
    let (before, ready) = poll_until(&readyz, "200 after the restore", RUN_TIMEOUT, |status, body| {
        if body["reason"] == "restoring" {
            let (health, text) = http_get(&format!("http://{address}/healthz"));
            assert_eq!((health, text.as_str()), (200, Some("ok\n")), "alive while restoring");
        }
        status == 200
    });
    let restoring = before
        .iter()
        .find(|b| b["reason"] == "restoring")
        .unwrap_or_else(|| panic!("no `restoring` answer before 200: {before:?}\nlog:\n{}", pipeline.log_text()));
    assert_eq!(restoring["ready"], false);
    assert_eq!(restoring["not_ready"], serde_json::json!({ "restoring": 1 }), "{restoring}");
    let shown = &restoring["pipelines"][0];
    assert_eq!((shown["name"].as_str(), shown["reason"].as_str()), (Some(pipeline.name.as_str()), Some("restoring")));
    assert!(shown["detail"].as_str().is_some_and(|d| d.contains("2 partition(s) from the changelog")), "{shown}");
    let log = pipeline.log_text();
    assert!(log.contains("WEIR_FAULT: stalling") && log.contains("restored the state from the changelog"), "{log}");
    assert_eq!(ready["reason"], Value::Null, "{ready}");
    assert_eq!(ready["pipelines"][0]["ready"], true, "{ready}");
    let status = pipeline.stop(&mut run, Duration::from_secs(60));
    assert!(status.success(), "{status}; log:\n{}", pipeline.log_text());
}

/// A `weir run` whose transform fails on a record under `on_error = "fail"` keeps recovering
/// (it does not exit, so it keeps serving): `/readyz` answers 503 `recovering` with the
/// transform's error, `/healthz` 200.
#[tokio::test(flavor = "multi_thread")]
async fn readyz_reports_a_pipeline_failing_on_a_record_as_recovering_with_its_error() {
    let pipeline = TestPipeline::new("weir-ready-failing", &Spec::new("misbehave"));
    produce(&pipeline.source, 1, &[(None, "fine".into()), (None, "error".into())]).await;
    let mut run = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
    let address = pipeline.metrics_address(&mut run);
    let (_, failing) =
        poll_until(&format!("http://{address}/readyz"), "503 recovering", RUN_TIMEOUT, |status, body| {
            status == 503 && body["reason"] == "recovering"
        });
    let shown = &failing["pipelines"][0];
    assert_eq!(shown["name"], pipeline.name.as_str());
    assert!(shown["detail"].as_str().is_some_and(|d| d.contains("misbehave: error at offset 1")), "{failing}");
    assert_eq!(http_get(&format!("http://{address}/healthz")).0, 200);
    assert!(run.try_wait().expect("try_wait").is_none(), "weir run keeps running (and recovering)");
}
