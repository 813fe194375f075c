//! A real Envoy process for the integration tests, and a tiny HTTP/1.1 client to talk to
//! it. The caller writes the config around the ports it is handed (the admin port and
//! `n` listener ports, free loopback ports never handed out twice by one test binary);
//! the harness starts `envoy --disable-hot-restart` on it, waits for `GET /ready` =
//! `LIVE`, and kills the process when dropped, printing its log if the test failed.
//!
//! Every wait is bounded: a process that does not become ready within
//! [`ENVOY_TIMEOUT`], or a request that gets no complete answer within
//! [`REQUEST_TIMEOUT`], fails the test with what was seen.

use std::collections::BTreeSet;
use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bound on Envoy becoming ready (it takes well under a second).
pub const ENVOY_TIMEOUT: Duration = Duration::from_secs(30);
/// Bound on one HTTP exchange: far above anything a local request takes, so exceeding
/// it means a hang rather than a slow machine.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries with fresh ports when another process took one between probe and bind.
const ATTEMPTS: usize = 5;

/// The ports an Envoy config must use.
#[derive(Debug, Clone)]
pub struct EnvoyPorts {
    /// The admin listener (`/ready`, `/stats`).
    pub admin: u16,
    /// One per listener the caller asked for, in order.
    pub listeners: Vec<u16>,
}

/// A running Envoy; killed (SIGKILL) when dropped.
pub struct Envoy {
    ports: EnvoyPorts,
    child: Child,
    /// Holds `envoy.yaml` and `envoy.log`; removed on drop.
    dir: TempDir,
}

impl Envoy {
    /// Starts Envoy on the YAML that `config` writes for the ports it is given (`listeners`
    /// of them besides the admin port) and waits until it is ready. If a port turns out to
    /// be taken by another process, starts again on fresh ports. Listeners in `config`
    /// should set `enable_reuse_port: false`: with Envoy's default (on, on Linux) a second
    /// process could bind the same port silently instead of failing.
    pub async fn start(listeners: usize, config: impl Fn(&EnvoyPorts) -> String) -> Envoy {
        let binary = super::envoy_binary();
        for _ in 0..ATTEMPTS {
            let ports = EnvoyPorts {
                admin: reserve_port(),
                listeners: (0..listeners).map(|_| reserve_port()).collect(),
            };
            let dir = tempfile::Builder::new()
                .prefix("meshlimit-envoy-")
                .tempdir()
                .expect("creating a temporary directory for Envoy");
            let yaml = dir.path().join("envoy.yaml");
            std::fs::write(&yaml, config(&ports)).expect("writing envoy.yaml");
            let log = File::create(dir.path().join("envoy.log")).expect("creating envoy.log");
            let child = Command::new(&binary)
                .arg("-c")
                .arg(&yaml)
                // One worker thread is plenty for a test, and spares the machine.
                .args(["--disable-hot-restart", "--concurrency", "1"])
                .args(["--log-level", "warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("duplicating the log handle"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
            let mut envoy = Envoy { ports, child, dir };
            if envoy.wait_ready().await {
                return envoy;
            }
        }
        panic!("Envoy: a port was taken by another process {ATTEMPTS} times in a row");
    }

    /// Polls `GET /ready` until `LIVE`: true then; false when a port was in use (Envoy
    /// exited, or went live without that listener); panics (with the log) on any other
    /// exit or after [`ENVOY_TIMEOUT`].
    async fn wait_ready(&mut self) -> bool {
        let deadline = tokio::time::Instant::now() + ENVOY_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("polling Envoy") {
                let log = self.log();
                if port_was_taken(&log) {
                    return false;
                }
                panic!("Envoy exited with {status} while starting; its log:\n{log}");
            }
            let ready = request(self.admin(), "/ready", &[]).await;
            if ready
                .as_ref()
                .is_ok_and(|r| r.status == 200 && r.body.trim() == "LIVE")
            {
                // Envoy 1.40 logs a listener it could not listen on ("final pre-worker listener
                // init for listener 'open' failed: cannot listen() errno=98") and goes live
                // without it; requests to that port then reach whoever holds it.
                // `start` then drops this Envoy, which stops it.
                return !port_was_taken(&self.log());
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Envoy not ready within {ENVOY_TIMEOUT:?} (last /ready: {ready:?}); its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The admin address.
    pub fn admin(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports.admin))
    }

    /// The address of listener `i` (in the order of [`EnvoyPorts::listeners`]).
    pub fn listener(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports.listeners[i]))
    }

