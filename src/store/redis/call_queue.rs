//! A node's call queue (coalescing): requests bound for one node that arrive while its
//! script calls are in flight wait, and go to Redis together in the next call.
//!
//! A node has as many script calls in flight as [`CallsAllowed`] learnt pays, at most
//! [`RedisOptions::calls_in_flight`]: one where Redis is near, more where a round trip
//! hides behind them. A request that finds fewer in flight is sent at once, so a batch
//! adds no wait when load is light. Otherwise requests queue in arrival order while the
//! calls run, and each call that ends takes the queue's next batch: the oldest waiting
//! request and every later one that the same script and, in a Cluster, the same slot
//! decides (a script may only touch keys of one slot; and at the same time, when the
//! caller gives it), up to [`MAX_CHECKS`] checks and [`MAX_BYTES`] of keys and arguments.
//! The scripts decide a batch's requests one after the other, each all-or-nothing on its
//! own (see decide.lua's header): a batch answers exactly what the same requests, sent one
//! call each in that order, would get. Calls in flight together run in the order Redis
//! receives them; their requests were concurrent, so either order is one they could have
//! had.
//!
//! Calls run in tasks of their own, not in a request's ([`super::script`] sends them): a
//! request that gives up (its deadline passed, or its client went away) leaves the batch it
//! is in unharmed, and is not sent at all if it was still waiting. A failure (unreachable,
//! a timeout, an error reply, a malformed reply) is every request's of the batch, each then
//! answered by the failure policy; `NOSCRIPT` and Cluster redirects are handled for the
//! whole call.
//!
//! [`RedisOptions::calls_in_flight`]: super::RedisOptions::calls_in_flight

use std::collections::VecDeque;

use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::calls_allowed::CallsAllowed;
use super::part::Part;
use crate::clock::Stopwatch;

/// Checks one call decides at most: a call holds Redis for all other clients while it runs
/// (about a microsecond a check), so it stays well under a millisecond.
const MAX_CHECKS: usize = 256;

/// Bytes of keys and arguments one call carries at most.
const MAX_BYTES: usize = 64 * 1024;

/// One node's requests waiting for a script call, and its calls in flight; `A` is what a
/// request is answered (the call's reply, or its failure).
#[derive(Debug)]
pub(crate) struct Batcher<A> {
    /// A `parking_lot` mutex, not a Tokio one: held only to push or take, never across an
    /// await.
    queue: Mutex<Queue<A>>,
    /// When the batcher was made: what the times [`CallsAllowed`] learns from count from.
    born: Stopwatch,
}

impl<A> Default for Batcher<A> {
    fn default() -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
            born: Stopwatch::start(),
        }
    }
}

/// What [`Batcher`] guards.
#[derive(Debug)]
struct Queue<A> {
    /// Script calls in flight on the node, each run by a task looping over batches.
    in_flight: usize,
    /// Requests waiting for a call, in arrival order.
    waiting: VecDeque<Waiting<A>>,
    /// Their checks (those that gave up included, until the next batch is taken).
    waiting_checks: usize,
    /// How many calls in flight pay, learnt from those that ended.
    allowed: CallsAllowed,
}

impl<A> Default for Queue<A> {
    fn default() -> Self {
        Self {
            in_flight: 0,
            waiting: VecDeque::new(),
            waiting_checks: 0,
            allowed: CallsAllowed::default(),
        }
    }
}

/// A request waiting for its answer.
#[derive(Debug)]
pub(crate) struct Waiting<A> {
    /// Its keys and arguments.
    pub(super) part: Part,
    /// Its keys' Cluster slot (0 outside a Cluster): a call's keys share one.
    slot: u16,
    /// Where its answer goes; closed when the request gave up.
    pub(super) answer: oneshot::Sender<A>,
}

