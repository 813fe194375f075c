//! What one bucket of the embedded store keeps: one limit's state, or the states of every
//! limit of a `rate_limits` list, side by side under the descriptor's key. Keeping a list's
//! limits together makes a descriptor with two limits one table lookup and one cache line's
//! walk instead of two of each; they are looked up, aged and evicted together.

use crate::clock::Nanos;
use crate::limiter::State;
use crate::rules::Limit;
use crate::short_eq;

/// A bucket being decided on: its state and the rate it was last decided under, wherever
/// its cell keeps them.
#[derive(Debug)]
pub(super) struct Kept<'a> {
    /// `None` until its first decision is kept.
    pub(super) state: &'a mut Option<State>,
    /// `requests_per_unit` of the last limit applied, to know when the bucket is idle.
    requests_per_unit: &'a mut u32,
}

impl Kept<'_> {
    /// Keeps `state`, decided under `limit`.
    pub(super) fn keep(self, state: Option<State>, limit: &Limit) {
        *self.state = state;
        // Written only when it changed: a one-limit bucket's rate is on its slot's second
        // cache line, which other cores then keep reading without a transfer.
        if *self.requests_per_unit != limit.requests_per_unit {
            *self.requests_per_unit = limit.requests_per_unit;
        }
    }
}

/// Whether a bucket in `state` under a limit of `requests_per_unit`, left alone from `now`
/// on, holds nothing a decision would miss: full again, or its window over.
fn idle(state: &Option<State>, requests_per_unit: u32, now: Nanos) -> bool {
    state.is_none_or(|s| s.idle_in(now, requests_per_unit) == 0)
}

/// One limit of a list: its part of the bucket key (`BucketKey::limit_part`) and its
/// bucket.
#[derive(Debug)]
pub(super) struct ListedLimit {
    part: Box<str>,
    state: Option<State>,
    requests_per_unit: u32,
}

impl ListedLimit {
    /// Whether this is the limit whose key part is `part`.
    #[inline]
    fn is(&self, part: &str) -> bool {
        short_eq::same(self.part.as_bytes(), part.as_bytes())
    }

    /// Its bucket's state; `None` until its first decision is kept.
    pub(super) fn state(&self) -> Option<&State> {
        self.state.as_ref()
    }

    /// Keeps `state`, decided under `limit`.
    pub(super) fn keep(&mut self, state: State, limit: &Limit) {
        self.state = Some(state);
        self.requests_per_unit = limit.requests_per_unit;
    }
}

/// What a slot keeps.
#[derive(Debug)]
pub(super) enum Cell {
    /// The state of a descriptor with one limit (its rate is the slot's: kept beside the
    /// slot's links, it costs no padding).
    One(Option<State>),
    /// The buckets of a listed descriptor's limits, in the order first seen. A reload can
    /// add limits; one it removes stays until the descriptor goes (idle or evicted).
    Listed(Vec<ListedLimit>),
}

/// Index of [`Cell::One`]'s bucket in [`Cell::get`] and [`Cell::get_mut`].
pub(super) const ONE: u32 = u32::MAX;

/// Whether the limit at `hint` is the one with `part`. Limits are added in the order
/// first seen, their list's: the hint is nearly always right, one comparison.
#[inline]
fn at_hint(limits: &[ListedLimit], part: &str, hint: usize) -> bool {
    limits.get(hint).is_some_and(|l| l.is(part))
}

/// Bytes a limit of a list adds to its bucket: its entry, and its part's allocation with
/// the allocator's header and rounding.
pub(super) fn listed_limit_bytes(part: &str) -> u64 {
    (size_of::<ListedLimit>() + part.len().next_multiple_of(16) + 16) as u64
}

impl Cell {
    /// The bucket at `limit`: [`ONE`]'s (whose rate is `one_rate`, the slot's), or a listed
    /// limit's index from [`Cell::limit`]. Such an index stays valid while the bucket lives
    /// (limits are only ever added), so a decision holding its shard's lock indexes with it
    /// directly.
    pub(super) fn at_mut<'a>(&'a mut self, limit: u32, one_rate: &'a mut u32) -> Kept<'a> {
        match self {
            Cell::One(state) => Kept {
                state,
                requests_per_unit: one_rate,
            },
            Cell::Listed(limits) => {
                let listed = &mut limits[limit as usize];
                Kept {
                    state: &mut listed.state,
                    requests_per_unit: &mut listed.requests_per_unit,
                }
            }
        }
    }

