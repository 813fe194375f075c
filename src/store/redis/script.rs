//! The script calls that decide requests: `EVALSHA` of [`decide_buckets.lua`] (requests of
//! token buckets only) or [`decide.lua`] (any request) on the node holding the requests'
//! slot, several requests per call when they wait together ([`super::call_queue`]); `EVAL` when
//! the node lost the script, and a Cluster's redirects, for the whole call.
//!
//! [`decide_buckets.lua`]: ./decide_buckets.lua
//! [`decide.lua`]: ./decide.lua

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, ErrorKind, ServerErrorKind, Value};

use super::Inner;
use super::call_queue::{CallSlot, Waiting};
use super::leases::Want;
use super::node::{Failure, Node, timed_out};
use super::part::{self, Part, Shape};
use super::reply::Reply;
use super::slots::slot;
use crate::clock::{Nanos, Stopwatch};
use crate::error::{StoreError, StoreErrorKind};
use crate::store::Check;

/// The general decision script, after the token-bucket arithmetic it shares with
/// [`BUCKETS`]: one text, so one SHA1 and one `EVALSHA`, with the shared code written once.
const GENERAL: &str = concat!(include_str!("exact.lua"), include_str!("decide.lua"));

/// The decision script for requests of token buckets only, after the same arithmetic.
const BUCKETS: &str = concat!(
    include_str!("exact.lua"),
    include_str!("decide_buckets.lua")
);

/// The decision scripts as this store runs them, and their SHA1s for `EVALSHA`: each after
/// a first line setting the expiry jitter, so that no call carries it.
#[derive(Debug)]
pub(super) struct Scripts {
    /// [`GENERAL`], and its SHA1.
    general: (String, String),
    /// [`BUCKETS`], and its SHA1.
    buckets: (String, String),
}

impl Scripts {
    /// The scripts, each key they write living up to `expiry_jitter` longer at random.
    pub(super) fn new(expiry_jitter: Duration) -> Self {
        let jitter_ms = expiry_jitter.as_millis();
        let script = |body: &str| {
            let text = format!("local EXPIRY_JITTER_MS = {jitter_ms}\n{body}");
            let sha = redis::Script::new(&text).get_hash().to_string();
            (text, sha)
        };
        Scripts {
            general: script(GENERAL),
            buckets: script(BUCKETS),
        }
    }

    /// `shape`'s script: its text and its SHA1.
    fn of(&self, shape: Shape) -> &(String, String) {
        match shape {
            Shape::Buckets => &self.buckets,
            Shape::General => &self.general,
        }
    }
}

