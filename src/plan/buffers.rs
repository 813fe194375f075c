//! The strings a request's plan is written into, kept per thread between requests so
//! that planning allocates nothing once they have grown to fit.

use std::cell::RefCell;

/// Largest capacity kept for the next request: a request with unusually long keys (up
/// to the request caps' megabytes) must not pin that memory on every worker thread.
const MAX_KEPT: usize = 16 * 1024;

/// Most spare pairs a thread keeps. Requests that wait for Redis hold theirs across the
/// wait, tens at a time on one thread under load; with one spare, each of them but one
/// grew new strings (four reallocations for a two-descriptor request's keys).
const SPARES: usize = 64;

/// Most bytes of spare capacity a thread keeps (a two-descriptor request's pair is a few
/// hundred bytes).
const SPARE_BYTES: usize = 64 * 1024;

/// A request's working strings.
#[derive(Debug)]
pub(crate) struct Buffers {
    /// Every limited descriptor's bucket key, back to back.
    pub(crate) keys: String,
    /// Where the matcher builds each level's composite `key_value` to look it up.
    pub(crate) scratch: String,
}

thread_local! {
    /// This thread's spare strings (keys, scratch), taken by the requests that run on it
    /// and given back by whichever thread drops them. Plain strings, not [`Buffers`]:
    /// dropping a `Buffers` here would run its `Drop`, which gives back to this very list.
    static SPARE: RefCell<Spares> = const {
        RefCell::new(Spares {
            pairs: Vec::new(),
            bytes: 0,
        })
    };
}

/// A thread's spare strings.
struct Spares {
    /// (keys, scratch) pairs, empty.
    pairs: Vec<(String, String)>,
    /// Their capacity in all.
    bytes: usize,
}

impl Buffers {
    /// A spare pair of this thread's, emptied; new ones if it has none left.
    pub(crate) fn take() -> Self {
        let (keys, scratch) = SPARE
            .try_with(|spare| {
                let mut spare = spare.borrow_mut();
                let pair = spare.pairs.pop()?;
                spare.bytes -= pair.0.capacity() + pair.1.capacity();
                Some(pair)
            })
            .ok()
            .flatten()
            .unwrap_or_default();
        Buffers { keys, scratch }
    }

    fn capacity(&self) -> usize {
        self.keys.capacity() + self.scratch.capacity()
    }
}

/// Given back to whichever thread drops them: a request's future may move between threads.
impl Drop for Buffers {
    fn drop(&mut self) {
        let capacity = self.capacity();
        if capacity == 0 || capacity > MAX_KEPT {
            return;
        }
        let mut keys = std::mem::take(&mut self.keys);
        let mut scratch = std::mem::take(&mut self.scratch);
        keys.clear();
        scratch.clear();
        // Fails only while the thread is being torn down; the strings are then just freed,
        // as they are when the thread keeps enough spares already.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.pairs.len() < SPARES && spare.bytes + capacity <= SPARE_BYTES {
                spare.bytes += capacity;
                spare.pairs.push((keys, scratch));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{Buffers, MAX_KEPT, SPARES};

    #[test]
    fn the_buffers_come_back_empty_with_their_capacity() {
        let mut first = Buffers::take();
        first.keys.push_str("7:trading");
        first.scratch.push_str("user_id_alice");
        let capacity = first.capacity();
        drop(first);
        let again = Buffers::take();
        assert!(again.keys.is_empty() && again.scratch.is_empty());
        assert_eq!(again.capacity(), capacity);
        // While one request holds them, another on the same thread gets its own.
        assert_eq!(Buffers::take().capacity(), 0);
    }

    #[test]
    fn requests_at_once_on_one_thread_each_get_grown_buffers_back() {
        let grown = || {
            let mut buffers = Buffers::take();
            buffers.keys.reserve(100);
            assert!(buffers.capacity() <= 200);
            buffers
        };
        let held: Vec<Buffers> = (0..SPARES + 4).map(|_| grown()).collect();
        drop(held);
        // As many as the thread keeps come back with their capacity; then new ones.
        const { assert!(SPARES * 200 <= super::SPARE_BYTES) };
        let again: Vec<Buffers> = (0..SPARES + 4).map(|_| Buffers::take()).collect();
        let kept = again.iter().filter(|b| b.keys.capacity() >= 100).count();
        assert_eq!(kept, SPARES);
    }

    #[test]
    fn a_thread_keeps_spares_up_to_its_byte_budget() {
        let big = || {
            let mut buffers = Buffers::take();
            buffers.keys.reserve(MAX_KEPT / 2);
            buffers
        };
        let held: Vec<Buffers> = (0..SPARES).map(|_| big()).collect();
        drop(held);
        let again: Vec<Buffers> = (0..SPARES).map(|_| Buffers::take()).collect();
        let kept: usize = again.iter().map(Buffers::capacity).sum();
        assert!(kept > 0 && kept <= super::SPARE_BYTES, "{kept} bytes kept");
    }

    #[test]
    fn huge_buffers_are_not_kept() {
        let mut huge = Buffers::take();
        huge.keys.reserve(MAX_KEPT + 1);
        drop(huge);
        assert!(Buffers::take().capacity() <= MAX_KEPT);
    }
}
