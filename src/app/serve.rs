//! The one entry point of a running server: [`serve`] on bound listeners until a shutdown
//! future completes, then the drain.

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

use super::health::{set_grpc_health, spawn_maintenance};
use super::source::start_source;
use super::{Error, Settings, build_service};
use crate::admin_token::AdminToken;
use crate::config::Config;
use crate::grpc::{GrpcRoutes, Rls};
use crate::http::{self, Health};
use crate::net::{self, ConnectionOptions, Connections, Listener, Protocols, TlsFiles, TlsSource};
use crate::page::Page;
use crate::rlqs::service::Drain;
use crate::rlqs::{QuotaService, Registry};
use crate::source::History;
use crate::statsd;
use crate::traces;

/// The sockets a server answers on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    /// `RateLimitService`, the quota service and gRPC health: a TCP port or a Unix socket.
    pub grpc: Listener,
    /// The operator endpoints.
    pub http: TcpListener,
    /// More addresses serving the operator endpoints (the Go server's debug port).
    pub extra_http: Vec<TcpListener>,
    /// The address serving metrics and health only (`--metrics-addr`).
    pub metrics: Option<TcpListener>,
}

impl Listeners {
    /// Just the gRPC and the operator ports, as tests and most deployments use.
    pub fn new(grpc: TcpListener, http: TcpListener) -> Self {
        Self {
            grpc: grpc.into(),
            http,
            extra_http: Vec::new(),
            metrics: None,
        }
    }
}

/// Serves on `listeners` until `shutdown` completes, then drains:
/// 1. health turns bad (`/healthcheck` 500 `draining`, gRPC health `NOT_SERVING`) while
///    everything keeps answering, for [`Settings::drain_delay`];
/// 2. the gRPC server stops accepting and waits for in-flight calls (at most
///    [`Settings::drain_timeout`]);
/// 3. the operator endpoints stop last, so the drain is observable to the end.
///
/// # Errors
/// Invalid initial config, or a server failing.
pub async fn serve(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let history = Arc::new(History::new(
        settings.config.kind(),
        settings.config.describe(),
    ));
    let service = build_service(&settings, Config::default())?;
    // Before waiting on the source: a bad token file is refused at once.
    let admin_token = match &settings.admin_token_file {
        Some(path) => Some(AdminToken::load(path)?),
        None => None,
    };
    let tracing = match &settings.tracing {
        Some(options) => Some(traces::start(options, |name| std::env::var(name).ok())?),
        None => None,
    };
    let traces = tracing.as_ref().map(|t| t.traces.clone());
    // The shutdown is followed from the start, so that a server still waiting for its
    // first config stops when asked.
    let (stop_tx, mut stopped) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let Some(follower) = start_source(&settings, service.config(), &history, &mut stopped).await?
    else {
        if let Some(tracing) = tracing {
            tracing.shutdown().await;
        }
        info!("meshlimit stopped before its first config loaded");
        return Ok(());
    };
    let metrics = service.metrics().expect("build_service counts").clone();
    metrics.follow_source(history.clone());
    let statsd = settings
        .statsd
        .clone()
        .map(|statsd| statsd::spawn(metrics.clone(), statsd));
    let health = Health::new();
    let (reporter, health_service) = tonic_health::server::health_reporter();
    set_grpc_health(
        &reporter,
        !settings.unhealthy_without_config || history.loaded(),
    )
    .await;
    let config_ready = {
        let history = history.clone();
        let required = settings.unhealthy_without_config;
        move || !required || history.loaded()
    };
    let maintenance = spawn_maintenance(
        service.store().clone(),
        reporter.clone(),
        health.clone(),
        config_ready,
    );

    let connections = Connections::new(
        settings
            .max_connections
            .unwrap_or_else(net::descriptors::default_max_connections),
    );
    metrics.follow_connections(connections.clone());
    let grpc_tls = load_tls(settings.grpc_tls.clone(), Protocols::Grpc)?;
    let http_tls = load_tls(settings.http_tls.clone(), Protocols::Http)?;

    let quotas = Arc::new(Registry::new(
        service.config().clone(),
        settings.algorithm,
        settings.rlqs_unmatched,
        service.store(),
        service.clock().clone(),
        settings.rlqs_assignment_ttl,
    ));
    metrics.follow_quotas(quotas.clone());
    tokio::spawn({
        let quotas = quotas.clone();
        async move { quotas.warm_up().await }
    });
    let page = Arc::new(Page::new(
        service.clone(),
        metrics.clone(),
        history.clone(),
        quotas.clone(),
    ));
    let page_sampler = page.spawn_sampler();
    let operator = http::Operator {
        health: health.clone(),
        service: service.clone(),
        source: history.clone(),
        unhealthy_without_config: settings.unhealthy_without_config,
        metrics,
        page,
        metrics_path: settings.metrics_path.clone(),
        admin_token: admin_token.clone(),
        quotas: quotas.clone(),
        traces: traces.clone(),
    };
    let token_watch = admin_token.map(AdminToken::watch);
    let also: Vec<String> = listeners
        .extra_http
        .iter()
        .filter_map(|l| l.local_addr().ok().map(|a| a.to_string()))
        .collect();
    let metrics_addr = match &listeners.metrics {
        Some(listener) => listener.local_addr()?.to_string(),
        None => String::new(),
    };
    info!(
        grpc = %listeners.grpc.describe(),
        http = %listeners.http.local_addr()?,
        also_http = %also.join(","),
        metrics = %metrics_addr,
        config = %settings.config.describe(),
        max_connections = connections.max(),
        grpc_tls = grpc_tls.is_some(),
        http_tls = http_tls.is_some(),
        "meshlimit serving"
    );
    // The operator endpoints stop only after gRPC has drained.
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let http_servers = spawn_operator_servers(
        &settings,
        OperatorPorts {
            http: listeners.http,
            http_tls,
            extra_http: listeners.extra_http,
            metrics: listeners.metrics,
        },
        &operator,
        &connections,
        &http_stop_rx,
    );

    // Quota streams last as long as their Envoy: new ones are refused once draining, open
    // ones end with the drain's delay, so that the drain of calls does not wait for them.
    let (quota_drain, quota_stage) = watch::channel(Drain::Serving);
    let grpc_stop = {
        let health = health.clone();
        let reporter = reporter.clone();
        let delay = settings.drain_delay;
        async move {
            let _ = stopped.wait_for(|&stop| stop).await;
            info!(delay = ?delay, "shutting down: health checks fail while draining");
            health.set(false);
            let _ = quota_drain.send(Drain::Refusing);
            set_grpc_health(&reporter, false).await;
            tokio::time::sleep(delay).await;
            let _ = quota_drain.send(Drain::Closing);
        }
    };
    let quota_refresh = spawn_quota_refresh(quotas.clone());
    let quota_service = QuotaService::new(
        quotas,
        settings.request_limits,
        settings.rlqs_assignment_ttl,
        quota_stage,
    );
    let routes = GrpcRoutes::new(
        Rls::new(service)
            .with_response_headers(settings.response_headers.clone())
            .with_draft_fields(settings.draft_headers)
            .with_traces(traces)
            .into_server(),
        health_service,
        quota_service.into_server(),
        crate::grpc::reflection_servers(),
    );
    let grpc_options = ConnectionOptions {
        max_age: settings.grpc_max_connection_age,
        max_age_grace: settings.grpc_max_connection_age_grace,
        http2_only: true,
        tls: grpc_tls,
        ..ConnectionOptions::new(settings.idle_timeout)
    };
    // Stops accepting once `grpc_stop` completes, then drains (at most drain_timeout).
    let grpc_result = tokio::spawn(net::serve(
        listeners.grpc,
        routes,
        grpc_options,
        connections,
        grpc_stop,
        settings.drain_timeout,
    ))
    .await;
    maintenance.abort();
    page_sampler.abort();
    if let Some(statsd) = statsd {
        statsd.abort();
    }
    drop(follower);
    quota_refresh.abort();
    if let Some(watch) = token_watch {
        watch.abort();
    }
    let _ = http_stop_tx.send(true);
    for server in http_servers {
        server
            .await
            .map_err(|join| Error::Http(std::io::Error::other(join)))?;
    }
    grpc_result.map_err(|join| Error::Http(std::io::Error::other(join)))?;
    if let Some(tracing) = tracing {
        tracing.shutdown().await;
    }
    info!("meshlimit stopped");
    Ok(())
}

