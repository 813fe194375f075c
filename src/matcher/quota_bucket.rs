//! A quota bucket's id (Envoy's RLQS `BucketId`, an unordered map of strings) resolved
//! against a domain's tree as if it were a request descriptor.
//!
//! A descriptor's entries come in order; an id's do not. So at each level the walk takes,
//! of the id entries not used yet, the one that matches the level's earliest entry in file
//! order, each id entry matching as a request entry would (its exact entry, else the first
//! wildcard matching it, else its key's value-less entry). It goes on from that entry's
//! children until every id entry is used. The bucket matches a rule only if the walk uses
//! every entry of the id and the entry it ends at has a rule; an empty id matches nothing.

use super::{DomainTree, Listing, WalkStep};
use crate::rules::Rule;

/// The walk of one bucket id through a domain's tree.
#[derive(Debug, Clone)]
pub struct QuotaBucketWalk<'a> {
    /// The id entries the walk used, in the order it used them.
    pub steps: Vec<WalkStep<'a>>,
    /// The id entries left when the walk stopped, by key; empty when it used them all.
    pub unused: Vec<(String, String)>,
    /// When entries are left: the composite keys of the level where the walk stopped.
    pub offered: Listing<'a>,
    /// The rule the bucket resolves to, if it matches one.
    pub rule: Option<&'a Rule>,
}

impl DomainTree {
    /// Walks the bucket `id` through the tree (see the module docs); listings show at most
    /// `shown` keys.
    pub fn walk_quota_bucket<'a>(
        &'a self,
        id: &[(&str, &str)],
        shown: usize,
    ) -> QuotaBucketWalk<'a> {
        // By key, so that the walk does not depend on the order the id came in: two id
        // entries can match one config entry (`a_b` + `c` and `a` + `b_c` both read as
        // the composite `a_b_c`), and the smaller key then goes first.
        let mut left: Vec<(&str, &str)> = id.to_vec();
        left.sort_unstable();
        let mut level = &self.root;
        let mut scratch = String::new();
        let mut steps: Vec<WalkStep<'a>> = Vec::with_capacity(left.len());
        let mut rule = None;
        while !left.is_empty() {
            let earliest = left
                .iter()
                .enumerate()
                .filter_map(|(i, &(key, value))| {
                    let (index, how) = level.lookup_at(key, value, &mut scratch)?;
                    Some((index, i, how))
                })
                .min_by_key(|&(index, i, _)| (index, i));
            let Some((index, i, how)) = earliest else {
                break;
            };
            let (key, value) = left.remove(i);
            let node = &level.entries[index].1;
            rule = node.rule.as_ref();
            steps.push(WalkStep {
                key: key.to_string(),
                value: value.to_string(),
                matched: Some(how),
                rule,
                offered: Listing::default(),
                nested: Listing::default(),
            });
            level = &node.children;
        }
        let offered = if left.is_empty() {
            Listing::default()
        } else {
            rule = None;
            Listing::of(level, shown)
        };
        QuotaBucketWalk {
            steps,
            unused: left
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            offered,
            rule,
        }
    }
}
