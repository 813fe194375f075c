//! One shard of the embedded store: its buckets, found by id and kept in recency order.
//!
//! Buckets live in a slab (`slots`, reused through a free list) so that they keep their
//! index while the hash table over them grows; the table holds only those indices. The
//! slab's slots also form a doubly linked list from the least to the most recently used
//! bucket, so the shard's eviction candidate is always at hand, and moving a bucket to the
//! recent end is a few index writes under the lock the decision already holds.
//!
//! Recency is measured in *stamps*: the value of the store's creation counter when a bucket
//! was last used (see `super::bounds`). A bucket moves in the list only when its stamp
//! changes, that is when some bucket was created since its last use: a steady stream of hits
//! on known buckets costs no list work at all. The list stays sorted by stamp, because every
//! stamp a shard hands out is read under its lock from a counter that only grows.

use hashbrown::HashTable;

use super::bucket_id::BucketId;
use super::cell::{Cell, Kept, ListedLimit, ONE};
use crate::bucket_key::BucketKey;
use crate::clock::Nanos;
use crate::limiter::State;

/// "No slot": the end of a list.
const NIL: u32 = u32::MAX;

/// `prev` of a slot on the free list (a live slot's `prev` is a slot index or [`NIL`]).
const FREE: u32 = u32::MAX - 1;

/// The oldest stamp of a shard that holds no bucket: never chosen for eviction.
pub(super) const EMPTY: u64 = u64::MAX;

/// Bytes a bucket counts for (besides a list's limits, `cell::listed_limit_bytes`),
/// whatever its key's length: its slot, its share of the index (4 bytes and a control byte
/// at a load factor between 7/16 and 7/8), and the slack of tables that grow by doubling.
/// See docs/performance.md, "Memory", for what the release binary measures.
pub(super) const BUCKET_BYTES: u64 = size_of::<Slot>() as u64 + 32;

/// What a store keeps of a bucket when it lets it go.
#[derive(Debug)]
pub(super) struct Gone {
    /// The bucket's id.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) id: BucketId,
    /// What it kept when it went, to be dropped once the shard's lock is released.
    cell: Cell,
    /// The rate of a one-limit bucket's last limit.
    one_rate: u32,
}

impl Gone {
    /// Bytes the bucket counted for.
    pub(super) fn bytes(&self) -> u64 {
        BUCKET_BYTES + self.cell.bytes()
    }

    /// Whether forgetting the bucket at `now` changes a future decision: one of its limits
    /// was not full again (or its window not over), so its caller's limit restarts from
    /// full.
    pub(super) fn weakens(&self, now: Nanos) -> bool {
        !self.cell.idle(now, self.one_rate)
    }
}

/// A bucket, or a free slot.
///
/// Aligned to a cache line, so that deciding on a known token bucket or fixed window
/// writes one line: the cell, first (the compiler puts the 16-byte-aligned state there).
/// The id, stamp, rate and links share the second line, only read while the bucket is
/// hit without being reordered. A hot key decided on by two cores moves one line a
/// decision instead of two or three (112 bytes at any 16-byte offset straddled lines).
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct Slot {
    /// The bucket's id: of its descriptor's key (`BucketKey::descriptor_part`). Its `low`
    /// half is the table's hash, so lookups and growth never hash again.
    id: BucketId,
    /// The bucket's state, or its limits' states for a listed descriptor.
    cell: Cell,
    /// `requests_per_unit` of the last limit applied to a one-limit bucket, to know when it
    /// is idle (a listed limit's is in the cell).
    one_rate: u32,
    /// The store's creation count when the bucket was last used.
    stamp: u64,
    /// Towards the least recently used end; [`FREE`] marks a free slot.
    prev: u32,
    /// Towards the most recently used end; the next free slot for a free one.
    next: u32,
}

impl Slot {
    /// Whether every limit of the bucket is idle at `now`: full again, or its window over.
    pub(super) fn idle(&self, now: Nanos) -> bool {
        self.cell.idle(now, self.one_rate)
    }
}

