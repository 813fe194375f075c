//! A request's descriptors as the service reads them: the protobuf type implements
//! [`RequestDescriptor`] in the gRPC module, so that the hot path reads its entries in
//! place; [`Descriptor`] is the owned form for `/json`, `/explain`, tools and tests.

use crate::rules::Unit;

/// A descriptor as the service reads it.
pub trait RequestDescriptor {
    /// The entries, in order, as (key, value).
    fn entries(&self) -> impl Iterator<Item = (&str, &str)>;
    /// The per-request limit override, if any.
    fn limit_override(&self) -> Option<Override>;
    /// Descriptor-level `hits_addend`, if set (0 is meaningful: check without consuming).
    fn hits_addend(&self) -> Option<u64>;
    /// `is_negative_hits`: the hits are a refund, given back to a rule that charges.
    fn is_negative_hits(&self) -> bool;
}

/// A per-request limit (`RateLimitDescriptor.limit`), unit not yet validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit as sent: `None` for UNKNOWN or an out-of-range number.
    pub unit: Option<Unit>,
}

/// An owned descriptor, for callers that do not hold protobuf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// (key, value) entries.
    pub entries: Vec<(String, String)>,
    /// Per-request limit override.
    pub limit: Option<Override>,
    /// Descriptor-level hits.
    pub hits_addend: Option<u64>,
    /// `is_negative_hits`: the hits are a refund.
    pub refund: bool,
}

impl Descriptor {
    /// A descriptor of `entries` with no override and default hits.
    pub fn new(entries: &[(&str, &str)]) -> Self {
        Self {
            entries: entries
                .iter()
                .map(|&(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Self::default()
        }
    }
}

impl RequestDescriptor for Descriptor {
    fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    fn limit_override(&self) -> Option<Override> {
        self.limit
    }
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }
    fn is_negative_hits(&self) -> bool {
        self.refund
    }
}
