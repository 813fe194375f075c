//! A `ShouldRateLimit` call in its common shape answered without tonic's streaming
//! machinery: the request's body is one DATA frame holding one uncompressed message, and
//! the stream ends there. Envoy's requests, and h2load's, all have that shape.
//!
//! tonic's `Grpc::unary` decodes any request through a streaming decoder (copying the
//! message into a buffer of its own), reads on to the end of the stream for trailers,
//! builds a `tonic::Request` and then an `http::Response` through metadata maps, and
//! encodes the answer through a streaming encoder: about 5,800 instructions of a
//! `two.grpc` request that costs 54,000 in all (`benches/grpc_callgrind.sh`, callgrind's
//! inclusive counts). Here the message is the frame's own bytes, and the answer is written
//! once, with its gRPC prefix, into the response's one DATA frame, followed by the
//! `grpc-status: 0` trailer: what tonic sends for the same answer.
//!
//! Any other shape (a message over several frames, a compressed one, more than one
//! message, trailers, a body error, `grpc-encoding`) goes to tonic's `Grpc::unary` with the
//! frame already read put back in front, so that every edge case is answered exactly as
//! tonic answers it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use crossbeam_utils::CachePadded;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use http_body::{Body as HttpBody, Frame};
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::server::{Grpc, UnaryService};

use super::codec::ShouldRateLimitCodec;
use super::{Rls, WireResponse};
use crate::net::Caller;
use crate::traces::{RequestSpan, SHOULD_RATE_LIMIT_SPAN};

/// The gRPC message prefix: a compressed flag, then the length as 4 big-endian bytes.
const PREFIX: usize = 5;

/// The largest message taken here: tonic's default limit for decoding, so that a larger
/// one gets tonic's answer.
const MAX_MESSAGE: usize = 4 * 1024 * 1024;

/// Answers `request`, a call of `ShouldRateLimit`, with `rls`.
pub(super) async fn answer<B>(rls: Arc<CachePadded<Rls>>, request: Request<B>) -> Response<Body>
where
    B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + Unpin,
{
    // Tracing off: this one test of the handle.
    let span = match &rls.traces {
        None => None,
        Some(traces) => traces.server_span(request.headers(), SHOULD_RATE_LIMIT_SPAN),
    };
    if request.headers().contains_key(GRPC_ENCODING) {
        return through_tonic(rls, request, span).await;
    }
    let (parts, mut body) = request.into_parts();
    let (first, message) = first_frame(&mut body).await;
    let Some(message) = message else {
        let body = Prepended { first, rest: body };
        return through_tonic(rls, Request::from_parts(parts, body), span).await;
    };
    let caller = parts.extensions.get::<Caller>();
    match rls
        .should_rate_limit_traced(message, span.as_ref(), caller)
        .await
    {
        Ok(answer) => one_message_response(|bytes| answer.encode(bytes)),
        Err(status) => status.into_http(),
    }
}

/// A successful unary answer as tonic sends it: `content-type: application/grpc`, one DATA
/// frame holding the message `write` writes (with its gRPC prefix), then `grpc-status: 0`.
pub fn one_message_response(write: impl FnOnce(&mut BytesMut)) -> Response<Body> {
    let mut bytes = BytesMut::with_capacity(128);
    bytes.put_bytes(0, PREFIX);
    write(&mut bytes);
    let length = u32::try_from(bytes.len() - PREFIX).unwrap_or(u32::MAX);
    bytes[1..PREFIX].copy_from_slice(&length.to_be_bytes());
    let mut response = Response::new(Body::new(OneMessage {
        data: Some(bytes.freeze()),
        done: false,
    }));
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, GRPC_CONTENT_TYPE);
    response
}

/// The header naming a request's compression; any value, even `identity`, leaves the call
/// to tonic. A constant, so that no request parses the name.
const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

/// The trailer with a call's status code.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// `content-type` of a gRPC response, as tonic writes it.
const GRPC_CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc");

