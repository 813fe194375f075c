//! The one entry point of a running server: [`serve`] on bound listeners until a shutdown
//! future completes, then the drain. Every task it starts is owned by one [`Tasks`].

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::HealthReporter;
use tracing::info;

use super::health::{set_grpc_health, spawn_maintenance};
use super::operator::{OperatorPorts, spawn_operator_servers, start_operator};
use super::parts::Parts;
use super::source::start_source;
use super::tasks::Tasks;
use super::{Error, Settings};
use crate::grpc::{GrpcRoutes, Rls};
use crate::http;
use crate::net::{self, ConnectionOptions, Listener, Protocols, TlsFiles, TlsSource};
use crate::rlqs::service::Drain;
use crate::rlqs::{QuotaService, Registry};
use crate::statsd;
use crate::traces::Tracing;

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

impl Listeners {
    /// The gRPC listener, and the operator ports with `http_tls` on the main one.
    fn split(self, http_tls: Option<Arc<TlsSource>>) -> (Listener, OperatorPorts) {
        let ports = OperatorPorts {
            http: self.http,
            http_tls,
            extra_http: self.extra_http,
            metrics: self.metrics,
        };
        (self.grpc, ports)
    }
}

/// Serves on `listeners` until `shutdown` completes, then drains:
/// 1. health turns bad (`/healthcheck` 500 `draining`, gRPC health `NOT_SERVING`) while
///    everything keeps answering, for [`Settings::drain_delay`];
/// 2. the gRPC server stops accepting and waits for in-flight calls (at most
///    [`Settings::drain_timeout`]);
/// 3. the background tasks stop;
/// 4. the operator endpoints stop last, so the drain is observable to the end.
///
/// # Errors
/// Invalid initial config, or a server failing.
pub async fn serve(
    settings: Settings,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let parts = Parts::build(&settings)?;
    let mut tasks = Tasks::default();
    // The shutdown is followed from the start, so that a server still waiting for its
    // first config stops when asked.
    let mut stopped = follow_shutdown(&mut tasks, shutdown);
    let config = parts.service.config();
    if !start_source(&settings, config, &parts.history, &mut tasks, &mut stopped).await? {
        drop(tasks);
        stop_tracing(parts.tracing).await;
        info!("meshlimit stopped before its first config loaded");
        return Ok(());
    }
    let (health, reporter, health_service) = start_health(&settings, &parts, &mut tasks).await;
    let grpc_tls = load_tls(settings.grpc_tls.clone(), Protocols::Grpc)?;
    let http_tls = load_tls(settings.http_tls.clone(), Protocols::Http)?;
    let operator = start_operator(&settings, &parts, &health, &mut tasks);
    log_serving(&settings, &listeners, &parts, (&grpc_tls, &http_tls))?;
    let (grpc, ports) = listeners.split(http_tls);
    // The operator endpoints stop only after gRPC has drained.
    let http_stop = spawn_operator_servers(&settings, ports, &operator, &parts, &mut tasks);
    // Quota streams last as long as their Envoy: new ones are refused once draining, open
    // ones end with the drain's delay, so that the drain of calls does not wait for them.
    let (quota_drain, quota_stage) = watch::channel(Drain::Serving);
    let drain = drain_signal(&settings, stopped, health, reporter, quota_drain);
    tasks.keep(spawn_quota_refresh(parts.quotas.clone()));
    let grpc = GrpcServer {
        listener: grpc,
        tls: grpc_tls,
        health: health_service,
        quota_stage,
    };
    let grpc = grpc.serve(&settings, &parts, drain);

    // The shutdown, in order: gRPC drains, the background tasks stop, then the operator
    // endpoints.
    let grpc = Tasks::run(grpc).await;
    tasks.stop_background();
    let _ = http_stop.send(true);
    tasks.join_operator().await.map_err(Error::Task)?;
    grpc.map_err(Error::Task)?;
    stop_tracing(parts.tracing).await;
    info!("meshlimit stopped");
    Ok(())
}

