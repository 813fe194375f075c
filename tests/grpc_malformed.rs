//! Issue 9, defect 8: a `ShouldRateLimit` whose message is not valid protobuf was answered
//! `INTERNAL` (tonic's prost codec); docs/configuration.md promises `INVALID_ARGUMENT`. The bytes go
//! in a well-formed gRPC frame, so only the protobuf inside is wrong.

mod support;

use bytes::{Buf, BufMut};
use meshlimit::rules::Algorithm;
use support::TestServer;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Sends raw bytes as the message and reads the answer as raw bytes.
#[derive(Debug, Default, Clone)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }
    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        Ok(Some(bytes.to_vec()))
    }
}

/// One `ShouldRateLimit` call whose message is `payload`, as it is.
async fn raw_call(channel: Channel, payload: Vec<u8>) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("channel ready");
    let path = http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    grpc.unary(tonic::Request::new(payload), path, RawCodec)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn malformed_protobuf_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("d.yaml"),
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n",
    )
    .unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    let channel = Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .expect("connect");

    let junk: [&[u8]; 4] = [
        // field 1 (domain) as length-delimited, claiming 100 bytes that are not there
        &[0x0a, 100, b'x'],
        // a varint that never ends
        &[
            0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
        // wire type 7 does not exist
        &[0x0f],
        // field number 0 is invalid
        &[0x02, 0x00],
    ];
    for bytes in junk {
        let status = raw_call(channel.clone(), bytes.to_vec())
            .await
            .expect_err("junk must be refused");
        assert_eq!(
            status.code(),
            Code::InvalidArgument,
            "{bytes:?} answered {status:?}"
        );
    }

    // A valid message on the same path is still answered.
    let valid = prost::Message::encode_to_vec(&support::rls_request("d", &[&[("k", "v")]]));
    let answer = raw_call(channel.clone(), valid)
        .await
        .expect("valid request");
    let answer: envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse =
        prost::Message::decode(answer.as_slice()).expect("a response");
    assert_eq!(answer.statuses[0].limit_remaining, 4);
    server.stop().await;
}
