//! Holds: hits a request keeps on its bucket while it is in flight, settled after its
//! response by Envoy's stream-done call, or released after a TTL (see `docs/holds.md`).
//!
//! What every store does with a [`Check`](super::Check) that carries a [`HoldOp`], in the
//! same atomic step as the rest of its request:
//!
//! - **Reservation** (`slots: None`), phase [`Phase::Hold`]: the check's hits (the
//!   estimate) are decided as ordinary hits of a limit that does not charge: taken only
//!   when the request passes. When they are taken and the check is not over, a hold of
//!   that many, named `id`, is kept on the check's key until `now + ttl`. A hold with an
//!   `id` the key holds already adds no second hold (the estimate stays taken).
//! - **Reservation**, phase [`Phase::Settle`]: the hold named `id` is removed whatever the
//!   request's fate, and the check's hits (what was used) land as a charge of what they
//!   exceed the hold by, or as a refund of what they fall short of it by (never past the
//!   burst, as refunds do). Without such a hold (settled already, expired, never made),
//!   the hits land as a charge in full.
//! - **Expiry**: a hold past its time is released: its hits are refunded to its bucket, as
//!   a settle of nothing would. Stores release expired holds before deciding on their
//!   key: every check of a rule with holds carries a [`HoldOp`] (phase [`Phase::Peek`]
//!   when its descriptor names no request), so a plain check of a reservation's rule
//!   sees them released too. The embedded store also releases them in its upkeep.
//!   Each hold released so is counted on the [`Expiries`] its rule's statistics gave
//!   with it ([`HoldOp::expiries`]): the embedded store keeps the hold's own with the
//!   hold (its upkeep releases holds with no request at hand); Redis, which releases a
//!   key's expired holds only within a check of that key, counts them on that check's.
//! - **Reservation**, phase [`Phase::Peek`]: expired holds released, then the check is
//!   decided as the rule's limits say (a check, a charge, a refund), nothing held.
//! - **Concurrency** (`slots: Some(max)`): the check's bucket is never touched. Phase
//!   `Hold` is over when `max` slots of the key are in use or `id` holds one already;
//!   otherwise, when the request passes, slot `id` is taken until `now + ttl`. A hold of
//!   an `id` that holds a slot already is refused, and the slot then waits for one more
//!   settle before it is free: Envoy settles every stream, the refused one too, and that
//!   settle must not free the slot of the request still in flight. Phase `Settle` is one
//!   of those settles (the last gives slot `id` back), whatever the fate, and is never
//!   over. Phase `Peek`
//!   (a descriptor without a `hold` or `settle` entry) is over when every slot is in use
//!   and takes none. Reports: `remaining` slots after the decision, `count` slots in use,
//!   `reset` the time until the soonest slot expires (0 when none is in use).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock::Nanos;

/// What a request asks of a hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The request path: hold the hits (or take a slot).
    Hold,
    /// After the stream: settle the hold (or give the slot back).
    Settle,
    /// A concurrency rule's descriptor naming no request: is a slot free?
    Peek,
}

/// A check's part in a hold (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldOp<'a> {
    /// The hold's name on its key: the `hold` or `settle` entry's value, a request id;
    /// empty for [`Phase::Peek`].
    pub id: &'a str,
    /// What is asked.
    pub phase: Phase,
    /// How long a new hold lasts unsettled.
    pub ttl: Nanos,
    /// `Some(n)`: a slot of a concurrency limit of `n`; `None`: the check's hits held on
    /// its limit.
    pub slots: Option<u32>,
    /// Where holds of the check's key released unsettled after their TTL are counted:
    /// the rule's statistics, given by the service on the first check of a descriptor
    /// (whose limits each keep a hold of the same request); `None` where nothing counts
    /// them.
    pub expiries: Option<&'a Expiries>,
}

/// A count of holds (and slots) released unsettled after their TTL, shared between a
/// rule's statistics, which read it, and the stores, which add to it (see the module
/// docs). Two are equal when they are the same count.
#[derive(Debug, Clone, Default)]
pub struct Expiries(Arc<AtomicU64>);

impl Expiries {
    /// Counts `n` holds released.
    pub fn add(&self, n: u64) {
        if n > 0 {
            self.0.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Holds counted so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl PartialEq for Expiries {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Expiries {}

/// What one key holds, for explanations and the operator's view of a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// Holds (or slots) in force.
    pub holds: u64,
    /// Their hits, together (a slot counts 1).
    pub hits: u64,
    /// When the soonest of them expires unsettled (store clock); 0 without holds.
    pub soonest_expiry: Nanos,
}
