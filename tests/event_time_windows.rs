//! Event time on the real broker with real components (issue 18): watermarks read from a JSON
//! field, event-time timers, tumbling windows (`flights-hourly`, Rust SDK `windows`), late
//! records, idleness, and windows that close exactly once while `weir run` is killed.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

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
        let mean = v["mean_dep_delay"].as_f64();
        assert_eq!(mean, (sums.1 > 0).then(|| sums.2 as f64 / sums.1 as f64), "{v}");
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

/// The hours of all flights, computed directly from the file: (origin, time_hour) → (flights,
/// departed, total departure delay).
fn batch_hours(rows: &[weir::file::Row]) -> BTreeMap<(String, String), (u64, u64, i64)> {
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
    let mut rows = Vec::new();
    weir::file::read_rows(&flights_zip(), None, &["origin".into()], |row| {
        rows.push(row);
        Ok(())
    })
    .unwrap();
    let want = batch_hours(&rows);
    // 48 hours of out-of-orderness: the file is sorted by actual departure, time_hour is the
    // scheduled hour (up to a day earlier for the most delayed flights).
    let (pipeline, late) = hourly("weir-hourly", source(48, Some(2_000)), "fail");
    produce(&pipeline.source, PARTITIONS, &keyed(&rows)).await;

    let mut reader = Reader::new(&pipeline.sink, PARTITIONS, Isolation::ReadCommitted);
    let mut child = pipeline.spawn(&[]);
    for kill in 0..KILLS {
        // Kill once the pipeline has committed some more hours than at the last kill, so that
        // every kill lands in the middle of the work.
        let target = want.len() * (kill as usize + 1) / (KILLS as usize + 2);
        let read = reader.read_until(target, RUN_TIMEOUT * 3);
        assert!(read >= target, "only {read} hours before kill {kill}; log:\n{}", pipeline.log_text());
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
