//! What the embedded store keeps of a bucket's key: a keyed 128-bit hash of it, not its text.
//!
//! Keys are mostly request values, tens to thousands of bytes each; the hash is 16 bytes
//! whatever their length, so a bucket costs the same small, fixed amount of memory.
//! Two keys share a bucket only if their hashes are equal. The hash is SipHash-1-3 with a
//! key drawn from the operating system's random source when the store is made, so a
//! caller who does not know that key cannot choose values that collide: as a PRF's, its
//! outputs for distinct inputs are as good as independent and uniform, and two of a
//! million buckets share one with a probability of about 2^-89. Nothing reads a key back
//! from the store: explain and logs take the text from the request.

use ring::rand::{SecureRandom, SystemRandom};
use siphasher::sip128::SipHasher13;

/// A bucket's identity in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(super) struct BucketId {
    /// Places the bucket: its shard and its slot in the shard's table.
    pub(super) low: u64,
    /// The rest of the 128 bits, compared with `low` to tell buckets apart.
    high: u64,
}

/// Makes [`BucketId`]s: one secret key per store. Not `Debug`: the key must not reach a
/// log line.
pub(super) struct IdHasher(SipHasher13);

impl IdHasher {
    /// A hasher with a fresh random key.
    ///
    /// # Panics
    /// If the operating system's random source fails, as `ring` reports it (it does not on
    /// Linux once the source is initialised): a store without a secret key would let
    /// callers collide buckets.
    pub(super) fn random() -> Self {
        let mut key = [0u8; 16];
        SystemRandom::new()
            .fill(&mut key)
            .expect("the operating system's random source failed");
        Self(SipHasher13::new_with_key(&key))
    }

    /// A hasher with a fixed key, for tests that need ids they can predict.
    #[cfg(test)]
    pub(super) fn fixed(seed: u8) -> Self {
        Self(SipHasher13::new_with_key(&[seed; 16]))
    }

    /// The id of the bucket whose key is `text`.
    #[inline]
    pub(super) fn id(&self, text: &str) -> BucketId {
        let hash = self.0.hash(text.as_bytes());
        BucketId {
            low: hash.h1,
            high: hash.h2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_depend_on_the_text_and_on_the_stores_key() {
        let (one, other) = (IdHasher::random(), IdHasher::random());
        assert_eq!(one.id("5:flood4:user2:u1"), one.id("5:flood4:user2:u1"));
        assert_ne!(one.id("5:flood4:user2:u1"), one.id("5:flood4:user2:u2"));
        // Another store's ids are unrelated: the key is secret per store.
        assert_ne!(one.id("5:flood4:user2:u1"), other.id("5:flood4:user2:u1"));
    }

    #[test]
    fn every_half_of_an_id_varies() {
        let hasher = IdHasher::fixed(7);
        let ids: Vec<BucketId> = (0..64).map(|i| hasher.id(&format!("k{i}"))).collect();
        for bit in 0..64 {
            let low = ids.iter().filter(|id| id.low >> bit & 1 == 1).count();
            let high = ids.iter().filter(|id| id.high >> bit & 1 == 1).count();
            assert!(
                (8..=56).contains(&low) && (8..=56).contains(&high),
                "bit {bit}"
            );
        }
    }
}