/// The buckets of one shard. Not synchronised: the store keeps each behind a mutex.
#[derive(Debug)]
pub(super) struct Buckets {
    /// Key → slot index.
    index: HashTable<u32>,
    /// Every slot ever used by this shard; a slot's index is stable while its bucket lives.
    slots: Vec<Slot>,
    /// First free slot, or [`NIL`].
    free: u32,
    /// Least recently used bucket, or [`NIL`].
    oldest: u32,
    /// Most recently used bucket, or [`NIL`].
    newest: u32,
    /// Stamp of `oldest`, or [`EMPTY`]: what the shard publishes for eviction.
    oldest_stamp: u64,
}

/// Where a check's state lives: its bucket's slot and, for a limit of a list, the limit's
/// index in it ([`ONE`] otherwise).
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    pub(super) slot: u32,
    pub(super) limit: u32,
}

/// The outcome of [`Buckets::touch`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Touched {
    /// The check's place.
    pub(super) place: Place,
    /// Whether the bucket was created by this use.
    pub(super) created: bool,
    /// Bytes of a listed limit added to a bucket that existed (one created with the
    /// bucket is in its creation's bytes).
    pub(super) grown: u64,
    /// Whether the shard's recency order changed (a creation, or a bucket moved to the
    /// recent end): only then may its oldest stamp have changed.
    pub(super) reordered: bool,
}

impl Buckets {
    /// A shard with no bucket.
    pub(super) fn new() -> Self {
        Self {
            index: HashTable::new(),
            slots: Vec::new(),
            free: NIL,
            oldest: NIL,
            newest: NIL,
            oldest_stamp: EMPTY,
        }
    }

    /// Buckets held.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// Stamp of the least recently used bucket, or [`EMPTY`].
    pub(super) fn oldest_stamp(&self) -> u64 {
        self.oldest_stamp
    }

