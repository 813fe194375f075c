//! Wiring: settings → config, store, service → gRPC and HTTP servers, reload, shutdown.
//!
//! [`run`] takes bound listeners and a shutdown future, so tests run the real server on
//! port 0 and signal handling stays in `main`.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::info;

use crate::admin_token::AdminToken;
use crate::clock::{Clock, SystemClock};
use crate::config::{self, render_errors};
use crate::grpc::{HEALTH_SERVICE_NAME, HeaderNames, Rls};
use crate::http::{self, Health};
use crate::metrics::Metrics;
use crate::net::{self, ConnectionOptions, Connections, Protocols, TlsError, TlsFiles, TlsSource};
use crate::request_limits::RequestLimits;
use crate::rules::Algorithm;
use crate::service::Service;
use crate::store::redis::{RedisOptions, UrlError};
use crate::store::{
    Bounds, DEFAULT_MAX_BUCKETS, DEFAULT_MAX_STORE_BYTES, MemoryStore, RedisStore, Store,
};

/// The full gRPC name of the rate-limit service, as health checks ask for it.
const RLS_SERVICE_NAME: &str = <crate::grpc::RateLimitServer as tonic::server::NamedService>::NAME;

/// What `meshlimit serve` needs, whatever it was parsed from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Descriptor file or directory.
    pub config: PathBuf,
    /// Algorithm for rules that do not name one.
    pub algorithm: Algorithm,
    /// Upper bound on buckets held by the embedded store.
    pub max_buckets: u64,
    /// Quiet time after the last file event before a reload.
    pub reload_debounce: Duration,
    /// The Redis store, or `None` for the embedded one.
    pub redis: Option<RedisOptions>,
    /// Global shadow mode: every request is answered OK overall; statuses still tell.
    pub global_shadow: bool,
    /// `RateLimit-*` response headers for Envoy to add, or `None` (the default).
    pub response_headers: Option<HeaderNames>,
    /// After the shutdown signal: how long health checks fail while everything still
    /// serves, so that load balancers stop sending before connections close.
    pub drain_delay: Duration,
    /// Longest wait for in-flight gRPC calls once the server stops accepting.
    pub drain_timeout: Duration,
    /// Share of a limit from which hits count as `near_limit` (the Go server's
    /// `NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f32,
    /// Where the operator endpoints also serve the Prometheus text, besides `/metrics`
    /// (the Go server's `PROMETHEUS_PATH`).
    pub metrics_path: String,
    /// Upper bound on the bytes held by the embedded store (keys plus per-bucket overhead).
    pub max_store_bytes: u64,
    /// A connection (HTTP or gRPC) with nothing from the peer and no request in flight
    /// for this long is closed.
    pub idle_timeout: Duration,
    /// Most connections open at once over all ports (`None`: what the file-descriptor
    /// limit allows, see [`net::descriptors::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// gRPC connections older than this (±10%) are asked to close (`None`: never; the Go
    /// server's `GRPC_MAX_CONNECTION_AGE`).
    pub grpc_max_connection_age: Option<Duration>,
    /// After that GOAWAY, how long calls in flight may still run (the Go server's
    /// `GRPC_MAX_CONNECTION_AGE_GRACE`).
    pub grpc_max_connection_age_grace: Duration,
    /// TLS (and mTLS) on the gRPC address; `None`: plain.
    pub grpc_tls: Option<TlsFiles>,
    /// TLS on the main HTTP address (never client certificates); `None`: plain.
    pub http_tls: Option<TlsFiles>,
    /// Caps on descriptors, entries and bytes per request (`--max-descriptors`,
    /// `--max-entries`, `--max-value-bytes`).
    pub request_limits: RequestLimits,
    /// The file holding the token that guards the operator endpoints (see
    /// [`crate::admin_token`]); `None`: no guard.
    pub admin_token_file: Option<PathBuf>,
    /// Most series each `detailed_metric` rule creates for request values.
    pub max_metric_values: usize,
}

/// Default of [`Settings::idle_timeout`], in milliseconds.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 300_000;
/// Default of [`Settings::grpc_max_connection_age_grace`], in milliseconds.
pub const DEFAULT_GRPC_MAX_CONNECTION_AGE_GRACE_MS: u64 = 10_000;

