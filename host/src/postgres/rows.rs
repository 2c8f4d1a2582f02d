//! Output records as rows: the table's columns as the sink found them at start, the check of
//! each record's JSON object against them, and the epoch's rows waiting for the barrier.
//!
//! A row keeps each field's JSON text as the transform wrote it ([`RawValue`]): PostgreSQL reads
//! the numbers itself, so a `numeric` keeps every digit and a `bigint` every bit, where a parse
//! into `f64` would round them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::value::RawValue;

use crate::types::TaskId;

/// What JSON a column takes: PostgreSQL converts the value itself (`json_populate_recordset`);
/// the kind only catches a value of the wrong sort early, with a message naming the column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// `smallint`, `integer`, `bigint`, `real`, `double precision`, `numeric`: a number.
    Number,
    /// `boolean`: `true` or `false`.
    Boolean,
    /// `text`, `varchar`, `char`, dates, times, `uuid` and other types read from text: a string.
    Text,
    /// `json`, `jsonb`, arrays and composite types: any JSON.
    Any,
}

impl ColumnKind {
    /// The kind of a column of type `udt` (`pg_type.typname`) and category `category`
    /// (`pg_type.typcategory`: `N` numeric, `B` boolean, `S` string, `D` date/time, `A` array…).
    pub fn of(udt: &str, category: &str) -> Self {
        match (udt, category) {
            ("json" | "jsonb", _) => ColumnKind::Any,
            (_, "N") => ColumnKind::Number,
            (_, "B") => ColumnKind::Boolean,
            (_, "S" | "D" | "T" | "U" | "I") => ColumnKind::Text,
            _ => ColumnKind::Any,
        }
    }

    fn fits(self, kind: JsonKind) -> bool {
        matches!(
            (self, kind),
            (_, JsonKind::Null)
                | (ColumnKind::Any, _)
                | (ColumnKind::Number, JsonKind::Number)
                | (ColumnKind::Boolean, JsonKind::Boolean)
                | (ColumnKind::Text, JsonKind::String)
        )
    }
}

/// One column of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type as PostgreSQL prints it (`format_type`), e.g. `character varying(3)`.
    pub type_name: String,
    /// What JSON it takes.
    pub kind: ColumnKind,
}

/// The table's columns, and the key columns of an upsert.
#[derive(Debug, Clone)]
pub struct TableShape {
    /// The table as configured (`sink.postgres.table`).
    pub table: String,
    /// Its columns, by name.
    pub columns: BTreeMap<String, Column>,
    /// `sink.postgres.key` (empty for inserts).
    pub key: Vec<String>,
    /// Its generated columns, which cannot be written.
    pub generated: Vec<String>,
}

/// An output record made a row.
#[derive(Debug, Clone)]
pub struct Row {
    /// The task whose output it is.
    pub task: TaskId,
    /// The output record's key and value as the transform gave them (for a dead letter).
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// The value's fields, a subset of the table's columns, each as its JSON text.
    pub fields: BTreeMap<String, Box<RawValue>>,
}

/// An output record the table refused, and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The task whose output it was.
    pub task: TaskId,
    /// The output record's key and value.
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// Why: Weir's check of the value, or PostgreSQL's message.
    pub reason: String,
}

impl Refusal {
    /// The refusal of an output record of `task`.
    pub fn of(task: &TaskId, key: Option<&[u8]>, value: Option<&[u8]>, reason: String) -> Self {
        Refusal { task: task.clone(), key: key.map(<[u8]>::to_vec), value: value.map(<[u8]>::to_vec), reason }
    }
}

impl Row {
    /// The refusal of this row.
    pub fn refused(self, reason: String) -> Refusal {
        Refusal { task: self.task, key: self.key, value: self.value, reason }
    }

    /// The JSON texts of the key columns, as one string.
    pub fn key_of(&self, key: &[String]) -> String {
        let values: Vec<&str> = key.iter().map(|k| self.fields.get(k).map_or("null", |v| v.get())).collect();
        values.join("\u{0}")
    }

