//! The operator's HTTP endpoints (axum, on the server's runtime).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

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
pub fn router(health: Health) -> Router {
    Router::new()
        .route("/healthcheck", get(healthcheck))
        .with_state(health)
}

async fn healthcheck(State(health): State<Health>) -> (StatusCode, &'static str) {
    if health.healthy() {
        (StatusCode::OK, "OK")
    } else {
        (StatusCode::INTERNAL_SERVER_ERROR, "draining")
    }
}
