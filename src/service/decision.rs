//! The future [`super::Service::should_rate_limit`] returns: already decided when the
//! store answered at once (the embedded store), or waiting on Redis.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::Answer;
use crate::error::RequestError;

/// A request's decision, to be awaited.
///
/// Why not an `async fn`: a request's plan (its descriptors, bucket keys and checks) is
/// about a kilobyte, and an `async fn` keeps it in its future, which every caller then
/// moves while building its own. The embedded store answers at once, so its requests are
/// decided before the future is returned and the future holds only the answer; a Redis
/// request's future, which does wait, is boxed, so that it is moved as a pointer.
#[must_use = "a decision does nothing on Redis unless awaited"]
pub enum Decision<'a> {
    /// Decided; taken by the first poll.
    Ready(Option<Result<Answer, RequestError>>),
    /// Waiting on the store.
    Waiting(Pin<Box<dyn Future<Output = Result<Answer, RequestError>> + Send + 'a>>),
}

impl std::fmt::Debug for Decision<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Decision::Ready(answer) => f.debug_tuple("Ready").field(answer).finish(),
            Decision::Waiting(_) => f.write_str("Waiting"),
        }
    }
}

impl Future for Decision<'_> {
    type Output = Result<Answer, RequestError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Decision::Ready(answer) => Poll::Ready(
                answer
                    .take()
                    .expect("a decision is not polled after it is ready"),
            ),
            Decision::Waiting(future) => future.as_mut().poll(cx),
        }
    }
}
