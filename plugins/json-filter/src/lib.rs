//! `json-filter`: forwards the records whose JSON value satisfies one condition on one field.
//!
//! See `README.md` next to this crate for the operators and configuration.

use std::cmp::Ordering;

use serde_json::Value;
use weir_guest::{Config, Emitter, Record, Transform, TransformError};

/// The operator names accepted by the `operator` config key.
const OPERATORS: &[&str] = &["eq", "ne", "lt", "le", "gt", "ge", "contains", "exists"];

/// A comparison applied to the selected field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Contains,
    Exists,
}

/// The transform: the parsed condition. Keeps no state.
pub struct JsonFilter {
    path: Vec<String>,
    op: Op,
    operand: Value,
}

impl Op {
    fn parse(name: &str) -> Result<Op, String> {
        Ok(match name {
            "eq" => Op::Eq,
            "ne" => Op::Ne,
            "lt" => Op::Lt,
            "le" => Op::Le,
            "gt" => Op::Gt,
            "ge" => Op::Ge,
            "contains" => Op::Contains,
            "exists" => Op::Exists,
            _ => {
                return Err(format!(
                    "config key `operator`: unknown operator {name:?} (allowed: {})",
                    OPERATORS.join(", ")
                ));
            }
        })
    }
}

/// Follows a dot path: object fields by name, array elements by decimal index.
fn lookup<'a>(mut value: &'a Value, path: &[String]) -> Option<&'a Value> {
    for segment in path {
        value = match value {
            Value::Object(map) => map.get(segment)?,
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

/// JSON equality, except that numbers compare by value (`1` equals `1.0`).
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => x.as_f64() == y.as_f64(),
        },
        _ => a == b,
    }
}

/// Order of two numbers or two strings; `None` for anything else.
fn json_cmp(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
        },
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

fn matches(op: Op, field: &Value, operand: &Value) -> bool {
    let ord = || json_cmp(field, operand);
    match op {
        Op::Exists => true,
        Op::Eq => json_eq(field, operand),
        Op::Ne => !json_eq(field, operand),
        Op::Lt => ord() == Some(Ordering::Less),
        Op::Le => matches!(ord(), Some(Ordering::Less | Ordering::Equal)),
        Op::Gt => ord() == Some(Ordering::Greater),
        Op::Ge => matches!(ord(), Some(Ordering::Greater | Ordering::Equal)),
        Op::Contains => match (field, operand) {
            (Value::String(s), Value::String(sub)) => s.contains(sub.as_str()),
            (Value::Array(items), _) => items.iter().any(|item| json_eq(item, operand)),
            _ => false,
        },
    }
}

impl JsonFilter {
    /// Whether a record value (raw bytes) passes the filter.
    fn accepts(&self, value: Option<&[u8]>) -> bool {
        let Some(Ok(json)) = value.map(serde_json::from_slice::<Value>) else {
            return false;
        };
        lookup(&json, &self.path).is_some_and(|field| matches(self.op, field, &self.operand))
    }
}

impl Transform for JsonFilter {
    fn init(config: &Config) -> Result<Self, String> {
        config.allow_only(&["field", "operator", "value"])?;
        let field = config.require("field")?;
        if field.is_empty() || field.split('.').any(str::is_empty) {
            return Err(format!("config key `field`: invalid path {field:?} (e.g. `a.b`)"));
        }
        let op = Op::parse(config.require("operator")?)?;
        let operand = match (op, config.get("value")) {
            (Op::Exists, None) => Value::Null,
            (Op::Exists, Some(_)) => {
                return Err("config key `value`: operator `exists` takes no value".to_string());
            }
            (_, None) => return Err("missing required config key `value`".to_string()),
            (_, Some(text)) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string())),
        };
        let path = field.split('.').map(str::to_string).collect();
        Ok(JsonFilter { path, op, operand })
    }

    fn process(&mut self, record: &Record, out: &mut Emitter) -> Result<(), TransformError> {
        if self.accepts(record.value()) {
            out.forward(record);
        }
        Ok(())
    }
}

weir_guest::export!(JsonFilter);

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(field: &str, operator: &str, value: Option<&str>) -> JsonFilter {
        let mut config = vec![("field", field), ("operator", operator)];
        config.extend(value.map(|v| ("value", v)));
        JsonFilter::init(&config.into_iter().collect()).unwrap()
    }

    fn accepts(f: &JsonFilter, json: &str) -> bool {
        f.accepts(Some(json.as_bytes()))
    }

    #[test]
    fn operators() {
        let doc = r#"{"a":{"b":5,"s":"hello","l":[1,"x"]},"n":null}"#;
        let cases = [
            ("a.b", "eq", Some("5.0"), true),
            ("a.b", "ne", Some("5"), false),
            ("a.b", "lt", Some("6"), true),
            ("a.b", "le", Some("5"), true),
            ("a.b", "gt", Some("5"), false),
            ("a.b", "ge", Some("4.5"), true),
            ("a.b", "gt", Some("abc"), false),
            ("a.s", "eq", Some("hello"), true),
            ("a.s", "eq", Some(r#""hello""#), true),
            ("a.s", "lt", Some("world"), true),
            ("a.s", "contains", Some("ell"), true),
            ("a.l", "contains", Some("x"), true),
            ("a.l", "contains", Some("1"), true),
            ("a.l", "contains", Some("2"), false),
            ("a.l.1", "eq", Some("x"), true),
            ("n", "exists", None, true),
            ("n", "eq", Some("null"), true),
            ("a.missing", "exists", None, false),
            ("a.missing", "ne", Some("1"), false),
            ("a.b.c", "exists", None, false),
        ];
        for (field, op, value, expected) in cases {
            let f = filter(field, op, value);
            assert_eq!(accepts(&f, doc), expected, "{field} {op} {value:?}");
        }
    }

    #[test]
    fn non_json_values_do_not_match() {
        let f = filter("a", "exists", None);
        assert!(!accepts(&f, "not json"));
        assert!(!f.accepts(None));
        assert!(!accepts(&f, "[1]"));
        assert!(accepts(&f, r#"{"a":0}"#));
    }

    #[test]
    fn config_errors() {
        let err = |c: &[(&str, &str)]| JsonFilter::init(&c.iter().copied().collect()).err().unwrap();
        let e = err(&[("field", "a"), ("operator", "like"), ("value", "1")]);
        assert!(e.contains("\"like\"") && e.contains("eq, ne, lt, le, gt, ge, contains, exists"), "{e}");
        assert!(err(&[("operator", "eq"), ("value", "1")]).contains("`field`"));
        assert!(err(&[("field", "a"), ("operator", "eq")]).contains("`value`"));
        assert!(err(&[("field", "a"), ("operator", "exists"), ("value", "1")]).contains("`value`"));
        assert!(err(&[("field", "a..b"), ("operator", "exists")]).contains("`field`"));
        assert!(err(&[("field", "a"), ("operator", "exists"), ("x", "1")]).contains("`x`"));
    }
}