impl<A> Batcher<A> {
    /// Queues `part` (keys in `slot`); the batch to send at once (the caller then runs it)
    /// when fewer calls are in flight than the node allows now, at most `bound`; and where
    /// the answer will come.
    pub(super) fn submit(
        &self,
        part: Part,
        slot: u16,
        bound: usize,
    ) -> (oneshot::Receiver<A>, Option<Vec<Waiting<A>>>) {
        let (answer, receiver) = oneshot::channel();
        let mut queue = self.queue.lock();
        queue.waiting_checks += part.checks;
        queue.waiting.push_back(Waiting { part, slot, answer });
        let starts = queue.in_flight < queue.allowed.now(bound);
        let batch = starts.then(|| {
            queue.in_flight += 1;
            queue.take()
        });
        (receiver, batch)
    }
}

impl<A> Queue<A> {
    /// The next batch (see the module docs): empty when nothing waits. Requests that gave
    /// up are dropped on the way.
    fn take(&mut self) -> Vec<Waiting<A>> {
        let mut batch: Vec<Waiting<A>> = Vec::new();
        let mut rest = VecDeque::new();
        let (mut checks, mut bytes, mut rest_checks) = (0, 0, 0);
        while let Some(waiting) = self.waiting.pop_front() {
            if waiting.answer.is_closed() {
                continue;
            }
            let joins = match batch.first() {
                None => true,
                Some(first) => {
                    first.part.shape() == waiting.part.shape()
                        && first.slot == waiting.slot
                        && first.part.now_us == waiting.part.now_us
                        && checks + waiting.part.checks <= MAX_CHECKS
                        && bytes + waiting.part.bytes <= MAX_BYTES
                }
            };
            if joins {
                checks += waiting.part.checks;
                bytes += waiting.part.bytes;
                batch.push(waiting);
            } else {
                rest_checks += waiting.part.checks;
                rest.push_back(waiting);
            }
        }
        self.waiting = rest;
        self.waiting_checks = rest_checks;
        batch
    }
}

/// A call slot held by a task running batches; given back when nothing waits, or when the
/// task ends otherwise (its runtime shutting down), so that a node never runs out of slots.
pub(super) struct CallSlot<'a, A> {
    /// The node's batcher.
    batcher: &'a Batcher<A>,
    /// Still held.
    held: bool,
}

impl<'a, A> CallSlot<'a, A> {
    /// A slot already counted in `batcher`'s calls in flight.
    pub(super) fn held(batcher: &'a Batcher<A>) -> Self {
        CallSlot {
            batcher,
            held: true,
        }
    }

    /// The call carrying `checks` that took `took` ended: learnt from, then the next batch,
    /// or `None`: nothing waits, and the slot is given back in the same lock, so that a
    /// request queued after it finds the slot free.
    pub(super) fn next(&mut self, checks: usize, took: Duration) -> Option<Vec<Waiting<A>>> {
        let at = self.batcher.born.until(Stopwatch::start());
        let mut queue = self.batcher.queue.lock();
        queue.allowed.call_ended(checks, took, at);
        let batch = queue.take();
        if batch.is_empty() {
            queue.in_flight -= 1;
            self.held = false;
            return None;
        }
        Some(batch)
    }
}

