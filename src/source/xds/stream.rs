//! One ADS stream (state of the world): the subscription, then an ACK or NACK for each
//! response, as Envoy sends them.
//!
//! - Subscription: `DiscoveryRequest{node, type_url}`, with `version_info` the last
//!   ACKed version when reconnecting (empty on the first connection), so that the
//!   server can tell what meshlimit holds.
//! - ACK: `version_info` and `response_nonce` of the response.
//! - NACK: `version_info` the last ACKed version, `response_nonce` the response's, and
//!   `error_detail` a `google.rpc.Status` with code 3 (INVALID_ARGUMENT) and the errors
//!   as `meshlimit validate` prints them.

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::google::rpc::Status;
use tokio::sync::mpsc;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};

use super::channel::{connect, error_chain};
use super::{TYPE_URL, XdsOptions};

/// gRPC's INVALID_ARGUMENT, the code of a NACK's `error_detail`.
const INVALID_ARGUMENT: i32 = 3;

/// Requests queued before the stream takes them; a stream sends one per response, so
/// this is never reached in practice.
const QUEUE: usize = 4;

/// An open ADS stream.
pub(super) struct Ads {
    /// The node sent in every request.
    node: Node,
    /// Requests to the server.
    requests: mpsc::Sender<DiscoveryRequest>,
    /// Responses from the server.
    responses: tonic::Streaming<DiscoveryResponse>,
}

impl Ads {
    /// Connects to the control plane and subscribes, telling it that meshlimit holds
    /// `acked` (the last ACKed version; empty: nothing).
    ///
    /// # Errors
    /// The control plane could not be reached or refused the stream; in words.
    pub(super) async fn open(options: &XdsOptions, acked: &str) -> Result<Ads, String> {
        let channel = connect(options).await?;
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(options.max_message_bytes);
        let (requests, queued) = mpsc::channel(QUEUE);
        let node = node(options);
        let subscribe = DiscoveryRequest {
            version_info: acked.to_string(),
            node: Some(node.clone()),
            type_url: TYPE_URL.into(),
            ..DiscoveryRequest::default()
        };
        requests
            .send(subscribe)
            .await
            .map_err(|_| "the request queue closed".to_string())?;
        let outbound = futures_util::stream::unfold(queued, |mut queued| async move {
            queued.recv().await.map(|request| (request, queued))
        });
        let mut request = tonic::Request::new(outbound);
        for (name, value) in &options.headers {
            let key = AsciiMetadataKey::from_bytes(name.to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("header {name:?} is not a gRPC metadata name"))?;
            let value = AsciiMetadataValue::try_from(value.as_str())
                .map_err(|_| format!("header {name}'s value {value:?} is not ASCII text"))?;
            request.metadata_mut().append(key, value);
        }
        let responses = client
            .stream_aggregated_resources(request)
            .await
            .map_err(|status| {
                format!(
                    "{} refused the ADS stream: {}",
                    options.server,
                    describe(&status)
                )
            })?
            .into_inner();
        Ok(Ads {
            node,
            requests,
            responses,
        })
    }

    /// The next response.
    ///
    /// # Errors
    /// The stream ended or failed; in words.
    pub(super) async fn next(&mut self) -> Result<DiscoveryResponse, String> {
        match self.responses.message().await {
            Ok(Some(response)) => Ok(response),
            Ok(None) => Err("the control plane closed the stream".into()),
            Err(status) => Err(format!("the stream failed: {}", describe(&status))),
        }
    }

    /// ACKs `response`: meshlimit now holds its version.
    ///
    /// # Errors
    /// The stream is gone.
    pub(super) async fn ack(&self, response: &DiscoveryResponse) -> Result<(), String> {
        self.send(response.version_info.clone(), response, None)
            .await
    }

    /// NACKs `response` for `problems`; meshlimit still holds `acked`.
    ///
    /// # Errors
    /// The stream is gone.
    pub(super) async fn nack(
        &self,
        acked: &str,
        response: &DiscoveryResponse,
        problems: String,
    ) -> Result<(), String> {
        let status = Status {
            code: INVALID_ARGUMENT,
            message: problems,
            details: Vec::new(),
        };
        self.send(acked.to_string(), response, Some(status)).await
    }

    /// Ends meshlimit's side of the stream and waits for the server to end its side, so
    /// that replies already queued reach it before the connection goes.
    pub(super) async fn close(self) {
        let Ads {
            requests,
            mut responses,
            ..
        } = self;
        drop(requests);
        while let Ok(Some(_)) = responses.message().await {}
    }

    /// Sends one request after a response: an ACK, or a NACK with `error_detail`.
    async fn send(
        &self,
        version_info: String,
        response: &DiscoveryResponse,
        error_detail: Option<Status>,
    ) -> Result<(), String> {
        let request = DiscoveryRequest {
            version_info,
            node: Some(self.node.clone()),
            type_url: TYPE_URL.into(),
            response_nonce: response.nonce.clone(),
            error_detail,
            ..DiscoveryRequest::default()
        };
        self.requests
            .send(request)
            .await
            .map_err(|_| "the stream closed before the reply was sent".to_string())
    }
}

/// The node of `options`: its id and its metadata as a struct of strings.
fn node(options: &XdsOptions) -> Node {
    let fields = options
        .node_metadata
        .iter()
        .map(|(k, v)| {
            let value = Value {
                kind: Some(Kind::StringValue(v.clone())),
            };
            (k.clone(), value)
        })
        .collect();
    Node {
        id: options.node_id.clone(),
        metadata: Some(Struct { fields }),
        user_agent_name: "meshlimit".into(),
        ..Node::default()
    }
}

/// A gRPC status in words, with its transport error underneath if any.
fn describe(status: &tonic::Status) -> String {
    let mut text = format!("{:?}: {}", status.code(), status.message());
    if let Some(source) = std::error::Error::source(status) {
        text.push_str(": ");
        text.push_str(&error_chain(source));
    }
    text
}
