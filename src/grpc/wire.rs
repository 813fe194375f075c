//! A `RateLimitRequest` read in place from its protobuf bytes, for the requests Envoy sends.
//!
//! prost decodes a request into owned strings: one allocation and copy per domain, key and
//! value, then as many frees. For a gateway's two-descriptor request that was about 5,500
//! instructions a request, more than matching and deciding it (`benches/grpc_callgrind.sh`).
//! This reader borrows every string from the message instead, and checks only that it is
//! UTF-8.
//!
//! It reads the message as Envoy and every protobuf library write it: each field this
//! service knows, with its own wire type, one-byte keys, varints shorter than ten bytes,
//! `limit` and `hits_addend` at most once per descriptor, at most 64 descriptors. Whatever
//! else a message holds (unknown fields, a sub-message sent twice, which protobuf merges,
//! groups, truncation, bad UTF-8, more descriptors) makes [`read`] return `None`, and the
//! caller decodes it with prost. So the outcome of a message is always prost's, and a
//! malformed one is worded by prost; this reader only takes a shortcut where the answer is
//! plain (the `wire` tests and the `request_bytes` fuzz target compare the two).

use smallvec::SmallVec;

use crate::request::{Override, Request, RequestDescriptor};

/// Wire type of varints (read here, written by `response.rs`).
pub(super) const VARINT: u8 = 0;
/// Wire type of strings and sub-messages.
pub(super) const LENGTH_DELIMITED: u8 = 2;

/// Descriptors read in place at most; a request with more is left to prost. A descriptor
/// read in place takes about 180 bytes, where prost's takes about 70, and an empty one is
/// two bytes of the message: without this bound, a 4 MB message of empty descriptors would
/// take about 350 MB here (150 MB with prost) before the service refused it for its
/// `--max-descriptors` (64 by default).
const IN_PLACE_DESCRIPTORS: usize = crate::defaults::MAX_DESCRIPTORS;

/// A request as read in place: what the service needs of a `RateLimitRequest`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct WireRequest<'a> {
    /// `domain`.
    pub(crate) domain: &'a str,
    /// `descriptors`, in order.
    pub(crate) descriptors: SmallVec<[WireDescriptor<'a>; 4]>,
    /// `hits_addend` (0 when absent, as in protobuf).
    pub(crate) hits_addend: u32,
}

impl<'a> WireRequest<'a> {
    /// The request, as the service reads it.
    pub(crate) fn as_request(&self) -> Request<'_, WireDescriptor<'a>> {
        Request::new(self.domain, &self.descriptors, self.hits_addend)
    }
}

/// A `RateLimitDescriptor` as read in place.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct WireDescriptor<'a> {
    /// `entries` as (key, value), in order.
    entries: SmallVec<[(&'a str, &'a str); 4]>,
    /// `limit`: requests per unit, and the unit's number.
    limit: Option<(u32, i32)>,
    /// `hits_addend.value`, when `hits_addend` is present.
    hits_addend: Option<u64>,
    /// `is_negative_hits`.
    pub(crate) is_negative_hits: bool,
}

impl RequestDescriptor for WireDescriptor<'_> {
    fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().copied()
    }

    fn limit_override(&self) -> Option<Override> {
        self.limit.map(|(requests_per_unit, unit)| Override {
            requests_per_unit,
            unit: super::unit_from_proto(unit),
        })
    }

    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }

    fn is_negative_hits(&self) -> bool {
        self.is_negative_hits
    }
}

/// Reads `message` into `request` (empty before), or returns `None` when it is not in the
/// plain shape this reader takes (see the module's comment): then prost must decode it, and
/// `request` is left half-filled. Filled in place, not returned: a request is several
/// hundred bytes to move.
pub(crate) fn read<'a>(message: &'a [u8], request: &mut WireRequest<'a>) -> Option<()> {
    let mut reader = Reader::new(message);
    while let Some(field) = reader.field()? {
        match field {
            (1, LENGTH_DELIMITED) => request.domain = reader.str()?,
            (2, LENGTH_DELIMITED) if request.descriptors.len() < IN_PLACE_DESCRIPTORS => {
                request.descriptors.push(WireDescriptor::default());
                let last = request.descriptors.last_mut()?;
                descriptor(reader.message()?, last)?;
            }
            // uint32, which protobuf truncates from the varint.
            (3, VARINT) => request.hits_addend = reader.varint()? as u32,
            _ => return None,
        }
    }
    Some(())
}