impl<A> Drop for CallSlot<'_, A> {
    fn drop(&mut self) {
        if self.held {
            self.batcher.queue.lock().in_flight -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::part::Shape;

    fn part(shape: Shape, checks: usize, bytes: usize) -> Part {
        Part::sized(shape, checks, bytes)
    }

    #[test]
    fn a_batch_takes_the_oldest_request_and_later_ones_of_its_script_and_slot() {
        let batcher = Batcher::<()>::default();
        let mut answers = Vec::new();
        let mut submit = |shape, slot, checks| {
            let (answer, batch) = batcher.submit(part(shape, checks, 10), slot, 1);
            answers.push(answer);
            batch.map(|b| b.len())
        };
        // The first is sent at once, alone; the others wait for the call to end.
        assert_eq!(submit(Shape::Buckets, 0, 1), Some(1));
        assert_eq!(submit(Shape::General, 0, 1), None);
        assert_eq!(submit(Shape::Buckets, 0, 2), None);
        assert_eq!(submit(Shape::Buckets, 7, 1), None);
        assert_eq!(submit(Shape::General, 0, 3), None);
        assert_eq!(submit(Shape::Buckets, 0, MAX_CHECKS), None);
        // A request that gave up is never sent.
        drop(answers.remove(2));
        let mut call_slot = CallSlot::held(&batcher);
        let sizes = |batch: Vec<Waiting<()>>| -> Vec<(Shape, usize)> {
            batch
                .iter()
                .map(|w| (w.part.shape(), w.part.checks))
                .collect()
        };
        assert_eq!(
            sizes(
                call_slot
                    .next(1, Duration::from_micros(50))
                    .expect("waiting")
            ),
            [(Shape::General, 1), (Shape::General, 3)]
        );
        assert_eq!(
            sizes(
                call_slot
                    .next(1, Duration::from_micros(50))
                    .expect("waiting")
            ),
            [(Shape::Buckets, 1)]
        );
        assert_eq!(
            sizes(
                call_slot
                    .next(1, Duration::from_micros(50))
                    .expect("waiting")
            ),
            [(Shape::Buckets, MAX_CHECKS)]
        );
        assert!(call_slot.next(1, Duration::from_micros(50)).is_none());
        assert_eq!(
            batcher.queue.lock().in_flight,
            0,
            "given back with the last batch"
        );
        drop(call_slot);
        assert_eq!(batcher.queue.lock().in_flight, 0, "given back once");
    }

    #[test]
    fn calls_start_beside_those_in_flight_as_far_as_the_node_allows() {
        let batcher = Batcher::<()>::default();
        // The answers' receivers: a request whose receiver is dropped has given up.
        let answers = std::cell::RefCell::new(Vec::new());
        let submit = |checks| {
            let (answer, batch) = batcher.submit(part(Shape::Buckets, checks, 10), 0, 3);
            answers.borrow_mut().push(answer);
            batch.map(|b| b.iter().map(|w| w.part.checks).collect::<Vec<_>>())
        };
        // Nothing learnt: one call, and the others wait for it, however many checks.
        assert_eq!(submit(1), Some(vec![1]));
        assert_eq!(submit(300), None);
        let mut call_slot = CallSlot::held(&batcher);
        assert_eq!(
            call_slot
                .next(1, Duration::from_micros(50))
                .map(|b| b.len()),
            Some(1)
        );
        assert!(call_slot.next(300, Duration::from_micros(400)).is_none());
        // A far Redis (two windows of slow calls): calls start beside the one in flight at
        // once, up to the bound.
        for at in [5, 7] {
            let mut queue = batcher.queue.lock();
            let (took, at) = (Duration::from_millis(2), Duration::from_secs(at));
            queue.allowed.call_ended(1, took, at);
        }
        assert_eq!(submit(1), Some(vec![1]));
        assert_eq!(submit(2), Some(vec![2]));
        assert_eq!(submit(3), Some(vec![3]));
        assert_eq!(submit(4), None, "three in flight: the bound");
        assert_eq!(submit(5), None);
        // A request that gave up is not sent when the next call takes the batch.
        drop(answers.borrow_mut().pop());
        let mut call_slot = CallSlot::held(&batcher);
        let batch = call_slot
            .next(1, Duration::from_millis(2))
            .expect("waiting");
        assert_eq!(batch.iter().map(|w| w.part.checks).collect::<Vec<_>>(), [4]);
        {
            let queue = batcher.queue.lock();
            assert_eq!((queue.in_flight, queue.waiting_checks), (3, 0));
        }
        assert!(call_slot.next(4, Duration::from_millis(2)).is_none());
        assert_eq!(batcher.queue.lock().in_flight, 2);
    }
}
