//! The buffer a request's bucket keys are written into, kept per thread between requests
//! so that building the keys allocates nothing once the buffer has grown to fit.

use std::cell::Cell;
use std::ops::{Deref, DerefMut};

/// Largest buffer kept for the next request: a request with unusually long keys (up to
/// the request caps' megabytes) must not pin that memory on every worker thread.
const MAX_KEPT: usize = 16 * 1024;

thread_local! {
    /// The spare buffer of this thread; empty while a request on this thread holds it.
    static SPARE: Cell<String> = const { Cell::new(String::new()) };
}

/// A request's key buffer, taken from this thread's spare and given back when dropped
/// (to whichever thread drops it: a request's future may move between threads).
#[derive(Debug)]
pub(crate) struct KeyBuffer(String);

impl KeyBuffer {
    /// This thread's spare buffer, empty; a new one if a request on this thread holds it.
    pub(crate) fn take() -> Self {
        KeyBuffer(SPARE.try_with(Cell::take).unwrap_or_default())
    }
}

impl Deref for KeyBuffer {
    type Target = String;
    fn deref(&self) -> &String {
        &self.0
    }
}

impl DerefMut for KeyBuffer {
    fn deref_mut(&mut self) -> &mut String {
        &mut self.0
    }
}

impl Drop for KeyBuffer {
    fn drop(&mut self) {
        let mut buffer = std::mem::take(&mut self.0);
        if buffer.capacity() > MAX_KEPT {
            return;
        }
        buffer.clear();
        // Fails only while the thread is being torn down; the buffer is then just freed.
        // Of two requests that ran at once on this thread, the larger buffer is kept.
        let _ = SPARE.try_with(|spare| {
            let other = spare.take();
            spare.set(if other.capacity() > buffer.capacity() {
                other
            } else {
                buffer
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::KeyBuffer;

    #[test]
    fn the_buffer_comes_back_empty_with_its_capacity() {
        let mut first = KeyBuffer::take();
        first.push_str("7:trading");
        let capacity = first.capacity();
        drop(first);
        let again = KeyBuffer::take();
        assert!(again.is_empty());
        assert_eq!(again.capacity(), capacity);
        // While one request holds it, another on the same thread gets its own.
        assert_eq!(KeyBuffer::take().capacity(), 0);
    }

    #[test]
    fn a_huge_buffer_is_not_kept() {
        let mut huge = KeyBuffer::take();
        huge.reserve(super::MAX_KEPT + 1);
        drop(huge);
        assert!(KeyBuffer::take().capacity() <= super::MAX_KEPT);
    }
}
