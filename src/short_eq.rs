//! Equality of short byte strings (keys, key parts), compared inline.
//!
//! `a == b` on slices calls the C library's `memcmp` through the dynamic linker's table;
//! for the few dozen bytes of a bucket key or a descriptor entry the call and its dispatch
//! cost more than the comparison, and a request makes about ten of them (5% of a
//! three-descriptor request in `perf`). Comparing eight bytes at a time in place keeps
//! them in registers.

/// Whether `a` and `b` hold the same bytes (as `a == b`).
#[inline]
pub(crate) fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if n >= 8 {
        // Whole words, the last one overlapping its predecessor rather than a byte tail.
        let mut at = 0;
        while at + 8 < n {
            if word(a, at) != word(b, at) {
                return false;
            }
            at += 8;
        }
        return word(a, n - 8) == word(b, n - 8);
    }
    if n >= 4 {
        // Two overlapping halves.
        return half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4);
    }
    a.iter().zip(b).fold(0, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The 8 bytes of `s` at `at` (within `s`), as one integer to compare.
#[inline]
fn word(s: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(s[at..at + 8].try_into().unwrap_or_default())
}

/// The 4 bytes of `s` at `at` (within `s`), as one integer to compare.
#[inline]
fn half(s: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(s[at..at + 4].try_into().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn answers_as_slice_equality_at_every_length_and_position() {
        let base: Vec<u8> = (0..70u8).map(|i| i.wrapping_mul(37)).collect();
        for len in 0..base.len() {
            let a = &base[..len];
            assert!(same(a, a), "{len}");
            assert!(!same(a, &base[..len + 1]), "{len}");
            for flipped in 0..len {
                let mut b = a.to_vec();
                b[flipped] ^= 0x40;
                assert!(!same(a, &b), "{len} at {flipped}");
            }
        }
    }
}
