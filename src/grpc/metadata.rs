//! The service's dynamic metadata (a JSON object) as the protobuf `Struct` Envoy reads:
//! numbers as doubles, as `structpb` carries them.

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, NullValue, Struct, Value};
use serde_json::{Map, Value as Json};

/// `object` as a `Struct`.
pub(super) fn to_struct(object: &Map<String, Json>) -> Struct {
    Struct {
        fields: object
            .iter()
            .map(|(key, value)| (key.clone(), to_value(value)))
            .collect(),
    }
}

fn to_value(value: &Json) -> Value {
    let kind = match value {
        Json::Null => Kind::NullValue(NullValue::NullValue as i32),
        Json::Bool(b) => Kind::BoolValue(*b),
        // Every JSON number the service makes is finite, so has an f64.
        Json::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
        Json::String(s) => Kind::StringValue(s.clone()),
        Json::Array(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect(),
        }),
        Json::Object(object) => Kind::StructValue(to_struct(object)),
    };
    Value { kind: Some(kind) }
}
