//! The errors below the edges (gRPC, HTTP, the command line), each with a kind that callers
//! branch on; the edges turn them into status codes and messages. Messages are for people:
//! nothing branches on their text.

use crate::request_limits::TooLarge;

/// Why a request could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The request named no domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// The request had no descriptors.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A limit override with an unusable unit (the Go server crashes on this one).
    #[error("descriptor {0}: limit override has no valid unit")]
    BadOverrideUnit(usize),
    /// The store could not decide.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The request is over one of the caps of [`crate::request_limits::RequestLimits`].
    #[error(transparent)]
    TooLarge(#[from] TooLarge),
}

impl RequestError {
    /// Whether the caller sent something no config can answer (as opposed to a store that
    /// could not decide): the Go server's `service_error`.
    pub fn is_invalid_request(&self) -> bool {
        !matches!(self, RequestError::Store(_))
    }
}

/// What kind of failure kept a store from deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreErrorKind {
    /// The store could not be reached, or its circuit is open after failures.
    Unreachable,
    /// The store did not answer within the timeout.
    TimedOut,
    /// The store answered with an error reply.
    Refused,
    /// The store's reply could not be read.
    MalformedReply,
}

/// A store could not decide; the service answers gRPC `UNAVAILABLE` so that Envoy's
/// `failure_mode_deny` applies.
#[derive(Debug, Clone, thiserror::Error)]
#[error("store unavailable: {message}")]
pub struct StoreError {
    /// What kind of failure.
    pub kind: StoreErrorKind,
    /// What happened, in words, for logs and the gRPC message.
    pub message: String,
}

impl StoreError {
    /// A failure of `kind`, described by `message`.
    pub fn new(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            message: message.into(),
        }
    }

    /// Whether asking again soon may succeed: everything but a reply that could not be
    /// read, which says the store and meshlimit disagree about the protocol.
    pub fn is_transient(&self) -> bool {
        self.kind != StoreErrorKind::MalformedReply
    }
}
