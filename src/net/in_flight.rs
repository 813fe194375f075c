//! A hyper service wrapper that keeps a request counted as in flight until its response
//! body is finished (or dropped), so that the idle timeout never closes a connection
//! under a request, however long its response streams.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;

use super::activity::{Activity, InFlight};
use super::service::BoxError;

/// `inner`, with each request counted in `activity`.
#[derive(Debug, Clone)]
pub(crate) struct Counted<S> {
    /// The wrapped service, cloned for each request.
    inner: S,
    /// The connection's activity, where each request is counted in flight.
    activity: Arc<Activity>,
    /// Who is calling, put into each request's extensions.
    caller: super::Caller,
}

impl<S> Counted<S> {
    pub(crate) fn new(inner: S, activity: Arc<Activity>, caller: super::Caller) -> Self {
        Self {
            inner,
            activity,
            caller,
        }
    }
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Counted<S>
where
    S: tower_service::Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Unpin,
{
    type Response = Response<CountedBody<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.caller.clone());
        let guard = self.activity.request();
        let mut inner = self.inner.clone();
        Box::pin(async move {
            std::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
            let response = inner.call(request).await?;
            Ok(response.map(|body| CountedBody {
                body,
                _guard: guard,
            }))
        })
    }
}

/// A response body that ends its request's [`InFlight`] when it is dropped.
#[derive(Debug)]
pub(crate) struct CountedBody<B> {
    /// The response body; its frames pass through unchanged.
    body: B,
    /// Keeps the request in flight until the body is finished or dropped.
    _guard: InFlight,
}

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
