//! Wildcard patterns of composite keys (`key_value*`), matched as the Go server does.

use crate::short_eq;

/// A composite key with `*` wildcards: each `*` matches any run of characters, the
/// segments must appear in order, and the first and last are anchored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    /// The text around the `*`s, in order; empty at an end where the pattern starts or ends
    /// with `*`.
    segments: Vec<Box<str>>,
}

impl Pattern {
    pub(crate) fn new(pattern: &str) -> Self {
        Self {
            segments: pattern.split('*').map(Into::into).collect(),
        }
    }

    /// Whether the pattern matches `key_value`. A prefix pattern (`…*`, the usual kind) is
    /// matched on the parts; any other writes `key_value` into `scratch` once (`written`
    /// remembers that across a level's patterns).
    pub(super) fn matches_pair(
        &self,
        key: &str,
        value: &str,
        scratch: &mut String,
        written: &mut bool,
    ) -> bool {
        if let [prefix, last] = &self.segments[..]
            && last.is_empty()
        {
            return pair_starts_with(key, value, prefix);
        }
        if !*written {
            scratch.clear();
            scratch.push_str(key);
            scratch.push('_');
            scratch.push_str(value);
            *written = true;
        }
        self.matches(scratch)
    }

    pub(crate) fn matches(&self, text: &str) -> bool {
        let Some((first, rest)) = self.segments.split_first() else {
            return false;
        };
        // Most patterns fail on their first byte: checked before the call to compare.
        if first
            .as_bytes()
            .first()
            .is_some_and(|b| text.as_bytes().first() != Some(b))
        {
            return false;
        }
        let Some(mut tail) = text.strip_prefix(&**first) else {
            return false;
        };
        let Some((last, middle)) = rest.split_last() else {
            return tail.is_empty();
        };
        for segment in middle {
            match tail.find(&**segment) {
                Some(at) => tail = &tail[at + segment.len()..],
                None => return false,
            }
        }
        tail.ends_with(&**last)
    }
}

/// Whether `key_value` starts with `prefix`, without writing it out.
fn pair_starts_with(key: &str, value: &str, prefix: &str) -> bool {
    let prefix = prefix.as_bytes();
    let key = key.as_bytes();
    // Most patterns fail on their first byte: checked before any call to compare.
    if let Some(&first) = prefix.first()
        && first != key.first().copied().unwrap_or(b'_')
    {
        return false;
    }
    let starts_with = |text: &[u8], start: &[u8]| {
        text.len() >= start.len() && short_eq::same(&text[..start.len()], start)
    };
    if prefix.len() <= key.len() {
        return starts_with(key, prefix);
    }
    starts_with(prefix, key)
        && prefix[key.len()] == b'_'
        && starts_with(value.as_bytes(), &prefix[key.len() + 1..])
}

#[cfg(test)]
pub(super) mod tests {
    use super::{Pattern, pair_starts_with};

    /// Request parts whose `key_value` may or may not be a composite, including the Go
    /// server's collisions (`a_b` read as `a` + `b`, or `a_b` + nothing).
    pub(in crate::matcher) const PARTS: [&str; 9] =
        ["", "a", "b", "a_b", "b_", "_", "a_", "ab", "é_b"];

    #[test]
    fn prefix_patterns_match_the_parts_as_the_joined_text() {
        for prefix in ["", "a", "a_", "a_b", "_", "__", "a_b_", "b", "é"] {
            let pattern = Pattern::new(&format!("{prefix}*"));
            for key in PARTS {
                for value in PARTS {
                    assert_eq!(
                        pair_starts_with(key, value, prefix),
                        pattern.matches(&format!("{key}_{value}")),
                        "{prefix:?}* ~ {key:?} + {value:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn wildcards_match_like_the_go_server() {
        let cases = [
            ("wild_foo*", "wild_foo1", true),
            ("wild_foo*", "wild_foo", true),
            ("wild_foo*", "wild_bar", false),
            ("midWild_bar*b", "midWild_barab", true),
            ("midWild_bar*b", "midWild_bar123b", true),
            ("midWild_bar*b", "midWild_barb", true),
            ("midWild_bar*b", "midWild_bara", false),
            ("midWild_bar*b", "midWild_xbarb", false),
            ("multiWild_foo*bar*baz", "multiWild_foo123bar456baz", true),
            ("multiWild_foo*bar*baz", "multiWild_foobarbaz", true),
            ("multiWild_foo*bar*baz", "multiWild_foo123baz", false),
            ("multiWild_foo*bar*baz", "multiWild_bar456baz", false),
            ("k_*", "k_", true),
            ("k_a*a", "k_a", false),
            ("k_a*a", "k_aa", true),
            ("k_*x*", "k_yyxyy", true),
        ];
        for (pattern, text, expected) in cases {
            assert_eq!(
                Pattern::new(pattern).matches(text),
                expected,
                "{pattern} ~ {text}"
            );
        }
    }
}
