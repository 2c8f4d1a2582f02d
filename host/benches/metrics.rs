//! What the metrics cost the record path: the per-batch call a task makes
//! ([`TaskMetrics::batch`]: five counter adds and a histogram observation on handles looked up
//! when the task started), alone and while another thread scrapes `/metrics` and the
//! dashboard's JSON in a loop (the worst case of contention on the counters' cache lines).
//!
//! Run: `cargo bench -p weir --bench metrics`.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use weir::{BatchFigures, Metrics, PipelineConfig, TaskId, TaskMetrics};

fn task(metrics: &Metrics) -> TaskMetrics {
    let text = "name = \"bench\"\n[source]\nbrokers = \"localhost:9092\"\ntopics = [\"flights\"]\n\
                [[transforms]]\nname = \"passthrough\"\nwasm = \"passthrough.wasm\"\n[sink]\ntopic = \"out\"\n";
    let config = PipelineConfig::from_toml_str(text, Path::new("/")).expect("valid pipeline file");
    let pipeline = metrics.pipeline(&config);
    // Eight partitions, as in the main job: the scrape encodes all of them.
    for partition in 1..8 {
        pipeline.task(&TaskId::new("flights", partition), Some(0));
    }
    pipeline.task(&TaskId::new("flights", 0), Some(0))
}

fn batch(c: &mut Criterion) {
    let metrics = Arc::new(Metrics::default());
    let task = task(&metrics);
    let figures = BatchFigures {
        records_in: 256,
        bytes_in: 256 * 330,
        records_out: 256,
        bytes_out: 256 * 330,
        dead_letters: 0,
        duration: Duration::from_micros(300),
    };
    let mut group = c.benchmark_group("metrics");
    group.bench_function("batch", |b| b.iter(|| task.batch(black_box(&figures))));

    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let (metrics, stop) = (metrics.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut scrapes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                black_box(metrics.encode());
                black_box(metrics.view());
                scrapes += 1;
            }
            scrapes
        })
    };
    group.bench_function("batch_while_scraped", |b| b.iter(|| task.batch(black_box(&figures))));
    stop.store(true, Ordering::Relaxed);
    let scrapes = scraper.join().expect("scraper thread");
    println!("the scraper encoded /metrics and the JSON view {scrapes} times meanwhile");
    group.finish();
}

criterion_group!(benches, batch);
criterion_main!(benches);
