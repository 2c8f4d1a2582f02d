//! Event time on the real broker with real components (issue 18): watermarks read from a JSON
//! field, event-time timers, tumbling windows (`flights-hourly`, Rust SDK `windows`), late
//! records, idleness, and windows that close exactly once while `weir run` is killed.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::Value;
use weir_tests::pipeline::{RUN_TIMEOUT, Reader, Spec, TestPipeline, keyed, produce, signal};
use weir_tests::records::read_raw;
use weir_tests::{Consumed, Isolation, flights_zip};

/// `[source]` lines: event time from `time_hour`, `bound_h` hours of out-of-orderness, and an
/// idle timeout when `idle_ms` is set.
fn source(bound_h: u64, idle_ms: Option<u64>) -> String {
    let idle = idle_ms.map(|ms| format!("idle_timeout_ms = {ms}\n")).unwrap_or_default();
    format!(
        "batch_size = 256\n[source.watermark]\nfield = \"time_hour\"\nformat = \"rfc3339\"\n\
         max_out_of_orderness_ms = {}\n{idle}",
        bound_h * 3_600_000
    )
}

/// A flights-hourly pipeline whose late flights go to the `late` output (topic `<name>-late`).
fn hourly(prefix: &str, source_lines: String, on_error: &str) -> (TestPipeline, String) {
    let mut spec = Spec::new("flights-hourly");
    spec.source = source_lines;
    spec.transform = format!("on_error = \"{on_error}\"\nconfig = {{ late_output = \"late\" }}");
    let late = weir_tests::unique_name(&format!("{prefix}-late"));
    spec.sink = format!("outputs = {{ late = \"{late}\" }}");
    spec.checkpoint = "interval_ms = 200\ntimeout_ms = 10000".into();
    (TestPipeline::new(prefix, &spec), late)
}

/// A flight of `origin` scheduled at `time_hour`.
fn flight(origin: &str, time_hour: &str, dep_delay: i64) -> (Option<String>, String) {
    let value = serde_json::json!({"origin": origin, "time_hour": time_hour, "dep_delay": dep_delay});
    (Some(origin.to_owned()), value.to_string())
}

fn json(record: &Consumed) -> Value {
    serde_json::from_str(record.value.as_deref().expect("a value")).expect("JSON output")
}

