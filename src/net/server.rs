//! One port's accept loop: connections within the cap, each served on a task of its
//! own; on shutdown, the listening socket closes at once, open connections are asked to
//! close, and those still busy after the drain timeout are dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::warn;

use super::accept::{Acceptor, LOG_EVERY};
use super::connection::{ConnectionOptions, serve_connection};
use super::limit::Connections;
use super::listener::Listener;
use super::service::{HttpService, ResponseBody};
use crate::throttle::Throttle;

/// Serves `service` on `listener` until `shutdown` completes, then drains: open
/// connections get at most `drain_timeout` to finish what is in flight.
///
/// Connections beyond `connections`' cap are closed as soon as they are accepted (and
/// counted, and logged at most once per 10 s).
pub async fn serve<S, B>(
    listener: impl Into<Listener>,
    service: S,
    options: ConnectionOptions,
    connections: Arc<Connections>,
    shutdown: impl Future<Output = ()>,
    drain_timeout: Duration,
) where
    S: HttpService<B>,
    B: ResponseBody,
{
    let builder = builder(&options);
    let options = Arc::new(options);
    let mut acceptor = Acceptor::new(listener.into());
    let refusals = Throttle::new(LOG_EVERY);
    let (stop, stopping) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            stream = acceptor.accept(&connections) => stream,
        };
        // Reap finished connections so the set stays as large as what is open.
        while tasks.try_join_next().is_some() {}
        let Some(permit) = connections.admit() else {
            if let Some(left_out) = refusals.allow() {
                warn!(
                    max_connections = connections.max(),
                    similar_refusals_not_logged = left_out,
                    "connection refused: --max-connections reached"
                );
            }
            drop(stream);
            continue;
        };
        tasks.spawn(serve_connection(
            stream,
            service.clone(),
            options.clone(),
            builder.clone(),
            stopping.clone(),
            permit,
        ));
    }
    // Stop accepting at once: new clients are refused rather than left waiting.
    drop(acceptor);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(drain_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        warn!(
            connections = tasks.len(),
            timeout = ?drain_timeout,
            "connections still busy after the drain timeout; dropping them"
        );
        tasks.abort_all();
    }
}

fn builder(options: &ConnectionOptions) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    if options.http2_only {
        builder = builder.http2_only();
    }
    // With a timer, hyper bounds how long an HTTP/1 request's headers may take (30 s).
    builder.http1().timer(TokioTimer::new());
    builder.http2().timer(TokioTimer::new());
    builder
}
