//! The codec of `ShouldRateLimit`: answers written by [`WireResponse::encode`], requests handed
//! over as their bytes.
//!
//! The request is parsed by the method itself ([`super::Rls::should_rate_limit_traced`]): most
//! are read in place, borrowing their strings from these bytes, and the rest decoded by
//! prost there. A message that does not parse is answered `INVALID_ARGUMENT` by the method,
//! where tonic's prost codec would answer `INTERNAL` (following grpc's status-code guide,
//! which reserves `INVALID_ARGUMENT` for the application): for a rate-limit service the
//! bytes *are* the argument, and a client sending junk made a mistake that retrying cannot
//! fix.

use bytes::{Buf, Bytes};
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use super::WireResponse;

/// Encodes [`WireResponse`]s; decodes each message to its bytes.
#[derive(Debug, Default)]
pub(crate) struct ShouldRateLimitCodec;

impl Codec for ShouldRateLimitCodec {
    type Encode = WireResponse;
    type Decode = Bytes;
    type Encoder = AnswerEncoder;
    type Decoder = MessageBytes;

    fn encoder(&mut self) -> Self::Encoder {
        AnswerEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageBytes
    }
}

/// Writes an [`WireResponse`] as a `RateLimitResponse`.
#[derive(Debug)]
pub(crate) struct AnswerEncoder;

impl Encoder for AnswerEncoder {
    type Item = WireResponse;
    type Error = Status;

    fn encode(&mut self, answer: WireResponse, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        answer.encode(dst);
        Ok(())
    }
}

/// A message's bytes, taken from tonic's buffer without a copy.
#[derive(Debug)]
pub(crate) struct MessageBytes;

impl Decoder for MessageBytes {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
