//! A level's wildcard entries, and the first of them in file order that a request entry
//! matches.
//!
//! The Go server tries a level's wildcard entries one by one in file order, so a request
//! entry costs a scan of them all when none matches (issue 14: 20,000 `prefix*` rules in a
//! domain answered 3k req/s). The usual shape, a pattern whose only `*` is its last
//! character, is indexed here by its prefix instead: the request's `key_value` is probed
//! once per distinct prefix length that some pattern has, each probe one hash lookup, so a
//! lookup costs at most that many probes (and none longer than `key_value`) however many
//! patterns share those lengths. A probe that reaches past the key is looked up as the pair
//! (key, start of the value), as the level's exact entries are, so `key_value` is never
//! written out for it. Other shapes (`a*b`, `a*b*`, `*a`, `a**`) are still tried
//! one by one in file order. The answer is the scan's: among all the patterns that match,
//! of either kind, the one earliest in the file.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use super::Entry;
use super::pattern::Pattern;
use crate::short_eq;

/// The wildcard entries of one level.
#[derive(Debug, Default)]
pub(super) struct Wildcards {
    /// The prefix patterns (`prefix*`), each as its index in the level's entries, hashed by
    /// the bytes of its prefix (the composite key without the `*`): found by probes no
    /// longer than the request's key. Composite keys are unique in a level, so a prefix has
    /// one entry.
    prefixes: HashTable<u32>,
    /// The same patterns read as (key, start of value) once per `_` in their prefix, hashed
    /// as that pair: found by probes that reach past the request's key, which are the
    /// request's key, `_`, and the start of its value. Looking them up as a pair spares
    /// writing `key_value` out and hashing it back, a read that stalls on the writes it
    /// spans. A pair reads back as one prefix only (key, `_`, value), so a probe finds at
    /// most one entry.
    splits: HashTable<PrefixSplit>,
    /// Each distinct prefix length with the first entry (in file order) whose prefix has
    /// it, in the order of those first entries. A match already found before a length's
    /// first entry cannot be beaten by that length, nor by any after it in this list, so a
    /// lookup stops there.
    lengths: Vec<PrefixLength>,
    /// The patterns of other shapes, in file order, each with its index in the entries.
    others: Vec<(Pattern, usize)>,
}

/// A prefix length of [`Wildcards::lengths`].
#[derive(Debug, Clone, Copy)]
struct PrefixLength {
    /// In bytes.
    len: u32,
    /// The index of the first entry whose prefix has this length.
    first: u32,
}

/// A prefix pattern's prefix read as a pair: `entries[index]`'s prefix split at byte `at`
/// (an `_`).
#[derive(Debug, Clone, Copy)]
struct PrefixSplit {
    index: u32,
    at: u32,
}

impl PrefixSplit {
    /// The (key, start of value) this split reads its prefix as.
    fn pair(self, entries: &[(Box<str>, Entry)]) -> (&[u8], &[u8]) {
        let prefix = prefix_of(entries, self.index);
        let at = self.at as usize;
        (&prefix[..at], &prefix[at + 1..])
    }
}

/// The prefix of `entries[index]`, a prefix pattern: its composite key without the `*`.
fn prefix_of(entries: &[(Box<str>, Entry)], index: u32) -> &[u8] {
    let composite = entries[index as usize].0.as_bytes();
    &composite[..composite.len() - 1]
}

impl Wildcards {
    /// Adds `entries[index]`, a wildcard entry (its composite key has a `*`). Entries come
    /// in file order, which keeps [`Wildcards::lengths`] in order of first entries.
    pub(super) fn insert(
        &mut self,
        index: usize,
        entries: &[(Box<str>, Entry)],
        hasher: &RandomState,
    ) {
        let composite = &*entries[index].0;
        let Some(prefix) = Pattern::trailing_prefix(composite) else {
            self.others.push((Pattern::new(composite), index));
            return;
        };
        let (index, len) = (index as u32, prefix.len() as u32);
        if !self.lengths.iter().any(|l| l.len == len) {
            self.lengths.push(PrefixLength { len, first: index });
        }
        self.prefixes
            .insert_unique(hasher.hash_one(prefix.as_bytes()), index, |&i| {
                hasher.hash_one(prefix_of(entries, i))
            });
        for (at, _) in prefix.match_indices('_') {
            let split = PrefixSplit {
                index,
                at: at as u32,
            };
            self.splits
                .insert_unique(hasher.hash_one(split.pair(entries)), split, |s| {
                    hasher.hash_one(s.pair(entries))
                });
        }
    }

