//! The reader against prost: whatever it reads, prost decodes to the same request; the
//! messages Envoy sends, it reads.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use proptest::prelude::*;
use prost::Message;

use super::*;

/// `bytes` as [`super::read`] reads them.
fn read(bytes: &[u8]) -> Option<WireRequest<'_>> {
    let mut request = WireRequest::default();
    super::read(bytes, &mut request)?;
    Some(request)
}

/// What prost decoded, in the reader's terms.
fn from_prost(request: &RateLimitRequest) -> WireRequest<'_> {
    WireRequest {
        domain: &request.domain,
        hits_addend: request.hits_addend,
        descriptors: request
            .descriptors
            .iter()
            .map(|d| WireDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect(),
                limit: d.limit.as_ref().map(|l| (l.requests_per_unit, l.unit)),
                hits_addend: d.hits_addend.as_ref().map(|h| h.value),
                is_negative_hits: d.is_negative_hits,
            })
            .collect(),
    }
}

/// The reader's verdict on `bytes` must never differ from prost's.
fn agrees_with_prost(bytes: &[u8]) -> Result<(), TestCaseError> {
    let decoded = RateLimitRequest::decode(bytes);
    if let Some(read) = read(bytes) {
        prop_assert!(decoded.is_ok(), "read {read:?}, prost: {decoded:?}");
        prop_assert_eq!(read, from_prost(decoded.as_ref().unwrap()));
    }
    Ok(())
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_/.]{0,12}",
        any::<String>(),
        // Long enough for two-byte lengths.
        "[0-9a-f]{120,200}",
    ]
}

fn descriptor() -> impl Strategy<Value = RateLimitDescriptor> {
    (
        prop::collection::vec((text(), text()), 0..6),
        prop::option::of((any::<u32>(), -2i32..10)),
        prop::option::of(prop_oneof![0u64..3, any::<u64>()]),
        any::<bool>(),
    )
        .prop_map(|(entries, limit, hits, negative)| RateLimitDescriptor {
            entries: entries
                .into_iter()
                .map(|(key, value)| Entry { key, value })
                .collect(),
            limit: limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                requests_per_unit,
                unit,
            }),
            hits_addend: hits.map(|value| UInt64Value { value }),
            is_negative_hits: negative,
        })
}

fn request() -> impl Strategy<Value = RateLimitRequest> {
    (
        text(),
        prop::collection::vec(descriptor(), 0..6),
        prop_oneof![Just(0u32), any::<u32>()],
    )
        .prop_map(|(domain, descriptors, hits_addend)| RateLimitRequest {
            domain,
            descriptors,
            hits_addend,
        })
}

/// A varint as any encoder may write it: `padding` needless continuation bytes, up to nine
/// bytes in all (what the reader takes).
fn varint(value: u64, padding: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = value;
    loop {
        let group = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            break out.push(group);
        }
        out.push(group | 0x80);
    }
    for _ in 0..padding.min(9usize.saturating_sub(out.len())) {
        *out.last_mut().unwrap() |= 0x80;
        out.push(0);
    }
    out
}

/// One field as (number, wire type, payload) of a hand-written message.
fn field(number: u8, payload: Field) -> Vec<u8> {
    let (wire_type, bytes) = match payload {
        Field::Varint(value, padding) => (VARINT, varint(value, padding)),
        Field::Bytes(bytes) => (
            LENGTH_DELIMITED,
            [varint(bytes.len() as u64, 0), bytes].concat(),
        ),
    };
    [vec![number << 3 | wire_type], bytes].concat()
}

/// A field's payload.
#[derive(Debug, Clone)]
enum Field {
    Varint(u64, usize),
    Bytes(Vec<u8>),
}

fn small_varint() -> impl Strategy<Value = Field> {
    (prop_oneof![0u64..4, 0u64..(1 << 63)], 0usize..3).prop_map(|(v, p)| Field::Varint(v, p))
}

fn text_field() -> impl Strategy<Value = Field> {
    text().prop_map(|t| Field::Bytes(t.into_bytes()))
}

/// The fields of a message, in any order, any repeated, as other encoders may write them:
/// needless varint bytes, bools other than 1, strings sent twice.
fn hand_written_request() -> impl Strategy<Value = Vec<u8>> {
    let entry = prop::collection::vec(
        prop_oneof![
            text_field().prop_map(|f| field(1, f)),
            text_field().prop_map(|f| field(2, f)),
        ],
        0..4,
    )
    .prop_map(|fields| fields.concat());
    let one_field = |number: u8, value: BoxedStrategy<Field>| {
        prop::collection::vec(value.prop_map(move |f| field(number, f)), 0..2)
            .prop_map(|fields| fields.concat())
    };
    let limit = (
        one_field(1, small_varint().boxed()),
        one_field(2, small_varint().boxed()),
    )
        .prop_map(|(a, b)| [a, b].concat());
    let hits = one_field(1, small_varint().boxed());
    let descriptor = prop::collection::vec(
        prop_oneof![
            4 => entry.prop_map(|e| field(1, Field::Bytes(e))),
            1 => limit.prop_map(|l| field(2, Field::Bytes(l))),
            1 => hits.prop_map(|h| field(3, Field::Bytes(h))),
            1 => small_varint().prop_map(|v| field(4, v)),
        ],
        0..5,
    )
    .prop_map(|fields| fields.concat());
    prop::collection::vec(
        prop_oneof![
            1 => text_field().prop_map(|f| field(1, f)),
            3 => descriptor.prop_map(|d| field(2, Field::Bytes(d))),
            1 => small_varint().prop_map(|v| field(3, v)),
        ],
        0..6,
    )
    .prop_map(|fields| fields.concat())
}

