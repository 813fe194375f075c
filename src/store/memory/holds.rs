//! The embedded store's holds and concurrency slots (see [`crate::store::hold`] for what
//! they mean): a ledger beside the buckets, under one lock of its own.
//!
//! # Locking
//! A request with a hold takes the ledger's lock, then its buckets' shard locks (through
//! the usual paths), and keeps the ledger's for the whole decision: holds of one key are
//! read, decided and recorded by one request at a time, and the buckets' own steps stay
//! atomic as always. Requests without holds never take the ledger's lock, so the one lock
//! costs nothing to the requests that make up nearly all traffic. Always the ledger first,
//! then shards: the order that keeps two requests from waiting on each other.
//!
//! # Bounds
//! A hold counts [`HOLD_BYTES`] plus its key's length towards the store's byte bound
//! (`--max-store-bytes`, buckets evicted to make room as for any growth), and the store
//! keeps at most as many holds as its bucket bound (`--max-buckets`): a hold or slot past
//! that is refused, never another one dropped, since dropping a hold would hand its
//! budget back before its request ended. Within a key, holds are bounded anyway: each
//! reservation takes at least one hit of the budget, each slot one of `max_in_flight`.

use std::collections::BTreeSet;

use foldhash::fast::RandomState;

// Keyed by ids that are keyed hashes already: a fast hasher is enough.
type HashMap<K, V> = std::collections::HashMap<K, V, RandomState>;

use smallvec::SmallVec;

use super::bucket_id::BucketId;
use super::{Inner, many};
use crate::bucket_key::BucketKey;
use crate::clock::Nanos;
use crate::limiter::Report;
use crate::rules::{Limit, Mode};
use crate::store::{Check, Expiries, Held, Phase, Reports};

/// What a hold costs beside its key's text: the ledger's entries for it (the hold, its
/// place in the key's and the store's expiry orders), rounded up.
pub(super) const HOLD_BYTES: u64 = 192;

/// Every hold of the store.
#[derive(Debug, Default)]
pub(super) struct Ledger {
    /// Each hold, by its key's id and its name's id.
    holds: HashMap<(BucketId, BucketId), Hold>,
    /// Each key that holds anything: its held hits and its holds by expiry.
    keys: HashMap<BucketId, KeyHolds>,
    /// Every hold by expiry: what the next expiry pass releases first.
    expiries: BTreeSet<(Nanos, BucketId, BucketId)>,
}

/// One hold.
#[derive(Debug)]
struct Hold {
    /// The bucket's key text, to give a reservation's hits back to when it expires.
    bucket: Box<str>,
    /// How much of `bucket` is the descriptor's own key (see [`BucketKey::listed`]).
    descriptor_len: usize,
    /// The limit the hits were taken under.
    limit: Limit,
    /// Hits held; for a slot, the settles it waits for (1, but for a name held twice).
    hits: u64,
    /// When it is released unsettled.
    expires: Nanos,
    /// A concurrency slot: nothing to give back to a bucket.
    slot: bool,
    /// Where its release unsettled is counted: its rule's statistics (see
    /// [`HoldOp::expiries`](crate::store::HoldOp::expiries)).
    expiries: Option<Expiries>,
}

impl Hold {
    fn bytes(&self) -> i64 {
        (HOLD_BYTES + self.bucket.len() as u64) as i64
    }
}

/// One key's holds.
#[derive(Debug, Default)]
struct KeyHolds {
    /// Their hits together.
    hits: u64,
    /// Their names by expiry, soonest first.
    by_expiry: BTreeSet<(Nanos, BucketId)>,
}

/// A reservation released unsettled: its hits go back to its bucket.
struct Released {
    bucket: Box<str>,
    descriptor_len: usize,
    limit: Limit,
    hits: u64,
}

impl Ledger {
    fn len(&self) -> u64 {
        self.holds.len() as u64
    }

    fn contains(&self, key: BucketId, name: BucketId) -> bool {
        self.holds.contains_key(&(key, name))
    }

    /// What `key` holds now.
    fn held(&self, key: BucketId) -> Held {
        self.keys.get(&key).map_or(Held::default(), |k| Held {
            holds: k.by_expiry.len() as u64,
            hits: k.hits,
            soonest_expiry: k.by_expiry.first().map_or(0, |(at, _)| *at),
        })
    }

    fn insert(&mut self, key: BucketId, name: BucketId, hold: Hold) -> i64 {
        let bytes = hold.bytes();
        let entry = self.keys.entry(key).or_default();
        entry.hits += hold.hits;
        entry.by_expiry.insert((hold.expires, name));
        self.expiries.insert((hold.expires, key, name));
        self.holds.insert((key, name), hold);
        bytes
    }

