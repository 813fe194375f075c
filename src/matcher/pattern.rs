//! Wildcard patterns of composite keys (`key_value*`), matched as the Go server does.

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

    /// The prefix of a pattern whose only `*` is its last character (`prefix*`, the
    /// usual kind): such patterns are found through [`super::wildcards`]'s prefix index
    /// instead of being matched one by one.
    pub(super) fn trailing_prefix(pattern: &str) -> Option<&str> {
        let prefix = pattern.strip_suffix('*')?;
        (!prefix.contains('*')).then_some(prefix)
    }

    /// Whether the pattern matches `key_value`, written into `scratch` once (`written`
    /// remembers that across a level's patterns).
    pub(super) fn matches_pair(
        &self,
        key: &str,
        value: &str,
        scratch: &mut String,
        written: &mut bool,
    ) -> bool {
        if !*written {
            write_pair(scratch, key, value);
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

/// Writes `key_value` into `scratch`, replacing what it held.
pub(super) fn write_pair(scratch: &mut String, key: &str, value: &str) {
    scratch.clear();
    scratch.push_str(key);
    scratch.push('_');
    scratch.push_str(value);
}

#[cfg(test)]
pub(super) mod tests {
    use super::Pattern;

    /// Request parts whose `key_value` may or may not be a composite, including the Go
    /// server's collisions (`a_b` read as `a` + `b`, or `a_b` + nothing).
    pub(in crate::matcher) const PARTS: [&str; 9] =
        ["", "a", "b", "a_b", "b_", "_", "a_", "ab", "é_b"];

    #[test]
    fn only_a_lone_trailing_star_makes_a_prefix_pattern() {
        let cases = [
            ("k_a*", Some("k_a")),
            ("*", Some("")),
            ("k_é*", Some("k_é")),
            ("k_a**", None),
            ("k_*a*", None),
            ("k_a*b", None),
            ("*k_a", None),
            ("k_a", None),
        ];
        for (pattern, prefix) in cases {
            assert_eq!(Pattern::trailing_prefix(pattern), prefix, "{pattern}");
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
