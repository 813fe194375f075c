//! A small xDS control plane for tests: an ADS server (state of the world, real protobuf
//! over real gRPC) on 127.0.0.1, serving `RateLimitConfig` snapshots the test pushes.
//!
//! - Each stream answers the client's subscription with the current snapshot, then sends
//!   every snapshot pushed later, each with a new nonce.
//! - Every `DiscoveryRequest` received is recorded ([`Seen`]: node, version, nonce, error
//!   detail, the stream's gRPC metadata), so that tests can assert ACKs and NACKs.
//! - [`AdsServer::stop`] ends every stream (UNAVAILABLE) and closes the listener;
//!   [`AdsServer::restart`] listens again on the same port, with the same snapshot and
//!   record.
//! - Optionally TLS, with a certificate and key in PEM, and optionally mutual TLS (client
//!   certificates required, checked against a CA), on a port of the test's choosing.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::google::rpc;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use futures_util::stream::Stream;
use parking_lot::Mutex;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

/// The type URL of `RateLimitConfig` resources.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Bound on waiting for a request to arrive, and on the server stopping.
const TIMEOUT: Duration = Duration::from_secs(20);

/// One `DiscoveryRequest` the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The client's node.
    pub node: Option<Node>,
    /// `version_info`: the version ACKed (empty on a first subscription).
    pub version_info: String,
    /// `response_nonce`: the response answered (empty on a subscription).
    pub response_nonce: String,
    /// `error_detail`: set on a NACK.
    pub error_detail: Option<rpc::Status>,
    /// The type URL subscribed to.
    pub type_url: String,
    /// The stream's gRPC metadata, as (name, value) text pairs.
    pub headers: Vec<(String, String)>,
    /// The stream's number (from 1, counted across restarts).
    pub stream: u64,
}

impl Seen {
    /// Whether this is an ACK of `version` (no error detail, a nonce).
    pub fn is_ack_of(&self, version: &str) -> bool {
        self.error_detail.is_none()
            && !self.response_nonce.is_empty()
            && self.version_info == version
    }

    /// The value of metadata `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A snapshot: its version and resources.
#[derive(Debug, Clone)]
struct Snapshot {
    version: String,
    resources: Vec<Any>,
}

/// What every stream and the test share.
#[derive(Debug)]
struct Shared {
    /// The snapshot served; `None`: nothing yet (subscriptions wait).
    snapshot: watch::Sender<Option<Snapshot>>,
    /// Every request received, in order.
    seen: Mutex<Vec<Seen>>,
    /// The last nonce given.
    nonce: AtomicU64,
    /// The last stream number given.
    streams: AtomicU64,
    /// Every response sent, as (nonce, version).
    sent: Mutex<Vec<(String, String)>>,
}

/// A running (or stopped) ADS server.
pub struct AdsServer {
    /// The port it listens on, kept across restarts.
    pub port: u16,
    shared: Arc<Shared>,
    tls: Option<(Vec<u8>, Vec<u8>)>,
    /// With TLS: the CA client certificates must chain to (PEM); none asked for without.
    client_ca: Option<Vec<u8>>,
    running: Option<(watch::Sender<bool>, JoinHandle<()>)>,
}

impl AdsServer {
    /// A plain HTTP/2 ADS server on 127.0.0.1, on a port of the system's choosing.
    pub async fn start() -> AdsServer {
        Self::start_with(None).await
    }

    /// An ADS server over TLS with certificate `cert` and key `key` (PEM).
    pub async fn start_tls(cert: Vec<u8>, key: Vec<u8>) -> AdsServer {
        Self::start_with(Some((cert, key))).await
    }

    /// An ADS server on 127.0.0.1:`port` over mutual TLS: certificate `cert` and key
    /// `key`, client certificates required and checked against `client_ca` (all PEM), as
    /// Envoy Gateway's control plane serves its rate-limit Deployment.
    pub async fn start_mtls(
        port: u16,
        cert: Vec<u8>,
        key: Vec<u8>,
        client_ca: Vec<u8>,
    ) -> AdsServer {
        Self::start_on(port, Some((cert, key)), Some(client_ca)).await
    }

    async fn start_with(tls: Option<(Vec<u8>, Vec<u8>)>) -> AdsServer {
        Self::start_on(0, tls, None).await
    }

    async fn start_on(
        port: u16,
        tls: Option<(Vec<u8>, Vec<u8>)>,
        client_ca: Option<Vec<u8>>,
    ) -> AdsServer {
        let mut server = AdsServer {
            port,
            shared: Arc::new(Shared {
                snapshot: watch::Sender::new(None),
                seen: Mutex::new(Vec::new()),
                nonce: AtomicU64::new(0),
                streams: AtomicU64::new(0),
                sent: Mutex::new(Vec::new()),
            }),
            tls,
            client_ca,
            running: None,
        };
        server.listen().await;
        server
    }

