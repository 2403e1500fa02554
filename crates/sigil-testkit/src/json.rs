//! Canonical JSON (object keys sorted bytewise, no insignificant whitespace),
//! as Rekor uses for entry bodies and SET payloads. Written here rather than
//! relying on serde_json's map order, which a workspace feature could change.

use serde_json::Value;

/// Serializes `value` canonically.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(*k) {
                    write(v, out);
                }
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Inserts `key: value` into `target` if it is an object (a no-op otherwise).
pub fn insert(target: &mut Value, key: &str, value: Value) {
    if let Some(map) = target.as_object_mut() {
        map.insert(key.to_owned(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_keys_recursively_without_spaces() {
        let v = serde_json::json!({"b": 1, "a": {"d": [1, {"z": "x", "y": null}], "c": true}});
        assert_eq!(
            canonical(&v),
            r#"{"a":{"c":true,"d":[1,{"y":null,"z":"x"}]},"b":1}"#
        );
    }
}
