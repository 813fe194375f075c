//! The store configurations the conformance table runs on, and the service each builds.
//!
//! Redis deployments are started once per test binary ([`Shared`]) and emptied for each
//! service, so that every case starts from nothing, as on a fresh embedded store; each
//! serves one service at a time, so a test drops its first service before building
//! another. Every
//! Redis store reads the manual clock's time ([`TimeSource::Caller`]), so its cases are as
//! deterministic as the embedded store's; the over-limit cache is on, as always, so its
//! answers are checked too.

use std::sync::Arc;
use std::time::Duration;

use meshlimit::clock::{Clock, ManualClock};
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;
use meshlimit::store::redis::{FailurePolicy, RedisOptions, TimeSource};
use meshlimit::store::{RedisStore, Store};

use crate::support;
use crate::support::redis::{RedisCluster, RedisServer, Shared, Turn};

/// A store configuration of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setup {
    /// The embedded store (`--store memory`).
    Embedded,
    /// One Redis server.
    Redis,
    /// One Redis server, each replica leasing [`LEASE`] tokens ahead (`--redis-lease`).
    RedisLeased,
    /// Redis unreachable under `--redis-failure local`: the replica's embedded fallback
    /// decides every request. The fallback is per replica, and a case has one replica, so
    /// it answers as the embedded store does (several replicas: tests/redis_store.rs).
    LocalFallback,
    /// A Redis Cluster of three masters. A request's keys share its domain, the hash tag,
    /// so one master decides it, as one server would.
    Cluster,
}

/// Tokens a [`Setup::RedisLeased`] replica leases beyond a request's own.
pub const LEASE: u32 = 4;

/// The server of [`Setup::Redis`].
static REDIS: Shared<RedisServer> = Shared::new();
/// The server of [`Setup::RedisLeased`]: its own, so that it takes turns only with itself.
static LEASED: Shared<RedisServer> = Shared::new();
/// The cluster of [`Setup::Cluster`].
static CLUSTER: Shared<RedisCluster> = Shared::new();

/// What a service of the table needs kept alive beside it.
pub enum Holds {
    /// Nothing (the embedded store).
    Nothing,
    /// A turn on a shared Redis server.
    Server {
        /// Held, not read: no other test uses the server meanwhile.
        _turn: Turn<RedisServer>,
    },
    /// A turn on the shared cluster.
    Cluster {
        /// Held, not read: no other test uses the cluster meanwhile.
        _turn: Turn<RedisCluster>,
    },
    /// The unreachable Redis of [`Setup::LocalFallback`].
    Unreachable {
        /// Held, not read: keeps the port refusing, and checks the store on drop.
        _redis: Unreachable,
    },
}

/// The service on `setup`'s store, over in-memory files `(name, yaml)`, with a manual
/// clock standing at [`support::START`], and what must outlive it.
pub fn service(
    setup: Setup,
    files: &[(&str, &str)],
    algorithm: Algorithm,
) -> (Service, ManualClock, Holds) {
    match setup {
        Setup::Embedded => {
            let (service, clock) = support::service(files, algorithm);
            (service, clock, Holds::Nothing)
        }
        Setup::Redis | Setup::RedisLeased => {
            let shared = if setup == Setup::Redis {
                &REDIS
            } else {
                &LEASED
            };
            let turn = shared.take();
            let mut options = options(turn.deployment.url());
            if setup == Setup::RedisLeased {
                options.lease = LEASE;
                // Never expiring within a test: an expiry would lose the leased tokens
                // after a real-time wait, so the counts would depend on machine speed.
                options.lease_ttl = Duration::from_secs(3600);
            }
            let (service, clock) = redis_service(files, algorithm, options);
            (service, clock, Holds::Server { _turn: turn })
        }
        Setup::Cluster => {
            let turn = CLUSTER.take();
            let (service, clock) = redis_service(files, algorithm, options(turn.deployment.url()));
            (service, clock, Holds::Cluster { _turn: turn })
        }
        Setup::LocalFallback => {
            let mut unreachable = Unreachable::new();
            let options = RedisOptions {
                failure: FailurePolicy::Local,
                ..options(unreachable.url())
            };
            let (service, clock) = redis_service(files, algorithm, options);
            unreachable.store = match service.store() {
                Store::Redis(store) => Some(store.clone()),
                Store::Memory(_) => unreachable!("a Redis store was built"),
            };
            (
                service,
                clock,
                Holds::Unreachable {
                    _redis: unreachable,
                },
            )
        }
    }
}

/// The table's Redis options for `url`.
fn options(url: String) -> RedisOptions {
    RedisOptions {
        time: TimeSource::Caller,
        // Generous: a loaded CI machine must not turn a slow answer into a failure.
        timeout: Duration::from_secs(10),
        ..RedisOptions::new(url)
    }
}

/// The service on a Redis store with `options`.
fn redis_service(
    files: &[(&str, &str)],
    algorithm: Algorithm,
    options: RedisOptions,
) -> (Service, ManualClock) {
    support::service_on(files, algorithm, |clock: Arc<dyn Clock>| {
        Store::Redis(RedisStore::new(options, clock).expect("valid URL"))
    })
}

/// A loopback port bound but not listening: connecting is refused at once, and no other
/// process (a Redis of another test, say) can take the port while this is held. On drop,
/// checks that Redis decided nothing: every request the store sent was a failure, so the
/// embedded fallback answered it.
pub struct Unreachable {
    /// The bound, never listening socket whose port the store's URL names.
    socket: socket2::Socket,
    /// The store whose decisions are checked, once built.
    store: Option<RedisStore>,
}

impl Unreachable {
    fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
        let loopback = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
        socket
            .bind(&loopback.into())
            .expect("binding a loopback port");
        Self {
            socket,
            store: None,
        }
    }

    fn url(&self) -> String {
        let addr = self
            .socket
            .local_addr()
            .expect("bound")
            .as_socket()
            .expect("IP");
        format!("redis://{addr}")
    }
}

impl Drop for Unreachable {
    fn drop(&mut self) {
        if let Some(store) = &self.store
            && !std::thread::panicking()
        {
            let stats = store.stats();
            assert!(
                stats.misses == stats.errors && stats.over_limit_hits == 0 && stats.lease_hits == 0,
                "Redis is unreachable, yet it decided: {stats:?}"
            );
        }
    }
}
