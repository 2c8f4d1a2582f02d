//! Bytes shown losslessly in JSON, for `weir consume` and `weir transform run`/`test`.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

/// Inserts `bytes` as `field` (a string; null for `None`) when they are UTF-8, else as
/// `<field>_base64` (standard base64 with padding).
pub fn insert_bytes(object: &mut Map<String, Value>, field: &str, bytes: Option<&[u8]>) {
    let (name, value) = match bytes {
        None => (field.to_owned(), Value::Null),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => (field.to_owned(), text.into()),
            Err(_) => (format!("{field}_base64"), STANDARD.encode(bytes).into()),
        },
    };
    object.insert(name, value);
}

/// Inserts a record value as `field`: the JSON it holds when its bytes are a JSON object, array,
/// number or boolean (so that outputs compare as JSON), else as [`insert_bytes`] does: a JSON
/// string, or a JSON `null`, stays its text, so that no two values show alike.
pub fn insert_value(object: &mut Map<String, Value>, field: &str, bytes: Option<&[u8]>) {
    match bytes.and_then(|b| serde_json::from_slice::<Value>(b).ok()) {
        Some(json) if !matches!(json, Value::String(_) | Value::Null) => {
            object.insert(field.to_owned(), json);
        }
        _ => insert_bytes(object, field, bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(bytes: Option<&[u8]>) -> Value {
        let mut object = Map::new();
        insert_value(&mut object, "value", bytes);
        Value::Object(object)
    }

    #[test]
    fn values_that_differ_show_differently() {
        assert_eq!(shown(Some(br#"{"a": 1}"#)), serde_json::json!({"value": {"a": 1}}));
        assert_eq!(shown(Some(b"11")), serde_json::json!({"value": 11}));
        assert_eq!(shown(Some(b"plain")), serde_json::json!({"value": "plain"}));
        assert_eq!(shown(Some(br#""plain""#)), serde_json::json!({"value": "\"plain\""}));
        assert_eq!(shown(Some(b"null")), serde_json::json!({"value": "null"}));
        assert_eq!(shown(None), serde_json::json!({"value": null}));
        assert_eq!(shown(Some(&[0xff, 0])), serde_json::json!({"value_base64": "/wA="}));
    }
}
