//! A Redis that forgot its buckets, noticed: each node's server is known by its `run_id`
//! (`INFO server`), which is new at every start of a Redis process, and a marker key
//! tells, when it changes, whether the node's keys survived.
//!
//! meshlimit cannot keep a Redis without persistence from coming back empty after a
//! restart (every limit on it then starts from full), but it can say so, once per event:
//! a log line and `meshlimit_redis_restarts_total`. The node is read on the health
//! checks' cadence, after each background check or probe write that succeeds (the probe
//! that ends an outage is the first use of the new connection), so a restart between two
//! checks is seen by the next one, and a request's way to Redis is never longer for it:
//! one pipelined `INFO server` and `GET` a second per node.
//!
//! The marker, `ml1:alive{N}` after `--redis-key-prefix` (in one of the node's slots, as
//! the probe key), holds the run_id of the server it was first written on. It has no TTL:
//! it must outlive any quiet spell, it is one short key per node, and under a `volatile-*`
//! eviction policy a key without a TTL is never evicted. When the run_id changes:
//! - the marker is there, written under an earlier run_id: the keys survived (a restart
//!   with RDB or AOF, as of its last save; a failover to a replica that had them);
//! - it is missing, or was written under the new run_id (another replica noticed first
//!   and wrote it again): the data set started empty with this server, and every limit on
//!   the node restarted from full.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use redis::RedisError;
use tracing::{info, warn};

use super::Inner;
use super::node::{Node, timed_out};
use crate::throttle::Throttle;

/// The marker's name within the node's keys (see the module docs).
const MARKER: &str = "alive";

/// Least time between two lines saying a node's run_id cannot be read (an ACL that
/// refuses `INFO`, say): the node still decides, so once in a while is enough.
const UNREADABLE_LOG_EVERY: Duration = Duration::from_secs(600);

/// A node's server changes so far, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRestarts {
    /// The node as its other messages name it: `host:port`, or the URL without password.
    pub node: String,
    /// Changes after which its keys were still there.
    pub kept: u64,
    /// Changes after which its keys were gone: its limits restarted from full.
    pub lost: u64,
}

/// What one reading of a node found.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// The node's first reading: nothing to compare with.
    First,
    /// The same server as last time.
    Same,
    /// Another server than last time (`old` its run_id), which lost the keys or not.
    Restarted { old: String, lost: bool },
}

/// Every node's last run_id and its changes; see the module docs.
#[derive(Debug)]
pub(super) struct Restarts {
    /// By node name, not by [`Node`]: a Cluster's nodes leave the slot map and come back
    /// as new ones, their counts stay.
    nodes: Mutex<BTreeMap<String, Known>>,
    /// Throttles the "cannot tell" lines.
    unreadable_log: Throttle,
}

/// What is known of one node.
#[derive(Debug)]
struct Known {
    /// Its server's run_id as last read.
    run_id: String,
    /// Its changes so far.
    counts: NodeRestarts,
}

impl Default for Restarts {
    fn default() -> Self {
        Self {
            nodes: Mutex::default(),
            unreadable_log: Throttle::new(UNREADABLE_LOG_EVERY),
        }
    }
}

impl Restarts {
    /// Records that `node` runs `run_id` with its marker written under `marker` (`None`:
    /// missing), and what that changes; counts a change. Readings of one node come one at
    /// a time (the health checks'), so none is taken for older than the one before.
    fn observe(&self, node: &str, run_id: &str, marker: Option<&str>) -> Change {
        let mut nodes = self.nodes.lock();
        let Some(known) = nodes.get_mut(node) else {
            let counts = NodeRestarts {
                node: node.to_string(),
                kept: 0,
                lost: 0,
            };
            let run_id = run_id.to_string();
            nodes.insert(node.to_string(), Known { run_id, counts });
            return Change::First;
        };
        if known.run_id == run_id {
            return Change::Same;
        }
        let old = std::mem::replace(&mut known.run_id, run_id.to_string());
        let lost = marker.is_none_or(|written_under| written_under == run_id);
        if lost {
            known.counts.lost += 1;
        } else {
            known.counts.kept += 1;
        }
        Change::Restarted { old, lost }
    }

    /// Every node read so far, by name.
    pub(super) fn snapshot(&self) -> Vec<NodeRestarts> {
        self.nodes
            .lock()
            .values()
            .map(|k| k.counts.clone())
            .collect()
    }
}