/// (origin, hour) → (flights, departed, total delay) of the outputs; panics on a window seen twice.
fn windows(outputs: &[Consumed]) -> BTreeMap<(String, String), (u64, u64, i64)> {
    let mut seen = BTreeMap::new();
    for output in outputs {
        let v = json(output);
        let window = (v["origin"].as_str().unwrap().to_owned(), v["hour"].as_str().unwrap().to_owned());
        let sums =
            (v["flights"].as_u64().unwrap(), v["departed"].as_u64().unwrap(), v["total_dep_delay"].as_i64().unwrap());
        // serde_json's default float parser may be off by an ulp or two: compare loosely.
        let mean = v["mean_dep_delay"].as_f64();
        let want = (sums.1 > 0).then(|| sums.2 as f64 / sums.1 as f64);
        assert!(mean.zip(want).map_or(mean == want, |(m, w)| (m - w).abs() <= 1e-12 * w.abs().max(1.0)), "{v}");
        assert_eq!(output.key.as_deref(), Some(window.0.as_str()));
        assert!(seen.insert(window.clone(), sums).is_none(), "window {window:?} emitted twice");
    }
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn windows_close_by_the_watermark_and_late_or_timeless_records_are_set_aside() {
    let (pipeline, late) = hourly("weir-evt", source(0, None), "dead-letter");
    let input = vec![
        flight("EWR", "2013-01-01T10:00:00Z", 5),
        flight("EWR", "2013-01-01T10:00:00Z", 7),
        flight("JFK", "2013-01-01T10:00:00Z", 1),
        // Moves the watermark to 10:59:59.999: the 10:00 hour is over.
        flight("EWR", "2013-01-01T11:00:00Z", 2),
        // Late: its hour closed before it arrived.
        flight("EWR", "2013-01-01T10:00:00Z", 100),
        (Some("EWR".into()), r#"{"origin": "EWR", "dep_delay": 3}"#.into()),
        // Moves the watermark to 11:59:59.999.
        flight("LGA", "2013-01-01T12:00:00Z", 4),
    ];
    produce(&pipeline.source, 1, &input).await;
    let mut child = pipeline.spawn(&[]);
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    let read = reader.read_until(3, RUN_TIMEOUT);
    let late_records = read_raw(&late, 1, 1, RUN_TIMEOUT);
    let dead = read_raw(&pipeline.dead_letters, 1, 1, RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    reader.drain(Duration::from_secs(2));
    assert!(read >= 3 && status.success(), "{}", pipeline.log_text());

    let got = windows(&reader.records);
    let hour = |o: &str, h: &str| (o.to_owned(), format!("2013-01-01T{h}:00:00Z"));
    let want = BTreeMap::from([
        (hour("EWR", "10"), (2, 2, 12)),
        (hour("JFK", "10"), (1, 1, 1)),
        (hour("EWR", "11"), (1, 1, 2)),
    ]);
    // The 12:00 hour stays open: nothing moved the watermark past it (no idle timeout), so it
    // was not emitted even though `weir run` stopped after committing everything it read.
    assert_eq!(got, want);
    assert_eq!(late_records.len(), 1);
    assert!(String::from_utf8_lossy(late_records[0].record.value.as_deref().unwrap()).contains("100"));
    let error = dead[0].record.headers.iter().find(|(k, _)| k == b"weir.error").and_then(|(_, v)| v.clone());
    let error = String::from_utf8(error.expect("weir.error")).unwrap();
    assert!(error.contains("no event time") && error.contains("time_hour"), "{error}");
}

/// Issue 46 item 6: one flight dated 2100 between the hours of 2013. Without a bound it moves the
/// watermark to 2100: the 10:00 hour closes, the later flights are late (counted per partition in
/// the dashboard's JSON, with the watermark), and a warning says why. With
/// `source.watermark.max_future_ms` it is dead-lettered instead, and the 11:00 hour closes as
/// the next flight's watermark says.
#[tokio::test(flavor = "multi_thread")]
async fn a_flight_dated_2100_is_warned_of_and_counted_or_dead_lettered_under_max_future_ms() {
    let input = vec![
        flight("EWR", "2013-01-01T10:00:00Z", 5),
        flight("EWR", "2013-01-01T10:00:00Z", 7),
        flight("EWR", "2100-01-01T00:00:00Z", 1),
        flight("EWR", "2013-01-01T11:00:00Z", 2),
        flight("LGA", "2013-01-01T12:00:00Z", 4),
    ];
    let hour = |o: &str, h: &str| (o.to_owned(), format!("2013-01-01T{h}:00:00Z"));
    for bounded in [false, true] {
        let lines = source(0, None) + if bounded { "max_future_ms = 86400000\n" } else { "" };
        let (pipeline, late) = hourly("weir-evt-2100", lines, "dead-letter");
        produce(&pipeline.source, 1, &input).await;
        let mut child = pipeline.spawn_with(&["--metrics", "127.0.0.1:0"], &[]);
        let address = pipeline.metrics_address(&mut child);
        let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
        let windows_out = if bounded { 2 } else { 1 };
        reader.read_until(windows_out, RUN_TIMEOUT);
        let set_aside =
            read_raw(if bounded { &pipeline.dead_letters } else { &late }, 1, if bounded { 1 } else { 2 }, RUN_TIMEOUT);
        pipeline.wait_for_log("checkpoint committed", RUN_TIMEOUT);
        let (_, view) = weir_tests::pipeline::http_get(&format!("http://{address}/api/pipelines"));
        let status = pipeline.stop(&mut child, Duration::from_secs(60));
        reader.drain(Duration::from_secs(2));
        let log = pipeline.log_text();
        assert!(status.success(), "{log}");
        let partition = &view["pipelines"][0]["partitions"][0];
        // `weir status` reads the watermark its last checkpoint committed with the offsets.
        let (ok, stdout, stderr) =
            weir_tests::run_weir(&["status".as_ref(), pipeline.file.as_ref(), "--output".as_ref(), "json".as_ref()]);
        assert!(ok, "weir status: {stderr}");
        let status: Value = serde_json::from_str(&stdout).expect("JSON");
        let committed_watermark = if bounded { 1_357_041_599_999_i64 } else { 4_102_444_799_999 };
        assert_eq!(status["partitions"][0]["watermark_ms"], committed_watermark, "{status}");
        if bounded {
            assert_eq!(
                windows(&reader.records),
                BTreeMap::from([(hour("EWR", "10"), (2, 2, 12)), (hour("EWR", "11"), (1, 1, 2))])
            );
            let error =
                set_aside[0].record.headers.iter().find(|(k, _)| k == b"weir.error").and_then(|(_, v)| v.clone());
            let error = String::from_utf8(error.expect("weir.error")).unwrap();
            assert!(error.contains("max_future_ms = 86400000"), "{error}");
            assert_eq!(partition["late_records"], 0, "{view}");
        } else {
            assert_eq!(windows(&reader.records), BTreeMap::from([(hour("EWR", "10"), (2, 2, 12))]));
            assert_eq!(set_aside.len(), 2, "the flights after 2100 are late");
            assert_eq!(partition["late_records"], 2, "{view}");
            assert_eq!(partition["watermark_ms"], 4_102_444_799_999_i64, "the watermark is at 2100: {view}");
            assert!(log.contains("event time lies far ahead"), "a warning says why:\n{log}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_that_falls_silent_closes_its_windows_after_the_idle_timeout() {
    let (pipeline, _) = hourly("weir-idle", source(1, Some(1_000)), "fail");
    produce(&pipeline.source, 1, &[flight("EWR", "2013-01-01T10:00:00Z", 5)]).await;
    let mut child = pipeline.spawn(&[]);
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    // Only idleness can close the hour: no later record exists.
    let read = reader.read_until(1, RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(read == 1 && status.success(), "{}", pipeline.log_text());
    assert_eq!(windows(&reader.records).into_values().collect::<Vec<_>>(), vec![(1, 1, 5)]);
}

/// Creates `topic` with time retention off (`retention.ms = -1`).
async fn create_topic_keeping_all(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", weir_tests::bootstrap()).create().expect("admin client");
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1)).set("retention.ms", "-1");
    let created = admin.create_topics(&[new], &AdminOptions::new()).await.expect("create topic");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

/// The flights keyed by origin, in the order they departed: by day, and within a day in the
/// file's order (by actual departure time). flights.csv itself lists the months as text sorts
/// them — 1, 10, 11, 12, 2, … — so read in file order, February comes ten months after December.
fn flights_by_day() -> Vec<weir::Row> {
    let mut rows = Vec::new();
    weir::read_rows(&flights_zip(), None, &["origin".into()], |row| {
        let v: Value = serde_json::from_slice(&row.value_bytes()).unwrap();
        let day = (v["year"].as_i64().unwrap(), v["month"].as_i64().unwrap(), v["day"].as_i64().unwrap());
        rows.push((day, row));
        Ok(())
    })
    .unwrap();
    rows.sort_by_key(|(day, _)| *day);
    rows.into_iter().map(|(_, row)| row).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partition_read_to_its_end_before_a_restart_still_goes_idle() {
    let (pipeline, _) = hourly("weir-idle-restart", source(0, None), "fail");
    produce(&pipeline.source, 1, &[flight("EWR", "2013-01-01T10:00:00Z", 5), flight("EWR", "2013-01-01T12:00:00Z", 7)])
        .await;
    let mut reader = Reader::new(&pipeline.sink, 1, Isolation::ReadCommitted);
    // The 12:00 flight closes the 10:00 hour: once that result is committed, so is the epoch
    // that read both flights.
    let mut child = pipeline.spawn(&[]);
    let read = reader.read_until(1, RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(read == 1 && status.success(), "{}", pipeline.log_text());
    // Restarted with an idle timeout, it has nothing left to read, so librdkafka never reports
    // a position for the partition: the 12:00 hour must close all the same.
    pipeline.set("source.watermark", "idle_timeout_ms = 1000");
    let mut child = pipeline.spawn(&[]);
    let read = reader.read_until(2, RUN_TIMEOUT);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    assert!(read == 2 && status.success(), "{}", pipeline.log_text());
    let hours: Vec<_> = windows(&reader.records).into_iter().map(|((_, hour), sums)| (hour, sums)).collect();
    assert_eq!(
        hours,
        vec![("2013-01-01T10:00:00Z".to_owned(), (1, 1, 5)), ("2013-01-01T12:00:00Z".to_owned(), (1, 1, 7))]
    );
}

/// The hours of all flights, computed directly from the file: (origin, time_hour) → (flights,
/// departed, total departure delay).
fn batch_hours(rows: &[weir::Row]) -> BTreeMap<(String, String), (u64, u64, i64)> {
    let mut hours: BTreeMap<(String, String), (u64, u64, i64)> = BTreeMap::new();
    for row in rows {
        let v: Value = serde_json::from_slice(&row.value_bytes()).unwrap();
        let window = (v["origin"].as_str().unwrap().to_owned(), v["time_hour"].as_str().unwrap().to_owned());
        let sums = hours.entry(window).or_default();
        sums.0 += 1;
        if let Some(delay) = v["dep_delay"].as_i64() {
            sums.1 += 1;
            sums.2 += delay;
        }
    }
    hours
}

#[tokio::test(flavor = "multi_thread")]
async fn flights_hourly_equals_a_batch_computation_and_closes_each_hour_once_under_kills() {
    const PARTITIONS: i32 = 4;
    const KILLS: u32 = 6;
    let rows = flights_by_day();
    let want = batch_hours(&rows);
    // 48 hours of out-of-orderness: within a day the file is sorted by actual departure, and
    // time_hour is the scheduled hour (up to a day earlier for the most delayed flights).
    let (pipeline, late) = hourly("weir-hourly", source(48, Some(2_000)), "fail");
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;
    // The hours' results carry 2013 timestamps (the hour's end): under the broker's default
    // retention.ms of 7 days, every segment the sink topic rolls would be deleted at once.
    for topic in [&pipeline.sink, &late] {
        create_topic_keeping_all(topic, PARTITIONS).await;
    }

    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let mut child = pipeline.spawn(&[]);
    for kill in 0..KILLS {
        // Kill once the pipeline has committed some more hours than at the last kill, so that
        // every kill lands in the middle of the work.
        let target = want.len() * (kill as usize + 1) / (KILLS as usize + 2);
        let read = reader.read_until(target, RUN_TIMEOUT * 3);
        assert!(read >= target, "only {read} hours before kill {kill}; log:\n{}", pipeline.log_text());
        // The run has recovered before it is killed: a run that committed past the next target
        // would otherwise get its successor killed mid-recovery.
        let started = Instant::now();
        while pipeline.log_text().matches("recovered").count() <= kill as usize {
            assert!(started.elapsed() < RUN_TIMEOUT, "run {kill} never recovered; log:\n{}", pipeline.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        signal(&child, "KILL");
        child.wait().expect("reap");
        child = pipeline.spawn(&[]);
    }
    let started = Instant::now();
    let read = reader.read_until(want.len(), RUN_TIMEOUT * 5);
    let status = pipeline.stop(&mut child, Duration::from_secs(60));
    reader.drain(Duration::from_secs(3));
    eprintln!("hourly: {read} hours committed, the last {:?} after the kills", started.elapsed());
    assert!(read >= want.len(), "only {read} of {} hours; log tail:\n{}", want.len(), pipeline.log_text());
    assert!(status.success());
    assert!(pipeline.log_text().matches("recovered").count() as u32 > KILLS, "every run recovered");
    let got = windows(&reader.records);
    let differ: Vec<_> = want.iter().filter(|(k, v)| got.get(*k) != Some(v)).take(5).collect();
    assert!(
        differ.is_empty() && got.len() == want.len(),
        "{} hours, {} expected; first differences {differ:?}",
        got.len(),
        want.len()
    );
    let mut late_reader = Reader::new(&late, PARTITIONS, Isolation::ReadCommitted);
    assert_eq!(late_reader.drain(Duration::from_secs(2)), 0, "no flight is late with 48 h of bound");
    let per_origin: HashMap<&str, u64> = got.iter().fold(HashMap::new(), |mut m, ((o, _), v)| {
        *m.entry(o.as_str()).or_default() += v.0;
        m
    });
    assert_eq!(per_origin.values().sum::<u64>(), rows.len() as u64);
}

/// A record of key `key` with value `word` for `misbehave`.
fn word(offset: i64, key: &str, word: &str) -> weir::InputRecord {
    weir::InputRecord {
        key: Some(key.as_bytes().to_vec()),
        value: Some(word.as_bytes().to_vec()),
        headers: Vec::new(),
        timestamp: 0,
        topic: "t".into(),
        partition: 0,
        offset,
        event_time: 0,
        watermark: None,
    }
}

/// (clock, time, key) of timers.
fn timers(due: &[weir::Timer]) -> Vec<(bool, i64, String)> {
    let event = |t: &weir::Timer| matches!(t.domain, weir::TimeDomain::EventTime);
    due.iter().map(|t| (event(t), t.time, String::from_utf8_lossy(&t.key).into_owned())).collect()
}

#[test]
fn timers_fire_once_when_due_in_order_and_stay_registered_when_on_timer_fails() {
    let mut operator = weir_tests::operator("misbehave", &[]);
    operator.set_watermark(Some(100));
    let batch = [
        word(0, "a", "timer:event:150"),
        word(1, "b", "timer:event:100"),
        word(2, "a", "timer:processing:5"),
        word(3, "c", "timer:event:120"),
        word(4, "c", "cancel:event:120"),
        word(5, "fail", "timer:processing:7"),
        word(6, "b", "timer:event:100"),
    ];
    let out = operator.process(&batch).unwrap();
    assert_eq!(out[0].value.as_deref(), Some(&b"watermark: Some(100)"[..]), "the watermark import");

    // At watermark 100 and wall clock 6 ms: event time 100 (once, though registered twice) and
    // processing time 5; not 150 nor the cancelled 120, nor processing time 7.
    let due = operator.due_timers(6).unwrap();
    assert_eq!(timers(&due), vec![(true, 100, "b".into()), (false, 5, "a".into())]);
    let fired = operator.on_timer(&due).unwrap().to_records();
    let values: Vec<_> =
        fired.iter().map(|o| String::from_utf8_lossy(o.value.as_deref().unwrap()).into_owned()).collect();
    assert_eq!(values, vec!["fired event 100 b", "fired processing 5 a"]);
    assert_eq!(fired.iter().map(|o| o.timestamp).collect::<Vec<_>>(), vec![Some(100), Some(5)]);
    assert!(operator.due_timers(6).unwrap().is_empty(), "a timer fires once");

    // A failing on-timer leaves its timer registered.
    let due = operator.due_timers(10).unwrap();
    assert_eq!(timers(&due), vec![(false, 7, "fail".into())]);
    let error = operator.on_timer(&due).unwrap_err();
    assert!(error.to_string().contains("on-timer") && error.to_string().contains("timer of key fail"), "{error}");
    assert_eq!(timers(&operator.due_timers(10).unwrap()), vec![(false, 7, "fail".into())]);

    operator.set_watermark(Some(150));
    assert_eq!(timers(&operator.due_timers(0).unwrap()), vec![(true, 150, "a".into())]);
}

#[test]
fn a_contract_0_1_component_has_no_timers() {
    let mut operator = weir_tests::operator("contract-0-1", &[]);
    operator.set_watermark(Some(i64::MAX));
    operator.process(&[word(0, "a", "x")]).unwrap();
    assert!(operator.due_timers(i64::MAX).unwrap().is_empty());
}
