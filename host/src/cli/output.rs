//! `--output table|json`, which every list and show command takes, and the one way they print.
//!
//! `table` (the default) is for people: aligned columns for a list, `field  value` lines for one
//! thing. `json` is for programs: one JSON document on stdout, an array for a list and an object
//! for one thing, whose field names are documented (README's command table, docs/hosting.md,
//! docs/observability.md) and kept stable.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::Value;

/// How a list or show command prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns, or `field  value` lines, for people.
    #[default]
    Table,
    /// One JSON document: an array for a list, an object for one thing.
    Json,
}

/// `--output table|json`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// How to print: `table` for people, `json` for programs (one JSON document: an array for
    /// a list, an object for one thing; field names as documented).
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

/// Prints `value` to stdout: as JSON, or as `text` writes it.
///
/// # Errors
/// When stdout cannot be written (a closed pipe is an I/O error, which `main` ends on quietly).
pub fn print<T: Serialize + ?Sized>(
    format: Format,
    value: &T,
    text: impl FnOnce(&mut dyn Write, &T) -> io::Result<()>,
) -> anyhow::Result<ExitCode> {
    let mut out = io::stdout().lock();
    match format {
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, value).map_err(io::Error::from)?;
            writeln!(out)?;
        }
        Format::Table => text(&mut out, value)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Rows of cells written in columns as wide as their widest cell, two spaces apart.
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose first row is `header` (none when it is empty: `field  value` lines).
    pub fn new(header: &[&str]) -> Self {
        let rows = if header.is_empty() { Vec::new() } else { vec![header.iter().map(|h| (*h).to_owned()).collect()] };
        Self { rows }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: impl IntoIterator<Item = String>) -> &mut Self {
        self.rows.push(cells.into_iter().collect());
        self
    }

    /// Writes the rows; the last cell of a row is not padded.
    ///
    /// # Errors
    /// When `out` cannot be written.
    pub fn write(&self, out: &mut dyn Write) -> io::Result<()> {
        let mut widths: Vec<usize> = Vec::new();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                let width = cell.chars().count();
                match widths.get_mut(i) {
                    Some(w) => *w = (*w).max(width),
                    None => widths.push(width),
                }
            }
        }
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// A JSON value as a table cell: a string as it is, null as `-`, anything else as JSON.
pub fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let mut table = Table::new(&["NAME", "STATE"]);
        table.row(["delays".to_owned(), "running".to_owned()]).row(["a".to_owned(), cell(&Value::Null)]);
        let mut out = Vec::new();
        table.write(&mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "NAME    STATE\ndelays  running\na       -\n");
    }
}
