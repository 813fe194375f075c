//! gRPC TLS and mTLS, and HTTP TLS (issue 9, "gRPC TLS and mTLS"), against the
//! `meshlimit` binary, with certificates made by the `openssl` CLI for each test:
//! - a real Envoy reaching meshlimit over mTLS (`UpstreamTlsContext` with a client
//!   certificate) gets answers; without a certificate, or with one whose SAN is not
//!   allowed, the handshake is refused and Envoy's fail-closed setting answers 500;
//! - rotating the server certificate on disk: new handshakes see the new certificate,
//!   a connection opened before still answers, no restart;
//! - `/healthcheck` over HTTPS without a client certificate.

mod support;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use support::envoy::{Envoy, EnvoyPorts};
use support::pki::Pki;
use support::process::Meshlimit;
use support::{eventually_async, rls_request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint};

const LIMITS: &str = "domain: e2e\ndescriptors:\n  - key: route\n    value: tls\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

fn config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("e2e.yaml"), LIMITS).unwrap();
    dir
}

/// A rustls client trusting the test CA, with `client` (`<name>`) as its certificate.
fn client_config(pki: &Pki, client: Option<&str>, alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.path("ca.pem")).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match client {
        None => builder.with_no_client_auth(),
        Some(name) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(pki.path(&format!("{name}.pem"))).unwrap()],
                PrivateKeyDer::from_pem_file(pki.path(&format!("{name}.key"))).unwrap(),
            )
            .unwrap(),
    };
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// Connects over TLS to `addr` as `localhost`; the server's certificate as it presented it.
async fn tls_connect(
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
) -> std::io::Result<(tokio_rustls::client::TlsStream<TcpStream>, Vec<u8>)> {
    let tcp = TcpStream::connect(addr).await?;
    let mut tls = TlsConnector::from(config)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    // TLS 1.3: a refused client certificate shows on the first read or write.
    tls.flush().await?;
    let peer = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    Ok((tls, peer))
}

/// tonic's connector over our TLS client; counts connections and keeps the last
/// certificate the server presented.
#[derive(Clone)]
struct Connector {
    config: Arc<rustls::ClientConfig>,
    addr: SocketAddr,
    connects: Arc<AtomicUsize>,
    peer: Arc<Mutex<Vec<u8>>>,
}

impl tower_service::Service<http::Uri> for Connector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let (tls, peer) = tls_connect(this.config, this.addr).await?;
            this.connects.fetch_add(1, Ordering::SeqCst);
            *this.peer.lock().unwrap() = peer;
            Ok(TokioIo::new(tls))
        })
    }
}

async fn ask(channel: &Channel) -> bool {
    let mut client = RateLimitServiceClient::new(channel.clone());
    let request = rls_request("e2e", &[&[("k", "v")]]);
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(10), client.should_rate_limit(request)).await,
        Ok(Ok(r)) if r.get_ref().overall_code == Code::Ok as i32
    )
}

