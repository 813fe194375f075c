//! The compiled descriptor tree of one domain and the Go server's matching walk (§1.3).
//!
//! Each level maps the composite key (`key_value`, or `key` for a value-less entry) to a
//! node, as the Go server does, so its quirks carry over: `key: a_b` and `key: a` +
//! `value: b` collide. For each request entry the walk tries, in order: the exact
//! composite; the level's wildcard entries in file order (first match wins; wildcards.rs
//! finds it without trying them all); the bare key.
//! Nothing matched stops the walk with no limit: there is no backtracking and no fallback
//! to a parent's limit, and a limit applies only at the request's last entry.

mod pattern;
mod quota_bucket;
mod wildcards;

use std::collections::HashMap;
use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::bucket_key::KeyWriter;
use crate::rules::Rule;
use crate::short_eq;
pub use quota_bucket::QuotaBucketWalk;
use wildcards::Wildcards;

/// One level of a domain's tree.
#[derive(Debug, Default)]
pub(crate) struct Level {
    /// The level's entries in file order, each with its composite key.
    entries: Vec<(Box<str>, Entry)>,
    /// Composite key → index in `entries`, for value-less lookups (a request's bare key).
    exact: HashMap<Box<str>, usize, RandomState>,
    /// Every way of reading a composite key as `key` + `_` + `value`: one per `_` in it,
    /// hashed as the pair. A request entry finds its exact match here without writing
    /// `key_value` out, which costs a copy and a stalled read of what was just written.
    /// Composite keys are unique, so a pair has at most one entry.
    pairs: HashTable<Split>,
    /// Hashes `pairs`.
    hasher: RandomState,
    /// The lengths of the keys `pairs` holds, and of the composite keys `exact` holds:
    /// most request keys have no exact entry at a level (a bare `user_id`), and a length
    /// that no entry has answers that without hashing.
    pair_keys: Lengths,
    exact_keys: Lengths,
    /// The wildcard entries, `prefix*` ones indexed by their prefix, each as its index
    /// in `entries`, so that a match costs no second lookup. Boxed, and only where the
    /// level has any: most levels have none, and every entry has a level below it.
    wildcards: Option<Box<Wildcards>>,
}

/// An entry [`Level::append`] did not move: its composite key is taken.
#[derive(Debug)]
pub(crate) struct Duplicate {
    /// Its place among the appended level's entries.
    pub(crate) index: usize,
    /// Its composite key.
    pub(crate) composite: Box<str>,
    /// The place of the entry with that key in the level appended to.
    pub(crate) existing: usize,
}

/// A set of string lengths, exact below 63 (one bit each), the longer ones all in the
/// last bit: a filter in front of a hash lookup.
#[derive(Debug, Default, Clone, Copy)]
struct Lengths(u64);

impl Lengths {
    fn bit(len: usize) -> u64 {
        1 << len.min(63)
    }

    fn insert(&mut self, len: usize) {
        self.0 |= Self::bit(len);
    }

    /// False only if no string of `len` bytes was inserted.
    fn may_hold(self, len: usize) -> bool {
        self.0 & Self::bit(len) != 0
    }
}

/// A composite key of a level read as a pair: `entries[index]`'s key, split at byte `at`
/// (an `_`).
#[derive(Debug, Clone, Copy)]
struct Split {
    index: u32,
    at: u32,
}

impl Split {
    /// The (key, value) this split reads its composite key as.
    fn pair(self, entries: &[(Box<str>, Entry)]) -> (&str, &str) {
        let composite = &*entries[self.index as usize].0;
        let at = self.at as usize;
        (&composite[..at], &composite[at + 1..])
    }
}

/// One descriptor entry of the config.
#[derive(Debug)]
pub(crate) struct Entry {
    /// The limit at this level, if the entry has one.
    pub(crate) rule: Option<Rule>,
    /// `share_threshold`: every value matching this wildcard uses one bucket, keyed by the
    /// pattern's value instead of the request's.
    pub(crate) shared_value: Option<Box<str>>,
    /// Nested entries.
    pub(crate) children: Level,
}

