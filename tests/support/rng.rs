//! A small seeded random generator for the randomised script tests: the same sequence on
//! every run from the same seed, so a failing walk can be replayed, and no dependency.

/// SplitMix64 from a seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (a slight bias for large `n` does not matter to the tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// One of `items`, which must not be empty.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// Distinct indexes below `len`, in the order drawn: from 1 to `most` draws, a repeat
    /// dropped.
    pub fn distinct(&mut self, most: u64, len: usize) -> Vec<usize> {
        let mut picked: Vec<usize> = Vec::new();
        for _ in 0..=self.below(most) {
            let i = self.below(len as u64) as usize;
            if !picked.contains(&i) {
                picked.push(i);
            }
        }
        picked
    }
}
