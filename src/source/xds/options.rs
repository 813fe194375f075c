//! How to reach the control plane and what to tell it.

use std::path::PathBuf;

use crate::config::SharedDomains;
use crate::defaults;
use crate::source::backoff::Backoff;

/// An xDS config source.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsOptions {
    /// The control plane's address: `host:port`, `http://host:port` or `https://host:port`
    /// (`--xds-server`).
    pub server: String,
    /// The node id sent in every request (`--xds-node-id`).
    pub node_id: String,
    /// The node's metadata, sent as a struct of strings (`--xds-node-metadata k=v,k2=v2`).
    pub node_metadata: Vec<(String, String)>,
    /// gRPC metadata sent on the stream (`--xds-header k=v`, repeated).
    pub headers: Vec<(String, String)>,
    /// TLS to the control plane; `None`: plain HTTP/2.
    pub tls: Option<XdsTls>,
    /// Waits between reconnections.
    pub backoff: Backoff,
    /// The largest response accepted (`--xds-max-msg-bytes`).
    pub max_message_bytes: usize,
    /// Whether resources of one domain are merged (`--merge-domain-config`).
    pub domains: SharedDomains,
}

/// TLS to the control plane (`--xds-tls` and its files).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct XdsTls {
    /// CA bundle that signs the server's certificate; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    /// Client certificate and key, for mTLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// The name to check the server's certificate against, when it is not the host in
    /// `server` (`--xds-tls-san`).
    pub server_name: Option<String>,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: defaults::XDS_BACKOFF_INITIAL,
            max: defaults::XDS_BACKOFF_MAX,
            random_factor: defaults::XDS_BACKOFF_RANDOM_FACTOR,
            jitter: true,
        }
    }
}

impl XdsOptions {
    /// `server` with every other setting at its default.
    pub fn new(server: impl Into<String>) -> XdsOptions {
        XdsOptions {
            server: server.into(),
            node_id: defaults::XDS_NODE_ID.into(),
            node_metadata: Vec::new(),
            headers: Vec::new(),
            tls: None,
            backoff: Backoff::default(),
            max_message_bytes: defaults::XDS_MAX_MESSAGE_BYTES,
            domains: SharedDomains::Refused,
        }
    }

    /// The server and node id.
    pub fn describe(&self) -> String {
        format!("xds {} node {}", self.server, self.node_id)
    }
}