impl Level {
    /// Adds a node under `composite`; false (and nothing added) if the composite is taken.
    pub(crate) fn insert(&mut self, composite: &str, wildcard: bool, node: Entry) -> bool {
        if self.exact.contains_key(composite) {
            return false;
        }
        let index = self.entries.len();
        self.exact.insert(composite.into(), index);
        self.exact_keys.insert(composite.len());
        self.entries.push((composite.into(), node));
        let (entries, hasher) = (&self.entries, &self.hasher);
        for (at, _) in composite.match_indices('_') {
            self.pair_keys.insert(at);
            let split = Split {
                index: index as u32,
                at: at as u32,
            };
            let hash = hasher.hash_one(split.pair(entries));
            self.pairs
                .insert_unique(hash, split, |s| hasher.hash_one(s.pair(entries)));
        }
        if wildcard {
            let wildcards = self.wildcards.get_or_insert_with(Box::default);
            wildcards.insert(index, entries, hasher);
        }
        true
    }

    /// Moves `other`'s entries after this level's, in their order, keeping the matching
    /// order a single file of both would have. An entry whose composite key this level
    /// already has is not moved: each is returned.
    pub(crate) fn append(&mut self, other: Level) -> Vec<Duplicate> {
        let mut wildcard = vec![false; other.entries.len()];
        if let Some(wildcards) = &other.wildcards {
            for index in wildcards.indices() {
                wildcard[index] = true;
            }
        }
        let mut duplicates = Vec::new();
        for (index, ((composite, node), wildcard)) in
            other.entries.into_iter().zip(wildcard).enumerate()
        {
            if let Some(&existing) = self.exact.get(&composite) {
                duplicates.push(Duplicate {
                    index,
                    composite,
                    existing,
                });
            } else {
                self.insert(&composite, wildcard, node);
            }
        }
        duplicates
    }

    /// The entry with this composite key, if any.
    #[cfg(test)]
    fn get(&self, composite: &str) -> Option<&Entry> {
        self.exact.get(composite).map(|&i| &self.entries[i].1)
    }

    /// The index of the entry whose composite key is `key_value`, if any.
    fn pair_index(&self, key: &str, value: &str) -> Option<usize> {
        if !self.pair_keys.may_hold(key.len()) {
            return None;
        }
        let hash = self.hasher.hash_one((key, value));
        let split = self.pairs.find(hash, |s| {
            let (k, v) = s.pair(&self.entries);
            short_eq::same(k.as_bytes(), key.as_bytes())
                && short_eq::same(v.as_bytes(), value.as_bytes())
        })?;
        Some(split.index as usize)
    }

    /// The entry whose composite key is `key_value`, if any.
    #[cfg(test)]
    fn get_pair(&self, key: &str, value: &str) -> Option<&Entry> {
        self.pair_index(key, value).map(|i| &self.entries[i].1)
    }

    fn lookup(&self, key: &str, value: &str, scratch: &mut String) -> Option<&Entry> {
        self.lookup_how(key, value, scratch).map(|(node, _)| node)
    }

