//! Protobuf codec for `ShouldRateLimit` that answers malformed messages with
//! `INVALID_ARGUMENT`.
//!
//! tonic's prost codec reports a message that does not parse as `INTERNAL` (following
//! grpc's status-code guide, which reserves `INVALID_ARGUMENT` for the application). For
//! a rate-limit service the bytes *are* the argument: a client sending junk made a
//! mistake that retrying cannot fix, and `INTERNAL` would page the operator for it. This
//! codec is tonic's own, with only the decoder's errors mapped.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::{Code, Status};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// tonic's prost codec, except that a request that is not valid protobuf is answered
/// `INVALID_ARGUMENT` instead of `INTERNAL`.
#[derive(Debug)]
pub(crate) struct StrictCodec<T, U>(
    /// The types only: `T` is encoded (responses), `U` decoded (requests).
    PhantomData<(T, U)>,
);

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(ProstDecoder::new(BufferSettings::default()))
    }
}

/// The prost decoder with its parse errors turned into `INVALID_ARGUMENT`.
#[derive(Debug)]
pub(crate) struct StrictDecoder<U>(
    /// tonic's prost decoder, which does the parsing.
    ProstDecoder<U>,
);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0.decode(src).map_err(|status| {
            // The prost decoder has one error: the bytes are not a valid message.
            if status.code() == Code::Internal {
                Status::invalid_argument(format!("malformed request: {}", status.message()))
            } else {
                status
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
