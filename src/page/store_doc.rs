//! The store's part of `state.json`: its health, the embedded store's size against its
//! bounds, Redis' nodes and caches.

use serde::Serialize;

use super::Page;
use crate::store::{Store, StoreHealth};

/// The store's state.
#[derive(Debug, Serialize)]
pub struct StoreDoc {
    /// `memory` or `redis`.
    pub kind: &'static str,
    /// `OK`, `degraded: why` or `down: why` (as `/healthcheck` says).
    pub health: String,
    /// The embedded store's size.
    pub memory: Option<MemoryDoc>,
    /// Redis' nodes and caches.
    pub redis: Option<RedisDoc>,
}

/// The embedded store's size and evictions.
#[derive(Debug, Serialize)]
pub struct MemoryDoc {
    /// Buckets held.
    pub buckets: u64,
    /// `--max-buckets`.
    pub max_buckets: u64,
    /// Bytes they count for.
    pub bytes: u64,
    /// `--max-store-bytes`.
    pub max_bytes: u64,
    /// Buckets evicted to respect a bound.
    pub evictions: u64,
    /// Of those, buckets not full again.
    pub evictions_weakened: u64,
    /// Holds and concurrency slots in force.
    pub holds: u64,
    /// Holds released unsettled after their TTL.
    pub holds_expired: u64,
}

/// Redis as the store sees it.
#[derive(Debug, Serialize)]
pub struct RedisDoc {
    /// `--redis-failure`.
    pub failure_policy: &'static str,
    /// Each node.
    pub nodes: Vec<NodeDoc>,
    /// Requests answered by the over-limit cache.
    pub over_limit_hits: u64,
    /// Requests answered from leased tokens.
    pub lease_hits: u64,
    /// Requests sent to Redis.
    pub misses: u64,
    /// Requests Redis failed to decide.
    pub errors: u64,
    /// Requests the failure policy answered.
    pub fallbacks: u64,
    /// Script calls that decided requests, failed ones included.
    pub calls: u64,
    /// Requests those calls carried.
    pub call_requests: u64,
    /// Time those calls took, summed, in seconds.
    pub call_seconds: f64,
}

/// One Redis node.
#[derive(Debug, Serialize)]
pub struct NodeDoc {
    /// `host:port`.
    pub name: String,
    /// Why its circuit is open; `None` while it decides.
    pub down: Option<String>,
    /// The latest probe's round trip in microseconds (0: none yet).
    pub round_trip_us: u64,
}

impl Page {
    /// The store's state now.
    pub(super) fn store_doc(&self) -> StoreDoc {
        let store = self.service.store();
        let health = match store.health() {
            StoreHealth::Healthy => "OK".to_string(),
            StoreHealth::Degraded(why) => format!("degraded: {why}"),
            StoreHealth::Down(why) => format!("down: {why}"),
        };
        let (memory, redis) = match store {
            Store::Memory(memory) => {
                let (stats, bounds) = (memory.stats(), memory.bounds());
                let doc = MemoryDoc {
                    buckets: stats.buckets,
                    max_buckets: bounds.buckets,
                    bytes: stats.bytes,
                    max_bytes: bounds.bytes,
                    evictions: stats.evictions,
                    evictions_weakened: stats.evictions_weakened,
                    holds: stats.holds,
                    holds_expired: stats.holds_expired,
                };
                (Some(doc), None)
            }
            Store::Redis(redis) => {
                let stats = redis.stats();
                let nodes = redis
                    .nodes()
                    .into_iter()
                    .map(|node| NodeDoc {
                        name: node.name,
                        down: node.down,
                        round_trip_us: node.round_trip_us,
                    })
                    .collect();
                let doc = RedisDoc {
                    failure_policy: redis.failure_policy().name(),
                    nodes,
                    over_limit_hits: stats.over_limit_hits,
                    lease_hits: stats.lease_hits,
                    misses: stats.misses,
                    errors: stats.errors,
                    fallbacks: stats.fallbacks,
                    calls: stats.calls,
                    call_requests: stats.call_requests,
                    call_seconds: stats.call_seconds(),
                };
                (None, Some(doc))
            }
        };
        StoreDoc {
            kind: store.kind(),
            health,
            memory,
            redis,
        }
    }
}