    /// The row as a JSON object.
    pub fn to_json(&self) -> String {
        let mut text = String::from("{");
        for (i, (name, value)) in self.fields.iter().enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&serde_json::to_string(name).unwrap_or_default());
            text.push(':');
            text.push_str(value.get());
        }
        text.push('}');
        text
    }
}

/// Each key's rows merged into one, in the order of the keys' first rows: a later row's fields
/// replace an earlier one's, and the fields it leaves out keep theirs, so that one upsert per
/// key ends where one upsert per row, in order, would have.
pub fn merge_per_key(rows: Vec<Row>, key: &[String]) -> Vec<Row> {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut merged: Vec<Row> = Vec::new();
    for row in rows {
        match index.get(&row.key_of(key)) {
            Some(&i) => {
                let into = &mut merged[i];
                into.fields.extend(row.fields);
                (into.key, into.value) = (row.key, row.value);
            }
            None => {
                index.insert(row.key_of(key), merged.len());
                merged.push(row);
            }
        }
    }
    merged
}

impl TableShape {
    /// The row of an output record of `task`, or why the table cannot take it: the value is not
    /// a JSON object, a field is not a column or holds JSON of the wrong sort, or a key column
    /// of an upsert is missing or null.
    pub fn row(&self, task: &TaskId, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Row, String> {
        let bytes = value.ok_or("the output record has no value; the table needs a JSON object")?;
        let not_json =
            |e: serde_json::Error| format!("the output value is not JSON ({e}); the table needs a JSON object");
        let fields: BTreeMap<String, Box<RawValue>> = match bytes.trim_ascii_start().first() {
            Some(b'{') => serde_json::from_slice(bytes).map_err(not_json)?,
            _ => {
                let value: Box<RawValue> = serde_json::from_slice(bytes).map_err(not_json)?;
                let kind = JsonKind::of(&value).name();
                return Err(format!("the output value is JSON {kind}, not an object of the table's columns"));
            }
        };
        for (name, value) in &fields {
            let Some(column) = self.columns.get(name) else {
                let why = match self.generated.contains(name) {
                    true => "is a generated column of table",
                    false => "is not a column of table",
                };
                return Err(format!("field `{name}` {why} {}", self.table));
            };
            let kind = JsonKind::of(value);
            if !column.kind.fits(kind) {
                return Err(format!(
                    "field `{name}` holds JSON {}, which column {name} ({}) does not take",
                    kind.name(),
                    column.type_name
                ));
            }
        }
        let null = |k: &&String| fields.get(*k).is_none_or(|value| JsonKind::of(value) == JsonKind::Null);
        if let Some(missing) = self.key.iter().find(null) {
            return Err(format!("key column `{missing}` is missing or null; an upsert needs every key column"));
        }
        Ok(Row { task: task.clone(), key: key.map(<[u8]>::to_vec), value: Some(bytes.to_vec()), fields })
    }
}

/// The sort of a JSON value, told by its first character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonKind {
    Null,
    Boolean,
    Number,
    String,
    Array,
    Object,
}

impl JsonKind {
    fn of(value: &RawValue) -> Self {
        match value.get().as_bytes().first() {
            Some(b'n') => JsonKind::Null,
            Some(b't' | b'f') => JsonKind::Boolean,
            Some(b'"') => JsonKind::String,
            Some(b'[') => JsonKind::Array,
            Some(b'{') => JsonKind::Object,
            _ => JsonKind::Number,
        }
    }

    fn name(self) -> &'static str {
        match self {
            JsonKind::Null => "null",
            JsonKind::Boolean => "boolean",
            JsonKind::Number => "number",
            JsonKind::String => "string",
            JsonKind::Array => "array",
            JsonKind::Object => "object",
        }
    }
}

