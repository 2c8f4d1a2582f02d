//! Records from local files: CSV, JSON lines, either inside a `.zip`.
//!
//! Used by `weir transform run` (and by the loader that produces files into Kafka). Every row
//! becomes a JSON object value; CSV rows are converted by [`csv_row_to_json`]: header names
//! as field names, `NA` and empty cells as `null`, cells written as JSON numbers as numbers,
//! everything else (`02134` too) as strings. A row's record bytes keep what the file wrote: a
//! JSON line as it is, a CSV row as [`csv_row_text`] writes it, fields in the header's order.
//! A key is built from named fields joined by `|` (`origin,carrier` → `EWR|UA`).

mod reader;

pub use reader::{FileError, Format, Row, csv_row_text, csv_row_to_json, read_rows};
