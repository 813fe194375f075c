//! A Redis Cluster as the store routes to it: its own slot map (from `CLUSTER SLOTS`) and
//! one [`Node`] per master, each with its own connection and circuit.
//!
//! Why not redis-rs' cluster connection: it runs every node's requests through one task
//! that stops serving all of them while it rebuilds its slot map or reconnects to a dead
//! node, so one dead master held up (and timed out) requests for the live ones. Here a
//! request goes to the master of its key's slot directly; a dead master fails only the
//! requests for its own slots, fast (its circuit is open), while the map is refreshed in
//! the background until the cluster has promoted a replica in its place.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use redis::Value;

use super::conn;
use super::node::{Node, Source, kind_of};
use super::slots::{SlotMap, parse_slots, slot};
use crate::error::{StoreError, StoreErrorKind};

/// Least time between two background refreshes of the slot map.
const REFRESH_EVERY: Duration = Duration::from_millis(200);

/// A Redis Cluster; see the module docs.
pub(crate) struct Cluster {
    /// The seed nodes' `host:port`, from the URL.
    seeds: Vec<String>,
    /// What goes before `host:port` in a node's URL: scheme and credentials.
    url_prefix: String,
    /// What goes after it (`/#insecure` for unchecked TLS).
    url_suffix: String,
    /// The CA and client certificate of TLS connections to the nodes, if given.
    certs: Option<redis::TlsCertificates>,
    /// Longest a node's connection or reply is waited for, and a slot map read per node.
    timeout: Duration,
    /// Which master serves each slot, as last read; swapped whole by a refresh, so that
    /// requests read it without a lock.
    map: ArcSwap<SlotMap>,
    /// Every node met so far (seeds, masters), by `host:port`; pruned to the seeds and
    /// the current masters at each refresh.
    nodes: Mutex<HashMap<String, Arc<Node>>>,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// When the last background refresh started.
    last_refresh: Mutex<Option<tokio::time::Instant>>,
    /// Why the last refresh failed (no node answered `CLUSTER SLOTS`); cleared by a success.
    refresh_error: Mutex<Option<StoreError>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("seeds", &self.seeds)
            .field("masters", &self.map.load().masters())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster reached through `seeds` (`host:port`), each node's URL being
    /// `<url_prefix>host:port<url_suffix>`, its TLS connections made with `certs` when
    /// given. Connects to nothing yet.
    ///
    /// # Errors
    /// A node URL that redis-rs rejects.
    pub(crate) fn new(
        seeds: Vec<String>,
        (url_prefix, url_suffix): (String, String),
        certs: Option<redis::TlsCertificates>,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let cluster = Self {
            seeds,
            url_prefix,
            url_suffix,
            certs,
            timeout,
            map: ArcSwap::default(),
            nodes: Mutex::new(HashMap::new()),
            refreshing: tokio::sync::Mutex::new(()),
            last_refresh: Mutex::new(None),
            refresh_error: Mutex::new(None),
        };
        for seed in &cluster.seeds {
            cluster.node_at(seed)?;
        }
        Ok(cluster)
    }

    /// The node at `addr` (`host:port`), made on first use.
    ///
    /// # Errors
    /// A URL that redis-rs rejects: a node that cannot be reached.
    pub(crate) fn node_at(&self, addr: &str) -> Result<Arc<Node>, StoreError> {
        let mut nodes = self.nodes.lock();
        if let Some(node) = nodes.get(addr) {
            return Ok(node.clone());
        }
        let url = format!("{}{addr}{}", self.url_prefix, self.url_suffix);
        let client = conn::client(&url, self.certs.as_ref()).map_err(|e| {
            StoreError::new(
                StoreErrorKind::Unreachable,
                format!("Redis Cluster node {addr}: {e}"),
            )
        })?;
        let node = Arc::new(Node::new(
            addr.to_string(),
            Source::Client(client),
            self.timeout,
        ));
        nodes.insert(addr.to_string(), node.clone());
        Ok(node)
    }

