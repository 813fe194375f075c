//! A request as the service reads it: one [`Request`] value (domain, descriptors, hits)
//! carried from the edge through the plan, the service, the statistics, the dynamic
//! metadata and explanations. Its descriptors are any [`RequestDescriptor`]: the gRPC
//! edge's, read in place from the message's bytes, or the owned [`Descriptor`] of
//! `/json`, `/explain`, tools and tests ([`OwnedRequest`] holds a whole JSON body).

use crate::rules::Unit;

/// One `ShouldRateLimit` request: what every step of a decision reads, borrowed from
/// wherever the edge keeps it. Copied freely (three words and a number).
#[derive(Debug)]
pub struct Request<'a, D> {
    /// The config domain the descriptors are looked up in.
    pub domain: &'a str,
    /// The descriptors, in request order.
    pub descriptors: &'a [D],
    /// The request's `hits_addend`: hits of every descriptor without its own (0 counts
    /// as 1).
    pub hits_addend: u32,
    /// Whether its caller may give budget back (refunds, settles of holds): the edges
    /// ask their `--give-back-from` policy; a request made inside the process may.
    pub may_give_back: bool,
}

impl<'a, D> Request<'a, D> {
    /// A request of `descriptors` in `domain`, each taking `hits_addend` hits unless it
    /// says otherwise, from a caller that may give budget back.
    pub const fn new(domain: &'a str, descriptors: &'a [D], hits_addend: u32) -> Self {
        Self {
            domain,
            descriptors,
            hits_addend,
            may_give_back: true,
        }
    }

    /// This request, from a caller that may give budget back or not.
    pub const fn giving_back(self, may: bool) -> Self {
        Self {
            may_give_back: may,
            ..self
        }
    }
}

// By hand: derived, both would ask `D: Clone`, which a borrowed slice does not need.
impl<D> Clone for Request<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D> Copy for Request<'_, D> {}

/// A request that owns its strings: a JSON body read by `/json` or `POST /explain`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedRequest {
    /// `domain`.
    pub domain: String,
    /// `descriptors`, in request order.
    pub descriptors: Vec<Descriptor>,
    /// `hits_addend` of the request.
    pub hits_addend: u32,
}

impl OwnedRequest {
    /// The request, borrowed.
    pub fn as_request(&self) -> Request<'_, Descriptor> {
        Request::new(&self.domain, &self.descriptors, self.hits_addend)
    }
}

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