    fn remove(&mut self, key: BucketId, name: BucketId) -> Option<Hold> {
        let hold = self.holds.remove(&(key, name))?;
        self.expiries.remove(&(hold.expires, key, name));
        if let Some(entry) = self.keys.get_mut(&key) {
            entry.hits -= hold.hits;
            entry.by_expiry.remove(&(hold.expires, name));
            if entry.by_expiry.is_empty() {
                self.keys.remove(&key);
            }
        }
        Some(hold)
    }

    /// A slot's settle: one of the settles it waits for (see
    /// [`Ledger::expect_another_settle`]), the slot gone after the last. Its bytes, if
    /// gone.
    fn give_back_slot(&mut self, key: BucketId, name: BucketId) -> i64 {
        match self.holds.get_mut(&(key, name)) {
            Some(hold) if hold.hits > 1 => {
                hold.hits -= 1;
                if let Some(entry) = self.keys.get_mut(&key) {
                    entry.hits -= 1;
                }
                0
            }
            Some(_) => self.remove(key, name).map_or(0, |h| h.bytes()),
            None => 0,
        }
    }

    /// When `key` has a slot named `name`: one more settle for it to wait for, and true.
    fn expect_another_settle(&mut self, key: BucketId, name: BucketId) -> bool {
        let Some(hold) = self.holds.get_mut(&(key, name)) else {
            return false;
        };
        hold.hits += 1;
        if let Some(entry) = self.keys.get_mut(&key) {
            entry.hits += 1;
        }
        true
    }

    /// Removes every hold of `key` without settling any; their bytes.
    fn remove_key(&mut self, key: BucketId) -> Option<i64> {
        let names: Vec<BucketId> = self
            .keys
            .get(&key)?
            .by_expiry
            .iter()
            .map(|(_, n)| *n)
            .collect();
        Some(
            names
                .into_iter()
                .filter_map(|name| self.remove(key, name))
                .map(|hold| hold.bytes())
                .sum(),
        )
    }

    /// Removes the holds expired at `now`, each counted on its rule's [`Expiries`]: the
    /// reservations among them, to give back, and the bytes they all freed.
    fn expire(&mut self, now: Nanos) -> (Vec<Released>, i64) {
        let mut released = Vec::new();
        let mut bytes = 0;
        while let Some(&(at, key, name)) = self.expiries.first() {
            if at > now {
                break;
            }
            let Some(hold) = self.remove(key, name) else {
                self.expiries.pop_first();
                continue;
            };
            bytes += hold.bytes();
            if let Some(expiries) = &hold.expiries {
                expiries.add(1);
            }
            if !hold.slot {
                released.push(Released {
                    bucket: hold.bucket,
                    descriptor_len: hold.descriptor_len,
                    limit: hold.limit,
                    hits: hold.hits,
                });
            }
        }
        (released, bytes)
    }
}

