//! The shard's table and recency list, without the store around them.

use super::*;
use crate::rules::{Algorithm, Limit, Unit};
use crate::store::memory::bucket_id::IdHasher;
use crate::store::memory::cell;

fn id(key: &str) -> BucketId {
    IdHasher::fixed(7).id(key)
}

fn touch(buckets: &mut Buckets, key: &str, current: &mut u64) -> Touched {
    touch_key(buckets, key.into(), current)
}

fn touch_key(buckets: &mut Buckets, key: BucketKey<'_>, current: &mut u64) -> Touched {
    let mut count = *current;
    let touched = buckets.touch(&key, id(key.descriptor_part()), count, |_| {
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
    assert_eq!(buckets.pop_oldest().unwrap().id, id("b"));
    assert_eq!(buckets.pop_oldest().unwrap().id, id("c"));
    let slots = buckets.slots.len();
    touch(&mut buckets, "d", &mut count);
    assert_eq!(buckets.slots.len(), slots, "a free slot was reused");
    assert_eq!(buckets.pop_oldest().unwrap().id, id("a"));
    assert_eq!(buckets.pop_oldest().unwrap().id, id("d"));
    assert!(buckets.pop_oldest().is_none());
    assert_eq!((buckets.len(), buckets.oldest_stamp()), (0, EMPTY));
}

#[test]
fn removing_idle_buckets_keeps_the_rest_in_order() {
    let mut buckets = Buckets::new();
    let mut count = 0;
    for key in ["a", "b", "c", "d"] {
        let place = touch(&mut buckets, key, &mut count).place;
        if matches!(key, "b" | "d") {
            // A second's worth of debt at 1/s: not full again before 1 s.
            let owing = State::TokenBucket {
                debt: 1_000_000_000,
                at: 0,
                period: 1,
            };
            let per_second = Limit {
                charge: false,
                requests_per_unit: 1,
                unit: Unit::Second,
                multiplier: 1,
                burst: 1,
                algorithm: Algorithm::TokenBucket,
            };
            buckets.kept_mut(place).keep(Some(owing), &per_second);
        }
    }
    let gone = buckets.remove_idle(|slot| slot.idle(0));
    assert_eq!(gone.len(), 2);
    assert_eq!(buckets.len(), 2);
    assert!(buckets.lookup(&"a".into(), id("a")).is_none());
    let b = buckets.pop_oldest().unwrap();
    assert_eq!(b.id, id("b"));
    assert!(b.weakens(0) && !b.weakens(1_000_000_000));
    assert_eq!(buckets.pop_oldest().unwrap().id, id("d"));
}

/// "1:d" + "5:p=1s" and "1:d" + "5:p=1d": two limits of descriptor "1:d".
#[test]
fn a_descriptors_limits_share_one_bucket_apart_from_a_one_limit_bucket() {
    let (per_second, daily) = ("1:d5:p=1s", "1:d5:p=1d");
    let mut buckets = Buckets::new();
    let mut count = 0;
    let first = touch_key(&mut buckets, BucketKey::listed(per_second, 3), &mut count);
    let second = touch_key(&mut buckets, BucketKey::listed(daily, 3), &mut count);
    assert!(first.created && !second.created);
    assert_eq!(second.grown, cell::listed_limit_bytes("5:p=1d"));
    assert_eq!(first.place.slot, second.place.slot);
    assert_eq!((first.place.limit, second.place.limit), (0, 1));
    // The same text with one limit (a reload that dropped the list) is another bucket.
    let one = touch(&mut buckets, "1:d", &mut count);
    assert!(one.created && one.place.slot != first.place.slot);
    assert_eq!(buckets.len(), 2);
    let listed = buckets.pop_oldest().unwrap();
    assert_eq!(
        listed.bytes(),
        BUCKET_BYTES + cell::listed_limit_bytes("5:p=1s") + cell::listed_limit_bytes("5:p=1d")
    );
}

#[test]
fn a_slots_state_has_a_cache_line_of_its_own() {
    assert_eq!(align_of::<Slot>(), 64);
    assert_eq!(size_of::<Slot>(), 128);
    assert_eq!(std::mem::offset_of!(Slot, cell), 0);
    assert!(size_of::<Cell>() <= 64);
}
