//! Output records as rows: the table's columns as the sink found them at start, the check of
//! each record's JSON object against them, and the epoch's rows waiting for the barrier.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Map, Value};

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

    fn fits(self, value: &Value) -> bool {
        matches!(
            (self, value),
            (_, Value::Null)
                | (ColumnKind::Any, _)
                | (ColumnKind::Number, Value::Number(_))
                | (ColumnKind::Boolean, Value::Bool(_))
                | (ColumnKind::Text, Value::String(_))
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
}

/// An output record made a row.
#[derive(Debug, Clone)]
pub struct Row {
    /// The task whose output it is.
    pub task: TaskId,
    /// The output record's key and value as the transform gave them (for a dead letter).
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    /// The value's fields: a subset of the table's columns.
    pub fields: Map<String, Value>,
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

    /// The values of the key columns, as one string (an upsert keeps the last row per key).
    pub fn key_of(&self, key: &[String]) -> String {
        let values: Vec<&Value> = key.iter().map(|k| self.fields.get(k).unwrap_or(&Value::Null)).collect();
        serde_json::to_string(&values).unwrap_or_default()
    }
}

impl TableShape {
    /// The row of an output record of `task`, or why the table cannot take it: the value is not
    /// a JSON object, a field is not a column or holds JSON of the wrong sort, or a key column
    /// of an upsert is missing or null.
    pub fn row(&self, task: &TaskId, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Row, String> {
        let bytes = value.ok_or("the output record has no value; the table needs a JSON object")?;
        let fields = match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(fields)) => fields,
            Ok(other) => {
                return Err(format!("the output value is JSON {}, not an object of the table's columns", kind(&other)));
            }
            Err(e) => return Err(format!("the output value is not JSON ({e}); the table needs a JSON object")),
        };
        for (name, value) in &fields {
            let Some(column) = self.columns.get(name) else {
                return Err(format!("field `{name}` is not a column of table {}", self.table));
            };
            if !column.kind.fits(value) {
                return Err(format!(
                    "field `{name}` holds JSON {}, which column {name} ({}) does not take",
                    kind(value),
                    column.type_name
                ));
            }
        }
        if let Some(missing) = self.key.iter().find(|k| fields.get(*k).is_none_or(Value::is_null)) {
            return Err(format!("key column `{missing}` is missing or null; an upsert needs every key column"));
        }
        Ok(Row { task: task.clone(), key: key.map(<[u8]>::to_vec), value: Some(bytes.to_vec()), fields })
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
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
        }
    }

    #[test]
    fn a_value_becomes_a_row_only_when_every_field_fits_its_column() {
        let task = TaskId { topic: "flights".into(), partition: 0 };
        let row = |value: &str| shape(&["origin"]).row(&task, None, Some(value.as_bytes()));
        let ok = row(r#"{"origin":"EWR","flights":3,"late":null,"extra":[1]}"#).unwrap();
        assert_eq!(ok.key_of(&["origin".into()]), r#"["EWR"]"#);
        for (value, says) in [
            (r#"{"origin":"EWR","flights":"3"}"#, "field `flights` holds JSON string, which column flights (bigint)"),
            (r#"{"origin":"EWR","carrier":"UA"}"#, "field `carrier` is not a column of table delays"),
            (r#"{"flights":3}"#, "key column `origin` is missing or null"),
            (r#"{"origin":null}"#, "key column `origin` is missing or null"),
            (r#"[1,2]"#, "JSON array, not an object"),
            ("nope", "not JSON"),
        ] {
            let error = row(value).unwrap_err();
            assert!(error.contains(says), "{value}: {error}");
        }
        assert!(shape(&[]).row(&task, None, None).unwrap_err().contains("no value"));
    }
}
