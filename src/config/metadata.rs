//! A descriptor's `metadata`: a mapping of anything, read as the Go server reads it
//! (yaml.v2 into `map[string]interface{}`, then a protobuf `Struct`), for the dynamic
//! metadata of answers (`--response-dynamic-metadata`).
//!
//! Numbers become numbers (the `Struct`'s doubles), YAML 1.1's booleans booleans, `~` and
//! `null` nulls; keys are their text, as Go formats a non-string key. A number that is not
//! finite (`.inf`, `.nan`) stays text: a `Struct` cannot carry it to Envoy.

use serde_json::{Map, Number, Value};

use super::fields::Reader;
use super::yaml::{Yaml, YamlNode, line};
use crate::error::ConfigErrorKind;

/// The `metadata` mapping `node` of the descriptor at `path`; `None` (with the problem
/// recorded) when it is not a mapping or has a key that is a list or a mapping.
pub(super) fn read(
    reader: &mut Reader<'_>,
    node: &YamlNode,
    path: &str,
) -> Option<Map<String, Value>> {
    match &node.value {
        Yaml::Map(entries) => mapping(reader, entries, path),
        Yaml::Null => Some(Map::new()),
        other => {
            let kind = other.kind();
            reader.error(
                ConfigErrorKind::NotAMapping,
                line(node),
                Some(path),
                format_args!("metadata must be a mapping, found {kind}"),
            );
            None
        }
    }
}

fn mapping(
    reader: &mut Reader<'_>,
    entries: &[(YamlNode, YamlNode)],
    path: &str,
) -> Option<Map<String, Value>> {
    let mut map = Map::new();
    let mut valid = true;
    for (key, value) in entries {
        let Yaml::Scalar { text, .. } = &key.value else {
            let kind = key.value.kind();
            reader.error(
                ConfigErrorKind::KeyNotAString,
                line(key),
                Some(path),
                format_args!("metadata key is not of type string: {kind}"),
            );
            valid = false;
            continue;
        };
        match self::value(reader, value, path) {
            Some(value) => {
                map.insert(text.clone(), value);
            }
            None => valid = false,
        }
    }
    valid.then_some(map)
}

fn value(reader: &mut Reader<'_>, node: &YamlNode, path: &str) -> Option<Value> {
    Some(match &node.value {
        Yaml::Null => Value::Null,
        Yaml::Scalar { text, string: true } => Value::String(text.clone()),
        Yaml::Scalar {
            text,
            string: false,
        } => scalar(text),
        Yaml::Seq(items) => Value::Array(
            items
                .iter()
                .map(|item| value(reader, item, path))
                .collect::<Option<_>>()?,
        ),
        Yaml::Map(entries) => Value::Object(mapping(reader, entries, path)?),
    })
}

/// An untyped scalar as YAML 1.1 (yaml.v2) types it: a boolean, a null, a number, or text.
fn scalar(text: &str) -> Value {
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "true" | "True" | "TRUE" => {
            return Value::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "false" | "False" | "FALSE" => {
            return Value::Bool(false);
        }
        "~" | "null" | "Null" | "NULL" => return Value::Null,
        _ => {}
    }
    let plain = text.replace('_', "");
    let (negative, digits) = match plain.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, plain.strip_prefix('+').unwrap_or(&plain)),
    };
    let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
        .into_iter()
        .find_map(|(prefix, radix)| Some((digits.strip_prefix(prefix)?, radix)));
    let whole = match radix {
        Some((digits, radix)) => u64::from_str_radix(digits, radix).ok(),
        None => digits.parse::<u64>().ok(),
    };
    let number = match whole {
        Some(n) if negative => Number::from_f64(-(n as f64)),
        Some(n) => Some(Number::from(n)),
        None => plain.parse::<f64>().ok().and_then(Number::from_f64),
    };
    number.map_or_else(|| Value::String(text.to_string()), Value::Number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untyped_scalars_are_typed_as_yaml_1_1_types_them() {
        for (text, expected) in [
            ("yes", Value::Bool(true)),
            ("Off", Value::Bool(false)),
            ("~", Value::Null),
            ("42", Value::from(42u64)),
            ("1_000", Value::from(1000u64)),
            ("-3", Value::from(-3.0)),
            ("0x1F", Value::from(31u64)),
            ("2.5", Value::from(2.5)),
            ("1e3", Value::from(1000.0)),
            (".inf", Value::from(".inf")),
            (".nan", Value::from(".nan")),
            ("abc", Value::from("abc")),
        ] {
            assert_eq!(scalar(text), expected, "{text}");
        }
    }
}
