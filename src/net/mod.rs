//! Connections on the gRPC and HTTP ports: accepting them within the process' means,
//! TLS, and closing the ones nobody uses.
//!
//! Every port is served by [`serve`]: one accept loop ([`accept`]) that keeps going when
//! the process runs out of file descriptors, a cap on open connections shared by all
//! ports ([`Connections`]), and per connection ([`connection`]): an optional TLS
//! handshake, HTTP/1 or HTTP/2 (hyper), an idle timeout that counts what the peer sends
//! and the requests in flight ([`activity`]), an optional maximum age, and a graceful
//! close when the server drains.
//!
//! - [`listener`]: a TCP port or a Unix socket, and the connections it accepts.
//! - [`limit`]: the connection cap and the connection counters shown in `/metrics`.
//! - [`descriptors`]: the file-descriptor limit and the default cap derived from it.
//! - [`service`]: the service and body bounds every layer shares, named once.
//! - [`tls`], [`tls_reload`], [`client_san`], [`tls_error`]: rustls configs from PEM files,
//!   rebuilt when the files change, the client-certificate SAN allow-list, and their error.

mod accept;
mod activity;
mod caller;
mod client_san;
mod connection;
pub mod descriptors;
mod in_flight;
mod limit;
mod listener;
mod server;
mod service;
mod tls;
mod tls_error;
mod tls_reload;

pub use caller::{Caller, GiveBack};
pub use connection::{ConnectionOptions, SILENT_TIMEOUT};
pub use limit::Connections;
pub use listener::Listener;
pub use server::serve;
pub use service::{BoxError, HttpService, ResponseBody};
pub use tls::{Protocols, TlsFiles};
pub use tls_error::TlsError;
pub use tls_reload::TlsSource;
