//! The answer's bytes against prost's encoding of the same answer.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use proptest::prelude::*;
use prost::Message;

use super::*;
use crate::rules::Unit;
use crate::service::{CurrentLimit, DescriptorStatus};

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[a-z_]{1,12}",
        "[a-z]{120,300}",
        any::<String>()
    ]
}

fn unit() -> impl Strategy<Value = Unit> {
    prop::sample::select(&Unit::ALL[..])
}

fn status() -> impl Strategy<Value = DescriptorStatus> {
    (
        any::<bool>(),
        prop::option::of((prop_oneof![Just(0u32), any::<u32>()], unit(), text())),
        prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()],
        prop::option::of(prop_oneof![Just(0u64), 0u64..NANOS_PER_SEC, any::<u64>()]),
    )
        .prop_map(|(over_limit, limit, remaining, reset)| DescriptorStatus {
            over_limit,
            current_limit: limit.map(|(requests_per_unit, unit, name)| CurrentLimit {
                requests_per_unit,
                unit,
                multiplier: 1,
                name,
            }),
            remaining,
            reset,
            all_limits: Vec::new(),
        })
}

fn answer() -> impl Strategy<Value = WireResponse> {
    (
        any::<bool>(),
        prop::collection::vec(status(), 0..5),
        prop::collection::vec(
            (text(), text(), prop::collection::vec(any::<u8>(), 0..3)),
            0..4,
        ),
    )
        .prop_map(|(over_limit, statuses, headers)| WireResponse {
            answer: service::Answer {
                over_limit,
                statuses,
                headline: None,
                dynamic_metadata: None,
            },
            headers: headers
                .into_iter()
                .map(|(key, value, raw_value)| HeaderValue {
                    key,
                    value,
                    raw_value,
                })
                .collect(),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn an_answer_is_written_as_prost_encodes_it(answer in answer()) {
        let mut written = Vec::new();
        answer.encode(&mut written);
        prop_assert_eq!(written, answer.into_proto().encode_to_vec());
    }
}

#[test]
fn an_empty_limit_is_still_sent() {
    // A limit whose fields are all protobuf defaults is present, with no bytes inside.
    let answer = WireResponse {
        answer: service::Answer {
            over_limit: false,
            statuses: vec![DescriptorStatus {
                current_limit: Some(CurrentLimit {
                    requests_per_unit: 0,
                    unit: Unit::Second,
                    multiplier: 1,
                    name: String::new(),
                }),
                ..DescriptorStatus::default()
            }],
            headline: None,
            dynamic_metadata: None,
        },
        headers: Vec::new(),
    };
    let mut written = Vec::new();
    answer.encode(&mut written);
    let decoded = RateLimitResponse::decode(written.as_slice()).unwrap();
    assert_eq!(decoded.statuses[0].current_limit.as_ref().unwrap().unit, 1);
    assert_eq!(written, answer.into_proto().encode_to_vec());
}

#[test]
fn dynamic_metadata_is_sent_as_a_struct() {
    let serde_json::Value::Object(metadata) = serde_json::json!({
        "domain": "d",
        "descriptors": [{"entries": ["k=v"], "hitsAddend": 3}],
        "metadata": {"pool": "a", "weight": 2.5, "on": true, "none": null},
    }) else {
        unreachable!()
    };
    let answer = WireResponse {
        answer: service::Answer {
            dynamic_metadata: Some(Box::new(metadata)),
            ..service::Answer::no_limits(1)
        },
        headers: Vec::new(),
    };
    let mut written = Vec::new();
    answer.encode(&mut written);
    let decoded = RateLimitResponse::decode(written.as_slice()).unwrap();
    let expected = answer.into_proto();
    assert!(expected.dynamic_metadata.is_some());
    // Compared decoded: a Struct's fields are a map, written in no fixed order.
    assert_eq!(decoded, expected);
}