impl Inner {
    /// Runs a small script `call` (not a decision: the operator's view of holds, a reset,
    /// the quota service's demands) on the node of `key`, within the store's timeout;
    /// `what` names it if Redis times out.
    pub(super) async fn run_small<T: redis::FromRedisValue>(
        &self,
        key: &str,
        call: &redis::ScriptInvocation<'_>,
        what: &str,
    ) -> Result<T, StoreError> {
        let asked = async {
            let node = self.backend.node_for(key).await?;
            let mut conn = node.conn().await.map_err(|e| node.error(&e))?;
            call.invoke_async(&mut conn)
                .await
                .map_err(|e| node.error(&e))
        };
        tokio::time::timeout(self.options.timeout, asked)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::new(
                    StoreErrorKind::TimedOut,
                    format!("Redis timed out on {what}"),
                ))
            })
    }

    /// Decides the request of `checks` on `node` (which holds their `keys`, one slot), each
    /// check leasing its [`Want`]'s extra tokens: in a script call of its own, or with
    /// requests waiting alongside ([`super::call_queue`]). Not bounded in time: the caller's
    /// deadline is.
    pub(super) async fn decide(
        self: &Arc<Self>,
        node: Arc<Node>,
        keys: smallvec::SmallVec<[String; 4]>,
        checks: &[Check<'_>],
        wants: &[Want],
        now: Nanos,
    ) -> Result<Reply, Failure> {
        let part = Part::new(
            self.options.time,
            keys,
            checks,
            wants,
            now,
            self.options.specialised,
        );
        self.submit(node, part).await
    }

    /// Decides `part` on `node`: in a call of its own when the node has fewer calls in
    /// flight than allowed, else in the batch the next call that ends takes. Not bounded
    /// in time: the caller's deadline is (a call itself is bounded by the timeout).
    async fn submit(self: &Arc<Self>, node: Arc<Node>, part: Part) -> Result<Reply, Failure> {
        let cluster_slot = match self.backend.cluster() {
            Some(_) => part.keys.first().map_or(0, |key| slot(key.as_bytes())),
            None => 0,
        };
        let bound = self.options.calls_in_flight;
        let (answer, batch) = node.batcher.submit(part, cluster_slot, bound);
        if let Some(batch) = batch {
            tokio::spawn(self.clone().run_batches(node.clone(), batch));
        }
        answer.await.unwrap_or_else(|_| {
            Err(Failure {
                error: StoreError::new(
                    StoreErrorKind::Unreachable,
                    format!("Redis {}: the call was abandoned", node.name),
                ),
                node,
                opens: false,
            })
        })
    }

    /// Runs `batch` on `node`, then every batch that waits, until none does; holds one of
    /// the node's call slots meanwhile.
    async fn run_batches(
        self: Arc<Self>,
        node: Arc<Node>,
        mut batch: Vec<Waiting<Result<Reply, Failure>>>,
    ) {
        let mut call_slot = CallSlot::held(&node.batcher);
        loop {
            let started = Stopwatch::start();
            let parts: smallvec::SmallVec<[&Part; 8]> = batch.iter().map(|w| &w.part).collect();
            let called = tokio::time::timeout(self.options.timeout, self.call(&node, &parts));
            let result = called.await.unwrap_or_else(|_| {
                node.reset();
                Err(Failure {
                    error: node.error(&timed_out("deciding")),
                    node: node.clone(),
                    opens: true,
                })
            });
            drop(parts);
            let took = started.until(Stopwatch::start());
            self.counts.call_ended(batch.len(), took);
            let checks = batch.iter().map(|w| w.part.checks).sum();
            match result {
                Ok(replies) => {
                    for (waiting, reply) in batch.drain(..).zip(replies) {
                        let _ = waiting.answer.send(Ok(reply));
                    }
                }
                Err(failure) => {
                    for waiting in batch.drain(..) {
                        let _ = waiting.answer.send(Err(failure.clone()));
                    }
                }
            }
            match call_slot.next(checks, took) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// One script call on `node` deciding `parts` (one shape, one slot) in order; each
    /// part's reply, in order.
    pub(super) async fn call(
        &self,
        node: &Arc<Node>,
        parts: &[&Part],
    ) -> Result<Vec<Reply>, Failure> {
        let shape = parts.first().map_or(Shape::General, |p| p.shape());
        let cmd = part::evalsha(&self.scripts.of(shape).1, parts);
        let value = match self.run(node, &cmd, shape, false).await {
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
                    self.run(&target, &cmd, shape, asking)
                        .await
                        .map_err(|e| Failure::of(target, &e))?
                }
                _ => return Err(Failure::of(node.clone(), &e)),
            },
        };
        part::replies(&value, parts).map_err(|e| Failure {
            error: StoreError::new(StoreErrorKind::MalformedReply, e.to_string()),
            node: node.clone(),
            opens: false,
        })
    }

    /// `cmd` (an `EVALSHA` of `shape`'s script) on `node`; `EVAL` when the node does not
    /// have the script (flushed, restarted or failed over: `EVAL` loads it as it runs), or
    /// after `ASKING`.
    async fn run(
        &self,
        node: &Node,
        cmd: &Cmd,
        shape: Shape,
        asking: bool,
    ) -> Result<Value, redis::RedisError> {
        let mut conn = node.conn().await?;
        let result = if asking {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING")
                .ignore()
                .add_command(as_eval(cmd, &self.scripts.of(shape).0));
            pipe.query_async::<Vec<Value>>(&mut conn)
                .await
                .and_then(|mut values| values.pop().ok_or_else(|| timed_out("answering ASKING")))
        } else {
            match cmd.query_async::<Value>(&mut conn).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    as_eval(cmd, &self.scripts.of(shape).0)
                        .query_async(&mut conn)
                        .await
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

/// The `EVAL` twin of an `EVALSHA` call of the script `text`: its text instead of its hash.
fn as_eval(cmd: &Cmd, text: &str) -> Cmd {
    let mut eval = redis::cmd("EVAL");
    eval.arg(text);
    for arg in cmd.args_iter().skip(2) {
        if let redis::Arg::Simple(bytes) = arg {
            eval.arg(bytes);
        }
    }
    eval
}
