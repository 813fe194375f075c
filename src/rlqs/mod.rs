//! Envoy's Rate Limit Quota Service (RLQS, `envoy.service.rate_limit_quota.v3`): Envoy
//! enforces quota in the proxy and asks the server, per bucket, what to enforce.
//!
//! So far: what a bucket's rule hands out as a whole ([`quota`]); the bucket ids are
//! matched against the config by [`crate::matcher::BucketWalk`]. The stream service, the
//! split of a rule's quota among the Envoys reporting a bucket, and its state are issue 12's
//! remaining work.

pub mod quota;

pub use quota::{Quota, quota_of};