    /// The master serving `key`'s slot; reads the slot map first when it has none for it.
    ///
    /// # Errors
    /// No node answers `CLUSTER SLOTS`, or no master serves the slot.
    pub(crate) async fn owner(self: &Arc<Self>, key: &str) -> Result<Arc<Node>, StoreError> {
        let slot = slot(key.as_bytes());
        let map = self.map.load();
        if let Some(node) = map.owner(slot) {
            return Ok(node.clone());
        }
        if !map.ranges.is_empty() {
            // A map without this slot (being moved, or not assigned): read it again in the
            // background rather than on every request's time.
            self.refresh_soon();
            return Err(StoreError::new(
                StoreErrorKind::Unreachable,
                format!("Redis Cluster: no master serves slot {slot} (cluster down?)"),
            ));
        }
        // No map yet: read it now. Boxed: rare, and large (it may try every node).
        Box::pin(self.refresh()).await?;
        self.map.load().owner(slot).cloned().ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::Unreachable,
                format!("Redis Cluster unreachable: no master serves slot {slot} (cluster down?)"),
            )
        })
    }

    /// The masters serving slots now.
    pub(crate) fn masters(&self) -> Vec<Arc<Node>> {
        self.map.load().masters()
    }

    /// Whether `node` serves slots now.
    pub(crate) fn serves(&self, node: &Node) -> bool {
        self.map
            .load()
            .ranges
            .iter()
            .any(|(_, _, n)| std::ptr::eq(&**n, node))
    }

    /// Why the cluster as a whole cannot be used: no slot map, and the last attempt to
    /// read one failed.
    pub(crate) fn unreachable(&self) -> Option<StoreError> {
        if self.map.load().ranges.is_empty() {
            self.refresh_error.lock().clone()
        } else {
            None
        }
    }

    /// A key named `name` in one of `node`'s slots after `namespace`, for its probe writes
    /// and its marker: the first `{N}` hash tag in its slots, the same while they are.
    pub(crate) fn node_key(&self, node: &Node, namespace: &str, name: &str) -> Option<String> {
        let map = self.map.load();
        (0..100_000).find_map(|n| {
            let key = format!(
                "{namespace}{}{name}{{{n}}}",
                crate::bucket_key::REDIS_PREFIX
            );
            let owner = map.owner(slot(key.as_bytes()))?;
            std::ptr::eq(&**owner, node).then_some(key)
        })
    }

    /// Refreshes the slot map in the background, unless one was started less than
    /// [`REFRESH_EVERY`] ago.
    pub(crate) fn refresh_soon(self: &Arc<Self>) {
        let now = tokio::time::Instant::now();
        {
            let mut last = self.last_refresh.lock();
            if last.is_some_and(|at| now.duration_since(at) < REFRESH_EVERY) {
                return;
            }
            *last = Some(now);
        }
        let cluster = self.clone();
        tokio::spawn(async move {
            let _ = cluster.refresh().await;
        });
    }

    /// Reads the slot map from the first node that answers: masters that are up first,
    /// then the seeds, then the rest, each within the timeout.
    ///
    /// # Errors
    /// No node answered; the error has the kind of the last node's failure.
    pub(crate) async fn refresh(&self) -> Result<(), StoreError> {
        let Ok(_one) = self.refreshing.try_lock() else {
            // Another refresh is running: its outcome is this one's.
            let _done = self.refreshing.lock().await;
            return self.refresh_error.lock().clone().map_or(Ok(()), Err);
        };
        let mut candidates: Vec<Arc<Node>> = Vec::new();
        let mut add = |node: Arc<Node>| {
            if !candidates.iter().any(|n| Arc::ptr_eq(n, &node)) {
                candidates.push(node);
            }
        };
        let masters = self.masters();
        masters
            .iter()
            .filter(|n| n.circuit.is_up())
            .for_each(|n| add(n.clone()));
        for seed in &self.seeds {
            if let Ok(node) = self.node_at(seed) {
                add(node);
            }
        }
        let known: Vec<Arc<Node>> = self.nodes.lock().values().cloned().collect();
        known.into_iter().for_each(&mut add);
        let mut last_error = StoreError::new(StoreErrorKind::Unreachable, "no cluster node to ask");
        for node in candidates {
            let asked = tokio::time::timeout(self.timeout, self.read_slots(&node)).await;
            let read = asked.unwrap_or_else(|_| {
                Err(StoreError::new(
                    StoreErrorKind::TimedOut,
                    "Redis timed out reading the slot map",
                ))
            });
            match read {
                Ok(ranges) => {
                    self.install(ranges);
                    *self.refresh_error.lock() = None;
                    return Ok(());
                }
                Err(e) => {
                    last_error = StoreError::new(e.kind, format!("{}: {}", node.name, e.message));
                }
            }
        }
        let error = StoreError::new(
            last_error.kind,
            format!("Redis Cluster unreachable: {}", last_error.message),
        );
        *self.refresh_error.lock() = Some(error.clone());
        Err(error)
    }

    /// Replaces the slot map and forgets nodes that are neither seeds nor masters.
    fn install(&self, ranges: Vec<(u16, u16, Arc<Node>)>) {
        let mut map = SlotMap { ranges };
        map.ranges.sort_by_key(|r| r.0);
        let masters = map.masters();
        self.map.store(Arc::new(map));
        self.nodes.lock().retain(|addr, node| {
            self.seeds.contains(addr) || masters.iter().any(|m| Arc::ptr_eq(m, node))
        });
    }

    /// `CLUSTER SLOTS` from `node`, as ranges and their masters.
    /// Errors are in redis-rs' words, without the node's name (the caller adds it).
    async fn read_slots(&self, node: &Node) -> Result<Vec<(u16, u16, Arc<Node>)>, StoreError> {
        let failed = |e: redis::RedisError| {
            node.reset();
            StoreError::new(kind_of(&e), e.to_string())
        };
        let mut conn = node.conn().await.map_err(failed)?;
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        // A node that does not know its own address answers an empty host.
        let asked_host = node.name.rsplit_once(':').map_or("", |(h, _)| h);
        let ranges = parse_slots(&reply, asked_host)
            .map_err(|why| StoreError::new(StoreErrorKind::MalformedReply, why))?;
        if ranges.is_empty() {
            // A cluster whose slots are not assigned yet: nothing to route to.
            return Err(StoreError::new(
                StoreErrorKind::Unreachable,
                "CLUSTER SLOTS lists no slots",
            ));
        }
        ranges
            .into_iter()
            .map(|(first, last, addr)| Ok((first, last, self.node_at(&addr)?)))
            .collect()
    }
}
