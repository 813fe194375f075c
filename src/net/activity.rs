//! What makes a connection busy: bytes from the peer (requests, HTTP/2 pings, a TLS
//! handshake) and requests in flight (until their response body is finished, so a
//! long-running stream keeps its connection). A connection with neither for the idle
//! timeout is idle. What the server writes does not count: an answer to nobody's
//! request cannot keep a connection open.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// One connection's activity.
#[derive(Debug)]
pub(crate) struct Activity {
    /// When the connection was accepted; times below are milliseconds since.
    start: Instant,
    /// When the peer last sent bytes, or a request started or ended.
    last_ms: AtomicU64,
    /// Whether the peer has sent anything at all.
    heard: AtomicBool,
    /// Requests whose responses are not finished.
    in_flight: AtomicUsize,
}

impl Activity {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            heard: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn touch(&self) {
        self.last_ms.store(self.now_ms(), Relaxed);
    }

    fn heard_from_peer(&self) {
        self.touch();
        if !self.heard.load(Relaxed) {
            self.heard.store(true, Relaxed);
        }
    }

    /// A request starts; it is in flight until the returned guard is dropped.
    pub(crate) fn request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.touch();
        InFlight(self.clone())
    }

    /// Completes once the connection has been idle for `idle` (for `silent`, when the
    /// peer has not sent a single byte yet, whichever is shorter).
    pub(crate) async fn until_idle(&self, idle: Duration, silent: Duration) {
        loop {
            let limit = if self.heard.load(Relaxed) {
                idle
            } else {
                idle.min(silent)
            };
            let quiet =
                Duration::from_millis(self.now_ms().saturating_sub(self.last_ms.load(Relaxed)));
            let wait = if self.in_flight.load(Relaxed) > 0 {
                limit
            } else if quiet >= limit {
                return;
            } else {
                limit - quiet
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// A request in flight; ends (and counts as activity) when dropped.
#[derive(Debug)]
pub(crate) struct InFlight(
    /// The connection's activity, whose in-flight count includes this request.
    Arc<Activity>,
);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Relaxed);
        self.0.touch();
    }
}

/// A socket that notes every read that brings bytes as activity.
#[derive(Debug)]
pub(crate) struct Heard<IO> {
    /// The socket; writes pass straight through.
    io: IO,
    /// The connection's activity, touched by every read that brings bytes.
    activity: Arc<Activity>,
}

impl<IO> Heard<IO> {
    pub(crate) fn new(io: IO, activity: Arc<Activity>) -> Self {
        Self { io, activity }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Heard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.io).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.activity.heard_from_peer();
        }
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Heard<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_only_without_requests_in_flight() {
        let activity = Activity::new();
        activity.heard_from_peer();
        let request = activity.request();
        let idle = Duration::from_secs(10);
        let waited = tokio::time::timeout(Duration::from_secs(60), activity.until_idle(idle, idle));
        assert!(waited.await.is_err(), "a request in flight keeps it busy");
        drop(request);
        let start = Instant::now();
        activity.until_idle(idle, idle).await;
        assert_eq!(start.elapsed(), idle);
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_peer_gets_the_shorter_timeout() {
        let activity = Activity::new();
        let start = Instant::now();
        activity
            .until_idle(Duration::from_secs(300), Duration::from_secs(10))
            .await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
    }
}
