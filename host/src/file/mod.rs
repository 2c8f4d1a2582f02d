//! Records from local files: CSV, JSON lines, either inside a `.zip`.
//!
//! Used by `weir transform run` (and by the loader that produces files into Kafka). Every row
//! becomes a JSON object value; a CSV row's has the header names as field names, `NA` and
//! empty cells as `null`, cells written as JSON numbers as numbers, everything else (`02134`
//! too) as strings. A row's record bytes keep what the file wrote: a JSON line as it is, a CSV
//! row as the text of that object, fields in the header's order and numbers as written.
//! A key is built from named fields joined by `|` (`origin,carrier` → `EWR|UA`).

mod reader;

pub use reader::{Format, Row, read_rows};
