//! Envoy's Rate Limit Quota Service (RLQS, `envoy.service.rate_limit_quota.v3`): Envoy
//! enforces quota in the proxy and asks the server, per bucket, what to enforce.
//!
//! A bucket id is matched against the config like a descriptor
//! ([`crate::matcher::QuotaBucketWalk`]); its rule's whole quota ([`quota`]) is split among the
//! Envoys reporting the bucket ([`share`]), on this replica ([`registry`]), and sent on
//! their streams ([`service`]).

pub mod page;
pub mod quota;
pub mod registry;
#[cfg(test)]
mod registry_tests;
pub mod service;
pub mod share;

pub use quota::{Quota, quota_of};
pub use registry::{Registry, Unmatched};
pub use service::QuotaService;
