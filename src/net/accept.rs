//! Accepting connections without spinning or flooding the log when the process runs out
//! of file descriptors.
//!
//! `accept` fails with `EMFILE` (this process is at its descriptor limit) or `ENFILE`
//! (the whole system is) while the connection waits in the kernel's backlog; retrying at
//! once fails again, burning a core and, if each failure were logged, the disk. Instead
//! the loop backs off (5 ms doubling to 1 s) and logs at most one line per
//! [`LOG_EVERY`], with the number of failures since. As soon as descriptors are free
//! again, the next attempt succeeds and the backoff resets.

use std::io;
use std::time::Duration;

use rustix::io::Errno;
use tracing::warn;

use super::limit::Connections;
use super::listener::{Listener, Stream};
use crate::throttle::Throttle;

/// First pause after a failed accept.
const BACKOFF_MIN: Duration = Duration::from_millis(5);
/// Longest pause between attempts while accepts keep failing.
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one warning per this interval per listener.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// A listener whose [`accept`](Acceptor::accept) only returns connections.
#[derive(Debug)]
pub(crate) struct Acceptor {
    /// The listening socket of one port.
    listener: Listener,
    /// The local address, for log lines.
    local: String,
    /// Pause after the next failed accept: doubles from `BACKOFF_MIN` to `BACKOFF_MAX`,
    /// reset by a success.
    backoff: Duration,
    /// Keeps failure warnings to one per `LOG_EVERY`, so that a descriptor shortage cannot
    /// flood the log.
    log: Throttle,
}

impl Acceptor {
    pub(crate) fn new(listener: Listener) -> Self {
        Self {
            local: listener.describe(),
            listener,
            backoff: BACKOFF_MIN,
            log: Throttle::new(LOG_EVERY),
        }
    }

    /// The next connection; failures are counted, logged (throttled) and waited out.
    pub(crate) async fn accept(&mut self, connections: &Connections) -> Stream {
        loop {
            match self.listener.accept().await {
                Ok(stream) => {
                    self.backoff = BACKOFF_MIN;
                    return stream;
                }
                Err(error) => {
                    let shortage = out_of_descriptors(&error);
                    if shortage {
                        connections.count_descriptor_shortage();
                    }
                    if let Some(left_out) = self.log.allow() {
                        let addr = &self.local;
                        if shortage {
                            warn!(
                                %addr, %error, similar_failures_not_logged = left_out,
                                open_connections = connections.open(),
                                "cannot accept connections: out of file descriptors; \
                                 retrying with backoff (lower --max-connections or raise \
                                 the descriptor limit)"
                            );
                        } else {
                            warn!(%addr, %error, similar_failures_not_logged = left_out, "accept failed");
                        }
                    }
                    tokio::time::sleep(self.backoff).await;
                    self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
                }
            }
        }
    }
}

/// `EMFILE`, `ENFILE`, or the kernel out of socket memory: waiting is the only cure.
fn out_of_descriptors(error: &io::Error) -> bool {
    let Some(code) = error.raw_os_error() else {
        return false;
    };
    [Errno::MFILE, Errno::NFILE, Errno::NOBUFS, Errno::NOMEM]
        .iter()
        .any(|e| e.raw_os_error() == code)
}
