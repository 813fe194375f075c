//! Every task a running server spawns, owned by one guard ([`Tasks`]): none outlives
//! `serve`, whether it returns at the end of the drain or early with an error.

use std::future::Future;

use tokio::task::{JoinError, JoinHandle};

/// A spawned task, aborted when dropped (a task that has ended is left alone).
#[derive(Debug)]
struct Aborting(JoinHandle<()>);

impl Aborting {
    /// Waits for the task to end; a panic in it comes back as an error.
    async fn join(mut self) -> Result<(), JoinError> {
        (&mut self.0).await
    }
}

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The tasks of one server: those running beside the servers until the drain ends, and
/// the operator servers, which end after theirs. Dropping it aborts every one left.
#[derive(Debug, Default)]
pub(super) struct Tasks {
    /// Loops that run until stopped: the store's upkeep and health, the page's sampler,
    /// the statsd sink, the source's follower, the quota refresh, the admin token's
    /// watch, the quota warm-up, the wait for the shutdown future.
    background: Vec<Aborting>,
    /// The operator servers, each draining once told to stop.
    operator: Vec<Aborting>,
}

impl Tasks {
    /// Keeps `task` (already spawned) until [`Tasks::stop_background`].
    pub(super) fn keep(&mut self, task: JoinHandle<()>) {
        self.background.push(Aborting(task));
    }

    /// Spawns `task` and keeps it until [`Tasks::stop_background`].
    pub(super) fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.keep(tokio::spawn(task));
    }

    /// Spawns an operator server, joined by [`Tasks::join_operator`].
    pub(super) fn spawn_operator(&mut self, server: impl Future<Output = ()> + Send + 'static) {
        self.operator.push(Aborting(tokio::spawn(server)));
    }

    /// Runs `server` as a task of its own until it ends; aborted if the caller stops
    /// waiting. A panic in it comes back as an error.
    pub(super) async fn run(
        server: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), JoinError> {
        Aborting(tokio::spawn(server)).join().await
    }

    /// Aborts the background tasks.
    pub(super) fn stop_background(&mut self) {
        self.background.clear();
    }

    /// Waits for every operator server to end, in the order they were spawned.
    ///
    /// # Errors
    /// The first server that panicked (the others are aborted).
    pub(super) async fn join_operator(&mut self) -> Result<(), JoinError> {
        for server in self.operator.drain(..) {
            server.join().await?;
        }
        Ok(())
    }
}