    /// The node for `key`=`value` and which way it matched.
    fn lookup_how<'a>(
        &'a self,
        key: &str,
        value: &str,
        scratch: &mut String,
    ) -> Option<(&'a Entry, Matched<'a>)> {
        self.lookup_at(key, value, scratch)
            .map(|(index, how)| (&self.entries[index].1, how))
    }

    /// The index in file order of the entry `key`=`value` matches, and which way.
    fn lookup_at<'a>(
        &'a self,
        key: &str,
        value: &str,
        scratch: &mut String,
    ) -> Option<(usize, Matched<'a>)> {
        if let Some(index) = self.pair_index(key, value) {
            return Some((index, Matched::Exact));
        }
        let wildcard = self.wildcards.as_ref().and_then(|wildcards| {
            wildcards.first_match(key, value, &self.entries, &self.hasher, scratch)
        });
        if let Some(index) = wildcard {
            return Some((index, Matched::Wildcard(&self.entries[index].0)));
        }
        if !self.exact_keys.may_hold(key.len()) {
            return None;
        }
        self.exact
            .get(key)
            .map(|&index| (index, Matched::ValueLess))
    }

    /// Calls `visit` with every node below this level and the composite keys of the
    /// levels leading to it, outermost first (for statistics, which name rules by level).
    pub(crate) fn visit<'a>(
        &'a self,
        path: &mut Vec<&'a str>,
        visit: &mut impl FnMut(&[&'a str], &'a Entry),
    ) {
        for (composite, node) in &self.entries {
            path.push(composite);
            visit(path, node);
            node.children.visit(path, visit);
            path.pop();
        }
    }

    /// Numbers the rules at and below this level from `next` on (see [`Rule::ordinal`]);
    /// returns the number after the last.
    fn number_rules(&mut self, mut next: u32) -> u32 {
        for (_, node) in &mut self.entries {
            if let Some(rule) = &mut node.rule {
                rule.ordinal = next;
                // No config holds 2^32 rules (memory runs out first); saturating keeps a
                // miscount from panicking, and a table checks whose entry it finds.
                next = next.saturating_add(1);
            }
            next = node.children.number_rules(next);
        }
        next
    }

    /// Every node with its composite path below `prefix`, depth first, for config dumps.
    pub(crate) fn walk<'a>(&'a self, prefix: &str, out: &mut Vec<(String, &'a Entry)>) {
        let mut entries: Vec<&(Box<str>, Entry)> = self.entries.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        for (composite, node) in entries {
            let path = format!("{prefix}.{composite}");
            node.children.walk(&path, out);
            out.push((path, node));
        }
    }
}

/// The descriptor tree of one domain.
#[derive(Debug, Default)]
pub struct DomainTree {
    /// The entries a descriptor's first entry is looked up in.
    pub(crate) root: Level,
}

impl DomainTree {
    /// Numbers the tree's rules from `first` on, as [`Rule::ordinal`] says; returns the
    /// number after the last, where the config's next domain starts.
    pub(crate) fn number_rules(&mut self, first: u32) -> u32 {
        self.root.number_rules(first)
    }

    /// Finds the rule for a request descriptor, writing the bucket identity of every level
    /// (key and the value that counts: the request's, or a shared pattern's) to `key`.
    /// Returns `None` when no rule applies (the status is then plain OK). `scratch` is the
    /// caller's, reused across calls.
    pub fn find<'a, 'e>(
        &'a self,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
        key: &mut KeyWriter<'_>,
        scratch: &mut String,
    ) -> Option<&'a Rule> {
        let mut level = &self.root;
        let mut node: Option<&Entry> = None;
        for (k, value) in entries {
            if let Some(prev) = node {
                level = &prev.children;
            }
            let found = level.lookup(k, value, scratch)?;
            key.push(k);
            key.push(found.shared_value.as_deref().unwrap_or(value));
            node = Some(found);
        }
        node?.rule.as_ref()
    }
}

/// Which config entry a request entry matched, in the walk's order of preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched<'a> {
    /// The entry with this key and exactly this value.
    Exact,
    /// The first wildcard entry (in file order) whose pattern, here, matches.
    Wildcard(&'a str),
    /// The entry with this key and no value (any value).
    ValueLess,
}

