//! What a connection can serve, named once: every layer of [`super::serve`] takes the same
//! tower service of hyper requests and sends the same kind of response body.

use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;

/// Errors of services and bodies, as hyper takes them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A service a connection can serve: the gRPC router or the operator endpoints, cloned per
/// request.
pub trait HttpService<B>:
    tower_service::Service<
        Request<Incoming>,
        Response = Response<B>,
        Error: Into<BoxError>,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> HttpService<B> for S where
    S: tower_service::Service<
            Request<Incoming>,
            Response = Response<B>,
            Error: Into<BoxError>,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// A response body hyper can send on any connection.
pub trait ResponseBody: Body<Data: Send, Error: Into<BoxError>> + Unpin + Send + 'static {}

impl<B> ResponseBody for B where B: Body<Data: Send, Error: Into<BoxError>> + Unpin + Send + 'static {}