impl Inner {
    /// A request with at least one hold (see the module docs).
    #[inline(never)]
    pub(super) fn check_holding(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        let mut ledger = self.ledger.lock();
        self.release_expired(&mut ledger, now);
        let full = ledger.len() >= self.usage.bounds.buckets;
        let mut asked: SmallVec<[Check<'_>; 4]> = checks.iter().copied().collect();
        let mut fixed: SmallVec<[Option<Report>; 4]> = checks.iter().map(|_| None).collect();
        let mut record: SmallVec<[bool; 4]> = checks.iter().map(|_| false).collect();
        let mut freed = 0;
        let mut named: SmallVec<[(BucketId, BucketId); 4]> = SmallVec::new();
        for (i, check) in checks.iter().enumerate() {
            let Some(op) = check.hold else {
                named.push(Default::default());
                continue;
            };
            let (key, name) = (self.ids.id(check.key.as_str()), self.ids.id(op.id));
            named.push((key, name));
            match (op.slots, op.phase) {
                (Some(max), phase) => {
                    if phase == Phase::Settle {
                        freed += ledger.give_back_slot(key, name);
                    }
                    // A second hold of a slot's name is refused, and Envoy settles it after
                    // its stream all the same: the slot then waits for both settles.
                    let named_twice =
                        phase == Phase::Hold && ledger.expect_another_settle(key, name);
                    let held = ledger.held(key);
                    // Slots this request takes before this one, on the same key.
                    let earlier = (0..i).filter(|&j| record[j] && named[j].0 == key).count();
                    let in_use = held.holds + earlier as u64;
                    let over = match phase {
                        Phase::Hold => in_use >= u64::from(max) || full || named_twice,
                        Phase::Peek => in_use >= u64::from(max),
                        Phase::Settle => false,
                    };
                    record[i] = phase == Phase::Hold && !over;
                    fixed[i] = Some(slot_report(over, max, held, now));
                }
                // Expired holds are released above: nothing else to do.
                (None, Phase::Peek) => {}
                (None, Phase::Hold) => {
                    record[i] = !ledger.contains(key, name) && check.hits > 0;
                    if full && record[i] {
                        fixed[i] = Some(Report {
                            over: true,
                            ..Report::default()
                        });
                        record[i] = false;
                    }
                }
                (None, _) => {
                    let hold = ledger.remove(key, name);
                    freed += hold.as_ref().map_or(0, Hold::bytes);
                    let held = hold.map_or(0, |h| h.hits);
                    let settle = &mut asked[i];
                    if check.hits >= held {
                        settle.hits = check.hits - held;
                    } else {
                        (settle.hits, settle.refund) = (held - check.hits, true);
                    }
                }
            }
        }
        // Nearly always one check and no slot: the one-bucket path.
        let mut reports = match (&asked[..], fixed.iter().all(Option::is_none)) {
            ([one], true) => smallvec::smallvec![self.check_one(one, now)],
            _ => self.check_many_fixed(&asked, now, &fixed),
        };
        if !many::denied(&asked, |i| reports[i].over) {
            for (i, check) in checks.iter().enumerate() {
                let Some(op) = check.hold.filter(|_| record[i] && !reports[i].over) else {
                    continue;
                };
                let (key, name) = (self.ids.id(check.key.as_str()), self.ids.id(op.id));
                let hold = Hold {
                    bucket: check.key.as_str().into(),
                    descriptor_len: check.key.descriptor_part().len(),
                    limit: check.limit,
                    hits: if op.slots.is_some() { 1 } else { check.hits },
                    expires: now.saturating_add(op.ttl),
                    slot: op.slots.is_some(),
                    expiries: op.expiries.cloned(),
                };
                freed -= ledger.insert(key, name, hold);
                if let Some(max) = op.slots {
                    reports[i] = slot_report(false, max, ledger.held(key), now);
                }
            }
        }
        self.usage.holds_now(ledger.len(), 0);
        drop(ledger);
        self.usage.holds_changed(-freed);
        if freed < 0 {
            self.enforce_bounds(now);
        }
        reports
    }

    /// Gives every reservation expired at `now` back to its bucket, as a refund.
    fn release_expired(&self, ledger: &mut Ledger, now: Nanos) {
        let before = ledger.len();
        let (released, bytes) = ledger.expire(now);
        self.usage.holds_changed(-bytes);
        self.usage.holds_now(ledger.len(), before - ledger.len());
        for r in &released {
            let check = Check {
                key: BucketKey::listed(&r.bucket, r.descriptor_len),
                limit: Limit {
                    charge: true,
                    ..r.limit
                },
                hits: r.hits,
                refund: true,
                mode: Mode::Enforce,
                descriptor: 0,
                hold: None,
            };
            self.check_one(&check, now);
        }
    }

    /// What `key` holds at `now`, expired holds released first.
    pub(super) fn held(&self, key: &BucketKey<'_>, now: Nanos) -> Held {
        let mut ledger = self.ledger.lock();
        self.release_expired(&mut ledger, now);
        ledger.held(self.ids.id(key.as_str()))
    }

    /// Drops `key`'s holds unsettled; whether it had any.
    pub(super) fn drop_holds(&self, key: &BucketKey<'_>) -> bool {
        let mut ledger = self.ledger.lock();
        let bytes = ledger.remove_key(self.ids.id(key.as_str()));
        self.usage.holds_now(ledger.len(), 0);
        drop(ledger);
        bytes.inspect(|&b| self.usage.holds_changed(-b)).is_some()
    }

    /// Releases holds expired at `now`: the store's upkeep.
    pub(super) fn expire_holds(&self, now: Nanos) {
        let mut ledger = self.ledger.lock();
        self.release_expired(&mut ledger, now);
    }

    /// A concurrency slot check's report at `now`, seen by a peek: over when every slot
    /// is in use.
    pub(super) fn peek_slots(&self, key: &BucketKey<'_>, max: u32, now: Nanos) -> Report {
        let held = self.held(key, now);
        slot_report(held.holds >= u64::from(max), max, held, now)
    }
}

/// A concurrency check's report: `held` the key's slots after the decision.
fn slot_report(over: bool, max: u32, held: Held, now: Nanos) -> Report {
    let in_use = u32::try_from(held.holds).unwrap_or(u32::MAX);
    Report {
        over,
        remaining: max.saturating_sub(in_use),
        reset: held.soonest_expiry.saturating_sub(now),
        count: held.holds,
        cached: false,
    }
}
