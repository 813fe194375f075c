//! A `ShouldRateLimit` answer, and its protobuf: written straight from the service's
//! answer, or as prost's `RateLimitResponse`.
//!
//! The route sends [`WireResponse::encode`]'s bytes. Going through prost instead meant building a
//! `RateLimitResponse` (a vector of statuses, each limit's name copied), measuring it and
//! encoding it: about 1,000 instructions more for a two-descriptor answer than this
//! (`benches/grpc_callgrind.sh`). [`WireResponse::into_proto`] is the same answer as prost's
//! type, for callers in Rust; the tests check that prost encodes it to the same bytes.

use bytes::BufMut;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use prost::Message;

use super::metadata::to_struct;
use super::wire::{LENGTH_DELIMITED, VARINT};
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::rules::Unit;
use crate::service::{self, CurrentLimit};

/// Bytes of an answer written on the stack: a two-descriptor answer is about 40; one with
/// long names or headers may go on in [`Writer::heap`].
const STACK: usize = 256;

/// The answer to one `ShouldRateLimit`: the service's, and the headers Envoy is asked to
/// add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireResponse {
    /// What the service decided.
    pub(super) answer: service::Answer,
    /// `response_headers_to_add`.
    pub(super) headers: Vec<HeaderValue>,
}

impl WireResponse {
    /// The answer as prost's `RateLimitResponse`.
    pub fn into_proto(self) -> RateLimitResponse {
        RateLimitResponse {
            overall_code: overall_code(&self.answer),
            statuses: self
                .answer
                .statuses
                .into_iter()
                .map(status_to_proto)
                .collect(),
            response_headers_to_add: self.headers,
            dynamic_metadata: self.answer.dynamic_metadata.as_deref().map(to_struct),
            ..RateLimitResponse::default()
        }
    }

    /// Writes the `RateLimitResponse`, each message's fields in the order of their numbers, as
    /// prost writes them.
    pub fn encode(&self, out: &mut impl BufMut) {
        // Written on the stack, then copied at once: `BufMut` checks its room and may grow at
        // every byte, which cost more than the encoding itself.
        let mut writer = Writer {
            stack: [0; STACK],
            len: 0,
            heap: Vec::new(),
        };
        self.write(&mut writer);
        out.put_slice(&writer.stack[..writer.len]);
        out.put_slice(&writer.heap);
    }

    fn write(&self, out: &mut Writer) {
        put_field(out, 1, u64::from(overall_code(&self.answer) as u32));
        for status in &self.answer.statuses {
            put_length_delimited(out, 2, status_len(status));
            put_status(out, status);
        }
        for header in &self.headers {
            put_length_delimited(out, 3, header_len(header));
            put_bytes_field(out, 1, header.key.as_bytes());
            put_bytes_field(out, 2, header.value.as_bytes());
            put_bytes_field(out, 3, &header.raw_value);
        }
        if let Some(metadata) = &self.answer.dynamic_metadata {
            // Off the common path (--response-dynamic-metadata): prost writes the Struct.
            let bytes = to_struct(metadata).encode_to_vec();
            put_length_delimited(out, 6, bytes.len());
            out.extend_from_slice(&bytes);
        }
    }
}

/// `overall_code` of `response`.
fn overall_code(response: &service::Answer) -> i32 {
    code(response.over_limit)
}

/// A descriptor's or the request's code.
fn code(over_limit: bool) -> i32 {
    if over_limit {
        Code::OverLimit as i32
    } else {
        Code::Ok as i32
    }
}

fn status_to_proto(status: service::DescriptorStatus) -> DescriptorStatus {
    DescriptorStatus {
        code: code(status.over_limit),
        current_limit: status.current_limit.map(|l| RateLimit {
            name: l.name,
            requests_per_unit: l.requests_per_unit,
            unit: unit_to_proto(l.unit) as i32,
        }),
        limit_remaining: status.remaining,
        duration_until_reset: status.reset.map(|ns| PbDuration {
            seconds: seconds(ns) as i64,
            nanos: nanos(ns) as i32,
        }),
        ..DescriptorStatus::default()
    }
}

/// Whole seconds of a duration until the reset.
fn seconds(reset: Nanos) -> u64 {
    reset / NANOS_PER_SEC
}

