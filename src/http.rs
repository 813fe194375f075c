//! The operator's HTTP endpoints (axum, on the server's runtime).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;

use crate::metrics::{self, Metrics};
use crate::store::Store;

/// Whether the server answers as healthy; cleared while draining.
#[derive(Debug, Clone, Default)]
pub struct Health(Arc<AtomicBool>);

impl Health {
    /// A health flag, initially healthy.
    pub fn new() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }

    /// Marks the server healthy or not.
    pub fn set(&self, healthy: bool) {
        self.0.store(healthy, Ordering::SeqCst);
    }

    /// The current state.
    pub fn healthy(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// `GET /healthcheck`: 200 `OK` when serving, 500 otherwise (the Go server's contract).
/// While Redis is unreachable the body says so: 500 under `--redis-failure error`, 200
/// under `allow` or `local`, which still answer.
///
/// `GET /metrics`: the service's statistics for Prometheus (see [`crate::metrics`]).
pub fn router(health: Health, store: Store, metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .route(
            "/metrics",
            get(move || std::future::ready(scrape(&metrics))),
        )
        .with_state((health, store))
}

fn scrape(metrics: &Metrics) -> ([(header::HeaderName, &'static str); 1], String) {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        metrics.render(),
    )
}

async fn healthcheck(State((health, store)): State<(Health, Store)>) -> (StatusCode, String) {
    if !health.healthy() {
        return (StatusCode::INTERNAL_SERVER_ERROR, "draining".into());
    }
    match store.health() {
        Ok(()) => (StatusCode::OK, "OK".into()),
        Err(why) if store.serving() => (
            StatusCode::OK,
            format!("OK (degraded: Redis unreachable, answering by the failure policy: {why})"),
        ),
        Err(why) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("Redis unreachable: {why}"),
        ),
    }
}