/// What the gRPC port serves with, besides the service.
struct GrpcServer<H> {
    /// `--grpc-addr`, or a Unix socket.
    listener: Listener,
    /// `--grpc-tls-*`, if any.
    tls: Option<Arc<TlsSource>>,
    /// gRPC health.
    health: HealthServer<H>,
    /// The quota service's stage of the drain.
    quota_stage: watch::Receiver<Drain>,
}

impl<H: Health> GrpcServer<H> {
    /// The server: the rate-limit service, gRPC health, the quota service and reflection;
    /// it stops accepting once `drain` completes, then drains (at most
    /// [`Settings::drain_timeout`]).
    fn serve(
        self,
        settings: &Settings,
        parts: &Parts,
        drain: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let quota_service = QuotaService::new(
            parts.quotas.clone(),
            settings.request_caps,
            settings.rlqs_assignment_ttl,
            self.quota_stage,
        );
        let routes = GrpcRoutes::new(
            Rls::new(parts.service.clone())
                .with_response_headers(settings.response_headers.clone())
                .with_draft_fields(settings.draft_headers)
                .with_traces(parts.traces())
                .with_give_back(settings.give_back.clone())
                .into_server(),
            self.health,
            quota_service.into_server(),
            crate::grpc::reflection_servers(),
        );
        let options = ConnectionOptions {
            max_age: settings.grpc_max_connection_age,
            max_age_grace: settings.grpc_max_connection_age_grace,
            http2_only: true,
            tls: self.tls,
            ..ConnectionOptions::new(settings.idle_timeout)
        };
        net::serve(
            self.listener,
            routes,
            options,
            parts.connections.clone(),
            drain,
            settings.drain_timeout,
        )
    }
}

/// Spawns the wait for `shutdown` into `tasks`; the receiver turns true when it completes.
fn follow_shutdown(
    tasks: &mut Tasks,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> watch::Receiver<bool> {
    let (stop, stopped) = watch::channel(false);
    tasks.spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    stopped
}

/// Health as the server starts serving, and the task keeping gRPC health and the store's
/// upkeep going (in `tasks`); also starts the statsd sink, if any. Returns the drain's
/// flag, the gRPC health reporter and its service.
async fn start_health(
    settings: &Settings,
    parts: &Parts,
    tasks: &mut Tasks,
) -> (http::Health, HealthReporter, HealthServer<impl Health>) {
    let metrics = parts.metrics.clone();
    if let Some(statsd) = settings.statsd.clone() {
        tasks.keep(statsd::spawn(metrics, statsd));
    }
    let health = http::Health::new();
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let history = &parts.history;
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
    tasks.keep(spawn_maintenance(
        parts.service.store().clone(),
        reporter.clone(),
        health.clone(),
        config_ready,
    ));
    (health, reporter, health_service)
}

/// Logs the addresses served and how.
///
/// # Errors
/// An operator listener without an address.
fn log_serving(
    settings: &Settings,
    listeners: &Listeners,
    parts: &Parts,
    (grpc_tls, http_tls): (&Option<Arc<TlsSource>>, &Option<Arc<TlsSource>>),
) -> Result<(), Error> {
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
        max_connections = parts.connections.max(),
        grpc_tls = grpc_tls.is_some(),
        http_tls = http_tls.is_some(),
        "meshlimit serving"
    );
    Ok(())
}

/// Completes when the gRPC server is to stop accepting: once `stopped` turns true, health
/// turns bad and new quota streams are refused; after the drain's delay, open quota
/// streams are closed.
fn drain_signal(
    settings: &Settings,
    mut stopped: watch::Receiver<bool>,
    health: http::Health,
    reporter: HealthReporter,
    quota_drain: watch::Sender<Drain>,
) -> impl Future<Output = ()> + Send + 'static {
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
}

/// Sends the last spans, if tracing is on.
async fn stop_tracing(tracing: Option<Tracing>) {
    if let Some(tracing) = tracing {
        tracing.shutdown().await;
    }
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

/// The TLS source for `files`, watched for changes; `None` without files.
fn load_tls(
    files: Option<TlsFiles>,
    protocols: Protocols,
) -> Result<Option<Arc<TlsSource>>, Error> {
    Ok(files.map(|f| TlsSource::load(f, protocols)).transpose()?)
}