/// The first frame of a call's `body` (or its error, or `None` at its end), and the
/// message in it when the frame is the body's last and holds exactly one uncompressed gRPC
/// message no larger than tonic takes: the common shape, the message's bytes shared with
/// the frame.
pub async fn first_frame<B>(body: &mut B) -> (Option<Result<Frame<Bytes>, B::Error>>, Option<Bytes>)
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    let first = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
    let message = match &first {
        Some(Ok(frame)) if body.is_end_stream() => frame.data_ref().and_then(one_message),
        _ => None,
    };
    (first, message)
}

/// The message in `data` when `data` is exactly one uncompressed gRPC message no larger
/// than tonic takes: its bytes, shared with the frame.
fn one_message(data: &Bytes) -> Option<Bytes> {
    let (&compressed, rest) = data.split_first()?;
    let length: [u8; 4] = rest.get(..4)?.try_into().ok()?;
    let length = u32::from_be_bytes(length) as usize;
    (compressed == 0 && length <= MAX_MESSAGE && data.len() == PREFIX + length)
        .then(|| data.slice(PREFIX..))
}

/// The call as tonic makes it, for every shape [`answer`] does not take, traced in `span`
/// when sampled.
async fn through_tonic<B>(
    rls: Arc<CachePadded<Rls>>,
    request: Request<B>,
    span: Option<RequestSpan>,
) -> Response<Body>
where
    B: HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    let mut grpc = Grpc::new(ShouldRateLimitCodec);
    grpc.unary(ShouldRateLimit(Some(rls), span), request).await
}

/// The unary method, as tonic's `Grpc` calls it: once per request.
struct ShouldRateLimit(
    /// The server's `Rls`, moved into the call's future: one count taken a request (tonic's
    /// generated servers take two).
    Option<Arc<CachePadded<Rls>>>,
    /// The call's span, when it is sampled; moved into the call's future.
    Option<RequestSpan>,
);

impl UnaryService<Bytes> for ShouldRateLimit {
    type Response = WireResponse;
    type Future = BoxFuture<tonic::Response<WireResponse>, Status>;

    fn call(&mut self, request: tonic::Request<Bytes>) -> Self::Future {
        let (rls, span) = (self.0.take(), self.1.take());
        Box::pin(async move {
            // `Grpc::unary` calls the method it was given once and drops it.
            let rls = rls.ok_or_else(|| Status::internal("ShouldRateLimit called twice"))?;
            let caller = request.extensions().get::<Caller>().cloned();
            rls.should_rate_limit_traced(request.into_inner(), span.as_ref(), caller.as_ref())
                .await
                .map(tonic::Response::new)
        })
    }
}

/// A request body with its first frame (already read) put back in front.
struct Prepended<B: HttpBody> {
    /// The first frame, its error, or the end of the body; taken by the first poll.
    first: Option<Result<Frame<B::Data>, B::Error>>,
    /// The rest of the body.
    rest: B,
}

impl<B> HttpBody for Prepended<B>
where
    B: HttpBody + Unpin,
    B::Data: Unpin,
    B::Error: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        match self.first.take() {
            Some(first) => Poll::Ready(Some(first)),
            None => Pin::new(&mut self.rest).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.rest.is_end_stream()
    }
}

/// A response body of one DATA frame, then the `grpc-status: 0` trailer. Its size is not
/// told (as tonic's body does not tell it), so no `content-length` is sent.
struct OneMessage {
    /// The frame's bytes, until sent.
    data: Option<Bytes>,
    /// The trailer was sent.
    done: bool,
}

