//! The one script call a request costs: its arguments, `EVALSHA` on the node holding the
//! request's slot (`EVAL` when the node lost the script), and a Cluster's redirects.

use std::sync::Arc;

use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use super::node::{Node, timed_out};
use super::reply::{self, Reply};
use super::{Inner, Refill, SCRIPT, Scale, TimeSource};
use crate::clock::Nanos;
use crate::error::{StoreError, StoreErrorKind};
use crate::rules::{Algorithm, Mode};
use crate::store::Check;

/// Why a node did not decide.
pub(super) struct Failure {
    /// The node that failed (after a redirect, the one redirected to).
    pub(super) node: Arc<Node>,
    /// What kind of failure it is.
    pub(super) kind: StoreErrorKind,
    /// What to answer and log.
    pub(super) reason: String,
    /// Whether the node's circuit opens: any failure to reach it or error reply; not a
    /// malformed reply (a probe write could not tell when that ends), nor a node whose
    /// circuit is already open.
    pub(super) opens: bool,
}

impl Failure {
    fn of(node: Arc<Node>, e: &RedisError) -> Self {
        Failure {
            kind: kind_of(e),
            reason: describe(&node, e),
            node,
            opens: true,
        }
    }

    /// The store error the failure policy answers with.
    pub(super) fn into_error(self) -> StoreError {
        StoreError::new(self.kind, self.reason)
    }
}

/// The kind of a redis-rs error: an error reply, a timeout, or a node out of reach.
fn kind_of(e: &RedisError) -> StoreErrorKind {
    if e.code().is_some() {
        StoreErrorKind::Refused
    } else if e.is_timeout() {
        StoreErrorKind::TimedOut
    } else {
        StoreErrorKind::Unreachable
    }
}

/// A node's failure in words: an error reply, or why it could not be reached.
pub(super) fn describe(node: &Node, e: &RedisError) -> String {
    if e.code().is_some() {
        format!("Redis {} answered an error: {e}", node.name)
    } else {
        format!("Redis unreachable ({}): {e}", node.name)
    }
}

impl Inner {
    /// The script call deciding `checks` at `now`, leasing `leases`' extra tokens.
    fn script_call(
        &self,
        keys: &[String],
        checks: &[Check<'_>],
        leases: &[(u64, Option<Refill>)],
        now: Nanos,
    ) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&self.sha).arg(checks.len());
        for key in keys {
            cmd.arg(key);
        }
        match self.options.time {
            TimeSource::Redis => cmd.arg(""),
            TimeSource::Caller => cmd.arg(now / 1000),
        };
        for (check, &(lease, _)) in checks.iter().zip(leases) {
            let mode = match check.mode {
                Mode::Enforce => "e",
                Mode::Shadow => "s",
                Mode::Quota => "q",
                Mode::ShadowQuota => "x",
            };
            match check.limit.algorithm {
                Algorithm::TokenBucket => {
                    let s = Scale::of(&check.limit);
                    cmd.arg("t")
                        .arg(check.hits)
                        .arg(mode)
                        .arg(s.token)
                        .arg(s.rate)
                        .arg(s.cap)
                        .arg(s.q)
                        .arg(lease);
                }
                Algorithm::FixedWindow => {
                    cmd.arg("w")
                        .arg(check.hits)
                        .arg(mode)
                        .arg(check.limit.requests_per_unit)
                        .arg(check.limit.unit.seconds())
                        .arg(0)
                        .arg(0)
                        .arg(0);
                }
            }
        }
        cmd
    }

    /// One script call for the request, on the node holding its keys (`keys` are the
    /// checks' Redis keys, one slot). Not bounded in time: the caller's deadline is.
    pub(super) async fn decide(
        &self,
        node: Arc<Node>,
        keys: &[String],
        checks: &[Check<'_>],
        leases: &[(u64, Option<Refill>)],
        now: Nanos,
    ) -> Result<Reply, Failure> {
        let cmd = self.script_call(keys, checks, leases, now);
        let value = match self.run(&node, &cmd, false).await {
            Ok(value) => value,
            Err(e) => match (e.redirect_node(), self.backend.cluster()) {
                (Some((host, port)), Some(cluster)) => {
                    // The slot moved (resharding, or a failover the map has not seen
                    // yet): once to where Redis says, and the map is read again.
                    cluster.refresh_soon();
                    let asking = e.kind() == ErrorKind::Server(ServerErrorKind::Ask);
                    let target = cluster
                        .node_at(&format!("{host}:{port}"))
                        .map_err(|reason| Failure {
                            node: node.clone(),
                            kind: StoreErrorKind::Unreachable,
                            reason,
                            opens: false,
                        })?;
                    if !target.circuit.is_up() {
                        return Err(Failure {
                            kind: StoreErrorKind::Unreachable,
                            reason: target.circuit.reason(),
                            node: target,
                            opens: false,
                        });
                    }
                    self.run(&target, &cmd, asking)
                        .await
                        .map_err(|e| Failure::of(target, &e))?
                }
                _ => return Err(Failure::of(node, &e)),
            },
        };
        reply::parse(&value).map_err(|e| Failure {
            kind: StoreErrorKind::MalformedReply,
            reason: e.to_string(),
            node,
            opens: false,
        })
    }

    /// `cmd` (an `EVALSHA`) on `node`; `EVAL` when the node does not have the script
    /// (flushed, restarted or failed over: `EVAL` loads it as it runs), or after `ASKING`.
    async fn run(&self, node: &Node, cmd: &Cmd, asking: bool) -> Result<Value, RedisError> {
        let mut conn = node.conn().await?;
        let result = if asking {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING").ignore().add_command(as_eval(cmd));
            pipe.query_async::<Vec<Value>>(&mut conn)
                .await
                .and_then(|mut values| values.pop().ok_or_else(|| timed_out("answering ASKING")))
        } else {
            match cmd.query_async::<Value>(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    as_eval(cmd).query_async(&mut conn).await
                }
                other => other,
            }
        };
        if result.is_err() {
            // The next call connects anew: the connection may be broken or timed out, and
            // after an error reply (READONLY from a demoted master, say) a sentinel source
            // must ask for the master again.
            node.reset();
        }
        result
    }
}

/// The `EVAL` twin of an `EVALSHA` call: the script's text instead of its hash.
fn as_eval(cmd: &Cmd) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(SCRIPT);
    for arg in cmd.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}