/// The nanoseconds past [`seconds`]: below 10^9, so an `int32` that is never negative.
fn nanos(reset: Nanos) -> u64 {
    reset % NANOS_PER_SEC
}

fn unit_to_proto(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

/// Bytes of a `DescriptorStatus`'s fields.
fn status_len(status: &service::DescriptorStatus) -> usize {
    field_len(u64::from(code(status.over_limit) as u32))
        + status
            .current_limit
            .as_ref()
            .map_or(0, |l| message_len(limit_len(l)))
        + field_len(u64::from(status.remaining))
        + status.reset.map_or(0, |r| message_len(duration_len(r)))
}

fn put_status(out: &mut Writer, status: &service::DescriptorStatus) {
    put_field(out, 1, u64::from(code(status.over_limit) as u32));
    if let Some(limit) = &status.current_limit {
        put_length_delimited(out, 2, limit_len(limit));
        put_field(out, 1, u64::from(limit.requests_per_unit));
        put_field(out, 2, unit_to_proto(limit.unit) as u64);
        put_bytes_field(out, 3, limit.name.as_bytes());
    }
    put_field(out, 3, u64::from(status.remaining));
    if let Some(reset) = status.reset {
        put_length_delimited(out, 4, duration_len(reset));
        put_field(out, 1, seconds(reset));
        put_field(out, 2, nanos(reset));
    }
}

/// Bytes of a `RateLimit`'s fields.
fn limit_len(limit: &CurrentLimit) -> usize {
    bytes_field_len(limit.name.len())
        + field_len(u64::from(limit.requests_per_unit))
        + field_len(unit_to_proto(limit.unit) as u64)
}

/// Bytes of a `google.protobuf.Duration`'s fields.
fn duration_len(reset: Nanos) -> usize {
    field_len(seconds(reset)) + field_len(nanos(reset))
}

/// Bytes of a `HeaderValue`'s fields.
fn header_len(header: &HeaderValue) -> usize {
    bytes_field_len(header.key.len())
        + bytes_field_len(header.value.len())
        + bytes_field_len(header.raw_value.len())
}

/// Bytes of a varint.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes of a sub-message field of `len` bytes (our field numbers take one-byte keys).
fn message_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// Bytes of a varint field: nothing for 0, which protobuf 3 leaves out.
fn field_len(value: u64) -> usize {
    if value == 0 { 0 } else { 1 + varint_len(value) }
}

/// Bytes of a string or bytes field of `len` bytes: nothing when empty.
fn bytes_field_len(len: usize) -> usize {
    if len == 0 { 0 } else { message_len(len) }
}

/// An answer being written: its first [`STACK`] bytes, then the rest.
struct Writer {
    /// The first bytes.
    stack: [u8; STACK],
    /// Bytes written in `stack`.
    len: usize,
    /// Bytes beyond the first [`STACK`].
    heap: Vec<u8>,
}

impl Writer {
    #[inline(always)]
    fn push(&mut self, byte: u8) {
        if self.len < STACK {
            self.stack[self.len] = byte;
            self.len += 1;
        } else {
            self.heap.push(byte);
        }
    }

    #[inline(always)]
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        let fits = bytes.len().min(STACK - self.len);
        self.stack[self.len..self.len + fits].copy_from_slice(&bytes[..fits]);
        self.len += fits;
        self.heap.extend_from_slice(&bytes[fits..]);
    }
}

#[inline(always)]
fn put_key(out: &mut Writer, number: u8, wire_type: u8) {
    out.push(number << 3 | wire_type);
}

#[inline(always)]
fn put_varint(out: &mut Writer, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The key and length of a string, bytes or sub-message field of `len` bytes.
#[inline(always)]
fn put_length_delimited(out: &mut Writer, number: u8, len: usize) {
    put_key(out, number, LENGTH_DELIMITED);
    put_varint(out, len as u64);
}

/// A varint field, left out when 0.
#[inline(always)]
fn put_field(out: &mut Writer, number: u8, value: u64) {
    if value != 0 {
        put_key(out, number, VARINT);
        put_varint(out, value);
    }
}

/// A string or bytes field, left out when empty.
#[inline(always)]
fn put_bytes_field(out: &mut Writer, number: u8, bytes: &[u8]) {
    if !bytes.is_empty() {
        put_length_delimited(out, number, bytes.len());
        out.extend_from_slice(bytes);
    }
}

#[cfg(test)]
mod tests;
