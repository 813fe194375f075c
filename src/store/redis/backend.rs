//! The Redis nodes requests go to ([`Backend`]): one server (or the master Sentinel
//! names), or a Cluster's masters.

use std::sync::Arc;
use std::time::Duration;

use super::cluster::Cluster;
use super::conn::{SetupError, Target, redact};
use super::node::{Node, Source};
use crate::error::StoreError;

/// The Redis nodes requests go to: one, or a Cluster's masters.
#[derive(Debug)]
pub(crate) enum Backend {
    /// One server, or the master the sentinels name.
    One(Arc<Node>),
    /// A Redis Cluster, routed by slot.
    Cluster(Arc<Cluster>),
}

impl Backend {
    /// The nodes of `target`, `url` naming a single one in messages; connects to nothing.
    pub(crate) fn new(target: Target, url: &str, timeout: Duration) -> Result<Self, SetupError> {
        let one = |source| Backend::One(Arc::new(Node::new(redact(url), source, timeout)));
        match target {
            Target::Single(client) => Ok(one(Source::Client(client))),
            Target::Sentinel(sentinel) => {
                Ok(one(Source::Sentinel(tokio::sync::Mutex::new(sentinel))))
            }
            Target::Cluster {
                seeds,
                url_prefix,
                url_suffix,
                certs,
            } => Cluster::new(seeds, (url_prefix, url_suffix), certs, timeout)
                .map(|c| Backend::Cluster(Arc::new(c)))
                .map_err(|e| SetupError::Url(format!("{}: {}", redact(url), e.message))),
        }
    }

    /// The node that holds `key` (a Redis key).
    ///
    /// # Errors
    /// A Cluster whose slot map cannot be read, or that has no master for the slot.
    pub(crate) async fn node_for(&self, key: &str) -> Result<Arc<Node>, StoreError> {
        match self {
            Backend::One(node) => Ok(node.clone()),
            Backend::Cluster(cluster) => cluster.owner(key).await,
        }
    }

    /// The nodes requests go to now.
    pub(crate) fn nodes(&self) -> Vec<Arc<Node>> {
        match self {
            Backend::One(node) => vec![node.clone()],
            Backend::Cluster(cluster) => cluster.masters(),
        }
    }

    /// A key named `name` that `node` holds, for its probe writes (`probe`) and its
    /// marker (`alive`, [`super::restarts`]), after `namespace` (`--redis-key-prefix`) as
    /// every key of the store (`None`: it holds no slot any more).
    pub(crate) fn node_key(&self, node: &Node, namespace: &str, name: &str) -> Option<String> {
        match self {
            Backend::One(_) => Some(format!(
                "{namespace}{}{name}{{0}}",
                crate::bucket_key::REDIS_PREFIX
            )),
            Backend::Cluster(cluster) => cluster.node_key(node, namespace, name),
        }
    }

    /// The Cluster, if this is one.
    pub(crate) fn cluster(&self) -> Option<&Arc<Cluster>> {
        match self {
            Backend::One(_) => None,
            Backend::Cluster(cluster) => Some(cluster),
        }
    }
}