/// One step of an explained walk (see [`DomainTree::explain`]).
#[derive(Debug, Clone)]
pub struct WalkStep<'a> {
    /// The request entry.
    pub key: String,
    /// Its value.
    pub value: String,
    /// How it matched; `None` where the walk stopped.
    pub matched: Option<Matched<'a>>,
    /// The rule of the matched entry, if it has a `rate_limit` (or `unlimited`).
    pub rule: Option<&'a Rule>,
    /// Where the walk stopped here: the composite keys this level offers, the entries the
    /// request could have matched (`key_value`, or `key` for value-less ones). Empty
    /// otherwise.
    pub offered: Listing<'a>,
    /// At the request's last entry, when it matched: the entries nested under it (`key_value`
    /// or `key`). Empty otherwise.
    pub nested: Listing<'a>,
}

/// The first few of a level's composite keys in sorted order, and how many there are:
/// explanations show a few, and a level can hold hundreds of thousands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing<'a> {
    /// The smallest keys, sorted.
    pub first: Vec<&'a str>,
    /// How many keys the level has in all.
    pub total: usize,
}

impl<'a> Listing<'a> {
    /// The `shown` smallest keys of `level`, in linear time (a selection, not a full sort).
    fn of(level: &'a Level, shown: usize) -> Self {
        let mut keys: Vec<&'a str> = level.entries.iter().map(|(k, _)| &**k).collect();
        let total = keys.len();
        if shown < total {
            keys.select_nth_unstable(shown);
            keys.truncate(shown);
        }
        keys.sort_unstable();
        Listing { first: keys, total }
    }
}

impl DomainTree {
    /// The matching walk of [`DomainTree::find`], step by step, for explanations: every
    /// request entry up to and including the one where the walk stopped; the listings
    /// show at most `shown` keys.
    pub fn explain<'a, 'e>(
        &'a self,
        entries: impl IntoIterator<Item = (&'e str, &'e str)>,
        shown: usize,
    ) -> Vec<WalkStep<'a>> {
        let mut level = &self.root;
        let mut scratch = String::new();
        let mut steps = Vec::new();
        let mut entries = entries.into_iter().peekable();
        while let Some((key, value)) = entries.next() {
            let found = level.lookup_how(key, value, &mut scratch);
            let mut step = WalkStep {
                key: key.to_string(),
                value: value.to_string(),
                matched: None,
                rule: None,
                offered: Listing::default(),
                nested: Listing::default(),
            };
            let Some((node, how)) = found else {
                step.offered = Listing::of(level, shown);
                steps.push(step);
                break;
            };
            step.matched = Some(how);
            step.rule = node.rule.as_ref();
            if entries.peek().is_none() {
                step.nested = Listing::of(&node.children, shown);
            }
            steps.push(step);
            level = &node.children;
        }
        steps
    }
}

#[cfg(test)]
mod tests {
    use super::pattern::tests::PARTS;
    use super::{Entry, Lengths, Level};

    /// A node with no rule and nothing below it.
    pub(super) fn entry() -> Entry {
        Entry {
            rule: None,
            shared_value: None,
            children: Level::default(),
        }
    }

    #[test]
    fn pairs_find_exactly_what_the_joined_composite_finds() {
        let mut level = Level::default();
        for composite in ["a_b", "a", "_b", "a__", "ab_a_b", "é_b_", "x*", "a_b*"] {
            assert!(level.insert(composite, composite.ends_with('*'), entry()));
        }
        for key in PARTS {
            for value in PARTS {
                let joined = level.get(&format!("{key}_{value}")).map(std::ptr::from_ref);
                let paired = level.get_pair(key, value).map(std::ptr::from_ref);
                assert_eq!(paired, joined, "{key:?} + {value:?}");
            }
        }
    }

    #[test]
    fn lengths_hold_what_was_inserted_and_lump_the_long_ones() {
        let mut lengths = Lengths::default();
        for len in [0, 7, 62, 100] {
            lengths.insert(len);
        }
        for len in [0, 7, 62, 63, 100, 5000] {
            assert!(lengths.may_hold(len), "{len}");
        }
        for len in [1, 6, 8, 61] {
            assert!(!lengths.may_hold(len), "{len}");
        }
    }
}
