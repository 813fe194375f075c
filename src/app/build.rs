//! Settings → config, clock and store → the [`Service`] that answers requests, and the
//! metrics counting it.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::reporter::ServerReporter;
use super::{Error, Settings};
use crate::clock::{Clock, SystemClock};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::service::Service;
use crate::store::{Bounds, MemoryStore, RedisStore, Store};

/// Builds the service for `settings` with the real clock, serving `config`, counted by
/// metrics of the service alone.
///
/// # Errors
/// The Redis URL is invalid.
pub fn build_service(settings: &Settings, config: Config) -> Result<Service, Error> {
    Ok(count(settings, uncounted(settings, config)?, None).0)
}

/// The service for `settings` with the real clock, serving `config`, not yet counted.
///
/// # Errors
/// The Redis URL is invalid.
pub(super) fn uncounted(settings: &Settings, config: Config) -> Result<Service, Error> {
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
    Ok(Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        clock,
        settings.algorithm,
    )
    .with_global_shadow(settings.global_shadow)
    .with_global_quota(settings.global_quota)
    .with_dynamic_metadata(settings.dynamic_metadata)
    .with_request_caps(settings.request_caps))
}

/// `service` counted by its metrics, which also show what `reporter` reads, if any; and
/// those metrics.
pub(super) fn count(
    settings: &Settings,
    service: Service,
    reporter: Option<ServerReporter>,
) -> (Service, Arc<Metrics>) {
    let metrics = Metrics::new(service.config().clone(), service.store().clone());
    let metrics = match reporter {
        Some(reporter) => metrics.with_reporter(reporter),
        None => metrics,
    };
    metrics.set_near_limit_ratio(settings.near_limit_ratio);
    metrics.set_max_metric_values(settings.max_metric_values);
    let metrics = Arc::new(metrics);
    (service.with_metrics(metrics.clone()), metrics)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn an_invalid_config_is_every_problem_under_one_heading() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/config/invalid/several_problems.yaml");
        let Err(errors) = crate::config::load(&path) else {
            panic!("the fixture must be invalid");
        };
        assert!(errors.len() > 1, "{errors:?}");
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            Error::Config(errors).to_string(),
            format!("invalid config:\n{}", lines.join("\n"))
        );
    }
}