    /// Everything Envoy wrote so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// The value of counter `name` (exact name) on the admin `/stats` page; 0 when Envoy
    /// has not created it (many counters only appear once used).
    pub async fn counter(&self, name: &str) -> u64 {
        let stats = request(self.admin(), "/stats", &[])
            .await
            .unwrap_or_else(|e| panic!("GET /stats: {e}"));
        assert_eq!(stats.status, 200, "GET /stats: {stats:?}");
        stats
            .body
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
            .map_or(0, |v| {
                v.trim().parse().unwrap_or_else(|_| panic!("{name}: {v:?}"))
            })
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- log of Envoy (admin {}) ---\n{}",
                self.admin(),
                self.log()
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response: status, headers (names lower-cased) and body.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The value of the first header called `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `GET path` with `headers` over a fresh HTTP/1.1 connection to `addr`.
pub async fn request(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    request_from(None, addr, path, headers).await
}

/// [`request`] from the local address `source` (e.g. 127.0.0.2, another loopback
/// address, to be a second client IP), or any when `None`. Bounded by
/// [`REQUEST_TIMEOUT`].
pub async fn request_from(
    source: Option<IpAddr>,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    let exchange = async {
        let socket = tokio::net::TcpSocket::new_v4()?;
        if let Some(ip) = source {
            socket.bind(SocketAddr::new(ip, 0))?;
        }
        let mut stream = socket.connect(addr).await?;
        let mut text = format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
        for (name, value) in headers {
            text.push_str(&format!("{name}: {value}\r\n"));
        }
        text.push_str("\r\n");
        stream.write_all(text.as_bytes()).await?;
        // `connection: close`: the answer ends where the stream does.
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse(&String::from_utf8_lossy(&raw))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .unwrap_or_else(|_| {
            Err(std::io::Error::other(format!(
                "GET {path} on {addr}: no answer within {REQUEST_TIMEOUT:?}"
            )))
        })
}

fn parse(raw: &str) -> std::io::Result<Reply> {
    let bad = || std::io::Error::other(format!("not an HTTP/1.1 response: {raw:?}"));
    let (head, body) = raw.split_once("\r\n\r\n").ok_or_else(bad)?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':').ok_or_else(bad)?;
            Ok((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect::<std::io::Result<Vec<(String, String)>>>()?;
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        dechunk(body).ok_or_else(bad)?
    } else {
        body.to_string()
    };
    Ok(Reply {
        status,
        headers,
        body,
    })
}

/// The payload of a chunked body (Envoy's admin pages come this way); None if malformed.
fn dechunk(mut rest: &str) -> Option<String> {
    let mut body = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(body);
        }
        body.push_str(after.get(..size)?);
        rest = after.get(size..)?.strip_prefix("\r\n")?;
    }
}

/// Whether Envoy's log says it could not bind a port another process holds (EADDRINUSE).
fn port_was_taken(log: &str) -> bool {
    log.contains("Address already in use") || log.contains("errno=98")
}

/// A free loopback port not handed out before by this test binary, so that two Envoys
/// of parallel tests never get the same one (other processes are handled by retrying).
fn reserve_port() -> u16 {
    static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..1000 {
        let port = super::free_port();
        if TAKEN
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(port)
        {
            return port;
        }
    }
    panic!("found no free loopback port in 1000 tries");
}

/// `template` with its `@BACKEND_LISTENER@` and `@BACKEND_CLUSTER@` lines replaced by the
/// `backend` listener and cluster (the caller then replaces `@BACKEND@` with a port): a
/// second listener answering 200 `backend`, so that routes reach a real cluster (a
/// `direct_response` route never calls the rate-limit service).
pub fn with_backend(template: &str) -> String {
    template
        .replace("@BACKEND_LISTENER@\n", BACKEND_LISTENER)
        .replace("@BACKEND_CLUSTER@\n", BACKEND_CLUSTER)
}

const BACKEND_LISTENER: &str = r#"  - name: backend
    address:
      socket_address: { address: 127.0.0.1, port_value: @BACKEND@ }
    enable_reuse_port: false
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: backend_http
          route_config:
            virtual_hosts:
            - name: backend
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                direct_response: { status: 200, body: { inline_string: "backend\n" } }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#;

const BACKEND_CLUSTER: &str = r#"  - name: backend
    type: STATIC
    connect_timeout: 5s
    load_assignment:
      cluster_name: backend
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: @BACKEND@ }
"#;

/// `template` with its `@FRONT_HEAD@` line replaced by the admin listener on `@ADMIN@`
/// and the start of a listener `front` on `@FRONT@` with an HTTP connection manager, up
/// to its `@type` (the caller goes on with `stat_prefix`, tracing, routes and filters).
pub fn with_front(template: &str) -> String {
    template.replace("@FRONT_HEAD@\n", FRONT_HEAD)
}

const FRONT_HEAD: &str = r#"admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: @ADMIN@ }
static_resources:
  listeners:
  - name: front
    address:
      socket_address: { address: 127.0.0.1, port_value: @FRONT@ }
    enable_reuse_port: false
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
"#;

/// A cluster `name` of one HTTP/2 endpoint (a gRPC server: meshlimit, a collector) at
/// `address`, an Envoy address in YAML flow form ([`loopback`], or a `pipe`).
pub fn h2_cluster(name: &str, address: &str) -> String {
    H2_CLUSTER
        .replace("@NAME@", name)
        .replace("@ADDRESS@", address)
}

/// `addr`'s port on 127.0.0.1 as an Envoy `socket_address`.
pub fn loopback(addr: SocketAddr) -> String {
    format!(
        "socket_address: {{ address: 127.0.0.1, port_value: {} }}",
        addr.port()
    )
}

const H2_CLUSTER: &str = r#"  - name: @NAME@
    type: STATIC
    connect_timeout: 5s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
    load_assignment:
      cluster_name: @NAME@
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: { @ADDRESS@ }
"#;

/// Fails the test, with Envoy's output, unless `envoy --mode validate -c <config>`
/// accepts the file (an example's config, checked as it is shipped).
pub fn assert_validates(config: &str) {
    let out = Command::new(super::envoy_binary())
        .args(["--mode", "validate", "-c", config])
        .output()
        .expect("run envoy");
    assert!(
        out.status.success(),
        "envoy --mode validate {config} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ports an example's `envoy.yaml` ships with (see [`example_on`]).
#[derive(Debug, Clone, Copy)]
pub struct Shipped {
    /// `examples/<name>/`.
    pub example: &'static str,
    pub admin: u16,
    /// The `gateway` listener, whose connection manager has `stat_prefix: gateway_http`.
    pub gateway: u16,
    /// The stand-in backend's listener, and the cluster reaching it (in that order).
    pub backend: u16,
}

/// `examples/envoy-tokens/envoy.yaml`'s ports.
pub const TOKENS_EXAMPLE: Shipped = Shipped {
    example: "envoy-tokens",
    admin: 9921,
    gateway: 10020,
    backend: 10021,
};

/// `examples/envoy-holds/envoy.yaml`'s ports.
pub const HOLDS_EXAMPLE: Shipped = Shipped {
    example: "envoy-holds",
    admin: 9922,
    gateway: 10030,
    backend: 10031,
};

/// An example's `envoy.yaml` (its gateway and stand-in backend listeners, in that order,
/// and meshlimit on 127.0.0.1:8081) run by a test: on `ports` (two listeners), asking
/// meshlimit at `grpc`, its backend cluster sent to `upstream` when given (a
/// [`super::backend::Backend`], say) instead of the stand-in; every listener with
/// `enable_reuse_port: false` (see [`Envoy::start`]), and the gateway closing at once
/// after an answer (the test client reads until the connection closes). Then each
/// `(from, to)` of `edits`: `from` occurs `to.len()` times, its n-th occurrence becomes
/// `to[n]`.
pub fn example_on(
    shipped: Shipped,
    ports: &EnvoyPorts,
    grpc: SocketAddr,
    upstream: Option<SocketAddr>,
    edits: &[(&str, Vec<String>)],
) -> String {
    let path = format!(
        "{}/examples/{}/envoy.yaml",
        env!("CARGO_MANIFEST_DIR"),
        shipped.example
    );
    let mut config = std::fs::read_to_string(&path).expect("reading the example");
    let port = |p: u16| format!("port_value: {p} }}");
    let backend = port(ports.listeners[1]);
    let cluster = upstream.map_or(backend.clone(), |addr| port(addr.port()));
    let mut all = vec![
        (port(shipped.gateway), vec![port(ports.listeners[0])]),
        (port(shipped.backend), vec![backend, cluster]),
        (port(shipped.admin), vec![port(ports.admin)]),
        (port(8081), vec![port(grpc.port())]),
        (
            "    filter_chains:\n".to_string(),
            vec!["    enable_reuse_port: false\n    filter_chains:\n".to_string(); 2],
        ),
        (
            "stat_prefix: gateway_http\n".to_string(),
            vec!["stat_prefix: gateway_http\n          delayed_close_timeout: 0s\n".to_string()],
        ),
    ];
    all.extend(
        edits
            .iter()
            .map(|(from, to)| (from.to_string(), to.clone())),
    );
    for (from, to) in all {
        let parts: Vec<&str> = config.split(from.as_str()).collect();
        assert_eq!(parts.len(), to.len() + 1, "{from:?} in {path}");
        let mut edited = parts[0].to_string();
        for (to, part) in to.iter().zip(&parts[1..]) {
            edited.push_str(to);
            edited.push_str(part);
        }
        config = edited;
    }
    config
}

/// A cluster's `transport_socket`: TLS to a server named `sni`, trusting `pki`'s CA,
/// presenting `pki`'s certificate `client` (`<client>.pem`, `<client>.key`) if given.
pub fn upstream_tls(pki: &super::pki::Pki, sni: &str, client: Option<&str>) -> String {
    let certificate = client.map_or(String::new(), |name| {
        format!(
            "          tls_certificates:\n          - certificate_chain: {{ filename: \"{}\" }}\n            private_key: {{ filename: \"{}\" }}\n",
            pki.arg(&format!("{name}.pem")),
            pki.arg(&format!("{name}.key")),
        )
    });
    format!(
        r#"    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: {sni}
        common_tls_context:
          alpn_protocols: [h2]
          validation_context:
            trusted_ca: {{ filename: "{ca}" }}
{certificate}"#,
        ca = pki.arg("ca.pem"),
    )
}

/// Fails the test unless Envoy accepts `examples/<example>/envoy.yaml` and meshlimit its
/// `config/` (`meshlimit validate`), as they are shipped.
pub async fn assert_example_validates(example: &str) {
    let dir = format!("{}/examples/{example}", env!("CARGO_MANIFEST_DIR"));
    assert_validates(&format!("{dir}/envoy.yaml"));
    let config = format!("{dir}/config");
    let out = super::process::run(&["validate", "--config", &config]).await;
    assert!(
        out.status.success(),
        "meshlimit validate {config}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