/// One `RateLimitDescriptor`, into `descriptor`.
fn descriptor<'a>(mut reader: Reader<'a>, descriptor: &mut WireDescriptor<'a>) -> Option<()> {
    while let Some(field) = reader.field()? {
        match field {
            (1, LENGTH_DELIMITED) => descriptor.entries.push(entry(reader.message()?)?),
            // A second `limit` or `hits_addend` is merged into the first by protobuf's rules:
            // left to prost.
            (2, LENGTH_DELIMITED) if descriptor.limit.is_none() => {
                descriptor.limit = Some(limit_override(reader.message()?)?);
            }
            (3, LENGTH_DELIMITED) if descriptor.hits_addend.is_none() => {
                descriptor.hits_addend = Some(uint64_value(reader.message()?)?);
            }
            (4, VARINT) => descriptor.is_negative_hits = reader.varint()? != 0,
            _ => return None,
        }
    }
    Some(())
}

/// One `RateLimitDescriptor.Entry`: (key, value).
fn entry(mut reader: Reader<'_>) -> Option<(&str, &str)> {
    let (mut key, mut value) = ("", "");
    while let Some(field) = reader.field()? {
        match field {
            (1, LENGTH_DELIMITED) => key = reader.str()?,
            (2, LENGTH_DELIMITED) => value = reader.str()?,
            _ => return None,
        }
    }
    Some((key, value))
}

/// One `RateLimitOverride`: (requests_per_unit, unit).
fn limit_override(mut reader: Reader<'_>) -> Option<(u32, i32)> {
    let (mut requests_per_unit, mut unit) = (0, 0);
    while let Some(field) = reader.field()? {
        match field {
            (1, VARINT) => requests_per_unit = reader.varint()? as u32,
            // An enum: int32, truncated from the varint as protobuf does.
            (2, VARINT) => unit = reader.varint()? as i32,
            _ => return None,
        }
    }
    Some((requests_per_unit, unit))
}

/// One `google.protobuf.UInt64Value`.
fn uint64_value(mut reader: Reader<'_>) -> Option<u64> {
    let mut value = 0;
    while let Some(field) = reader.field()? {
        match field {
            (1, VARINT) => value = reader.varint()?,
            _ => return None,
        }
    }
    Some(value)
}

/// The part of a message not read yet (`at..end` of the whole request). Every method
/// returns `None` for what this reader leaves to prost.
#[derive(Clone, Copy)]
struct Reader<'a> {
    /// The whole request.
    bytes: &'a [u8],
    /// The whole request as text, when it is UTF-8 (as a request of short ASCII strings
    /// is, lengths and keys included): then each string is a slice of it, which costs a
    /// check of its two ends instead of a validation of each string.
    text: Option<&'a str>,
    /// The next byte to read.
    at: usize,
    /// The end of the message being read.
    end: usize,
}

impl<'a> Reader<'a> {
    /// A reader of the whole request `bytes`.
    fn new(bytes: &'a [u8]) -> Self {
        Reader {
            bytes,
            text: std::str::from_utf8(bytes).ok(),
            at: 0,
            end: bytes.len(),
        }
    }

    /// The next field's (number, wire type); `Some(None)` at the end of the message.
    /// Only one-byte keys (field numbers up to 15), which are all this service's fields.
    #[inline(always)]
    fn field(&mut self) -> Option<Option<(u8, u8)>> {
        if self.at == self.end {
            return Some(None);
        }
        let key = self.bytes[self.at];
        if key >= 0x80 {
            return None;
        }
        self.at += 1;
        Some(Some((key >> 3, key & 7)))
    }

    /// A varint of at most nine bytes (63 bits: no ambiguity about a tenth byte's bits).
    #[inline(always)]
    fn varint(&mut self) -> Option<u64> {
        let rest = &self.bytes[self.at..self.end];
        // Nearly every varint here (keys' lengths, small numbers) is one byte.
        if let Some(&byte) = rest.first()
            && byte < 0x80
        {
            self.at += 1;
            return Some(u64::from(byte));
        }
        let mut value = 0u64;
        for (i, &byte) in rest.iter().take(9).enumerate() {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte < 0x80 {
                self.at += i + 1;
                return Some(value);
            }
        }
        None
    }

    /// A length-delimited field's place in the request.
    #[inline(always)]
    fn length_delimited(&mut self) -> Option<std::ops::Range<usize>> {
        let len = usize::try_from(self.varint()?).ok()?;
        if len > self.end - self.at {
            return None;
        }
        let start = self.at;
        self.at += len;
        Some(start..self.at)
    }

    /// A sub-message field: a reader of its bytes.
    #[inline]
    fn message(&mut self) -> Option<Reader<'a>> {
        let range = self.length_delimited()?;
        Some(Reader {
            at: range.start,
            end: range.end,
            ..*self
        })
    }

    /// A string field.
    #[inline(always)]
    fn str(&mut self) -> Option<&'a str> {
        let range = self.length_delimited()?;
        // A slice of UTF-8 text that starts and ends between characters is UTF-8.
        match self.text.and_then(|text| text.get(range.clone())) {
            Some(text) => Some(text),
            None => std::str::from_utf8(&self.bytes[range]).ok(),
        }
    }
}

#[cfg(test)]
mod tests;
