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

use crate::clock::{Clock, SystemClock};
use crate::config::{self, render_errors};
use crate::grpc::{HEALTH_SERVICE_NAME, Rls};
use crate::http::{self, Health};
use crate::rules::Algorithm;
use crate::service::Service;
use crate::store::redis::{RedisOptions, UrlError};
use crate::store::{MemoryStore, RedisStore, Store};

/// The full gRPC name of the rate-limit service, as health checks ask for it.
const RLS_SERVICE_NAME: &str = <envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<Rls> as tonic::server::NamedService>::NAME;

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
    /// The gRPC server failed.
    #[error("gRPC server: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// The HTTP server failed.
    #[error("HTTP server: {0}")]
    Http(#[from] std::io::Error),
    /// The Redis URL is invalid.
    #[error("{0}")]
    Redis(#[from] UrlError),
}

/// Builds the service for `settings` with the real clock; loads the config once.
///
/// # Errors
/// The config is invalid.
pub fn build_service(settings: &Settings) -> Result<Service, Error> {
    let config = config::load(&settings.config).map_err(|e| Error::Config(render_errors(&e)))?;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = match &settings.redis {
        None => Store::Memory(MemoryStore::new(settings.max_buckets, clock.clone())),
        Some(options) => Store::Redis(RedisStore::new(options.clone(), clock.clone())?),
    };
    Ok(Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        clock,
        settings.algorithm,
    ))
}

/// Serves until `shutdown` completes, then drains in-flight calls and returns.
///
/// # Errors
/// Invalid initial config, or a server failing.
pub async fn run(
    settings: Settings,
    grpc: TcpListener,
    http_listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let service = build_service(&settings)?;
    let reloader = crate::reload::spawn(
        settings.config.clone(),
        service.config().clone(),
        settings.reload_debounce,
    )?;
    service.metrics().follow_reloads(reloader.status().clone());
    let health = Health::new();
    let (reporter, health_service) = tonic_health::server::health_reporter();
    reporter.set_serving::<envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer<Rls>>().await;
    reporter
        .set_service_status(HEALTH_SERVICE_NAME, tonic_health::ServingStatus::Serving)
        .await;

    let store = service.store().clone();
    let metrics = service.metrics().clone();
    let maintenance = {
        let store = store.clone();
        let reporter = reporter.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut serving = true;
            for round in 0u64.. {
                tick.tick().await;
                if round % 4 == 0 {
                    store.maintain();
                }
                // gRPC health follows the store: NOT_SERVING while nothing can answer.
                if store.serving() != serving {
                    serving = !serving;
                    let status = if serving {
                        tonic_health::ServingStatus::Serving
                    } else {
                        tonic_health::ServingStatus::NotServing
                    };
                    for name in ["", HEALTH_SERVICE_NAME, RLS_SERVICE_NAME] {
                        reporter.set_service_status(name, status).await;
                    }
                }
            }
        })
    };

    // One shutdown signal fanned out to both servers.
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|&s| s).await;
    };

    info!(
        grpc = %grpc.local_addr()?,
        http = %http_listener.local_addr()?,
        config = %settings.config.display(),
        "meshlimit serving"
    );
    let http_health = health.clone();
    let http_stop = stopped(stop_rx.clone());
    let http_server = tokio::spawn(async move {
        axum::serve(http_listener, http::router(http_health, store, metrics))
            .with_graceful_shutdown(http_stop)
            .await
    });
    let grpc_stop = {
        let rx = stop_rx.clone();
        let health = health.clone();
        async move {
            stopped(rx).await;
            health.set(false);
            reporter
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
        }
    };
    let grpc_result = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(Rls::new(service).into_server())
        .serve_with_incoming_shutdown(crate::grpc::incoming(grpc), grpc_stop)
        .await;
    maintenance.abort();
    let http_result = http_server.await;
    grpc_result?;
    match http_result {
        Ok(result) => result?,
        Err(join) => return Err(Error::Http(std::io::Error::other(join))),
    }
    info!("meshlimit stopped");
    Ok(())
}
