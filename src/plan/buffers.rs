//! The strings a request's plan is written into, kept per thread between requests so
//! that planning allocates nothing once they have grown to fit.

use std::cell::Cell;

/// Largest capacity kept for the next request: a request with unusually long keys (up
/// to the request caps' megabytes) must not pin that memory on every worker thread.
const MAX_KEPT: usize = 16 * 1024;

/// A request's working strings.
#[derive(Debug)]
pub(crate) struct Buffers {
    /// Every limited descriptor's bucket key, back to back.
    pub(crate) keys: String,
    /// Where the matcher builds each level's composite `key_value` to look it up.
    pub(crate) scratch: String,
}

thread_local! {
    /// This thread's spare strings (keys, scratch); empty while a request on this thread
    /// holds them. Plain strings, not [`Buffers`]: replacing a `Buffers` here would run its
    /// `Drop`, which gives back to this very slot.
    static SPARE: Cell<(String, String)> = const { Cell::new((String::new(), String::new())) };
}

impl Buffers {
    /// This thread's spare buffers, emptied; new ones if a request on this thread holds
    /// them.
    pub(crate) fn take() -> Self {
        let (keys, scratch) = SPARE.try_with(Cell::take).unwrap_or_default();
        Buffers { keys, scratch }
    }

    fn capacity(&self) -> usize {
        self.keys.capacity() + self.scratch.capacity()
    }
}

/// Given back to whichever thread drops them: a request's future may move between threads.
impl Drop for Buffers {
    fn drop(&mut self) {
        if self.capacity() == 0 || self.capacity() > MAX_KEPT {
            return;
        }
        let capacity = self.capacity();
        let mut keys = std::mem::take(&mut self.keys);
        let mut scratch = std::mem::take(&mut self.scratch);
        keys.clear();
        scratch.clear();
        // Fails only while the thread is being torn down; the strings are then just freed.
        // Of two requests that ran at once on this thread, the larger strings are kept.
        let _ = SPARE.try_with(|spare| {
            let other = spare.take();
            spare.set(if other.0.capacity() + other.1.capacity() > capacity {
                other
            } else {
                (keys, scratch)
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{Buffers, MAX_KEPT};

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
    fn huge_buffers_are_not_kept() {
        let mut huge = Buffers::take();
        huge.keys.reserve(MAX_KEPT + 1);
        drop(huge);
        assert!(Buffers::take().capacity() <= MAX_KEPT);
    }
}