/// Every second: the quota service follows config reloads and, on Redis, the other
/// replicas' reporters (see [`Registry::refresh`]); meanwhile, on Redis, the other
/// replicas' nudges (see [`Registry::follow_nudges`]). Runs until aborted.
fn spawn_quota_refresh(registry: Arc<Registry>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let nudges = {
            let registry = registry.clone();
            async move { registry.follow_nudges().await }
        };
        let ticks = async {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                registry.refresh().await;
            }
        };
        // Both loop for ever: aborting this task ends both.
        tokio::join!(nudges, ticks);
    })
}

/// The ports serving operator endpoints, and the TLS of the main one.
struct OperatorPorts {
    /// `--http-addr`: every operator endpoint.
    http: TcpListener,
    /// TLS on `http` only; the debug and metrics addresses stay plain.
    http_tls: Option<Arc<TlsSource>>,
    /// `--debug-addr`: the same endpoints as `http`.
    extra_http: Vec<TcpListener>,
    /// `--metrics-addr`: metrics and health only.
    metrics: Option<TcpListener>,
}

/// Spawns one server per operator port, each stopping when `stop` turns true.
fn spawn_operator_servers(
    settings: &Settings,
    ports: OperatorPorts,
    operator: &http::Operator,
    connections: &Arc<Connections>,
    stop: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
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
    let mut servers = Vec::new();
    for (listener, tls, router) in routers {
        let mut stop = stop.clone();
        let options = ConnectionOptions {
            tls,
            ..ConnectionOptions::new(settings.idle_timeout)
        };
        servers.push(tokio::spawn(net::serve(
            listener,
            router,
            options,
            connections.clone(),
            async move {
                let _ = stop.wait_for(|&s| s).await;
            },
            settings.drain_timeout,
        )));
    }
    servers
}

/// The TLS source for `files`, watched for changes; `None` without files.
fn load_tls(
    files: Option<TlsFiles>,
    protocols: Protocols,
) -> Result<Option<Arc<TlsSource>>, Error> {
    Ok(files.map(|f| TlsSource::load(f, protocols)).transpose()?)
}
