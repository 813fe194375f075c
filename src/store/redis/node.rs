//! One Redis server as the store uses it: a multiplexed connection shared by every
//! request, made lazily, replaced when it breaks and never waited on longer than the
//! timeout, the [`Circuit`] saying whether requests may ask it, the queue of requests
//! waiting for its script calls ([`Batcher`]), and a call's [`Failure`] on it.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{MultiplexedConnection, PubSub};
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Client, RedisError};

use super::call_queue::Batcher;
use super::circuit::Circuit;
use super::reply::Reply;
use crate::error::{StoreError, StoreErrorKind};

/// How a node's connections are made.
pub(crate) enum Source {
    /// A server at a fixed address.
    Client(Client),
    /// Whatever master the sentinels name at connection time.
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

/// One Redis server; see the module docs.
pub(crate) struct Node {
    /// The node in messages: `host:port`, or the URL without its password.
    pub(crate) name: String,
    /// How connections to it are made.
    source: Source,
    /// The connection every request shares; `None` until the first use, and after a
    /// failure (the next use connects anew).
    current: ArcSwapOption<MultiplexedConnection>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    /// Longest a connection attempt, and then any reply, is waited for.
    timeout: Duration,
    /// Whether requests may ask this node.
    pub(crate) circuit: Circuit,
    /// Requests waiting for a script call on this node, and its calls in flight.
    pub(crate) batcher: Batcher<Result<Reply, Failure>>,
    /// The latest background probe write's round trip, in microseconds (0: none yet), for
    /// the operator page.
    pub(crate) round_trip_us: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("name", &self.name)
            .field("connected", &self.current.load().is_some())
            .field("up", &self.circuit.is_up())
            .finish()
    }
}

impl Node {
    /// A node that connects on first use.
    pub(crate) fn new(name: String, source: Source, timeout: Duration) -> Self {
        Self {
            name,
            source,
            current: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
            timeout,
            circuit: Circuit::new(),
            batcher: Batcher::default(),
            round_trip_us: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The shared connection, connecting first if there is none. Bounded by the timeout.
    pub(crate) async fn conn(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(c) = self.current.load_full() {
            return Ok((*c).clone());
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current.load_full() {
            return Ok((*c).clone());
        }
        // Boxed as a trait object: connecting is rare, and redis-rs' connection future is
        // so deep that every crate spawning a request would otherwise need a higher
        // recursion limit to prove it `Send`.
        let connect: std::pin::Pin<
            Box<dyn Future<Output = Result<MultiplexedConnection, RedisError>> + Send + '_>,
        > = Box::pin(self.connect());
        let conn = tokio::time::timeout(self.timeout, connect)
            .await
            .map_err(|_| timed_out("connecting"))??;
        self.current.store(Some(Arc::new(conn.clone())));
        Ok(conn)
    }

    /// Drops the shared connection (it failed); the next call connects anew. A sentinel
    /// source asks the sentinels for the master again then.
    pub(crate) fn reset(&self) {
        self.current.store(None);
    }

    async fn connect(&self) -> Result<MultiplexedConnection, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        self.client()
            .await?
            .get_multiplexed_async_connection_with_config(&config)
            .await
    }

    /// A connection of its own for subscribing (a subscribed connection can send nothing
    /// else); the caller bounds the wait.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, RedisError> {
        self.client().await?.get_async_pubsub().await
    }

    /// The client of the server this node is now: a sentinel source asks the sentinels.
    async fn client(&self) -> Result<Client, RedisError> {
        match &self.source {
            Source::Client(client) => Ok(client.clone()),
            Source::Sentinel(sentinel) => sentinel.lock().await.async_get_client().await,
        }
    }
}

impl Node {
    /// This node's failure `e` as a store error, in words that name the node.
    pub(crate) fn error(&self, e: &RedisError) -> StoreError {
        let message = if e.code().is_some() {
            format!("Redis {} answered an error: {e}", self.name)
        } else {
            format!("Redis unreachable ({}): {e}", self.name)
        };
        StoreError::new(kind_of(e), message)
    }
}

/// Why a node did not decide.
#[derive(Clone, Debug)]
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
    pub(super) fn of(node: Arc<Node>, e: &redis::RedisError) -> Self {
        Failure {
            error: node.error(e),
            node,
            opens: true,
        }
    }
}

/// The kind of a redis-rs error: an error reply, a timeout, or a node out of reach.
pub(crate) fn kind_of(e: &RedisError) -> StoreErrorKind {
    if e.code().is_some() {
        StoreErrorKind::Refused
    } else if e.is_timeout() {
        StoreErrorKind::TimedOut
    } else {
        StoreErrorKind::Unreachable
    }
}

/// An I/O timeout error saying what timed out.
pub(crate) fn timed_out(what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("Redis timed out {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_told_apart_by_kind() {
        let node = Node::new(
            "127.0.0.1:1".into(),
            Source::Client(Client::open("redis://127.0.0.1:1").expect("a valid URL")),
            Duration::from_millis(100),
        );
        let refused = redis::parse_redis_value(b"-OOM command not allowed\r\n")
            .and_then(redis::Value::extract_error)
            .expect_err("an error reply");
        let error = node.error(&refused);
        assert_eq!(error.kind, StoreErrorKind::Refused);
        assert!(
            error
                .message
                .starts_with("Redis 127.0.0.1:1 answered an error: "),
            "{}",
            error.message
        );
        let error = node.error(&timed_out("deciding"));
        assert_eq!(error.kind, StoreErrorKind::TimedOut);
        assert_eq!(
            error.message,
            "Redis unreachable (127.0.0.1:1): Redis timed out deciding"
        );
        let gone = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(node.error(&gone).kind, StoreErrorKind::Unreachable);
    }
}
