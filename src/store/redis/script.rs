//! The one script call a request costs: `EVALSHA` of [`decide.lua`](./decide.lua) on the
//! node holding the request's slot (`EVAL` when the node lost the script), and a Cluster's
//! redirects.

use std::sync::Arc;

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::Inner;
use super::leases::Want;
use super::node::{Node, timed_out};
use super::reply::{self, Reply};
use super::script_args;
use crate::clock::Nanos;
use crate::error::{StoreError, StoreErrorKind};
use crate::store::Check;

/// The decision script.
const SCRIPT: &str = include_str!("decide.lua");

/// The SHA1 of the decision script, for `EVALSHA`.
pub(super) fn sha() -> String {
    redis::Script::new(SCRIPT).get_hash().to_string()
}

/// Why a node did not decide.
pub(super) struct Failure {
    /// The node that failed (after a redirect, the one redirected to).
    pub(super) node: Arc<Node>,
    /// What failed, for the failure policy's answer and the logs.
    pub(super) error: StoreError,
    /// Whether the node's circuit opens: any failure to reach it or error reply; not a
    /// malformed reply (a probe write could not tell when that ends), nor a node whose
    /// circuit is already open.
    pub(super) opens: bool,
}

impl Failure {
    /// `node` failed with `e`, which opens its circuit.
    fn of(node: Arc<Node>, e: &redis::RedisError) -> Self {
        Failure {
            error: node.error(e),
            node,
            opens: true,
        }
    }
}

impl Inner {
    /// One script call for the request, on the node holding its keys (`keys` are the
    /// checks' Redis keys, one slot), each check leasing its [`Want`]'s extra tokens. Not
    /// bounded in time: the caller's deadline is.
    pub(super) async fn decide(
        &self,
        node: Arc<Node>,
        keys: &[String],
        checks: &[Check<'_>],
        wants: &[Want],
        now: Nanos,
    ) -> Result<Reply, Failure> {
        let cmd = script_args::evalsha(&self.sha, self.options.time, keys, checks, wants, now);
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
                        .map_err(|error| Failure {
                            node: node.clone(),
                            error,
                            opens: false,
                        })?;
                    if !target.circuit.is_up() {
                        return Err(Failure {
                            error: StoreError::new(
                                StoreErrorKind::Unreachable,
                                target.circuit.reason(),
                            ),
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
            error: StoreError::new(StoreErrorKind::MalformedReply, e.to_string()),
            node,
            opens: false,
        })
    }

    /// `cmd` (an `EVALSHA`) on `node`; `EVAL` when the node does not have the script
    /// (flushed, restarted or failed over: `EVAL` loads it as it runs), or after `ASKING`.
    async fn run(&self, node: &Node, cmd: &Cmd, asking: bool) -> Result<Value, redis::RedisError> {
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
