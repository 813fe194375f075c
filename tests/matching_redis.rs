//! The conformance table (tests/conformance/cases.rs) on the Redis store: a real
//! `redis-server` per test, the scripts reading the manual clock's time
//! ([`TimeSource::Caller`]) so that every case is as deterministic as on the embedded
//! store. The over-limit cache is on, as always, so its answers are checked too.

mod support;

#[path = "conformance/cases.rs"]
mod cases;

use std::time::Duration;

use meshlimit::clock::ManualClock;
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;
use meshlimit::store::redis::{RedisOptions, TimeSource};
use meshlimit::store::{RedisStore, Store};
use support::redis::RedisServer;

/// The service on a Redis store over its own `redis-server`, kept alive beside it.
fn service(files: &[(&str, &str)], algorithm: Algorithm) -> (Service, ManualClock, RedisServer) {
    let redis = RedisServer::start();
    let options = RedisOptions {
        time: TimeSource::Caller,
        // Generous: a loaded CI machine must not turn a slow answer into a failure.
        timeout: Duration::from_secs(10),
        ..RedisOptions::new(redis.url())
    };
    let (service, clock) = support::service_on(files, algorithm, |clock| {
        Store::Redis(RedisStore::new(options, clock).expect("valid URL"))
    });
    (service, clock, redis)
}
