//! One shard of the embedded store: its buckets, found by key and kept in recency order.
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

use crate::clock::Nanos;
use crate::limiter::State;

/// "No slot": the end of a list.
const NIL: u32 = u32::MAX;

/// `prev` of a slot on the free list (a live slot's `prev` is a slot index or [`NIL`]).
const FREE: u32 = u32::MAX - 1;

/// The oldest stamp of a shard that holds no bucket: never chosen for eviction.
pub(super) const EMPTY: u64 = u64::MAX;

/// Bytes a bucket costs besides its key: its slot (80 bytes), its share of the index (4
/// bytes and a control byte at a load factor between 7/16 and 7/8), the allocator's header
/// and rounding of the key's allocation, and the slack of tables that grow by doubling.
/// Measured on the release binary: 600,000 buckets with 71-byte keys added 210 bytes each
/// to the resident memory, 139 besides the key (see the README's sizing paragraph).
pub(super) const BUCKET_OVERHEAD: u64 = size_of::<Slot>() as u64 + 64;

/// What a store keeps of a bucket when it lets it go.
#[derive(Debug)]
pub(super) struct Gone {
    /// The bucket's key, to be dropped once the shard's lock is released.
    pub(super) key: Box<str>,
    /// Its state when it went.
    pub(super) state: Option<State>,
    /// `requests_per_unit` of the last limit applied to it.
    pub(super) requests_per_unit: u32,
}

impl Gone {
    /// Bytes the bucket counted for.
    pub(super) fn bytes(&self) -> u64 {
        bucket_bytes(&self.key)
    }

    /// Whether forgetting the bucket at `now` changes a future decision: it was not full
    /// again (or its window not over), so its caller's limit restarts from full.
    pub(super) fn weakens(&self, now: Nanos) -> bool {
        self.state
            .is_some_and(|s| s.idle_in(now, self.requests_per_unit) > 0)
    }
}

/// Bytes a bucket with `key` counts for against the store's byte bound.
pub(super) fn bucket_bytes(key: &str) -> u64 {
    key.len() as u64 + BUCKET_OVERHEAD
}

/// A bucket, or a free slot.
#[derive(Debug)]
pub(super) struct Slot {
    /// The bucket's key (empty for a free slot, which then allocates nothing).
    key: Box<str>,
    /// The store's hash of `key`: table lookups and growth never hash again.
    hash: u64,
    /// The bucket's state; `None` until its first decision is kept.
    pub(super) state: Option<State>,
    /// `requests_per_unit` of the last limit applied, to know when the bucket is idle.
    pub(super) requests_per_unit: u32,
    /// The store's creation count when the bucket was last used.
    stamp: u64,
    /// Towards the least recently used end; [`FREE`] marks a free slot.
    prev: u32,
    /// Towards the most recently used end; the next free slot for a free one.
    next: u32,
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

/// The outcome of [`Buckets::touch`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Touched {
    /// The bucket's slot.
    pub(super) slot: u32,
    /// Whether the bucket was created by this use.
    pub(super) created: bool,
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

    /// The slot of `key`'s bucket, if held.
    pub(super) fn find(&self, key: &str, hash: u64) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(hash, |&i| {
                let slot = &slots[i as usize];
                slot.hash == hash && *slot.key == *key
            })
            .copied()
    }

    /// A held bucket's slot.
    pub(super) fn slot(&self, slot: u32) -> &Slot {
        &self.slots[slot as usize]
    }

    /// A held bucket's slot, to keep a decision's outcome.
    pub(super) fn slot_mut(&mut self, slot: u32) -> &mut Slot {
        &mut self.slots[slot as usize]
    }

    /// Uses `key`'s bucket, creating it (full) if absent, and makes it the most recently
    /// used. `current` is the store's creation count now; `create` is called only to create
    /// the bucket, with the bytes it counts for, and returns the new count (its stamp).
    pub(super) fn touch(
        &mut self,
        key: &str,
        hash: u64,
        current: u64,
        create: impl FnOnce(u64) -> u64,
    ) -> Touched {
        if let Some(slot) = self.find(key, hash) {
            let reordered = self.slots[slot as usize].stamp != current;
            if reordered {
                self.unlink(slot);
                self.slots[slot as usize].stamp = current;
                self.link_newest(slot);
            }
            return Touched {
                slot,
                created: false,
                reordered,
            };
        }
        let stamp = create(bucket_bytes(key));
        let bucket = Slot {
            key: Box::from(key),
            hash,
            state: None,
            requests_per_unit: 0,
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
            .insert_unique(hash, slot, |&i| slots[i as usize].hash);
        self.link_newest(slot);
        Touched {
            slot,
            created: true,
            reordered: true,
        }
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
        let hash = self.slots[slot as usize].hash;
        if let Ok(found) = self.index.find_entry(hash, |&i| i == slot) {
            found.remove();
        }
        self.unlink(slot);
        let freed = &mut self.slots[slot as usize];
        freed.prev = FREE;
        freed.next = self.free;
        self.free = slot;
        Gone {
            key: std::mem::take(&mut freed.key),
            state: freed.state.take(),
            requests_per_unit: freed.requests_per_unit,
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
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    fn hash(key: &str) -> u64 {
        foldhash::fast::FixedState::with_seed(7).hash_one(key)
    }

    fn touch(buckets: &mut Buckets, key: &str, current: &mut u64) -> Touched {
        let mut count = *current;
        let touched = buckets.touch(key, hash(key), count, |_| {
            count += 1;
            count
        });
        *current = count;
        touched
    }

    #[test]
    fn least_recently_used_goes_first_and_slots_are_reused() {
        let mut buckets = Buckets::new();
        let mut count = 0;
        for key in ["a", "b", "c"] {
            assert!(touch(&mut buckets, key, &mut count).created);
        }
        assert_eq!(buckets.oldest_stamp(), 1);
        // "a" used again after creations: it becomes the most recent.
        assert!(!touch(&mut buckets, "a", &mut count).created);
        assert_eq!(buckets.oldest_stamp(), 2);
        assert_eq!(&*buckets.pop_oldest().unwrap().key, "b");
        assert_eq!(&*buckets.pop_oldest().unwrap().key, "c");
        let slots = buckets.slots.len();
        touch(&mut buckets, "d", &mut count);
        assert_eq!(buckets.slots.len(), slots, "a free slot was reused");
        assert_eq!(&*buckets.pop_oldest().unwrap().key, "a");
        assert_eq!(&*buckets.pop_oldest().unwrap().key, "d");
        assert!(buckets.pop_oldest().is_none());
        assert_eq!((buckets.len(), buckets.oldest_stamp()), (0, EMPTY));
    }

    #[test]
    fn removing_idle_buckets_keeps_the_rest_in_order() {
        let mut buckets = Buckets::new();
        let mut count = 0;
        for key in ["a", "b", "c", "d"] {
            touch(&mut buckets, key, &mut count);
        }
        let gone = buckets.remove_idle(|s| matches!(&*s.key, "a" | "c"));
        assert_eq!(gone.len(), 2);
        assert_eq!(buckets.len(), 2);
        assert!(buckets.find("a", hash("a")).is_none());
        assert_eq!(&*buckets.pop_oldest().unwrap().key, "b");
        assert_eq!(&*buckets.pop_oldest().unwrap().key, "d");
    }
}
