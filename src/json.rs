//! The Go server's `/json` endpoint: `ShouldRateLimit` as protobuf JSON (the proto3 JSON
//! mapping of `RateLimitRequest` and `RateLimitResponse`), for curl users.
//!
//! Requests accept both spellings the mapping allows (`hits_addend` and `hitsAddend`),
//! units by name or number, and 64-bit integers as numbers or strings. Responses are
//! what Go's protojson writes: camelCase names, enums by name, fields at their default
//! value left out (`limitRemaining` of 0), durations as `"59s"`.

use serde::{Deserialize, Deserializer, Serialize};

use crate::clock::NANOS_PER_SEC;
use crate::request::{Descriptor, Override, OwnedRequest};
use crate::rules::Unit;
use crate::service;

/// Why a JSON body is not a request.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// Not JSON, or not the shape of a `RateLimitRequest`.
    #[error("invalid RateLimitRequest JSON: {0}")]
    Json(#[from] serde_json::Error),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    /// `domain`: the config domain the descriptors are looked up in.
    #[serde(default)]
    domain: String,
    /// `descriptors`, in request order.
    #[serde(default)]
    descriptors: Vec<RawDescriptor>,
    /// `hits_addend` / `hitsAddend`: hits of every descriptor without its own (0: one).
    #[serde(default, alias = "hitsAddend", deserialize_with = "integer")]
    hits_addend: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    /// `entries`: the (key, value) pairs the domain's tree is walked with.
    #[serde(default)]
    entries: Vec<RawEntry>,
    /// `limit`: a limit sent in the request, used instead of the config's.
    #[serde(default)]
    limit: Option<RawLimit>,
    /// `hits_addend` / `hitsAddend`, a `UInt64Value`: `None` when absent, so that an
    /// explicit 0 (check without consuming) stays distinct.
    #[serde(default, alias = "hitsAddend", deserialize_with = "optional_integer")]
    hits_addend: Option<u64>,
    /// `is_negative_hits` / `isNegativeHits`: the hits are a refund.
    #[serde(default, alias = "isNegativeHits")]
    is_negative_hits: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    /// `key` of a descriptor entry (absent: empty, as in proto3).
    #[serde(default)]
    key: String,
    /// `value` of a descriptor entry (absent: empty, as in proto3).
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLimit {
    /// `requests_per_unit` / `requestsPerUnit`; wider than the proto's `uint32` so that
    /// larger values saturate instead of failing the parse.
    #[serde(default, alias = "requestsPerUnit", deserialize_with = "integer")]
    requests_per_unit: u64,
    /// `unit`, by name or number, kept raw: an unknown unit must reach the service, which
    /// rejects the override, rather than fail the parse.
    #[serde(default)]
    unit: Option<serde_json::Value>,
}

/// An integer as JSON number or string (proto3 JSON writes 64-bit integers as strings).
fn integer<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(d)? {
        serde_json::Value::Number(n) => n
            .as_u64()
            .ok_or_else(|| D::Error::custom(format!("{n} is not a non-negative integer"))),
        serde_json::Value::String(s) => s
            .parse()
            .map_err(|_| D::Error::custom(format!("{s:?} is not a non-negative integer"))),
        serde_json::Value::Null => Ok(0),
        other => Err(D::Error::custom(format!("{other} is not an integer"))),
    }
}

fn optional_integer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    // A wrapper type (`google.protobuf.UInt64Value`) is the bare number in JSON.
    integer(d).map(Some)
}

/// A unit by enum name or number; `None` for UNKNOWN or anything else (the service
/// rejects an override without a valid unit).
fn unit(value: Option<&serde_json::Value>) -> Option<Unit> {
    match value? {
        serde_json::Value::String(name) => Unit::parse(name),
        serde_json::Value::Number(n) => match n.as_u64()? {
            1 => Some(Unit::Second),
            2 => Some(Unit::Minute),
            3 => Some(Unit::Hour),
            4 => Some(Unit::Day),
            5 => Some(Unit::Month),
            6 => Some(Unit::Year),
            7 => Some(Unit::Week),
            _ => None,
        },
        _ => None,
    }
}

