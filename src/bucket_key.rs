//! A bucket's identity, and the one place its text is written and read.
//!
//! A key is the domain followed by each level's key and counted value (the request's, or a
//! shared wildcard's), every part written as `<byte length>:<part>`. The length prefix is
//! what keeps two different descriptors from ever sharing a bucket, whatever their keys and
//! values contain: `a:b` + `c` and `a` + `b:c` differ. The embedded store uses the text as
//! is; Redis prefixes it and puts the domain part in a hash tag (see
//! [`BucketKey::redis_key`]).

use std::fmt;

/// The prefix of every Redis key meshlimit writes: the format's version, so that a future
/// format cannot misread buckets left by this one.
pub const REDIS_PREFIX: &str = "ml1:";

/// A bucket's identity, borrowed from the buffer it was built in. Two keys are equal when
/// their text is.
#[derive(Clone, Copy)]
pub struct BucketKey<'a>(
    /// The text: the domain, then each level's key and counted value, each as
    /// `<byte length>:<part>`, then, for a limit of a `rate_limits` list, the limit's part.
    &'a str,
    /// How much of the text is the descriptor's own key: all of it, but for a limit of a
    /// list, whose part follows.
    usize,
);

impl<'a> BucketKey<'a> {
    /// The key of one limit of a `rate_limits` list: `descriptor_len` bytes of the
    /// descriptor's key, then the limit's part.
    pub fn listed(text: &'a str, descriptor_len: usize) -> Self {
        BucketKey(text, descriptor_len.min(text.len()))
    }

    /// The key as text: what the embedded store keys its buckets by.
    pub fn as_str(&self) -> &'a str {
        self.0
    }

    /// The descriptor's own key: the whole text but for a limit of a list. The embedded
    /// store keeps all the limits of one descriptor in one bucket under it.
    pub fn descriptor_part(&self) -> &'a str {
        &self.0[..self.1]
    }

    /// For a limit of a list, its part (what follows the descriptor's key); empty
    /// otherwise.
    pub fn limit_part(&self) -> &'a str {
        &self.0[self.1..]
    }

    /// Whether this is the key of a limit of a list (see [`BucketKey::listed`]).
    pub fn is_listed(&self) -> bool {
        self.1 < self.0.len()
    }

    /// The leading `<len>:<domain>` part; the whole key when it does not start with one
    /// (keys not built by [`KeyWriter`], as tests and tools may pass).
    pub fn domain_part(&self) -> &'a str {
        let key = self.0;
        let end = key
            .split_once(':')
            .and_then(|(len, _)| Some(len.len() + 1 + len.parse::<usize>().ok()?))
            .filter(|&end| key.is_char_boundary(end) && end <= key.len())
            .unwrap_or(key.len());
        &key[..end]
    }

    /// The Redis key of this bucket: the deployment's `namespace` (`--redis-key-prefix`,
    /// usually empty), [`REDIS_PREFIX`], then the domain part in braces, then the rest. The
    /// braces are a Cluster hash tag: every bucket of a domain lives in one slot, so that
    /// one script call can decide a whole request.
    pub fn redis_key(&self, namespace: &str) -> String {
        let domain = self.domain_part();
        let mut out =
            String::with_capacity(namespace.len() + REDIS_PREFIX.len() + self.0.len() + 2);
        out.push_str(namespace);
        out.push_str(REDIS_PREFIX);
        out.push('{');
        out.push_str(domain);
        out.push('}');
        out.push_str(&self.0[domain.len()..]);
        out
    }
}

impl<'a> From<&'a str> for BucketKey<'a> {
    fn from(key: &'a str) -> Self {
        BucketKey(key, key.len())
    }
}

impl PartialEq for BucketKey<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for BucketKey<'_> {}

impl std::hash::Hash for BucketKey<'_> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl fmt::Debug for BucketKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl fmt::Display for BucketKey<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Writes keys one after another into a buffer that outlives them, so that a request's
/// keys cost no allocation once the buffer has grown to fit.
#[derive(Debug)]
pub struct KeyWriter<'b> {
    /// Every key of the request so far, back to back.
    buffer: &'b mut String,
    /// Where the key being written starts in `buffer`.
    start: usize,
}

