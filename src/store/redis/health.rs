//! Whether each Redis node decides: circuits opened by failures, probe writes that close
//! them, background checks that notice a failing node without traffic (and a restarted
//! one, [`super::restarts`]), and the store's health as the operator endpoints show it.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use redis::Value;

use super::node::{Node, timed_out};
use super::{FailurePolicy, Inner, RedisStore};
use crate::clock::Stopwatch;
use crate::error::StoreError;
use crate::store::StoreHealth;

/// How often, at most, a node whose circuit is open is probed.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Lifetime of a probe key: long enough to be written, short enough to leave nothing.
const PROBE_TTL_MS: u64 = 2000;

/// One Redis node's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// `host:port`, or the URL without its password.
    pub name: String,
    /// Why its circuit is open (its requests answered by the failure policy); `None`
    /// while it decides.
    pub down: Option<String>,
    /// The latest background probe write's round trip in microseconds; 0 before the first.
    pub round_trip_us: u64,
}

impl RedisStore {
    /// `node` cannot decide because of `why`: its requests go to the failure policy
    /// until a probe write succeeds.
    pub(super) fn trip(&self, node: &Arc<Node>, why: &StoreError) {
        node.circuit
            .open(&node.name, &why.message, self.inner.options.failure);
        if let Some(cluster) = self.inner.backend.cluster() {
            // A dead master's slots move to a replica: find out as soon as they do.
            cluster.refresh_soon();
        }
        self.spawn_probe(node.clone());
    }

    /// Whether Redis decides: healthy; degraded while some nodes (a Cluster's masters) do
    /// not, or none does but the failure policy answers; down when nothing answers.
    pub fn health(&self) -> StoreHealth {
        let inner = &*self.inner;
        let policy = inner.options.failure;
        let whole = |why: String| match policy {
            FailurePolicy::Error => StoreHealth::Down(why),
            _ => StoreHealth::Degraded(format!(
                "{why}; answering by the failure policy ({})",
                policy.name()
            )),
        };
        if let Some(why) = inner.backend.cluster().and_then(|c| c.unreachable()) {
            return whole(why.message);
        }
        let nodes = inner.backend.nodes();
        let down: Vec<String> = nodes
            .iter()
            .filter(|n| !n.circuit.is_up())
            .map(|n| n.circuit.reason())
            .collect();
        if down.is_empty() {
            StoreHealth::Healthy
        } else if down.len() == nodes.len() {
            whole(down.join("; "))
        } else {
            StoreHealth::Degraded(format!(
                "{} of {} Redis Cluster masters cannot decide, their slots answer by the \
                 failure policy ({}): {}",
                down.len(),
                nodes.len(),
                policy.name(),
                down.join("; ")
            ))
        }
    }

    /// Each node (a Cluster's masters) as the operator page shows it.
    pub fn nodes(&self) -> Vec<NodeStatus> {
        self.inner
            .backend
            .nodes()
            .iter()
            .map(|node| {
                let up = node.circuit.is_up();
                NodeStatus {
                    name: node.name.clone(),
                    down: (!up).then(|| node.circuit.reason()),
                    round_trip_us: node.round_trip_us.load(Relaxed),
                }
            })
            .collect()
    }

    /// Cache upkeep, a check of every node that decides (so health notices a failing node
    /// without traffic, at startup too) and a probe of every node that does not; a
    /// Cluster's slot map is read again. Call about once a second, on the runtime.
    pub fn maintain(&self) {
        let inner = &*self.inner;
        if let Some(cluster) = inner.backend.cluster() {
            cluster.refresh_soon();
        }
        for node in inner.backend.nodes() {
            if node.circuit.is_up() {
                self.spawn_check(node);
            } else {
                self.spawn_probe(node);
            }
        }
        self.follow_resets();
        inner.over_limit_cache.run_pending_tasks();
        inner.leases.run_pending_tasks();
        inner.fallback.maintain();
    }

    /// Until `node` takes a write again: one probe at a time, backing off to
    /// [`PROBE_EVERY`]. Ends early when a Cluster no longer gives the node any slot (a
    /// replica took its place).
    pub(super) fn spawn_probe(&self, node: Arc<Node>) {
        if !node.circuit.start_probe() {
            return;
        }
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            loop {
                tokio::time::sleep(delay).await;
                if let Some(cluster) = inner.backend.cluster() {
                    cluster.refresh_soon();
                    if !cluster.serves(&node) {
                        node.circuit.end_probe();
                        return;
                    }
                }
                match inner.probe_write(&node).await {
                    Ok(()) => {
                        // The node is back, maybe as another server: said before it
                        // decides again.
                        inner.follow_run_id(&node).await;
                        // Done probing before closing: a failure from here on starts a
                        // new probe.
                        node.circuit.end_probe();
                        node.circuit.close(&node.name);
                        return;
                    }
                    Err(why) => node.circuit.set_reason(&why.message),
                }
                delay = (delay * 2).min(PROBE_EVERY);
            }
        });
    }

    /// While `node` decides: one background probe write, which opens its circuit when it
    /// fails, then a look at whether its server changed since the last check.
    fn spawn_check(&self, node: Arc<Node>) {
        if !node.circuit.start_probe() {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            let result = store.inner.probe_write(&node).await;
            if result.is_ok() {
                store.inner.follow_run_id(&node).await;
            }
            node.circuit.end_probe();
            if let Err(why) = result {
                store.trip(&node, &why);
            }
        });
    }
}

impl Inner {
    /// Writes a short-lived key on `node`, within the timeout: a node that answers but
    /// refuses writes (out of memory, read-only, ...) cannot decide either.
    async fn probe_write(&self, node: &Node) -> Result<(), StoreError> {
        let Some(key) = self
            .backend
            .node_key(node, &self.options.key_prefix, "probe")
        else {
            return Ok(());
        };
        let write = async {
            let mut conn = node.conn().await?;
            let started = Stopwatch::start();
            let written = redis::cmd("SET")
                .arg(&key)
                .arg(1)
                .arg("PX")
                .arg(PROBE_TTL_MS)
                .query_async::<Value>(&mut conn)
                .await;
            let took = started.until(Stopwatch::start());
            let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
            node.round_trip_us.store(micros, Relaxed);
            written
        };
        let result = tokio::time::timeout(self.options.timeout, write)
            .await
            .unwrap_or_else(|_| Err(timed_out("writing a probe key")));
        result.map(drop).map_err(|e| {
            // Connect anew for the next probe (see `Inner::run`).
            node.reset();
            node.error(&e)
        })
    }
}