/// Reads a `RateLimitRequest` from its JSON form.
///
/// # Errors
/// The body is not such JSON.
pub fn parse_request(body: &[u8]) -> Result<OwnedRequest, ParseError> {
    let raw: RawRequest = serde_json::from_slice(body)?;
    let mut descriptors = Vec::with_capacity(raw.descriptors.len());
    for d in raw.descriptors {
        descriptors.push(Descriptor {
            refund: d.is_negative_hits,
            entries: d.entries.into_iter().map(|e| (e.key, e.value)).collect(),
            limit: d.limit.map(|l| Override {
                requests_per_unit: u32::try_from(l.requests_per_unit).unwrap_or(u32::MAX),
                unit: unit(l.unit.as_ref()),
            }),
            hits_addend: d.hits_addend,
        });
    }
    Ok(OwnedRequest {
        domain: raw.domain,
        descriptors,
        hits_addend: u32::try_from(raw.hits_addend).unwrap_or(u32::MAX),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse<'a> {
    /// `overallCode`: `OK` or `OVER_LIMIT`.
    overall_code: &'static str,
    /// `statuses`, one per descriptor in request order; protojson leaves it out when empty.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    statuses: Vec<JsonStatus>,
    /// `dynamicMetadata`, with --response-dynamic-metadata.
    #[serde(skip_serializing_if = "Option::is_none")]
    dynamic_metadata: Option<&'a serde_json::Map<String, serde_json::Value>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    /// `code` of the descriptor: `OK` or `OVER_LIMIT`.
    code: &'static str,
    /// `currentLimit`: the limit that applied; left out when none did.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    /// `limitRemaining`; left out at 0, as protojson leaves out default values.
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    /// `durationUntilReset` as a proto3 JSON duration (`"59s"`); left out when the status
    /// has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    /// `name`: the rule's `name` in the config; left out when empty.
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    /// `requestsPerUnit`; left out at 0, as protojson does.
    #[serde(skip_serializing_if = "is_zero")]
    requests_per_unit: u32,
    /// `unit`, by enum name (`SECOND`, `MINUTE`, ...).
    unit: &'static str,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn code(over_limit: bool) -> &'static str {
    if over_limit { "OVER_LIMIT" } else { "OK" }
}

/// A duration as proto3 JSON writes it: seconds with 0, 3, 6 or 9 decimals and an `s`.
fn duration(nanos: u64) -> String {
    let (secs, frac) = (nanos / NANOS_PER_SEC, nanos % NANOS_PER_SEC);
    if frac == 0 {
        format!("{secs}s")
    } else if frac % 1_000_000 == 0 {
        format!("{secs}.{:03}s", frac / 1_000_000)
    } else if frac % 1_000 == 0 {
        format!("{secs}.{:06}s", frac / 1_000)
    } else {
        format!("{secs}.{frac:09}s")
    }
}

/// A `RateLimitResponse` as JSON.
pub fn response_body(answer: &service::Answer) -> String {
    let response = JsonResponse {
        overall_code: code(answer.over_limit),
        statuses: answer
            .statuses
            .iter()
            .map(|s| JsonStatus {
                code: code(s.over_limit),
                current_limit: s.current_limit.as_ref().map(|l| JsonLimit {
                    name: l.name.clone(),
                    requests_per_unit: l.requests_per_unit,
                    unit: l.unit.name(),
                }),
                limit_remaining: s.remaining,
                duration_until_reset: s.reset.map(duration),
            })
            .collect(),
        dynamic_metadata: answer.dynamic_metadata.as_deref(),
    };
    serde_json::to_string(&response).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_spellings_and_string_integers() {
        let request = parse_request(
            br#"{"domain":"d","hitsAddend":2,"descriptors":[
                {"entries":[{"key":"k","value":"v"}],"hits_addend":"0",
                 "limit":{"requestsPerUnit":5,"unit":"MINUTE"}},
                {"entries":[{"key":"k"}],"limit":{"requests_per_unit":"7","unit":7}}]}"#,
        )
        .unwrap();
        assert_eq!(request.domain, "d");
        assert_eq!(request.hits_addend, 2);
        let [a, b] = &request.descriptors[..] else {
            panic!("two descriptors")
        };
        assert_eq!(a.entries, [("k".to_string(), "v".to_string())]);
        assert_eq!(a.hits_addend, Some(0));
        assert_eq!(
            a.limit,
            Some(Override {
                requests_per_unit: 5,
                unit: Some(Unit::Minute)
            })
        );
        assert_eq!(b.entries, [("k".to_string(), String::new())]);
        assert_eq!(b.hits_addend, None);
        assert_eq!(b.limit.unwrap().unit, Some(Unit::Week));
    }

    #[test]
    fn rejects_what_is_not_a_request() {
        for body in [
            &b"not json"[..],
            br#"{"domain":"d","descriptors":{}}"#,
            br#"{"domain":"d","extra":1}"#,
            br#"{"domain":"d","hits_addend":-1}"#,
        ] {
            assert!(
                parse_request(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let refund = parse_request(br#"{"domain":"d","descriptors":[{"isNegativeHits":true}]}"#);
        assert!(refund.expect("a refund is a request").descriptors[0].refund);
    }

    #[test]
    fn durations_as_proto3_json() {
        assert_eq!(duration(0), "0s");
        assert_eq!(duration(59 * NANOS_PER_SEC), "59s");
        assert_eq!(duration(1_500_000_000), "1.500s");
        assert_eq!(duration(1_000_001_000), "1.000001s");
        assert_eq!(duration(1), "0.000000001s");
    }
}