impl<'b> KeyWriter<'b> {
    /// Starts a key for `domain` at the end of `buffer`.
    pub fn new(buffer: &'b mut String, domain: &str) -> Self {
        let start = buffer.len();
        let mut writer = KeyWriter { buffer, start };
        writer.push(domain);
        writer
    }

    /// Appends one part (a level's key or its counted value).
    #[inline]
    pub fn push(&mut self, part: &str) {
        Self::part(self.buffer, part);
    }

    /// Appends `part` to `out` as one length-prefixed part: what [`KeyWriter::push`]
    /// writes, for parts written ahead of time (a listed limit's, see
    /// [`crate::rules::ConfigLimit::key_part`]).
    #[inline]
    pub fn part(out: &mut String, part: &str) {
        // This runs for every key and value of every request: digits pushed one by one up
        // to 99 (nearly every part), `itoa` beyond, never `write!`.
        match part.len() {
            len @ 0..10 => out.push(digit(len)),
            len @ 10..100 => {
                out.push(digit(len / 10));
                out.push(digit(len % 10));
            }
            len => out.push_str(itoa::Buffer::new().format(len)),
        }
        out.push(':');
        out.push_str(part);
    }

    /// The key's place in the buffer, for reading it back with [`key_at`] once every key of
    /// the request is written.
    pub fn finish(self) -> std::ops::Range<usize> {
        self.start..self.buffer.len()
    }

    /// Drops what was written of this key (the descriptor turned out to have no bucket).
    pub fn discard(self) {
        self.buffer.truncate(self.start);
    }
}

/// The decimal digit `n` (below 10).
fn digit(n: usize) -> char {
    char::from(b'0' + n as u8)
}

/// The key written at `range` of `buffer` by a [`KeyWriter`].
pub fn key_at(buffer: &str, range: std::ops::Range<usize>) -> BucketKey<'_> {
    BucketKey::from(&buffer[range])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key of `domain` and `parts` (keys and counted values, alternating).
    fn key_of<'p>(domain: &str, parts: impl IntoIterator<Item = &'p str>) -> String {
        let mut buffer = String::new();
        let mut writer = KeyWriter::new(&mut buffer, domain);
        for part in parts {
            writer.push(part);
        }
        writer.finish();
        buffer
    }

    #[test]
    fn parts_are_length_prefixed() {
        assert_eq!(
            key_of("trading", ["user_id", "alice"]),
            "7:trading7:user_id5:alice"
        );
        assert_eq!(key_of("", [""]), "0:0:");
        assert_ne!(key_of("d", ["a:b", "c"]), key_of("d", ["a", "b:c"]));
        for len in [9, 10, 42, 99, 100, 1234] {
            let part = "x".repeat(len);
            assert_eq!(key_of(&part, []), format!("{len}:{part}"));
        }
    }

    #[test]
    fn every_key_of_a_domain_shares_one_hash_tag() {
        let key = key_of("trading", ["user_id", "alice"]);
        assert_eq!(
            BucketKey::from(key.as_str()).redis_key(""),
            "ml1:{7:trading}7:user_id5:alice"
        );
        // A brace in the domain ends the tag early: still one slot for the whole domain.
        assert_eq!(BucketKey::from("3:a}b1:k").redis_key(""), "ml1:{3:a}b}1:k");
        // Keys not in the format (tests, tools) are tagged whole.
        assert_eq!(BucketKey::from("junk").redis_key(""), "ml1:{junk}");
        assert_eq!(BucketKey::from("99:short").redis_key(""), "ml1:{99:short}");
        assert_eq!(
            BucketKey::from("1:d1:k").redis_key("env:"),
            "env:ml1:{1:d}1:k"
        );
    }

    #[test]
    fn a_discarded_key_leaves_the_buffer_as_it_was() {
        let mut buffer = String::from("1:a");
        let writer = KeyWriter::new(&mut buffer, "dom");
        writer.discard();
        assert_eq!(buffer, "1:a");
        let mut writer = KeyWriter::new(&mut buffer, "dom");
        writer.push("k");
        let range = writer.finish();
        assert_eq!(key_at(&buffer, range).as_str(), "3:dom1:k");
    }
}