impl Inner {
    /// Reads `node`'s run_id and marker, says whether its server changed (see the module
    /// docs), and writes the marker where it is missing. A failure is only logged: it
    /// never opens the circuit, since a node that cannot say who it is still decides.
    pub(super) async fn follow_run_id(&self, node: &Node) {
        let Some(marker) = self
            .backend
            .node_key(node, &self.options.key_prefix, MARKER)
        else {
            return;
        };
        let read = tokio::time::timeout(self.options.timeout, self.read_run_id(node, &marker));
        let (run_id, written_under) = match read.await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => return self.unreadable(node, &e),
            Err(_) => return self.unreadable(node, &timed_out("reading INFO server")),
        };
        match self
            .restarts
            .observe(&node.name, &run_id, written_under.as_deref())
        {
            Change::Restarted { old, lost: true } => warn!(
                node = node.name,
                old_run_id = old,
                new_run_id = run_id,
                "Redis restarted without its keys (a restart without persistence, or a \
                 failover to a replica that did not have them): every limit on this node \
                 restarted from full"
            ),
            Change::Restarted { old, lost: false } => info!(
                node = node.name,
                old_run_id = old,
                new_run_id = run_id,
                "Redis is another server now (a restart with persistence, or a failover), \
                 its keys kept: limits go on from its data as of its last save or replication"
            ),
            Change::First | Change::Same => {}
        }
        if written_under.is_none() {
            self.write_marker(node, &marker, &run_id).await;
        }
    }

    /// Writes `node`'s marker `key` with `run_id`, unless another replica just did.
    async fn write_marker(&self, node: &Node, key: &str, run_id: &str) {
        let write = async {
            let mut conn = node.conn().await?;
            redis::cmd("SET")
                .arg(key)
                .arg(run_id)
                .arg("NX")
                .query_async::<redis::Value>(&mut conn)
                .await
        };
        match tokio::time::timeout(self.options.timeout, write).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => self.unreadable(node, &e),
            Err(_) => self.unreadable(node, &timed_out("writing its marker")),
        }
    }

    /// `node`'s run_id, and the run_id its marker `key` was written under (`None`: none).
    async fn read_run_id(
        &self,
        node: &Node,
        key: &str,
    ) -> Result<(String, Option<String>), RedisError> {
        let mut conn = node.conn().await?;
        let (info, marker): (String, Option<String>) = redis::pipe()
            .cmd("INFO")
            .arg("server")
            .cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await?;
        let run_id = run_id_in(&info).ok_or_else(|| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "INFO server has no run_id",
            ))
        })?;
        Ok((run_id.to_string(), marker))
    }

    /// Logs, at most once per [`UNREADABLE_LOG_EVERY`], that whether `node` restarted
    /// cannot be told, because of `e`.
    fn unreadable(&self, node: &Node, e: &RedisError) {
        if let Some(suppressed) = self.restarts.unreadable_log.allow() {
            warn!(
                node = node.name,
                error = %e,
                suppressed,
                "cannot tell whether Redis restarted and lost its keys (INFO server and a GET \
                 of its marker key are needed); its decisions are not affected"
            );
        }
    }
}

impl super::RedisStore {
    /// Each node's server changes so far (restarts and failovers), by whether its keys
    /// survived; nodes read at least once, by name.
    pub fn restarts(&self) -> Vec<NodeRestarts> {
        self.inner.restarts.snapshot()
    }
}

/// The `run_id` field of an `INFO server` reply.
fn run_id_in(info: &str) -> Option<&str> {
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(str::trim)
        .filter(|id| !id.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_id_is_read_from_info_server() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:3f2a\r\ntcp_port:6379\r\n";
        assert_eq!(run_id_in(info), Some("3f2a"));
        assert_eq!(run_id_in("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(run_id_in("# Server\r\n"), None);
    }

    #[test]
    fn a_new_run_id_counts_once_lost_or_kept_by_the_marker() {
        let restarts = Restarts::default();
        assert_eq!(restarts.observe("n", "a", None), Change::First);
        assert_eq!(restarts.observe("n", "a", Some("a")), Change::Same);
        let lost = |old: &str| Change::Restarted {
            old: old.into(),
            lost: true,
        };
        // Restarted empty: no marker, or one another replica wrote on the new server.
        assert_eq!(restarts.observe("n", "b", None), lost("a"));
        assert_eq!(restarts.observe("n", "b", Some("b")), Change::Same);
        assert_eq!(restarts.observe("n", "c", Some("c")), lost("b"));
        // A failover to a replica that has the keys, marker and all.
        assert_eq!(
            restarts.observe("n", "d", Some("c")),
            Change::Restarted {
                old: "c".into(),
                lost: false
            }
        );
        assert_eq!(restarts.observe("m", "x", None), Change::First);
        assert_eq!(
            restarts.snapshot(),
            [
                NodeRestarts {
                    node: "m".into(),
                    kept: 0,
                    lost: 0
                },
                NodeRestarts {
                    node: "n".into(),
                    kept: 1,
                    lost: 2
                },
            ]
        );
    }
}
