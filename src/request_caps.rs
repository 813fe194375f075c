//! Caps on what one request may ask for: descriptors, entries per descriptor, and bytes per
//! entry key or value.
//!
//! Without them the cost of one request, and the memory its buckets take, grows with what
//! the caller chooses to send: a single request of 175,000 descriptors kept a server busy
//! for over a minute. Requests over a cap are refused whole, before any work is done for
//! them, with the cap's flag named so that the operator knows which one to raise.

use crate::defaults;

/// The caps of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestCaps {
    /// Most descriptors in one request (`--max-descriptors`).
    pub max_descriptors: usize,
    /// Most entries in one descriptor (`--max-entries`).
    pub max_entries: usize,
    /// Most bytes in one entry's key, and in one entry's value (`--max-value-bytes`).
    pub max_value_bytes: usize,
}

impl Default for RequestCaps {
    fn default() -> Self {
        Self {
            max_descriptors: defaults::MAX_DESCRIPTORS,
            max_entries: defaults::MAX_ENTRIES,
            max_value_bytes: defaults::MAX_VALUE_BYTES,
        }
    }
}

/// A request over one of the caps. Descriptors and entries are numbered from 0, as in the
/// service's other messages.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TooLarge {
    /// Too many descriptors.
    #[error("request has {count} descriptors; --max-descriptors is {cap}")]
    Descriptors {
        /// Descriptors in the request.
        count: usize,
        /// The cap.
        cap: usize,
    },
    /// Too many entries in one descriptor.
    #[error("descriptor {descriptor} has {count} entries; --max-entries is {cap}")]
    Entries {
        /// Which descriptor.
        descriptor: usize,
        /// Entries in it.
        count: usize,
        /// The cap.
        cap: usize,
    },
    /// An entry's key or value is too long.
    #[error(
        "descriptor {descriptor}, entry {entry}: the {part} has {bytes} bytes; --max-value-bytes is {cap}"
    )]
    Bytes {
        /// Which descriptor.
        descriptor: usize,
        /// Which entry of it.
        entry: usize,
        /// `key` or `value`.
        part: &'static str,
        /// Its length.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
}

impl RequestCaps {
    /// Checks the number of descriptors; call it first, before looking at any of them.
    ///
    /// # Errors
    /// More than `max_descriptors`.
    pub fn check_count(&self, count: usize) -> Result<(), TooLarge> {
        if count > self.max_descriptors {
            return Err(TooLarge::Descriptors {
                count,
                cap: self.max_descriptors,
            });
        }
        Ok(())
    }

    /// Checks descriptor number `descriptor`, given its entries.
    ///
    /// # Errors
    /// More than `max_entries` entries, or a key or value longer than `max_value_bytes`.
    pub fn check_descriptor<'e>(
        &self,
        descriptor: usize,
        entries: impl Iterator<Item = (&'e str, &'e str)>,
    ) -> Result<(), TooLarge> {
        let mut count = 0;
        for (entry, (key, value)) in entries.enumerate() {
            count += 1;
            for (part, text) in [("key", key), ("value", value)] {
                if text.len() > self.max_value_bytes {
                    return Err(TooLarge::Bytes {
                        descriptor,
                        entry,
                        part,
                        bytes: text.len(),
                        cap: self.max_value_bytes,
                    });
                }
            }
        }
        if count > self.max_entries {
            return Err(TooLarge::Entries {
                descriptor,
                count,
                cap: self.max_entries,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_are_inclusive_and_named() {
        let limits = RequestCaps::default();
        assert_eq!(limits.check_count(64), Ok(()));
        assert_eq!(
            limits.check_count(65).unwrap_err().to_string(),
            "request has 65 descriptors; --max-descriptors is 64"
        );
        let entries: Vec<(String, String)> = (0..33).map(|i| (i.to_string(), "v".into())).collect();
        let pairs = |n: usize| entries[..n].iter().map(|(k, v)| (k.as_str(), v.as_str()));
        assert_eq!(limits.check_descriptor(0, pairs(32)), Ok(()));
        assert_eq!(
            limits
                .check_descriptor(3, pairs(33))
                .unwrap_err()
                .to_string(),
            "descriptor 3 has 33 entries; --max-entries is 32"
        );
        let long = "x".repeat(4097);
        let fits = "x".repeat(4096);
        let ok = [(fits.as_str(), fits.as_str())];
        assert_eq!(limits.check_descriptor(0, ok.into_iter()), Ok(()));
        let key = [(long.as_str(), "v")];
        assert_eq!(
            limits
                .check_descriptor(1, key.into_iter())
                .unwrap_err()
                .to_string(),
            "descriptor 1, entry 0: the key has 4097 bytes; --max-value-bytes is 4096"
        );
        let value = [("k", "v"), ("k", long.as_str())];
        assert_eq!(
            limits
                .check_descriptor(2, value.into_iter())
                .unwrap_err()
                .to_string(),
            "descriptor 2, entry 1: the value has 4097 bytes; --max-value-bytes is 4096"
        );
    }
}
