//! `compare` (final aggregates of two systems) and `table` (medians as markdown).

use std::path::Path;

use anyhow::{Context, bail};
use serde_json::Value;

/// The `q` quantile of sorted `values` by the nearest-rank method.
pub fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 { values[mid] } else { (values[mid - 1] + values[mid]) / 2.0 })
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("could not read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))
}

/// Fails, listing the differences, unless both finals files have the same keys and equal values.
pub fn compare(reference: &Path, candidate: &Path) -> anyhow::Result<()> {
    let (a, b) = (read_json(reference)?, read_json(candidate)?);
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        bail!("finals files must hold JSON objects: {} and {}", reference.display(), candidate.display());
    };
    let mut problems = Vec::new();
    for key in a.keys().filter(|k| !b.contains_key(*k)) {
        problems.push(format!("key {key:?} only in {}", reference.display()));
    }
    for key in b.keys().filter(|k| !a.contains_key(*k)) {
        problems.push(format!("key {key:?} only in {}", candidate.display()));
    }
    for (key, va) in a {
        if let Some(vb) = b.get(key) {
            diff(&format!("{key:?}"), va, vb, &mut problems);
        }
    }
    if !problems.is_empty() {
        let shown = problems.iter().take(20).cloned().collect::<Vec<_>>().join("\n  ");
        bail!(
            "final aggregates differ: {} vs {} ({} differences):\n  {shown}",
            reference.display(),
            candidate.display(),
            problems.len()
        );
    }
    println!("final aggregates agree: {} keys ({} = {})", a.len(), reference.display(), candidate.display());
    Ok(())
}

/// Integers must be equal; other numbers within a relative 1e-12; objects field by field.
fn diff(path: &str, a: &Value, b: &Value, problems: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for field in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                let (va, vb) = (x.get(field).unwrap_or(&Value::Null), y.get(field).unwrap_or(&Value::Null));
                if x.contains_key(field) != y.contains_key(field) {
                    problems.push(format!("{path}.{field}: present in only one ({va} vs {vb})"));
                } else {
                    diff(&format!("{path}.{field}"), va, vb, problems);
                }
            }
        }
        (Value::Number(x), Value::Number(y)) => {
            let integer = |n: &serde_json::Number| n.is_i64() || n.is_u64();
            let equal = if integer(x) && integer(y) {
                x == y
            } else {
                let (fx, fy) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
                (fx - fy).abs() <= 1e-12 * fx.abs().max(fy.abs())
            };
            if !equal {
                problems.push(format!("{path}: {x} vs {y}"));
            }
        }
        _ if a == b => {}
        _ => problems.push(format!("{path}: {a} vs {b}")),
    }
}

/// Prints the markdown table of medians per system, with ratios of records/s to two baselines.
pub fn table(results: &Path, baseline: &str, baseline2: &str) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(results).with_context(|| format!("could not read {}", results.display()))?;
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{} has a line that is not JSON", results.display()))?;
    let mut names: Vec<&str> = Vec::new();
    for name in lines.iter().filter_map(|l| l["name"].as_str()) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let med = |name: &str, kind: &str, field: &str| {
        median(
            lines.iter().filter(|l| l["name"] == name && l["kind"] == kind).filter_map(|l| l[field].as_f64()).collect(),
        )
    };
    let reps = |name: &str, kind: &str| lines.iter().filter(|l| l["name"] == name && l["kind"] == kind).count();
    let show = |v: Option<f64>, digits: usize| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"));
    let ratio = |v: Option<f64>, base: Option<f64>| match (v, base) {
        (Some(v), Some(b)) if b > 0.0 => format!("{:.2}", v / b),
        _ => "–".to_owned(),
    };
    let base = med(baseline, "run", "records_per_s");
    let base2 = med(baseline2, "run", "records_per_s");

    println!(
        "| system | runs | records/s | ÷ {baseline} | ÷ {baseline2} | seconds | CPU s | CPU µs/record | peak RSS MiB | checkpoint p50 ms | checkpoint p99 ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &name in names.iter().filter(|n| reps(n, "run") > 0) {
        let rate = med(name, "run", "records_per_s");
        let records = med(name, "run", "records");
        let cpu = med(name, "run", "cpu_s");
        let per_record = match (cpu, records) {
            (Some(c), Some(r)) if r > 0.0 => Some(c / r * 1e6),
            _ => None,
        };
        println!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            reps(name, "run"),
            show(rate, 0),
            ratio(rate, base),
            ratio(rate, base2),
            show(med(name, "run", "seconds"), 2),
            show(cpu, 2),
            show(per_record, 2),
            show(med(name, "run", "peak_rss_mib"), 0),
            show(med(name, "run", "checkpoint_p50_ms"), 1),
            show(med(name, "run", "checkpoint_p99_ms"), 1),
        );
    }
    // The kill runs: one table per kind, with the seconds each one measures.
    let kills = [
        ("recovery", "recovery (SIGKILL mid-run, restart)", "restart → first new committed output", "recovery_s"),
        (
            "rebalance",
            "rebalance (two processes, one SIGKILLed mid-run)",
            "kill → every partition's output again",
            "rebalance_s",
        ),
    ];
    for (kind, title, measure, field) in kills {
        let measured: Vec<&str> = names.iter().copied().filter(|n| reps(n, kind) > 0).collect();
        if measured.is_empty() {
            continue;
        }
        println!();
        println!("| {title} | runs | records before kill | {measure}, s |");
        println!("|---|---:|---:|---:|");
        for name in measured {
            println!(
                "| {name} | {} | {} | {} |",
                reps(name, kind),
                show(med(name, kind, "records_before_kill"), 0),
                show(med(name, kind, field), 2),
            );
        }
    }
    Ok(())
}