fn der(path: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(path).unwrap().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_over_mtls_gets_answers_and_other_clients_are_refused() {
    let pki = Pki::new();
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", 1);
    pki.issue("envoy", "DNS:envoy.mesh.test", 2);
    pki.issue("intruder", "DNS:intruder.test", 3);
    let dir = config();
    let mut args = pki.grpc_mtls("server");
    for san in ["other.test", "envoy.mesh.test"] {
        args.extend(["--grpc-client-san".to_string(), san.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ml = Meshlimit::start(dir.path(), &args).await;
    let envoy = Envoy::start(4, |ports| envoy_yaml(ports, ml.grpc, &pki)).await;

    // Listener 0: Envoy's client certificate has an allowed SAN: meshlimit decides.
    let reply = support::envoy::request(envoy.listener(0), "/", &[])
        .await
        .unwrap();
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.header("x-ratelimit-remaining"),
        Some("999"),
        "{reply:?}"
    );
    // Listener 1: no client certificate; listener 2: a SAN not allowed. Both refused
    // in the handshake, so the fail-closed filter answers 500.
    for (listener, what) in [(1, "no client certificate"), (2, "a SAN not allowed")] {
        let reply = support::envoy::request(envoy.listener(listener), "/", &[])
            .await
            .unwrap();
        assert_eq!(reply.status, 500, "{what}: {reply:?}");
    }
    // The same three from a client of our own, for the record.
    let alpn = b"h2";
    assert!(
        tls_connect(client_config(&pki, Some("envoy"), alpn), ml.grpc)
            .await
            .is_ok()
    );
    for client in [None, Some("intruder")] {
        let refused = tls_connect(client_config(&pki, client, alpn), ml.grpc).await;
        let refused = match refused {
            Err(_) => true,
            Ok((mut tls, _)) => {
                let mut byte = [0u8; 1];
                matches!(tls.read(&mut byte).await, Ok(0) | Err(_))
            }
        };
        assert!(refused, "{client:?} was let in");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_the_server_certificate_needs_no_restart() {
    let pki = Pki::new();
    pki.issue("old", "DNS:localhost", 10);
    pki.issue("new", "DNS:localhost", 11);
    pki.issue("envoy", "DNS:envoy.mesh.test", 12);
    let live_dir = pki.path("live");
    std::fs::create_dir(&live_dir).unwrap();
    std::fs::copy(pki.path("old.pem"), live_dir.join("tls.crt")).unwrap();
    std::fs::copy(pki.path("old.key"), live_dir.join("tls.key")).unwrap();
    let dir = config();
    let ml = Meshlimit::start(
        dir.path(),
        &[
            "--grpc-tls-cert",
            &live_dir.join("tls.crt").display().to_string(),
            "--grpc-tls-key",
            &live_dir.join("tls.key").display().to_string(),
            "--grpc-client-ca",
            &pki.arg("ca.pem"),
        ],
    )
    .await;
    let config = client_config(&pki, Some("envoy"), b"h2");
    let connector = Connector {
        config: config.clone(),
        addr: ml.grpc,
        connects: Arc::new(AtomicUsize::new(0)),
        peer: Arc::new(Mutex::new(Vec::new())),
    };
    let live = Endpoint::from_static("http://localhost")
        .connect_with_connector(connector.clone())
        .await
        .expect("TLS channel");
    assert!(ask(&live).await);
    assert_eq!(*connector.peer.lock().unwrap(), der(&pki.path("old.pem")));

    // A broken certificate is rejected (logged) and the old one stays in use.
    let staged = live_dir.join(".junk.tmp");
    std::fs::write(&staged, "-----BEGIN CERTIFICATE-----\nnot base64\n").unwrap();
    std::fs::rename(&staged, live_dir.join("tls.crt")).unwrap();
    eventually_async(20, "the broken certificate is rejected", || async {
        ml.log().contains("TLS files rejected")
    })
    .await;
    let (_, peer) = tls_connect(config.clone(), ml.grpc)
        .await
        .expect("old certificate");
    assert_eq!(peer, der(&pki.path("old.pem")));

    // Rotate: both files replaced by renames, as a secret mount or cert-manager does.
    for (from, to) in [("new.key", "tls.key"), ("new.pem", "tls.crt")] {
        let staged = live_dir.join(format!(".{to}.tmp"));
        std::fs::copy(pki.path(from), &staged).unwrap();
        std::fs::rename(&staged, live_dir.join(to)).unwrap();
    }
    let new = der(&pki.path("new.pem"));
    eventually_async(
        20,
        "a new handshake presents the new certificate",
        || async {
            tls_connect(config.clone(), ml.grpc)
                .await
                .is_ok_and(|(_, peer)| peer == new)
        },
    )
    .await;
    // The connection opened before the rotation still answers, on the same connection.
    assert!(ask(&live).await);
    assert_eq!(connector.connects.load(Ordering::SeqCst), 1);
    assert!(ml.log().contains("TLS files reloaded"), "{}", ml.log());
    assert_eq!(ml.log().matches("TLS files rejected").count(), 1);
}

#[tokio::test]
async fn unusable_tls_files_refuse_to_start() {
    let pki = Pki::new();
    pki.issue("server", "DNS:localhost", 30);
    pki.issue("other", "DNS:localhost", 31);
    let dir = config();
    let config = dir.path().display().to_string();
    let (cert, other_key) = (pki.arg("server.pem"), pki.arg("other.key"));
    let missing = pki.arg("missing.key");
    for (key, why) in [(&missing, "missing.key"), (&other_key, "other.key")] {
        let out = support::process::run_serve(
            &config,
            &["--grpc-tls-cert", &cert, "--grpc-tls-key", key],
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains("TLS") && stderr.contains(why), "{stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_over_https_without_a_client_certificate() {
    let pki = Pki::new();
    pki.issue("server", "DNS:localhost", 20);
    let dir = config();
    let ml = Meshlimit::start(
        dir.path(),
        &[
            "--http-tls-cert",
            &pki.arg("server.pem"),
            "--http-tls-key",
            &pki.arg("server.key"),
        ],
    )
    .await;
    let (mut tls, _) = tls_connect(client_config(&pki, None, b"http/1.1"), ml.http)
        .await
        .expect("TLS without a client certificate");
    tls.write_all(b"GET /healthcheck HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tls.read_to_string(&mut answer),
    )
    .await
    .expect("an answer")
    .ok();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("OK"), "{answer}");
}

fn envoy_yaml(ports: &EnvoyPorts, grpc: SocketAddr, pki: &Pki) -> String {
    let front = |i: usize, cluster: &str| {
        FRONT
            .replace("@NAME@", cluster)
            .replace("@PORT@", &ports.listeners[i].to_string())
    };
    let cluster = |name: &str, client: Option<&str>| {
        RLS_CLUSTER
            .replace("@NAME@", name)
            .replace("@GRPC@", &grpc.port().to_string())
            .replace(
                "@TLS@\n",
                &support::envoy::upstream_tls(pki, "localhost", client),
            )
    };
    support::envoy::with_backend(ENVOY)
        .replace("@ADMIN@", &ports.admin.to_string())
        .replace(
            "@FRONTS@",
            &[front(0, "good"), front(1, "none"), front(2, "bad")].join("\n"),
        )
        .replace(
            "@CLUSTERS@",
            &[
                cluster("good", Some("envoy")),
                cluster("none", None),
                cluster("bad", Some("intruder")),
            ]
            .join("\n"),
        )
        .replace("@BACKEND@", &ports.listeners[3].to_string())
}

const ENVOY: &str = r#"
admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: @ADMIN@ }
static_resources:
  listeners:
@FRONTS@
@BACKEND_LISTENER@
  clusters:
@BACKEND_CLUSTER@
@CLUSTERS@
"#;

/// The rate-limit service over TLS (`@TLS@`: `sni: localhost`, a client certificate or none).
const RLS_CLUSTER: &str = r#"  - name: rls_@NAME@
    type: STATIC
    connect_timeout: 5s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
@TLS@
    load_assignment:
      cluster_name: rls_@NAME@
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: @GRPC@ }"#;

/// A front listener whose every request asks cluster `rls_@NAME@`, failing closed.
const FRONT: &str = r#"  - name: @NAME@
    address:
      socket_address: { address: 127.0.0.1, port_value: @PORT@ }
    enable_reuse_port: false
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: @NAME@_http
          route_config:
            virtual_hosts:
            - name: e2e
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - generic_key: { descriptor_key: route, descriptor_value: tls }
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: e2e
              stat_prefix: @NAME@
              failure_mode_deny: true
              timeout: 10s
              enable_x_ratelimit_headers: DRAFT_VERSION_03
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: { cluster_name: rls_@NAME@ }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"#;