    /// A listed descriptor's limits, indexed as [`Cell::limit`] answers; none for
    /// [`Cell::One`].
    pub(super) fn listed_mut(&mut self) -> &mut [ListedLimit] {
        match self {
            Cell::One(_) => &mut [],
            Cell::Listed(limits) => limits,
        }
    }

    /// The state at `limit` (an index from [`Cell::limit`], or [`ONE`]); `None` if the
    /// cell has no such bucket.
    pub(super) fn get(&self, limit: u32) -> Option<&Option<State>> {
        match self {
            Cell::One(state) => (limit == ONE).then_some(state),
            Cell::Listed(limits) => limits.get(limit as usize).map(|l| &l.state),
        }
    }

    /// The index of the listed limit with `part`, if held; looked for first at `hint`.
    #[inline]
    pub(super) fn find(&self, part: &str, hint: usize) -> Option<u32> {
        match self {
            Cell::One(_) => None,
            Cell::Listed(limits) if at_hint(limits, part, hint) => Some(hint as u32),
            Cell::Listed(limits) => limits.iter().position(|l| l.is(part)).map(|i| i as u32),
        }
    }

    /// The index of the listed limit with `part` (probably at `hint`, see [`Cell::find`]),
    /// added (full) if absent, and the bytes added ([`listed_limit_bytes`], 0 when it was
    /// held). A [`Cell::One`] has no limits to add: it answers [`ONE`].
    #[inline]
    pub(super) fn limit(&mut self, part: &str, hint: usize) -> (u32, u64) {
        match self {
            Cell::Listed(limits) if at_hint(limits, part, hint) => (hint as u32, 0),
            _ => self.limit_elsewhere(part, hint),
        }
    }

    /// [`Cell::limit`] when the hint missed: looked for in the whole list, or added. Out
    /// of line, so that a decision's hot path does not carry the allocation's registers
    /// and frame (they were half the cost of a hit at the hint).
    #[cold]
    #[inline(never)]
    fn limit_elsewhere(&mut self, part: &str, hint: usize) -> (u32, u64) {
        if let Some(found) = self.find(part, hint) {
            return (found, 0);
        }
        let Cell::Listed(limits) = self else {
            return (ONE, 0);
        };
        // Exactly as many entries as limits: a list's limits arrive together, and a Vec
        // growing by doubling would hold four for two.
        limits.reserve_exact(1);
        limits.push(ListedLimit {
            part: Box::from(part),
            state: None,
            requests_per_unit: 0,
        });
        ((limits.len() - 1) as u32, listed_limit_bytes(part))
    }

    /// Bytes the cell's limits count for beyond the slot itself.
    pub(super) fn bytes(&self) -> u64 {
        match self {
            Cell::One(_) => 0,
            Cell::Listed(limits) => limits.iter().map(|l| listed_limit_bytes(&l.part)).sum(),
        }
    }

    /// Whether every bucket of the cell is idle at `now`: full again, or its window over
    /// (`one_rate`: the rate of [`Cell::One`]'s, the slot's).
    pub(super) fn idle(&self, now: Nanos, one_rate: u32) -> bool {
        match self {
            Cell::One(state) => idle(state, one_rate, now),
            Cell::Listed(limits) => limits
                .iter()
                .all(|l| idle(&l.state, l.requests_per_unit, now)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_adds_each_limit_once_and_counts_its_bytes() {
        let mut cell = Cell::Listed(Vec::new());
        let (first, bytes) = cell.limit("5:p=1s", 0);
        assert_eq!((first, bytes), (0, listed_limit_bytes("5:p=1s")));
        assert_eq!(cell.limit("5:p=1d", 1).0, 1);
        assert_eq!(cell.limit("5:p=1s", 0), (0, 0));
        // A wrong hint (a reload reordered the list) still finds it.
        assert_eq!(cell.limit("5:p=1s", 1), (0, 0));
        assert_eq!(
            cell.bytes(),
            listed_limit_bytes("5:p=1s") + listed_limit_bytes("5:p=1d")
        );
        let Cell::Listed(limits) = &cell else {
            unreachable!()
        };
        assert_eq!(limits.capacity(), 2);
        assert!(cell.get(1).is_some() && cell.get(2).is_none() && cell.get(ONE).is_none());
    }

    #[test]
    fn one_bucket_has_no_listed_limits() {
        let mut cell = Cell::One(None);
        assert_eq!(cell.limit("5:p=1s", 0), (ONE, 0));
        assert!(cell.get(ONE).is_some() && cell.get(0).is_none());
        assert_eq!(cell.bytes(), 0);
    }
}
