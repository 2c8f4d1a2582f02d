//! A record's event time, read per the source's watermark strategy.

use crate::config::{TimeFormat, WatermarkConfig};

/// Reads records' event times: the record timestamp, or a field of the JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTimeReader {
    field: Option<String>,
    format: TimeFormat,
}

impl EventTimeReader {
    /// The reader of `config`'s strategy.
    pub fn new(config: &WatermarkConfig) -> Self {
        Self { field: config.field.clone(), format: config.format }
    }

    /// The event time of a record with `value` and `timestamp`, in milliseconds since the Unix
    /// epoch.
    ///
    /// # Errors
    /// Why the field could not be read (the value is null or not a JSON object, the field is
    /// missing, or it does not parse in the format), naming the field and the format.
    pub fn read(&self, value: Option<&[u8]>, timestamp: i64) -> Result<i64, String> {
        let Some(field) = &self.field else { return Ok(timestamp) };
        let format = self.format;
        let fail = |what: String| Err(format!("source.watermark.field `{field}` ({format:?}): {what}"));
        let Some(value) = value else { return fail("the record's value is null".into()) };
        let json: serde_json::Value = match serde_json::from_slice(value) {
            Ok(json) => json,
            Err(error) => return fail(format!("the record's value is not JSON ({error})")),
        };
        let Some(found) = json.get(field) else { return fail("the record's JSON value has no such field".into()) };
        let parsed = match (format, found) {
            (TimeFormat::Rfc3339, serde_json::Value::String(text)) => parse_rfc3339(text),
            (TimeFormat::EpochMs | TimeFormat::EpochS, serde_json::Value::Number(n)) => epoch(format, n.as_f64()),
            (TimeFormat::EpochMs | TimeFormat::EpochS, serde_json::Value::String(s)) => {
                epoch(format, s.trim().parse::<f64>().ok())
            }
            _ => None,
        };
        parsed.map_or_else(|| fail(format!("cannot read {found} as a time")), Ok)
    }
}

/// A number of milliseconds or seconds as milliseconds, if finite and in range.
fn epoch(format: TimeFormat, number: Option<f64>) -> Option<i64> {
    let ms = if format == TimeFormat::EpochS { number? * 1000.0 } else { number? };
    (ms.is_finite() && ms.abs() < 9.0e15).then(|| ms.floor() as i64)
}

/// Milliseconds since the Unix epoch of an RFC 3339 date-time, e.g. `2013-01-01T10:00:00Z`,
/// `2013-01-01 05:00:00.250-05:00` (a space for `T` is accepted, as RFC 3339 allows); `None`
/// when it is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = b.get(range)?;
        part.iter().all(u8::is_ascii_digit).then(|| part.iter().fold(0, |n, d| n * 10 + i64::from(d - b'0')))
    };
    let (year, month, day) = (digits(0..4)?, digits(5..7)?, digits(8..10)?);
    let (hour, minute, second) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|&(i, c)| b[i] != c) || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &b[19..];
    let mut millis = 0;
    if let Some(fraction) = rest.strip_prefix(b".") {
        let len = fraction.iter().take_while(|c| c.is_ascii_digit()).count();
        if len == 0 {
            return None;
        }
        millis = fraction[..len.min(3)].iter().fold(0, |n, d| n * 10 + i64::from(d - b'0'));
        millis *= 10_i64.pow(3 - len.min(3) as u32);
        rest = &fraction[len..];
    }
    let offset_minutes = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit()).then(|| i64::from((a - b'0') * 10 + b - b'0'))
            };
            let minutes = two(*h1, *h2)? * 60 + two(*m1, *m2)?;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_minutes * 60;
    Some(seconds * 1000 + millis)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_is_read_to_the_millisecond_with_its_offset() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2013-01-01T10:00:00Z"), Some(1_357_034_400_000));
        assert_eq!(parse_rfc3339("2013-01-01 05:00:00-05:00"), Some(1_357_034_400_000));
        assert_eq!(parse_rfc3339("2013-01-01T10:00:00.25Z"), Some(1_357_034_400_250));
        assert_eq!(parse_rfc3339("2012-02-29T00:00:00.123456+01:00"), Some(1_330_470_000_123));
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), Some(-1000));
        for bad in [
            "",
            "2013-01-01",
            "2013-01-01T10:00:00",
            "2013-13-01T00:00:00Z",
            "2013-01-01T10:00:00.Z",
            "x013-01-01T10:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_field_or_the_timestamp_is_the_event_time_and_bad_fields_are_named() {
        let config = |field: Option<&str>, format| WatermarkConfig {
            field: field.map(str::to_owned),
            format,
            max_out_of_orderness: Duration::ZERO,
            idle_timeout: None,
            max_future: None,
        };
        assert_eq!(EventTimeReader::new(&config(None, TimeFormat::Rfc3339)).read(None, 42), Ok(42));
        let rfc = EventTimeReader::new(&config(Some("t"), TimeFormat::Rfc3339));
        assert_eq!(rfc.read(Some(br#"{"t": "1970-01-01T00:00:01Z"}"#), 42), Ok(1000));
        let seconds = EventTimeReader::new(&config(Some("t"), TimeFormat::EpochS));
        assert_eq!(seconds.read(Some(br#"{"t": 1.5}"#), 0), Ok(1500));
        assert_eq!(seconds.read(Some(br#"{"t": "2"}"#), 0), Ok(2000));
        let ms = EventTimeReader::new(&config(Some("t"), TimeFormat::EpochMs));
        assert_eq!(ms.read(Some(br#"{"t": 7}"#), 0), Ok(7));
        for (value, why) in [
            (None, "null"),
            (Some(&b"not json"[..]), "not JSON"),
            (Some(&br#"{"u": 1}"#[..]), "no such field"),
            (Some(&br#"{"t": "soon"}"#[..]), "cannot read \"soon\""),
        ] {
            let error = ms.read(value, 0).unwrap_err();
            assert!(error.contains("source.watermark.field `t`") && error.contains(why), "{error}");
        }
    }
}