    /// The index in the level's entries of every wildcard entry, in no order.
    pub(super) fn indices(&self) -> impl Iterator<Item = usize> + '_ {
        let prefixes = self.prefixes.iter().map(|&index| index as usize);
        prefixes.chain(self.others.iter().map(|&(_, index)| index))
    }

    /// The index of the first entry in file order whose pattern matches `key_value`, if
    /// any. `key_value` is written into `scratch` only if a pattern of another shape needs
    /// it.
    pub(super) fn first_match(
        &self,
        key: &str,
        value: &str,
        entries: &[(Box<str>, Entry)],
        hasher: &RandomState,
        scratch: &mut String,
    ) -> Option<usize> {
        let mut written = false;
        let joined = key.len() + 1 + value.len();
        let mut best: Option<usize> = None;
        for &PrefixLength { len, first } in &self.lengths {
            if best.is_some_and(|best| best < first as usize) {
                break;
            }
            let len = len as usize;
            if len > joined {
                continue;
            }
            // Bytes, not a `str`: a prefix length may cut a request's character in two,
            // and then the probe is simply not any pattern's prefix.
            let found = if len <= key.len() {
                let probe = &key.as_bytes()[..len];
                self.prefixes
                    .find(hasher.hash_one(probe), |&i| {
                        short_eq::same(prefix_of(entries, i), probe)
                    })
                    .copied()
            } else {
                // `len <= joined`: the value has these bytes.
                let probe = (key.as_bytes(), &value.as_bytes()[..len - key.len() - 1]);
                self.splits
                    .find(hasher.hash_one(probe), |s| {
                        let (k, v) = s.pair(entries);
                        short_eq::same(k, probe.0) && short_eq::same(v, probe.1)
                    })
                    .map(|s| s.index)
            };
            if let Some(index) = found {
                let index = index as usize;
                best = Some(best.map_or(index, |best| best.min(index)));
            }
        }
        for &(ref pattern, index) in &self.others {
            if best.is_some_and(|best| best < index) {
                break;
            }
            if pattern.matches_pair(key, value, scratch, &mut written) {
                return Some(index);
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::super::pattern::Pattern;
    use super::super::pattern::tests::PARTS;
    use super::super::tests::entry;
    use super::super::{Level, Matched};

    /// A level of these composite keys in this order, each a wildcard if it has a `*`
    /// (as for a value with one; the tests' keys have none).
    fn level(composites: &[&str]) -> Level {
        let mut level = Level::default();
        for composite in composites {
            assert!(level.insert(composite, composite.contains('*'), entry()));
        }
        level
    }

    /// The index and kind of the entry (key, value) matches.
    fn find<'a>(level: &'a Level, key: &str, value: &str) -> Option<(usize, Matched<'a>)> {
        level.lookup_at(key, value, &mut String::new())
    }

    /// (key, value) and the index of the wildcard entry it must match; `None`: no entry of
    /// any kind.
    type Case<'a> = (&'a str, &'a str, Option<usize>);

    /// For each level (its composite keys in file order), asserts its cases.
    fn assert_wildcards(table: &[(&[&str], &[Case<'_>])]) {
        for &(composites, cases) in table {
            let level = level(composites);
            for &(key, value, expected) in cases {
                let found = match find(&level, key, value) {
                    Some((index, Matched::Wildcard(_))) => Some(index),
                    None => None,
                    other => panic!("{key:?} + {value:?}: {other:?}, not a wildcard match"),
                };
                assert_eq!(found, expected, "{key:?} + {value:?} in {composites:?}");
            }
        }
    }

    #[test]
    fn an_earlier_prefix_wins_whether_shorter_or_longer() {
        assert_wildcards(&[
            (
                &["k_a*", "k_ab*", "k_abc*"],
                &[("k", "abcd", Some(0)), ("k", "a", Some(0))],
            ),
            (
                &["k_abc*", "k_ab*", "k_a*"],
                &[
                    ("k", "abcd", Some(0)),
                    ("k", "abd", Some(1)),
                    ("k", "ax", Some(2)),
                    ("k", "b", None),
                ],
            ),
            (
                &["k_x*", "k_ab*", "k_abc*", "k_a*"],
                &[("k", "abc", Some(1)), ("k", "a", Some(3))],
            ),
            // Lengths are probed in order of their first entries (4, then 5 bytes): the
            // second probe finds a later entry than the first.
            (
                &["k_zz*", "k_yyy*", "k_ab*", "k_abc*"],
                &[("k", "abcd", Some(2)), ("k", "yyyy", Some(1))],
            ),
        ]);
    }

    #[test]
    fn other_shapes_and_prefixes_compete_on_file_order() {
        assert_wildcards(&[
            (
                &["k_a*c", "k_a*"],
                &[("k", "abc", Some(0)), ("k", "abd", Some(1))],
            ),
            (
                &["k_a*", "k_a*c", "k_*c"],
                &[("k", "abc", Some(0)), ("k", "bc", Some(2))],
            ),
            // `a**` is no prefix pattern to the index, but matches as one, in its place.
            (&["k_b*", "k_a**", "k_a*"], &[("k", "ab", Some(1))]),
        ]);
    }

    #[test]
    fn exact_comes_first_and_the_bare_key_last() {
        let with_catch_all = level(&["k", "k_a*", "k_*", "k_abc"]);
        assert_eq!(find(&with_catch_all, "k", "abc"), Some((3, Matched::Exact)));
        assert_eq!(
            find(&with_catch_all, "k", "ab"),
            Some((1, Matched::Wildcard("k_a*")))
        );
        assert_eq!(
            find(&with_catch_all, "k", "x"),
            Some((2, Matched::Wildcard("k_*")))
        );
        assert_eq!(find(&with_catch_all, "j", "x"), None);
        let without_catch_all = level(&["k", "k_a*"]);
        assert_eq!(
            find(&without_catch_all, "k", "x"),
            Some((0, Matched::ValueLess))
        );
    }

    #[test]
    fn the_empty_prefix_matches_everything_in_its_place() {
        assert_wildcards(&[(
            &["k_a*", "*", "k_b*"],
            &[
                ("k", "a1", Some(0)),
                ("k", "b1", Some(1)),
                ("", "", Some(1)),
                ("x", "é", Some(1)),
            ],
        )]);
    }

    #[test]
    fn prefixes_straddling_the_join_match_as_the_joined_text() {
        let prefixes = [
            "", "a", "a_", "a_b", "_", "__", "a_b_", "b", "é", "é_", "a_b_a",
        ];
        let composites: Vec<String> = prefixes.iter().map(|p| format!("{p}*")).collect();
        for (i, composite) in composites.iter().enumerate() {
            let level = level(&[composite]);
            let pattern = Pattern::new(composite);
            for key in PARTS {
                for value in PARTS {
                    let joined = pattern.matches(&format!("{key}_{value}"));
                    let wildcards = level.wildcards.as_ref().expect("a wildcard entry");
                    let indexed = wildcards.first_match(
                        key,
                        value,
                        &level.entries,
                        &level.hasher,
                        &mut String::new(),
                    );
                    assert_eq!(
                        indexed.is_some(),
                        joined,
                        "{:?} ~ {key:?} + {value:?}",
                        prefixes[i]
                    );
                }
            }
        }
    }

    #[test]
    fn multi_byte_values_are_probed_as_bytes() {
        // `k_a*` is 3 bytes long: probing `k_é` at that length cuts `é` in two.
        assert_wildcards(&[(
            &["k_a*", "k_é*", "k_éa*", "k_日本*"],
            &[
                ("k", "é", Some(1)),
                ("k", "éa", Some(1)),
                ("k", "日本語", Some(3)),
                // `è` shares its first byte with `é`.
                ("k", "è", None),
                ("k", "日", None),
                ("k_日", "本", None),
                ("k_日本", "", Some(3)),
            ],
        )]);
    }

    #[test]
    fn a_hundred_thousand_prefixes_are_probed_not_scanned() {
        // `u7-*` is no prefix of `u77-…`: every value below has one rule, of 5 lengths.
        let mut composites: Vec<String> = (0..100_000).map(|i| format!("k_u{i}-*")).collect();
        composites.push("k_*x".into());
        let level = level(&composites.iter().map(String::as_str).collect::<Vec<_>>());
        let wildcards = level.wildcards.as_ref().expect("wildcard entries");
        assert_eq!(wildcards.lengths.len(), 5);
        assert_eq!(wildcards.others.len(), 1);
        let mut scratch = String::new();
        // A scan would try about 50,000 patterns a lookup.
        for i in (0..100_000).step_by(7) {
            let found = level.lookup_at("k", &format!("u{i}-/orders"), &mut scratch);
            assert_eq!(found.map(|(index, _)| index), Some(i), "u{i}");
        }
        let last = level.lookup_at("k", "u1x", &mut scratch);
        assert_eq!(last, Some((100_000, Matched::Wildcard("k_*x"))));
        assert_eq!(level.lookup_at("k", "u1", &mut scratch), None);
    }

    /// xorshift64: a small deterministic generator, so a failure reproduces.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }

        /// Up to `max` pieces of a small alphabet (so that patterns and values overlap
        /// often), multi-byte characters and the join's `_` included.
        fn text(&mut self, max: usize, star: bool) -> String {
            const PIECES: [&str; 5] = ["a", "b", "_", "é", "ab"];
            let mut text = String::new();
            for _ in 0..self.below(max + 1) {
                if star && self.below(4) == 0 {
                    text.push('*');
                } else {
                    text.push_str(PIECES[self.below(PIECES.len())]);
                }
            }
            text
        }
    }

    /// The walk before the prefix index: exact composite, then every wildcard pattern in
    /// file order on the joined text, then the bare key.
    fn linear(level: &Level, key: &str, value: &str) -> Option<usize> {
        let joined = format!("{key}_{value}");
        if let Some(&index) = level.exact.get(joined.as_str()) {
            return Some(index);
        }
        let wildcard = level.entries.iter().position(|(composite, _)| {
            composite.contains('*') && Pattern::new(composite).matches(&joined)
        });
        wildcard.or_else(|| level.exact.get(key).copied())
    }

    #[test]
    fn the_index_answers_as_the_linear_scan() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut wildcard_matches = 0;
        for _ in 0..300 {
            let mut level = Level::default();
            for _ in 0..rng.below(40) {
                // Trailing-wildcard patterns, and as many of other shapes (text around
                // two or three `*`s, any of it empty), and a few exact entries.
                let composite = match rng.below(9) {
                    0 => rng.text(5, false),
                    1..=4 => rng.text(4, false) + "*",
                    _ => {
                        let mut parts = vec![rng.text(2, false), rng.text(2, false)];
                        if rng.below(2) == 0 {
                            parts.push(rng.text(2, false));
                        }
                        parts.join("*")
                    }
                };
                // A taken composite is refused, as config loading does.
                level.insert(&composite, composite.contains('*'), entry());
            }
            let mut scratch = String::new();
            for _ in 0..200 {
                let star = rng.below(8) == 0;
                let (key, value) = (rng.text(3, false), rng.text(4, star));
                let found = level.lookup_at(&key, &value, &mut scratch);
                if let Some((_, Matched::Wildcard(_))) = found {
                    wildcard_matches += 1;
                }
                assert_eq!(
                    found.map(|(index, _)| index),
                    linear(&level, &key, &value),
                    "{key:?} + {value:?} in {:?}",
                    level.entries.iter().map(|(c, _)| c).collect::<Vec<_>>()
                );
            }
        }
        // The generator must exercise the wildcards, not only misses.
        assert!(wildcard_matches > 5_000, "{wildcard_matches}");
    }
}
