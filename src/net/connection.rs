//! One connection from accept to close: the TLS handshake (if any), HTTP/1 or HTTP/2,
//! and the three ways the server ends it:
//! - **idle**: nothing from the peer and no request in flight for the idle timeout
//!   (HTTP/2 pings from the peer count, so a proxy's keepalive keeps its connection);
//!   a peer that never sent a byte gets [`SILENT_TIMEOUT`] at most;
//! - **age** (`max_age`, gRPC): a GOAWAY after the age (±10% jitter, so that clients do not
//!   all reconnect at once), then `max_age_grace` for the calls in flight;
//! - **drain**: a GOAWAY (HTTP/2) or `Connection: close` when the server stops; the
//!   server bounds the wait.
//!
//! A closing connection is dropped once its grace runs out, in-flight calls or not.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tracing::debug;

use super::activity::{Activity, Heard};
use super::caller::Caller;
use super::in_flight::Counted;
use super::limit::Permit;
use super::listener::Stream;
use super::service::{HttpService, ResponseBody};
use super::tls_reload::TlsSource;

/// Longest a peer may stay connected without sending a single byte (bounded by the idle
/// timeout): long enough for any real client's first request, short enough that silent
/// connections from a flood give their places back quickly.
pub const SILENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle connection is given to close after its GOAWAY.
const IDLE_CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How connections on one port are served.
#[derive(Debug, Clone)]
pub struct ConnectionOptions {
    /// A connection with nothing from the peer and no request in flight for this long is
    /// closed.
    pub idle_timeout: Duration,
    /// Connections older than this (±10%) are asked to close (`None`: never).
    pub max_age: Option<Duration>,
    /// After the age's GOAWAY, how long in-flight calls may still run.
    pub max_age_grace: Duration,
    /// HTTP/2 only (gRPC), or HTTP/1.1 and HTTP/2.
    pub http2_only: bool,
    /// TLS, or plain TCP (`None`).
    pub tls: Option<Arc<TlsSource>>,
}

impl ConnectionOptions {
    /// Plain HTTP/1.1 and HTTP/2 with `idle_timeout` and no age limit.
    pub fn new(idle_timeout: Duration) -> Self {
        Self {
            idle_timeout,
            max_age: None,
            max_age_grace: Duration::ZERO,
            http2_only: false,
            tls: None,
        }
    }
}

/// Serves `stream` with `service` until one side closes it; `permit` is its place under
/// the connection cap, held to the end.
pub(crate) async fn serve_connection<S, B>(
    stream: Stream,
    service: S,
    options: Arc<ConnectionOptions>,
    builder: Builder<TokioExecutor>,
    stop: watch::Receiver<bool>,
    permit: Permit,
) where
    S: HttpService<B>,
    B: ResponseBody,
{
    let activity = Activity::new();
    let mut caller = Caller::of(&stream);
    let io = Heard::new(stream, activity.clone());
    let Some(tls) = &options.tls else {
        let service = Counted::new(service, activity.clone(), caller);
        return drive(io, service, &activity, &options, builder, stop, &permit).await;
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.acceptor().accept(io)).await {
        Ok(Ok(io)) => {
            caller.certificate = io
                .get_ref()
                .1
                .peer_certificates()
                .and_then(<[_]>::first)
                .map(|der| Arc::new(der.clone().into_owned()));
            let service = Counted::new(service, activity.clone(), caller);
            drive(io, service, &activity, &options, builder, stop, &permit).await
        }
        Ok(Err(error)) => {
            permit.connections().count_tls_failure();
            debug!(%error, "TLS handshake failed");
        }
        Err(_) => {
            permit.connections().count_tls_failure();
            debug!("TLS handshake timed out");
        }
    }
}

/// Why the server started closing a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    Idle,
    Aged,
    Draining,
}

async fn drive<IO, S, B>(
    io: IO,
    service: Counted<S>,
    activity: &Activity,
    options: &ConnectionOptions,
    builder: Builder<TokioExecutor>,
    mut stop: watch::Receiver<bool>,
    permit: &Permit,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HttpService<B>,
    B: ResponseBody,
{
    let connection = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(connection);
    let idle = activity.until_idle(options.idle_timeout, SILENT_TIMEOUT);
    tokio::pin!(idle);
    let age = tokio::time::sleep(options.max_age.map_or(Duration::MAX / 4, jitter));
    tokio::pin!(age);
    let mut closing: Option<Closing> = None;
    let grace = tokio::time::sleep(Duration::MAX / 4);
    tokio::pin!(grace);
    loop {
        let reason = tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    debug!(error = %error, "connection ended with an error");
                }
                return;
            }
            () = &mut grace, if closing.is_some() => {
                debug!(reason = ?closing, "closing grace over; dropping the connection");
                return;
            }
            () = &mut idle, if closing.is_none() => Closing::Idle,
            () = &mut age, if closing.is_none() && options.max_age.is_some() => Closing::Aged,
            _ = stop.changed(), if closing.is_none() => Closing::Draining,
        };
        closing = Some(reason);
        connection.as_mut().graceful_shutdown();
        let connections = permit.connections();
        match reason {
            Closing::Idle => {
                connections.count_idle_close();
                grace
                    .as_mut()
                    .reset(tokio::time::Instant::now() + IDLE_CLOSE_GRACE);
            }
            Closing::Aged => {
                connections.count_aged_out();
                grace
                    .as_mut()
                    .reset(tokio::time::Instant::now() + options.max_age_grace);
            }
            // The server bounds the drain and drops what is left.
            Closing::Draining => {}
        }
    }
}

/// `age` ± up to 10%, at random.
fn jitter(age: Duration) -> Duration {
    let random = RandomState::new().hash_one(0u8);
    let per_mille = (random % 201) as u32; // 0..=200 → −10%..+10%
    age.checked_mul(900 + per_mille)
        .map_or(age, |scaled| scaled / 1000)
}
