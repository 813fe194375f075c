//! The one place errors become gRPC statuses: a `ShouldRateLimit` message that is not
//! protobuf, a request's error ([`RequestError`]) and a quota stream's ([`QuotaError`]).
//! Each says why its code. (The transport's own answers, an unknown method, stay with
//! the routes.)
//!
//! The quota stream's is a `From` impl: `rlqs/`, a layer below this one, hands tonic its
//! statuses, and converts with `Status::from` without naming this module.

use tonic::Status;

use crate::error::{QuotaError, RequestError};

/// A `ShouldRateLimit` message prost cannot decode, as its status.
pub(super) fn malformed(error: prost::DecodeError) -> Status {
    // A client sending junk made a mistake that retrying cannot fix: not INTERNAL, which
    // would page the operator for it (see codec.rs).
    Status::invalid_argument(format!("malformed request: {error}"))
}

/// A `ShouldRateLimit` request's error as its status.
pub(super) fn to_status(error: RequestError) -> Status {
    match error {
        // The caller sent something no config could answer: its fault, and retrying the
        // same request will not help.
        RequestError::EmptyDomain
        | RequestError::NoDescriptors
        | RequestError::BadOverrideUnit(_)
        | RequestError::RefundNotAllowed(_)
        | RequestError::TooLarge(_) => Status::invalid_argument(error.to_string()),
        // A caller the operator did not allow to hand budget back: nothing changed.
        RequestError::GiveBackNotAllowed => Status::permission_denied(error.to_string()),
        // We could not decide. UNAVAILABLE lets Envoy apply its `failure_mode_deny`
        // setting, which is the operator's choice between failing open and closed.
        RequestError::Store(_) => Status::unavailable(error.to_string()),
    }
}

impl From<QuotaError> for Status {
    fn from(error: QuotaError) -> Status {
        match error {
            // The server is draining: UNAVAILABLE, so that Envoy opens its stream again,
            // on another replica.
            QuotaError::ShuttingDown => Status::unavailable(error.to_string()),
            // The client's reports are malformed: its fault, and the same reports will
            // not do better on another stream.
            QuotaError::NoDomain | QuotaError::EmptyBucketId(_) | QuotaError::TooLarge(_) => {
                Status::invalid_argument(error.to_string())
            }
        }
    }
}
