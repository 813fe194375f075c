//! The connection to the control plane: its address as a URI (`host:port` is plain
//! HTTP/2, `https://` or any TLS setting is TLS), TLS from [`XdsTls`] (a CA bundle or the
//! system's roots, a client certificate for mTLS, a server name override).

use std::time::Duration;

use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::{XdsOptions, XdsTls};

/// Bound on establishing the connection (TCP, and TLS when on).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connects to the control plane of `options`.
///
/// # Errors
/// A bad address or TLS file, or the connection failed; in words.
pub(super) async fn connect(options: &XdsOptions) -> Result<Channel, String> {
    let endpoint = endpoint(options)?;
    endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot connect to {}: {}", options.server, error_chain(&e)))
}

/// Idle time before the first TCP keepalive probe.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);

/// Time between unanswered TCP keepalive probes.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// Unanswered probes before the connection counts as dead.
const KEEPALIVE_RETRIES: u32 = 3;

/// The endpoint of `options`, with TLS when asked for.
fn endpoint(options: &XdsOptions) -> Result<Endpoint, String> {
    let uri = uri(&options.server, options.tls.is_some());
    let endpoint = Endpoint::from_shared(uri.clone())
        .map_err(|e| format!("--xds-server {:?} is not an address: {e}", options.server))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        // A control plane gone without a reset (a node lost, a partition) would leave the
        // idle stream waiting for ever: TCP keepalives notice it in about 25 s. Not HTTP/2
        // pings, which gRPC-Go servers (go-control-plane's) answer with GOAWAY
        // `too_many_pings` when sent more often than every 5 minutes.
        .tcp_keepalive(Some(KEEPALIVE_IDLE))
        .tcp_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .tcp_keepalive_retries(Some(KEEPALIVE_RETRIES));
    match &options.tls {
        None => Ok(endpoint),
        Some(tls) => endpoint
            .tls_config(tls_config(tls)?)
            .map_err(|e| format!("TLS to {uri}: {}", error_chain(&e))),
    }
}

/// `server` as a URI: `http://` or `https://` as `tls` says, whatever scheme it had.
fn uri(server: &str, tls: bool) -> String {
    let bare = server
        .strip_prefix("http://")
        .or_else(|| server.strip_prefix("https://"))
        .unwrap_or(server);
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{bare}")
}

/// tonic's TLS settings from `tls`.
fn tls_config(tls: &XdsTls) -> Result<ClientTlsConfig, String> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new();
    config = match &tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca)?)),
        None => config.with_native_roots(),
    };
    if let Some((cert, key)) = &tls.client_cert {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    if let Some(name) = &tls.server_name {
        config = config.domain_name(name.clone());
    }
    Ok(config)
}

/// An error and its sources, joined by `: ` (tonic's transport errors say little alone).
pub(super) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_the_scheme_tls_asks_for() {
        assert_eq!(uri("cp:18000", false), "http://cp:18000");
        assert_eq!(uri("http://cp:18000", false), "http://cp:18000");
        assert_eq!(uri("https://cp:18000", true), "https://cp:18000");
        assert_eq!(uri("cp:18000", true), "https://cp:18000");
    }

    #[test]
    fn a_missing_tls_file_is_named() {
        let options = XdsOptions {
            tls: Some(XdsTls {
                ca: Some("/nonexistent/ca.pem".into()),
                ..XdsTls::default()
            }),
            ..XdsOptions::new("cp:1")
        };
        let error = endpoint(&options).unwrap_err();
        assert!(error.contains("/nonexistent/ca.pem"), "{error}");
    }
}
