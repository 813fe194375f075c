//! gRPC health: the names it answers for, and the periodic task that keeps it following
//! the store and the drain (and runs the store's upkeep).

use std::time::Duration;

use tokio::task::JoinHandle;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::grpc::HEALTH_SERVICE_NAME;
use crate::http::Health;
use crate::store::Store;

/// The full gRPC name of the rate-limit service, as health checks ask for it.
const RLS_SERVICE_NAME: &str = <crate::grpc::RateLimitServer as tonic::server::NamedService>::NAME;

/// The full gRPC name of the rate limit quota service.
const RLQS_SERVICE_NAME: &str = <crate::rlqs::service::Server as tonic::server::NamedService>::NAME;

/// The names gRPC health answers for: overall (""), the Go server's `ratelimit`, and
/// the full names of both services.
const HEALTH_NAMES: [&str; 4] = ["", HEALTH_SERVICE_NAME, RLS_SERVICE_NAME, RLQS_SERVICE_NAME];

/// Sets every name of [`HEALTH_NAMES`] to `SERVING` or `NOT_SERVING`.
pub(super) async fn set_grpc_health(reporter: &HealthReporter, serving: bool) {
    let status = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for name in HEALTH_NAMES {
        reporter.set_service_status(name, status).await;
    }
}

/// Every 250 ms: gRPC health follows the store (`NOT_SERVING` while nothing can answer),
/// the config (`NOT_SERVING` while `config_ready` says no) and the drain (`health`);
/// every second, the store's upkeep. Runs until aborted.
pub(super) fn spawn_maintenance(
    store: Store,
    reporter: HealthReporter,
    health: Health,
    config_ready: impl Fn() -> bool + Send + 'static,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(250));
        let mut serving = true;
        for round in 0u64.. {
            tick.tick().await;
            if round % 4 == 0 {
                store.maintain();
            }
            let now = store.serving() && health.healthy() && config_ready();
            if now != serving {
                serving = now;
                set_grpc_health(&reporter, serving).await;
            }
        }
    })
}