    /// `127.0.0.1:<port>`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn listen(&mut self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .unwrap_or_else(|e| panic!("ADS server binding 127.0.0.1:{}: {e}", self.port));
        self.port = listener.local_addr().unwrap().port();
        let (stop, stopped) = watch::channel(false);
        let service = Ads {
            shared: self.shared.clone(),
            stopped: stopped.clone(),
        };
        let mut builder = Server::builder();
        if let Some((cert, key)) = &self.tls {
            let mut tls = ServerTlsConfig::new().identity(Identity::from_pem(cert, key));
            if let Some(ca) = &self.client_ca {
                tls = tls.client_ca_root(Certificate::from_pem(ca));
            }
            builder = builder.tls_config(tls).expect("ADS server TLS");
        }
        let mut shutdown = stopped;
        let router = builder.add_service(AggregatedDiscoveryServiceServer::new(service));
        let task = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = router
                .serve_with_incoming_shutdown(incoming, async move {
                    let _ = shutdown.wait_for(|&s| s).await;
                })
                .await;
        });
        self.running = Some((stop, task));
    }

    /// Ends every stream with UNAVAILABLE and closes the listener (bounded).
    pub async fn stop(&mut self) {
        if let Some((stop, mut task)) = self.running.take() {
            stop.send_replace(true);
            if tokio::time::timeout(TIMEOUT, &mut task).await.is_err() {
                task.abort();
            }
        }
    }

    /// Listens again on the same port, serving the current snapshot.
    pub async fn restart(&mut self) {
        self.stop().await;
        self.listen().await;
    }

    /// Serves `configs` as version `version`, to every stream.
    pub fn push(&self, version: &str, configs: &[RateLimitConfig]) {
        let resources = configs
            .iter()
            .map(|c| Any {
                type_url: TYPE_URL.into(),
                value: c.encode_to_vec(),
            })
            .collect();
        self.push_resources(version, resources);
    }

    /// Serves `resources`, whatever they are, as version `version`.
    pub fn push_resources(&self, version: &str, resources: Vec<Any>) {
        self.shared.snapshot.send_replace(Some(Snapshot {
            version: version.into(),
            resources,
        }));
    }

    /// The nonces of the responses that carried `version`.
    pub fn nonces_of(&self, version: &str) -> Vec<String> {
        let sent = self.shared.sent.lock();
        sent.iter()
            .filter(|(_, v)| v == version)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared.seen.lock().clone()
    }

    /// Waits (bounded) for a request that `matches`; the first one.
    pub async fn wait_for(&self, what: &str, matches: impl Fn(&Seen) -> bool) -> Seen {
        let deadline = tokio::time::Instant::now() + TIMEOUT;
        loop {
            if let Some(seen) = self.seen().into_iter().find(|s| matches(s)) {
                return seen;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the ADS server saw no {what} within {TIMEOUT:?}; it saw:\n{:#?}",
                self.seen()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for AdsServer {
    fn drop(&mut self) {
        if let Some((stop, task)) = self.running.take() {
            stop.send_replace(true);
            task.abort();
        }
    }
}

/// The ADS service of one listening period.
#[derive(Clone)]
struct Ads {
    shared: Arc<Shared>,
    /// Turns true when the server stops: every stream ends.
    stopped: watch::Receiver<bool>,
}

type Responses<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The items of `queue`, as a stream.
fn stream_of<T: Send + 'static>(queue: mpsc::Receiver<Result<T, Status>>) -> Responses<T> {
    Box::pin(futures_util::stream::unfold(
        queue,
        |mut queue| async move { queue.recv().await.map(|item| (item, queue)) },
    ))
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = Responses<DiscoveryResponse>;
    type DeltaAggregatedResourcesStream = Responses<DeltaDiscoveryResponse>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let headers: Vec<(String, String)> = request
            .metadata()
            .iter()
            .filter_map(|entry| match entry {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.as_str().to_string(), v.to_str().ok()?.to_string()))
                }
                tonic::metadata::KeyAndValueRef::Binary(..) => None,
            })
            .collect();
        let stream = self.shared.streams.fetch_add(1, Ordering::SeqCst) + 1;
        let mut inbound = request.into_inner();
        let (out, queue) = mpsc::channel(16);
        let shared = self.shared.clone();
        let mut stopped = self.stopped.clone();
        tokio::spawn(async move {
            let mut snapshots = shared.snapshot.subscribe();
            let mut subscribed = false;
            loop {
                let send_now = tokio::select! {
                    request = inbound.message() => match request {
                        Ok(Some(request)) => {
                            shared.seen.lock().push(Seen {
                                node: request.node,
                                version_info: request.version_info,
                                response_nonce: request.response_nonce,
                                error_detail: request.error_detail,
                                type_url: request.type_url,
                                headers: headers.clone(),
                                stream,
                            });
                            let first = !subscribed;
                            subscribed = true;
                            first
                        }
                        // The client closed its side or went away: end ours.
                        _ => break,
                    },
                    changed = snapshots.changed(), if subscribed => {
                        if changed.is_err() {
                            break;
                        }
                        true
                    }
                    _ = async { let _ = stopped.wait_for(|&s| s).await; } => {
                        let _ = out.send(Err(Status::unavailable("the control plane is stopping"))).await;
                        break;
                    }
                };
                if !send_now {
                    continue;
                }
                let current = snapshots.borrow_and_update().clone();
                if let Some(snapshot) = current {
                    let nonce = (shared.nonce.fetch_add(1, Ordering::SeqCst) + 1).to_string();
                    shared
                        .sent
                        .lock()
                        .push((nonce.clone(), snapshot.version.clone()));
                    let response = DiscoveryResponse {
                        version_info: snapshot.version,
                        resources: snapshot.resources,
                        type_url: TYPE_URL.into(),
                        nonce,
                        ..DiscoveryResponse::default()
                    };
                    if out.send(Ok(response)).await.is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Response::new(stream_of(queue)))
    }

    async fn delta_aggregated_resources(
        &self,
        _request: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}