impl HttpBody for OneMessage {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Some(data) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(data))));
        }
        if self.done {
            return Poll::Ready(None);
        }
        self.done = true;
        let mut trailers = HeaderMap::with_capacity(1);
        trailers.insert(GRPC_STATUS, HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::path::PathBuf;

    use arc_swap::ArcSwap;

    use super::*;
    use crate::clock::{Clock, ManualClock};
    use crate::config::Config;
    use crate::rules::Algorithm;
    use crate::service::Service;
    use crate::store::MemoryStore;
    use crate::store::Store;

    /// `RateLimitRequest{domain: "t", descriptors: [{entries: [{key: "k", value: "v"}]}]}`.
    const REQUEST: &[u8] = b"\x0a\x01t\x12\x08\x0a\x06\x0a\x01k\x12\x01v";

    /// A service with one limit of two a year on `k`, at a fixed time.
    fn rls() -> Arc<CachePadded<Rls>> {
        let yaml = "domain: t\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 2}\n";
        let config = Config::from_sources(&[(PathBuf::from("t.yaml"), yaml.to_string())])
            .expect("valid config");
        let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(1_767_225_600_000_000_000));
        let store = Store::Memory(MemoryStore::new(100, clock.clone()));
        let service = Service::new(
            Arc::new(ArcSwap::from_pointee(config)),
            store,
            clock,
            Algorithm::TokenBucket,
        );
        Arc::new(CachePadded::new(Rls::new(service)))
    }

    /// A request body of the given frames, then its end.
    struct Frames(VecDeque<Result<Frame<Bytes>, std::io::Error>>);

    impl HttpBody for Frames {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            Poll::Ready(self.0.pop_front())
        }

        fn is_end_stream(&self) -> bool {
            self.0.is_empty()
        }
    }

    fn prefixed(compressed: u8, message: &[u8]) -> Vec<u8> {
        let mut bytes = vec![compressed];
        bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
        bytes.extend_from_slice(message);
        bytes
    }

    /// Request headers, by name.
    type Headers = Vec<(&'static str, &'static str)>;

    /// A request with `headers` whose body is `chunks`, each a DATA frame.
    fn request(headers: &[(&'static str, &'static str)], chunks: &[&[u8]]) -> Request<Frames> {
        let frames = chunks
            .iter()
            .map(|c| Ok(Frame::data(Bytes::copy_from_slice(c))))
            .collect();
        let mut request = Request::new(Frames(frames));
        *request.uri_mut() = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
            .parse()
            .unwrap();
        for (name, value) in headers {
            request
                .headers_mut()
                .insert(*name, HeaderValue::from_static(value));
        }
        request
    }

    /// Everything a client sees of `response`: status, headers, the body's bytes, trailers.
    async fn seen(response: Response<Body>) -> (http::StatusCode, HeaderMap, Vec<u8>, HeaderMap) {
        let (parts, mut body) = response.into_parts();
        let (mut data, mut trailers) = (Vec::new(), HeaderMap::new());
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.expect("a frame");
            if let Some(bytes) = frame.data_ref() {
                data.extend_from_slice(bytes);
            } else if let Ok(t) = frame.into_trailers() {
                trailers.extend(t);
            }
        }
        (parts.status, parts.headers, data, trailers)
    }

    /// The answers to three identical requests, on a fresh service: OK, OK, OVER_LIMIT.
    async fn three_answers(
        answer_with: impl AsyncFn(Arc<CachePadded<Rls>>, Request<Frames>) -> Response<Body>,
        make: impl Fn() -> Request<Frames>,
    ) -> Vec<(http::StatusCode, HeaderMap, Vec<u8>, HeaderMap)> {
        let rls = rls();
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(seen(answer_with(rls.clone(), make()).await).await);
        }
        answers
    }

    /// [`through_tonic`] without a span.
    async fn untraced_tonic(
        rls: Arc<CachePadded<Rls>>,
        request: Request<Frames>,
    ) -> Response<Body> {
        through_tonic(rls, request, None).await
    }

    #[tokio::test]
    async fn the_common_shape_is_answered_as_tonic_answers_it() {
        let frame = prefixed(0, REQUEST);
        let one = || request(&[], &[&frame]);
        let ours = three_answers(answer, one).await;
        let tonics = three_answers(untraced_tonic, one).await;
        assert_eq!(ours, tonics);
        let (status, headers, data, trailers) = &ours[2];
        assert_eq!(*status, http::StatusCode::OK);
        assert_eq!(headers["content-type"], "application/grpc");
        assert_eq!(trailers["grpc-status"], "0");
        assert_ne!(
            data, &ours[0].2,
            "the third is over the limit, the first is not"
        );
    }

    #[tokio::test]
    async fn every_other_shape_gets_tonics_answer() {
        let frame = prefixed(0, REQUEST);
        let (head, tail) = frame.split_at(7);
        let fast = three_answers(answer, || request(&[], &[&frame])).await;
        // The same message over two frames, or with the end of the stream in a frame of
        // its own: the same answers as in one frame.
        let split = three_answers(answer, || request(&[], &[head, tail])).await;
        assert_eq!(split, fast);
        let ended_late = three_answers(answer, || request(&[], &[&frame, b""])).await;
        assert_eq!(ended_late, fast);

        let compressed = prefixed(1, REQUEST);
        let two_messages = [frame.clone(), frame.clone()].concat();
        let too_short = &frame[..frame.len() - 1];
        let shapes: Vec<(Headers, Vec<&[u8]>)> = vec![
            (vec![], vec![]),
            (vec![], vec![b""]),
            (vec![], vec![&compressed]),
            (vec![], vec![&two_messages]),
            (vec![], vec![too_short]),
            (vec![], vec![&frame[..3]]),
            (vec![("grpc-encoding", "gzip")], vec![&frame]),
        ];
        for (headers, chunks) in shapes {
            let make = || request(&headers, &chunks);
            let ours = three_answers(answer, make).await;
            let tonics = three_answers(untraced_tonic, make).await;
            assert_eq!(ours, tonics, "{headers:?} {chunks:?}");
        }
    }

    #[tokio::test]
    async fn a_call_through_tonic_is_traced_as_one_in_the_common_shape() {
        let (traces, ended, _provider) = crate::traces::recording::traces(1.0);
        let rls = Arc::new(CachePadded::new(
            CachePadded::into_inner(Arc::into_inner(rls()).unwrap()).with_traces(Some(traces)),
        ));
        let frame = prefixed(0, REQUEST);
        let (head, tail) = frame.split_at(7);
        // The common shape, then the same message over two frames (through tonic).
        for chunks in [vec![&frame[..]], vec![head, tail]] {
            let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let (status, _, _, trailers) =
                seen(answer(rls.clone(), request(&[("traceparent", parent)], &chunks)).await).await;
            assert_eq!(status, http::StatusCode::OK);
            assert_eq!(trailers["grpc-status"], "0");
        }
        let ended = ended.lock().unwrap();
        assert_eq!(ended.len(), 2, "{ended:?}");
        for span in ended.iter() {
            assert_eq!(span.name, crate::traces::SHOULD_RATE_LIMIT_SPAN);
            let domain = span
                .attributes
                .iter()
                .find(|kv| kv.key.as_str() == "domain");
            assert_eq!(domain.map(|kv| kv.value.to_string()).as_deref(), Some("t"));
        }
    }

    #[tokio::test]
    async fn a_body_error_gets_tonics_answer() {
        let failing = || {
            let mut request = request(&[], &[]);
            request
                .body_mut()
                .0
                .push_back(Err(std::io::Error::other("reset")));
            request
        };
        assert_eq!(
            three_answers(answer, failing).await,
            three_answers(untraced_tonic, failing).await
        );
    }

    #[test]
    fn one_message_is_exactly_one_uncompressed_message() {
        let frame = Bytes::from(prefixed(0, REQUEST));
        assert_eq!(one_message(&frame).as_deref(), Some(REQUEST));
        assert_eq!(
            one_message(&Bytes::from(prefixed(0, b""))).as_deref(),
            Some(&b""[..])
        );
        assert_eq!(one_message(&Bytes::from(prefixed(1, REQUEST))), None);
        assert_eq!(one_message(&frame.slice(..frame.len() - 1)), None);
        assert_eq!(one_message(&Bytes::from([&frame[..], b"x"].concat())), None);
        assert_eq!(one_message(&frame.slice(..4)), None);
        assert_eq!(one_message(&Bytes::new()), None);
        let mut huge = vec![0u8];
        huge.extend_from_slice(&(MAX_MESSAGE as u32 + 1).to_be_bytes());
        assert_eq!(one_message(&Bytes::from(huge)), None);
    }
}
