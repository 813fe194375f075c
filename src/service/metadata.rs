//! The dynamic metadata of an answer (`--response-dynamic-metadata`, the Go server's
//! `RESPONSE_DYNAMIC_METADATA`): what was asked, and the `metadata` of the rules that
//! passed, for Envoy to put in the request's dynamic metadata (under the rate-limit
//! filter's name) where routes and logs can read it.
//!
//! The shape is the Go server's: `domain`; `descriptors`, one object per descriptor with
//! its `entries` as `key=value` texts, its `limit` override as protobuf text and its
//! `hitsAddend` when set; the request's `hitsAddend` when not 0; `metadata`, the merge of
//! the `metadata` of every limited descriptor that is not OVER_LIMIT, in request order:
//! on a key two rules share, the first value stays, and two objects merge.

use serde_json::{Map, Value};

use super::answer::DescriptorStatus;
use crate::plan::{Plan, Resolved};
use crate::request::{Request, RequestDescriptor};

/// The dynamic metadata of `request`, answered with `statuses` (OVER_LIMIT after shadow
/// mode) from `plan` (`None`: a domain the config does not have, where no rule passed).
pub(super) fn dynamic_metadata<D: RequestDescriptor>(
    request: &Request<'_, D>,
    plan: Option<&Plan<'_>>,
    statuses: &[DescriptorStatus],
) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("domain".into(), request.domain.into());
    let descriptors = request
        .descriptors
        .iter()
        .map(|d| Value::Object(descriptor(d)));
    out.insert("descriptors".into(), Value::Array(descriptors.collect()));
    if request.hits_addend != 0 {
        out.insert("hitsAddend".into(), request.hits_addend.into());
    }
    let mut passed = Map::new();
    let resolved = plan.map_or(&[][..], Plan::resolved);
    for (resolved, status) in resolved.iter().zip(statuses) {
        if let Resolved::Limited {
            rule: Some(rule), ..
        } = resolved
            && !status.over_limit
            && let Some(metadata) = &rule.metadata
        {
            merge(&mut passed, metadata);
        }
    }
    if !passed.is_empty() {
        out.insert("metadata".into(), Value::Object(passed));
    }
    out
}

/// One descriptor as the Go server describes it.
fn descriptor(descriptor: &impl RequestDescriptor) -> Map<String, Value> {
    let entries = descriptor
        .entries()
        .map(|(key, value)| Value::String(format!("{key}={value}")));
    let mut out = Map::new();
    out.insert("entries".into(), Value::Array(entries.collect()));
    if let Some(limit) = descriptor.limit_override() {
        // Protobuf's text form of the override, as Go's `String()` writes it: fields at
        // their default left out.
        let mut text = Vec::new();
        if limit.requests_per_unit != 0 {
            text.push(format!("requests_per_unit:{}", limit.requests_per_unit));
        }
        if let Some(unit) = limit.unit {
            text.push(format!("unit:{}", unit.name()));
        }
        out.insert("limit".into(), Value::String(text.join(" ")));
    }
    if let Some(hits) = descriptor.hits_addend() {
        out.insert("hitsAddend".into(), hits.into());
    }
    out
}

/// Adds `from`'s keys that `into` lacks; where both hold an object, merges them.
fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (None, _) => {
                into.insert(key.clone(), value.clone());
            }
            (Some(Value::Object(mine)), Value::Object(theirs)) => merge(mine, theirs),
            (Some(_), _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_first_value_stays_and_objects_merge() {
        let Value::Object(mut into) = json!({"a": 1, "o": {"x": 1}, "s": "first"}) else {
            unreachable!()
        };
        let Value::Object(from) = json!({"a": 2, "o": {"x": 2, "y": 3}, "s": {"no": 1}, "b": [1]})
        else {
            unreachable!()
        };
        merge(&mut into, &from);
        assert_eq!(
            Value::Object(into),
            json!({"a": 1, "o": {"x": 1, "y": 3}, "s": "first", "b": [1]})
        );
    }
}