impl Settings {
    /// Defaults for everything but the config path: embedded store, token buckets, no
    /// drain delay.
    pub fn new(config: impl Into<PathBuf>) -> Self {
        Self {
            config: config.into(),
            algorithm: Algorithm::TokenBucket,
            max_buckets: DEFAULT_MAX_BUCKETS,
            reload_debounce: Duration::from_millis(200),
            redis: None,
            global_shadow: false,
            response_headers: None,
            drain_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(10),
            metrics_path: "/metrics".into(),
            near_limit_ratio: crate::metrics::DEFAULT_NEAR_LIMIT_RATIO,
            max_store_bytes: DEFAULT_MAX_STORE_BYTES,
            idle_timeout: Duration::from_millis(DEFAULT_IDLE_TIMEOUT_MS),
            max_connections: None,
            grpc_max_connection_age: None,
            grpc_max_connection_age_grace: Duration::from_millis(
                DEFAULT_GRPC_MAX_CONNECTION_AGE_GRACE_MS,
            ),
            grpc_tls: None,
            http_tls: None,
            request_limits: RequestLimits::default(),
            admin_token_file: None,
            max_metric_values: crate::metrics::DEFAULT_MAX_METRIC_VALUES,
        }
    }
}

/// The sockets a server answers on, bound by the caller.
#[derive(Debug)]
pub struct Listeners {
    /// `RateLimitService` and gRPC health.
    pub grpc: TcpListener,
    /// The operator endpoints.
    pub http: TcpListener,
    /// More addresses serving the operator endpoints (the Go server's debug port).
    pub extra_http: Vec<TcpListener>,
    /// The address serving metrics and health only (`--metrics-addr`).
    pub metrics: Option<TcpListener>,
}

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The initial config is invalid.
    #[error("invalid config:\n{0}")]
    Config(String),
    /// The config path cannot be watched.
    #[error("cannot watch the config: {0}")]
    Watch(#[from] notify::Error),
    /// The HTTP server failed.
    #[error("HTTP server: {0}")]
    Http(#[from] std::io::Error),
    /// The Redis URL is invalid.
    #[error("{0}")]
    Redis(#[from] UrlError),
    /// A TLS certificate, key or CA file is missing or invalid.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// `--admin-token-file` gives no token.
    #[error("{0}")]
    AdminToken(#[from] crate::admin_token::TokenError),
}

/// Builds the service for `settings` with the real clock; loads the config once.
///
/// # Errors
/// The config is invalid.
pub fn build_service(settings: &Settings) -> Result<Service, Error> {
    let config = config::load(&settings.config).map_err(|e| Error::Config(render_errors(&e)))?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = match &settings.redis {
        None => Store::Memory(MemoryStore::bounded(
            Bounds {
                buckets: settings.max_buckets,
                bytes: settings.max_store_bytes,
            },
            clock.clone(),
        )),
        Some(options) => Store::Redis(RedisStore::new(options.clone(), clock.clone())?),
    };
    let service = Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        clock,
        settings.algorithm,
    )
    .with_global_shadow(settings.global_shadow)
    .with_request_limits(settings.request_limits);
    let metrics = Arc::new(Metrics::new(
        service.config().clone(),
        service.store().clone(),
    ));
    metrics.set_near_limit_ratio(settings.near_limit_ratio);
    metrics.set_max_metric_values(settings.max_metric_values);
    Ok(service.with_metrics(metrics))
}

/// Serves until `shutdown` completes, then drains in-flight calls and returns.
///
/// # Errors
/// Invalid initial config, or a server failing.
pub async fn run(
    settings: Settings,
    grpc: TcpListener,
    http: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listeners = Listeners {
        grpc,
        http,
        extra_http: Vec::new(),
        metrics: None,
    };
    serve(settings, listeners, shutdown).await
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
    let service = build_service(&settings)?;
    let metrics = service.metrics().expect("build_service counts").clone();
    let admin_token = match &settings.admin_token_file {
        Some(path) => Some(AdminToken::load(path)?),
        None => None,
    };
    let reloader = crate::reload::spawn(
        settings.config.clone(),
        service.config().clone(),
        settings.reload_debounce,
    )?;
    metrics.follow_reloads(reloader.status().clone());
    let health = Health::new();
    let (reporter, health_service) = tonic_health::server::health_reporter();
    for name in HEALTH_NAMES {
        reporter
            .set_service_status(name, tonic_health::ServingStatus::Serving)
            .await;
    }

    let store = service.store().clone();
    let maintenance = {
        let store = store.clone();
        let reporter = reporter.clone();
        let health = health.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut serving = true;
            for round in 0u64.. {
                tick.tick().await;
                if round % 4 == 0 {
                    store.maintain();
                }
                // gRPC health follows the store (NOT_SERVING while nothing can answer)
                // and the drain.
                let now = store.serving() && health.healthy();
                if now != serving {
                    serving = now;
                    set_grpc_health(&reporter, serving).await;
                }
            }
        })
    };

    let connections = Connections::new(
        settings
            .max_connections
            .unwrap_or_else(net::descriptors::default_max_connections),
    );
    metrics.follow_connections(connections.clone());
    let grpc_tls = load_tls(settings.grpc_tls.clone(), Protocols::Grpc)?;
    let http_tls = load_tls(settings.http_tls.clone(), Protocols::Http)?;

    let operator = http::Operator {
        health: health.clone(),
        service: service.clone(),
        reload: reloader.status().clone(),
        metrics,
        config_path: settings.config.clone(),
        metrics_path: settings.metrics_path.clone(),
        admin_token: admin_token.clone(),
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
        grpc = %listeners.grpc.local_addr()?,
        http = %listeners.http.local_addr()?,
        also_http = %also.join(","),
        metrics = %metrics_addr,
        config = %settings.config.display(),
        max_connections = connections.max(),
        grpc_tls = grpc_tls.is_some(),
        http_tls = http_tls.is_some(),
        "meshlimit serving"
    );
    // The operator endpoints stop only after gRPC has drained.
    let (http_stop_tx, http_stop_rx) = watch::channel(false);
    let mut http_servers = Vec::new();
    // Only --http-addr may speak TLS; the debug and metrics addresses stay plain.
    let routers = std::iter::once((listeners.http, http_tls, http::router(operator.clone())))
        .chain(
            listeners
                .extra_http
                .into_iter()
                .map(|l| (l, None, http::router(operator.clone()))),
        )
        .chain(
            listeners
                .metrics
                .map(|l| (l, None, http::metrics_router(operator.clone()))),
        );
    for (listener, tls, router) in routers {
        let mut stop = http_stop_rx.clone();
        let options = ConnectionOptions {
            tls,
            ..ConnectionOptions::new(settings.idle_timeout)
        };
        http_servers.push(tokio::spawn(net::serve(
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

    let grpc_stop = {
        let health = health.clone();
        let reporter = reporter.clone();
        let delay = settings.drain_delay;
        async move {
            shutdown.await;
            info!(delay = ?delay, "shutting down: health checks fail while draining");
            health.set(false);
            set_grpc_health(&reporter, false).await;
            tokio::time::sleep(delay).await;
        }
    };
    let routes = tonic::service::Routes::new(health_service)
        .add_service(
            Rls::new(service)
                .with_response_headers(settings.response_headers.clone())
                .into_server(),
        )
        .prepare();
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
    info!("meshlimit stopped");
    Ok(())
}

/// The TLS source for `files`, watched for changes; `None` without files.
fn load_tls(
    files: Option<TlsFiles>,
    protocols: Protocols,
) -> Result<Option<Arc<TlsSource>>, Error> {
    Ok(files.map(|f| TlsSource::load(f, protocols)).transpose()?)
}

/// The names gRPC health answers for: overall (""), the Go server's `ratelimit`, and
/// the full service name.
const HEALTH_NAMES: [&str; 3] = ["", HEALTH_SERVICE_NAME, RLS_SERVICE_NAME];

async fn set_grpc_health(reporter: &tonic_health::server::HealthReporter, serving: bool) {
    let status = if serving {
        tonic_health::ServingStatus::Serving
    } else {
        tonic_health::ServingStatus::NotServing
    };
    for name in HEALTH_NAMES {
        reporter.set_service_status(name, status).await;
    }
}
