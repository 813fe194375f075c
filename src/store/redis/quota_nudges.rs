//! Telling the other replicas to look at a quota bucket again now: `quota_grant.lua`
//! publishes a bucket whose grant was cut, or whose reporters on one replica were left
//! less than they held, and every replica follows the channel. Without it a replica sees
//! the others' changes only at its next look at Redis (once a second), and a newcomer
//! beside a replica that holds the whole rule is refused until then.

use std::sync::Arc;

use futures_util::StreamExt;
use redis::aio::PubSubStream;

use super::RedisStore;
use crate::error::{StoreError, StoreErrorKind};

/// The channel of the nudges. Channels are global to a Redis server (not per database)
/// and, in a Cluster, reach the subscribers of every node.
pub const QUOTA_NUDGES: &str = "ml1:quota-nudges";

/// One nudge: a replica asks the others to look at a bucket again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nudge {
    /// The replica that published it (its field prefix in the buckets' hashes).
    pub from: String,
    /// The Redis key of the bucket's hash.
    pub key: String,
}

/// The nudges as they arrive on one subscription.
pub struct Nudges(
    /// The subscribed connection's messages.
    PubSubStream,
);

impl std::fmt::Debug for Nudges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nudges").finish_non_exhaustive()
    }
}

impl Nudges {
    /// The next nudge; `None` when the connection is gone (subscribe again). Messages
    /// that are not nudges are skipped.
    pub async fn next(&mut self) -> Option<Nudge> {
        loop {
            let message = self.0.next().await?;
            let Ok(text) = message.get_payload::<String>() else {
                continue;
            };
            if let Some((from, key)) = text.split_once(' ') {
                return Some(Nudge {
                    from: from.to_string(),
                    key: key.to_string(),
                });
            }
        }
    }
}

impl RedisStore {
    /// Subscribes to [`QUOTA_NUDGES`] on the first node that accepts (any node of a
    /// Cluster hears every node's messages): the one that would hold the channel's name
    /// as a key, which also reads a Cluster's slot map if nothing has yet, then the others.
    ///
    /// # Errors
    /// No node could be connected to and subscribed on within the store's timeout.
    pub async fn quota_nudges(&self) -> Result<Nudges, StoreError> {
        Ok(Nudges(self.subscribe(QUOTA_NUDGES).await?))
    }

    /// Subscribes to `channel` on the first node that accepts (any node of a Cluster
    /// hears every node's messages): the one that would hold the channel's name as a key,
    /// which also reads a Cluster's slot map if nothing has yet, then the others. Shared by
    /// the quota nudges and the resets (`holds.rs`).
    ///
    /// # Errors
    /// No node could be connected to and subscribed on within the store's timeout.
    pub(super) async fn subscribe(&self, channel: &str) -> Result<PubSubStream, StoreError> {
        let inner = &*self.inner;
        let mut last = None;
        let mut nodes = Vec::new();
        match inner.backend.node_for(channel).await {
            Ok(node) => nodes.push(node),
            Err(e) => last = Some(e),
        }
        for node in inner.backend.nodes() {
            if !nodes.iter().any(|n| Arc::ptr_eq(n, &node)) {
                nodes.push(node);
            }
        }
        for node in nodes {
            let subscribed = async {
                let mut pubsub = node.pubsub().await?;
                pubsub.subscribe(channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            match tokio::time::timeout(inner.options.timeout, subscribed).await {
                Ok(Ok(pubsub)) => return Ok(pubsub.into_on_message()),
                Ok(Err(e)) => last = Some(node.error(&e)),
                Err(_) => {
                    last = Some(StoreError::new(
                        StoreErrorKind::TimedOut,
                        format!("Redis {} timed out subscribing", node.name),
                    ));
                }
            }
        }
        Err(last.unwrap_or_else(|| {
            StoreError::new(StoreErrorKind::Unreachable, "no Redis node to subscribe on")
        }))
    }
}
