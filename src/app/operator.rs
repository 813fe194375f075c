//! The operator endpoints as a server runs them: their state (with the page's sampler,
//! the quota warm-up and the admin token's watch), and one server per operator port.

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::Settings;
use super::parts::Parts;
use super::tasks::Tasks;
use crate::http;
use crate::net::{self, ConnectionOptions, TlsSource};
use crate::page::Page;

/// The operator endpoints' state, with the quota warm-up, the page's sampler and the
/// admin token's watch started in `tasks`.
pub(super) fn start_operator(
    settings: &Settings,
    parts: &Parts,
    health: &http::Health,
    tasks: &mut Tasks,
) -> http::Operator {
    let quotas = parts.quotas.clone();
    tasks.spawn(async move { quotas.warm_up().await });
    let metrics = parts.metrics.clone();
    let page = Arc::new(Page::new(
        parts.service.clone(),
        metrics.clone(),
        parts.history.clone(),
        parts.quotas.clone(),
    ));
    tasks.keep(page.spawn_sampler());
    if let Some(token) = &parts.admin_token {
        tasks.keep(token.clone().watch());
    }
    http::Operator {
        health: health.clone(),
        service: parts.service.clone(),
        history: parts.history.clone(),
        unhealthy_without_config: settings.unhealthy_without_config,
        metrics,
        page,
        metrics_path: settings.metrics_path.clone(),
        admin_token: parts.admin_token.clone(),
        quotas: parts.quotas.clone(),
        traces: parts.traces(),
        give_back: settings.give_back.clone(),
    }
}

/// The ports serving operator endpoints, and the TLS of the main one.
pub(super) struct OperatorPorts {
    /// `--http-addr`: every operator endpoint.
    pub(super) http: TcpListener,
    /// TLS on `http` only; the debug and metrics addresses stay plain.
    pub(super) http_tls: Option<Arc<TlsSource>>,
    /// `--debug-addr`: the same endpoints as `http`.
    pub(super) extra_http: Vec<TcpListener>,
    /// `--metrics-addr`: metrics and health only.
    pub(super) metrics: Option<TcpListener>,
}

/// Spawns one server per operator port into `tasks`; sending `true` on the returned
/// sender stops them all.
pub(super) fn spawn_operator_servers(
    settings: &Settings,
    ports: OperatorPorts,
    operator: &http::Operator,
    parts: &Parts,
    tasks: &mut Tasks,
) -> watch::Sender<bool> {
    let (stop_tx, stop) = watch::channel(false);
    let routers = std::iter::once((ports.http, ports.http_tls, http::router(operator.clone())))
        .chain(
            ports
                .extra_http
                .into_iter()
                .map(|l| (l, None, http::router(operator.clone()))),
        )
        .chain(
            ports
                .metrics
                .map(|l| (l, None, http::metrics_router(operator.clone()))),
        );
    for (listener, tls, router) in routers {
        let mut stop = stop.clone();
        let options = ConnectionOptions {
            tls,
            ..ConnectionOptions::new(settings.idle_timeout)
        };
        tasks.spawn_operator(net::serve(
            listener,
            router,
            options,
            parts.connections.clone(),
            async move {
                let _ = stop.wait_for(|&s| s).await;
            },
            settings.drain_timeout,
        ));
    }
    stop_tx
}