/// A change to an encoded message: most make it malformed or unusual.
#[derive(Debug, Clone)]
enum Change {
    Flip { at: usize, bits: u8 },
    Truncate { at: usize },
    Insert { at: usize, bytes: Vec<u8> },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, bits)| Change::Flip { at, bits }),
        any::<usize>().prop_map(|at| Change::Truncate { at }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..6))
            .prop_map(|(at, bytes)| Change::Insert { at, bytes }),
    ]
}

fn apply(mut bytes: Vec<u8>, changes: &[Change]) -> Vec<u8> {
    for change in changes {
        let at = |i: usize| i % (bytes.len() + 1);
        match change {
            Change::Flip { at: i, bits } => {
                if !bytes.is_empty() {
                    let i = i % bytes.len();
                    bytes[i] ^= bits;
                }
            }
            Change::Truncate { at: i } => bytes.truncate(at(*i)),
            Change::Insert { at: i, bytes: new } => {
                let i = at(*i);
                bytes.splice(i..i, new.iter().copied());
            }
        }
    }
    bytes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_message_encoded_by_prost_is_read_as_prost_decodes_it(request in request()) {
        let bytes = request.encode_to_vec();
        // A negative unit or a `hits_addend` of 2^63 or more takes a ten-byte varint, which
        // the reader leaves to prost; nothing else that prost encodes is left.
        let ten_byte_varint = request.descriptors.iter().any(|d| {
            d.limit.is_some_and(|l| l.unit < 0) || d.hits_addend.is_some_and(|h| h.value >> 63 == 1)
        });
        match read(&bytes) {
            Some(read) => prop_assert_eq!(read, from_prost(&request)),
            None => prop_assert!(ten_byte_varint, "not read: {request:?}"),
        }
    }

    #[test]
    fn a_changed_message_is_read_only_as_prost_decodes_it(
        request in request(),
        changes in prop::collection::vec(change(), 1..4),
    ) {
        agrees_with_prost(&apply(request.encode_to_vec(), &changes))?;
    }

    #[test]
    fn a_hand_written_message_is_read_only_as_prost_decodes_it(bytes in hand_written_request()) {
        agrees_with_prost(&bytes)?;
    }

    #[test]
    fn any_bytes_are_read_only_as_prost_decodes_them(
        bytes in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        agrees_with_prost(&bytes)?;
    }
}

#[test]
fn what_protobuf_allows_beyond_the_plain_shape_is_left_to_prost() {
    let plain = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".into(),
                value: "v".into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
    .encode_to_vec();
    assert!(read(&plain).is_some());
    let with = |extra: &[u8]| [plain.as_slice(), extra].concat();
    for extra in [
        // an unknown field (number 9, varint)
        &[0x48, 1][..],
        // hits_addend as a ten-byte varint
        &[
            0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
        // domain again, not UTF-8
        &[0x0a, 1, 0xff],
        // a descriptor whose `limit` comes twice (protobuf merges the two)
        &[0x12, 8, 0x12, 2, 0x08, 5, 0x12, 2, 0x10, 1],
        // a descriptor whose `hits_addend` comes twice
        &[0x12, 8, 0x1a, 2, 0x08, 5, 0x1a, 2, 0x08, 6],
        // a two-byte key (field 1 written with a needless continuation byte)
        &[0x8a, 0x00, 1, b'x'],
        // a string claiming more bytes than there are
        &[0x0a, 100, b'x'],
        // the key of field 0
        &[0x02, 0x00],
    ] {
        let bytes = with(extra);
        assert_eq!(read(&bytes), None, "{extra:x?}");
    }
    // A descriptor whose `limit` comes twice: prost merges the two, which the reader left.
    let merged =
        RateLimitRequest::decode(with(&[0x12, 8, 0x12, 2, 0x08, 5, 0x12, 2, 0x10, 1]).as_slice())
            .unwrap();
    let limit = merged.descriptors[1].limit.unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (5, 1));
}

#[test]
fn a_string_sent_twice_keeps_the_last_as_in_protobuf() {
    // domain "a", then domain "b"; an entry whose key comes twice.
    let bytes = [
        0x0a, 1, b'a', 0x0a, 1, b'b', 0x12, 10, 0x0a, 8, 0x0a, 1, b'x', 0x0a, 1, b'y', 0x12, 0,
    ];
    let read = read(&bytes).unwrap();
    assert_eq!(read.domain, "b");
    assert_eq!(read.descriptors[0].entries.as_slice(), [("y", "")]);
    agrees_with_prost(&bytes).unwrap();
}

#[test]
fn a_request_of_many_descriptors_is_left_to_prost() {
    // Each `0x12 0x00` is an empty descriptor.
    let many = |n: usize| [&[0x0a, 1, b'd'][..], &[0x12, 0x00].repeat(n)].concat();
    let bytes = many(IN_PLACE_DESCRIPTORS);
    assert_eq!(
        read(&bytes).unwrap().descriptors.len(),
        IN_PLACE_DESCRIPTORS
    );
    assert_eq!(read(&many(IN_PLACE_DESCRIPTORS + 1)), None);
    assert_eq!(
        RateLimitRequest::decode(many(IN_PLACE_DESCRIPTORS + 1).as_slice())
            .unwrap()
            .descriptors
            .len(),
        IN_PLACE_DESCRIPTORS + 1
    );
}