/// The rows of the open epoch, filled by the workers and taken at the barrier.
#[derive(Debug, Default)]
pub struct PendingRows {
    rows: Mutex<Vec<Row>>,
    /// Key and value bytes of the rows, for `checkpoint.max_epoch_bytes`.
    bytes: AtomicUsize,
}

impl PendingRows {
    /// Adds a task's rows (in its output order).
    pub fn push(&self, rows: Vec<Row>) {
        let bytes: usize =
            rows.iter().map(|r| r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len)).sum();
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.rows.lock().unwrap_or_else(|e| e.into_inner()).extend(rows);
    }

    /// Takes every row.
    pub fn take(&self) -> Vec<Row> {
        self.bytes.store(0, Ordering::Relaxed);
        std::mem::take(&mut *self.rows.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(key: &[&str]) -> TableShape {
        let column = |name: &str, type_name: &str, kind| {
            (name.to_owned(), Column { name: name.into(), type_name: type_name.into(), kind })
        };
        TableShape {
            table: "delays".into(),
            columns: [
                column("origin", "text", ColumnKind::Text),
                column("flights", "bigint", ColumnKind::Number),
                column("late", "boolean", ColumnKind::Boolean),
                column("extra", "jsonb", ColumnKind::Any),
            ]
            .into(),
            key: key.iter().map(|k| (*k).to_owned()).collect(),
            generated: vec!["mean".into()],
        }
    }

    #[test]
    fn a_value_becomes_a_row_only_when_every_field_fits_its_column() {
        let task = TaskId::new("flights", 0);
        let row = |value: &str| shape(&["origin"]).row(&task, None, Some(value.as_bytes()));
        let ok = row(r#"{"origin":"EWR","flights":3,"late":null,"extra":[1]}"#).unwrap();
        assert_eq!(ok.key_of(&["origin".into()]), r#""EWR""#);
        // Numbers keep their text: PostgreSQL reads them, not an f64.
        let exact = row(r#"{"origin":"EWR","flights":123456789012345678901234567890.123456789,"extra":-0}"#).unwrap();
        assert_eq!(
            exact.to_json(),
            r#"{"extra":-0,"flights":123456789012345678901234567890.123456789,"origin":"EWR"}"#
        );
        for (value, says) in [
            (r#"{"origin":"EWR","flights":"3"}"#, "field `flights` holds JSON string, which column flights (bigint)"),
            (r#"{"origin":"EWR","carrier":"UA"}"#, "field `carrier` is not a column of table delays"),
            (r#"{"origin":"EWR","mean":1}"#, "field `mean` is a generated column of table delays"),
            (r#"{"flights":3}"#, "key column `origin` is missing or null"),
            (r#"{"origin":null}"#, "key column `origin` is missing or null"),
            (r#"[1,2]"#, "JSON array, not an object"),
            ("17", "JSON number, not an object"),
            ("nope", "not JSON"),
        ] {
            let error = row(value).unwrap_err();
            assert!(error.contains(says), "{value}: {error}");
        }
        assert!(shape(&[]).row(&task, None, None).unwrap_err().contains("no value"));
    }

    #[test]
    fn an_upsert_merges_each_keys_rows_in_order() {
        let task = TaskId::new("flights", 0);
        let row = |value: &str| shape(&["origin"]).row(&task, None, Some(value.as_bytes())).unwrap();
        let merged = merge_per_key(
            vec![
                row(r#"{"origin":"EWR","flights":1,"late":true}"#),
                row(r#"{"origin":"JFK","flights":9}"#),
                row(r#"{"origin":"EWR","flights":2}"#),
            ],
            &["origin".into()],
        );
        let json: Vec<String> = merged.iter().map(Row::to_json).collect();
        assert_eq!(json, [r#"{"flights":2,"late":true,"origin":"EWR"}"#, r#"{"flights":9,"origin":"JFK"}"#]);
    }
}