    /// The slot of the bucket `id` (a descriptor's, `listed` or not), if held. A listed
    /// descriptor's bucket and a one-limit bucket never share a slot, even with the same
    /// key (a reload that turned one into the other).
    #[inline]
    fn find(&self, id: BucketId, listed: bool) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(id.low, |&i| {
                let slot = &slots[i as usize];
                slot.id == id && matches!(slot.cell, Cell::Listed(_)) == listed
            })
            .copied()
    }

    /// The state of the bucket of `key` (whose descriptor's id is `id`), if held and
    /// decided.
    pub(super) fn lookup(&self, key: &BucketKey<'_>, id: BucketId) -> Option<State> {
        let cell = &self.slots[self.find(id, key.is_listed())? as usize].cell;
        let limit = if key.is_listed() {
            cell.find(key.limit_part(), 0)?
        } else {
            ONE
        };
        *cell.get(limit)?
    }

    /// The bucket at `place` (from [`Buckets::touch`] or [`Buckets::place_in`] under the
    /// same lock), to decide on and keep the outcome.
    pub(super) fn kept_mut(&mut self, place: Place) -> Kept<'_> {
        let slot = &mut self.slots[place.slot as usize];
        slot.cell.at_mut(place.limit, &mut slot.one_rate)
    }

    /// The limits of the listed descriptor in `slot` (from [`Buckets::touch`] under the
    /// same lock), indexed as [`Place::limit`].
    pub(super) fn listed_mut(&mut self, slot: u32) -> &mut [ListedLimit] {
        self.slots[slot as usize].cell.listed_mut()
    }

    /// The place of another limit `key` of the listed descriptor in `slot` (just
    /// touched), added if absent, and the bytes that added. `hint`: where the limit
    /// probably is (its position in its list).
    pub(super) fn place_in(&mut self, slot: u32, key: &BucketKey<'_>, hint: usize) -> (Place, u64) {
        let (limit, grown) = self.slots[slot as usize].cell.limit(key.limit_part(), hint);
        (Place { slot, limit }, grown)
    }

    /// Uses the bucket of `key` (whose descriptor's id is `id`), creating it
    /// (full) if absent, and makes it the most recently used. For a limit of a list, the
    /// bucket is its descriptor's, and the limit is added to it if absent. `current` is the
    /// store's creation count now; `create` is called only to create the bucket, with the
    /// bytes it counts for, and returns the new count (its stamp).
    pub(super) fn touch(
        &mut self,
        key: &BucketKey<'_>,
        id: BucketId,
        current: u64,
        create: impl FnOnce(u64) -> u64,
    ) -> Touched {
        let listed = key.is_listed();
        if let Some(slot) = self.find(id, listed) {
            let reordered = self.slots[slot as usize].stamp != current;
            if reordered {
                self.unlink(slot);
                self.slots[slot as usize].stamp = current;
                self.link_newest(slot);
            }
            let (place, grown) = if listed {
                self.place_in(slot, key, 0)
            } else {
                (Place { slot, limit: ONE }, 0)
            };
            return Touched {
                place,
                created: false,
                grown,
                reordered,
            };
        }
        let mut cell = if listed {
            Cell::Listed(Vec::new())
        } else {
            Cell::One(None)
        };
        let (limit, limit_bytes) = cell.limit(key.limit_part(), 0);
        let stamp = create(BUCKET_BYTES + limit_bytes);
        let bucket = Slot {
            id,
            cell,
            one_rate: 0,
            stamp,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free {
            NIL => {
                self.slots.push(bucket);
                // Below 2^31 + what is being created at the same moment: the store's bound
                // (`bounds::MAX_BUCKETS_LIMIT`) caps every shard's buckets, and slots are
                // reused before new ones are added.
                (self.slots.len() - 1) as u32
            }
            free => {
                self.free = self.slots[free as usize].next;
                self.slots[free as usize] = bucket;
                free
            }
        };
        let slots = &self.slots;
        self.index
            .insert_unique(id.low, slot, |&i| slots[i as usize].id.low);
        self.link_newest(slot);
        Touched {
            place: Place { slot, limit },
            created: true,
            grown: 0,
            reordered: true,
        }
    }

    /// Removes the bucket of `key` (whose descriptor's id is `id`; a list's limits go
    /// together), if held: the operator's reset. The bytes it counted for.
    pub(super) fn forget(&mut self, key: &BucketKey<'_>, id: BucketId) -> Option<u64> {
        let slot = self.find(id, key.is_listed())?;
        Some(self.remove(slot).bytes())
    }

    /// Removes the least recently used bucket.
    pub(super) fn pop_oldest(&mut self) -> Option<Gone> {
        match self.oldest {
            NIL => None,
            oldest => Some(self.remove(oldest)),
        }
    }

    /// Removes every bucket for which `idle` holds; returns them.
    pub(super) fn remove_idle(&mut self, mut idle: impl FnMut(&Slot) -> bool) -> Vec<Gone> {
        let doomed: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&i| {
                let slot = &self.slots[i as usize];
                slot.prev != FREE && idle(slot)
            })
            .collect();
        doomed.into_iter().map(|i| self.remove(i)).collect()
    }

    fn remove(&mut self, slot: u32) -> Gone {
        let hash = self.slots[slot as usize].id.low;
        if let Ok(found) = self.index.find_entry(hash, |&i| i == slot) {
            found.remove();
        }
        self.unlink(slot);
        let freed = &mut self.slots[slot as usize];
        freed.prev = FREE;
        freed.next = self.free;
        self.free = slot;
        Gone {
            id: freed.id,
            // A free slot keeps nothing, and allocates nothing.
            cell: std::mem::replace(&mut freed.cell, Cell::One(None)),
            one_rate: freed.one_rate,
        }
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { prev, next, .. } = self.slots[slot as usize];
        match prev {
            NIL => self.oldest = next,
            prev => self.slots[prev as usize].next = next,
        }
        match next {
            NIL => self.newest = prev,
            next => self.slots[next as usize].prev = prev,
        }
        if prev == NIL {
            self.oldest_stamp = match self.oldest {
                NIL => EMPTY,
                oldest => self.slots[oldest as usize].stamp,
            };
        }
    }

    fn link_newest(&mut self, slot: u32) {
        let newest = self.newest;
        let linked = &mut self.slots[slot as usize];
        linked.prev = newest;
        linked.next = NIL;
        match newest {
            NIL => {
                self.oldest = slot;
                self.oldest_stamp = linked.stamp;
            }
            newest => self.slots[newest as usize].next = slot,
        }
        self.newest = slot;
    }
}

#[cfg(test)]
mod tests;
