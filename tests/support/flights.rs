//! The flight-delays aggregates computed directly from the input, and the exactly-once check of
//! a flight-delays output topic.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Value, json};
use weir::Row;

use crate::Consumed;

/// Running aggregates of one `origin|carrier` key, as the flight-delays plugin defines them.
#[derive(Debug, Default, Clone)]
pub struct Aggregate {
    origin: String,
    carrier: String,
    flights: u64,
    departed: u64,
    delayed: u64,
    total: i64,
    max: Option<i64>,
}

impl Aggregate {
    /// Adds one flight (a JSON object with origin, carrier, dep_delay).
    pub fn add(&mut self, flight: &Value, threshold_minutes: i64) {
        self.origin = flight["origin"].as_str().unwrap_or_default().to_owned();
        self.carrier = flight["carrier"].as_str().unwrap_or_default().to_owned();
        self.flights += 1;
        if let Some(delay) = flight["dep_delay"].as_i64() {
            self.departed += 1;
            self.delayed += u64::from(delay > threshold_minutes);
            self.total += delay;
            self.max = Some(self.max.map_or(delay, |m| m.max(delay)));
        }
    }

    /// The plugin's output value for the aggregate so far.
    pub fn to_json(&self) -> Value {
        let mean = (self.departed > 0).then(|| self.total as f64 / self.departed as f64);
        json!({
            "origin": self.origin, "carrier": self.carrier, "flights": self.flights, "departed": self.departed,
            "delayed": self.delayed, "total_dep_delay": self.total, "max_dep_delay": self.max, "mean_dep_delay": mean,
        })
    }
}

/// Final aggregates per `origin|carrier` key over `rows`.
pub fn expected_finals(rows: &[Row], threshold_minutes: i64) -> HashMap<String, Aggregate> {
    let mut finals: HashMap<String, Aggregate> = HashMap::new();
    for row in rows {
        let key = row.key.clone().expect("rows keyed by origin,carrier");
        finals.entry(key).or_default().add(&row.value, threshold_minutes);
    }
    finals
}

/// What a read_committed read of a flight-delays output shows.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Input records.
    pub records_in: usize,
    /// Output records.
    pub records_out: usize,
    /// Keys whose `flights` sequence is not exactly 1..n.
    pub bad_keys: usize,
    /// Output records repeating a `flights` number already seen for their key.
    pub duplicates: usize,
    /// `flights` numbers missing from a key's sequence, and keys short of their input count.
    pub gaps: usize,
    /// Keys whose last record differs from the direct computation.
    pub wrong_finals: usize,
}

impl Verdict {
    /// Exactly once: every key runs 1..n with n its input count, and ends at the right aggregate.
    pub fn is_exactly_once(&self) -> bool {
        self.records_in == self.records_out
            && self.bad_keys == 0
            && self.duplicates == 0
            && self.gaps == 0
            && self.wrong_finals == 0
    }
}

/// Checks, per key, that `flights` runs exactly 1..n in order, that n equals the key's input
/// count, and that the last record equals the aggregates computed from `rows`.
pub fn verify(rows: &[Row], outputs: &[Consumed], threshold_minutes: i64) -> Verdict {
    let finals = expected_finals(rows, threshold_minutes);
    let mut per_key: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for output in outputs {
        let value: Value = serde_json::from_str(output.value.as_deref().unwrap_or("null")).unwrap_or(Value::Null);
        per_key.entry(output.key.clone().unwrap_or_default()).or_default().push(value);
    }
    let mut verdict = Verdict { records_in: rows.len(), records_out: outputs.len(), ..Verdict::default() };
    for (key, expected) in &finals {
        let values = per_key.get(key).map(Vec::as_slice).unwrap_or_default();
        let mut seen = 0u64;
        let mut ok = true;
        for value in values {
            let n = value["flights"].as_u64().unwrap_or(0);
            if n <= seen {
                verdict.duplicates += 1;
                ok = false;
            } else {
                if n != seen + 1 {
                    verdict.gaps += (n - seen - 1) as usize;
                    ok = false;
                }
                seen = n;
            }
        }
        if seen < expected.flights {
            verdict.gaps += (expected.flights - seen) as usize;
            ok = false;
        }
        verdict.bad_keys += usize::from(!ok);
        verdict.wrong_finals += usize::from(!values.last().is_some_and(|last| same_json(last, &expected.to_json())));
    }
    verdict.bad_keys += per_key.keys().filter(|k| !finals.contains_key(*k)).count();
    verdict
}

/// JSON equality where numbers compare as f64 within 1e-12 relative error: serde_json's default
/// float parsing may be one ulp off the value a guest printed.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap_or(f64::NAN), y.as_f64().unwrap_or(f64::NAN));
            x == y || (x - y).abs() <= 1e-12 * x.abs().max(y.abs())
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(v, w)| same_json(v, w)),
        _ => a == b,
    }
}
