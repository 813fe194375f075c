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
pub struct BucketWalk<'a> {
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
    pub fn walk_bucket<'a>(&'a self, id: &[(&str, &str)], shown: usize) -> BucketWalk<'a> {
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
        BucketWalk {
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

#[cfg(test)]
mod tests {
    use crate::config::Config;

    fn config(yaml: &str) -> Config {
        Config::from_sources(&[("edge.yaml".into(), yaml.to_string())]).expect("a valid config")
    }

    /// The rule's path the bucket `id` resolves to in `yaml`'s domain `edge`, if any.
    fn rule_of(yaml: &str, id: &[(&str, &str)]) -> Option<String> {
        let config = config(yaml);
        let walk = config.domain("edge").unwrap().walk_bucket(id, 4);
        walk.rule.map(|r| r.full_key.clone())
    }

    const NESTED: &str = "
domain: edge
descriptors:
  - key: user_id
    descriptors:
      - key: method
        value: /a
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: method
        rate_limit: {unit: second, requests_per_unit: 50}
  - key: name
    value: per_user
    descriptors:
      - key: user_id
        rate_limit: {unit: minute, requests_per_unit: 10}
";

    #[test]
    fn an_id_in_any_order_walks_the_file_order() {
        for id in [
            [("user_id", "alice"), ("method", "/a")],
            [("method", "/a"), ("user_id", "alice")],
        ] {
            assert_eq!(
                rule_of(NESTED, &id).as_deref(),
                Some("edge.user_id.method_/a")
            );
        }
        assert_eq!(
            rule_of(NESTED, &[("method", "/b"), ("user_id", "bob")]).as_deref(),
            Some("edge.user_id.method")
        );
        // Both `user_id` (first in the file) and `name_per_user` match at the top: the
        // earlier entry is taken, and the walk goes on under it, where nothing matches
        // `name`.
        assert_eq!(
            rule_of(NESTED, &[("name", "per_user"), ("user_id", "alice")]),
            None
        );
    }

    #[test]
    fn every_entry_must_be_used_and_end_at_a_rule() {
        // A left-over entry: no match, not a fallback to a shorter rule.
        assert_eq!(
            rule_of(NESTED, &[("user_id", "a"), ("method", "/a"), ("x", "1")]),
            None
        );
        // Used up at an entry without a rate_limit.
        assert_eq!(rule_of(NESTED, &[("user_id", "a")]), None);
        assert_eq!(rule_of(NESTED, &[]), None);
    }

    #[test]
    fn the_walk_says_what_it_used_and_what_was_left() {
        let config = config(NESTED);
        let walk = config
            .domain("edge")
            .unwrap()
            .walk_bucket(&[("x", "1"), ("user_id", "a")], 4);
        assert_eq!(walk.steps.len(), 1);
        assert_eq!(walk.steps[0].key, "user_id");
        assert_eq!(walk.unused, [("x".to_string(), "1".to_string())]);
        assert_eq!(walk.offered.first, ["method", "method_/a"]);
        assert!(walk.rule.is_none());
    }
}
