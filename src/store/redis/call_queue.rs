//! A node's call queue (coalescing): requests bound for one node that arrive while its
//! script calls are in flight wait, and go to Redis together in the next call.
//!
//! A node has at most [`RedisOptions::calls_in_flight`] script calls in flight. A request
//! that finds none is sent at once, alone, so a batch adds no wait when load is light.
//! Under load, requests queue in arrival order while the calls run, and each call that
//! ends takes the queue's next batch: the oldest waiting request and every later one that
//! the same script and, in a Cluster, the same slot decides (a script may only touch keys
//! of one slot; and at the same time, when the caller gives it), up to [`MAX_CHECKS`]
//! checks and [`MAX_BYTES`] of keys and arguments. A call beside one in flight (when more
//! than one is allowed) starts only once [`FURTHER_CALL_MIN_CHECKS`] checks wait: started
//! for any request, such calls would split the batches, and each call has a fixed price
//! in Redis and in meshlimit that its batch shares (docs/performance.md, "Redis across a network"). The scripts decide
//! a batch's requests one after the other, each all-or-nothing on its own (see
//! decide.lua's header): a batch answers exactly what the same requests, sent one call
//! each in that order, would get. Calls in flight together run in the order Redis
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

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::part::Part;

/// Checks one call decides at most: a call holds Redis for all other clients while it runs
/// (about a microsecond a check), so it stays well under a millisecond.
const MAX_CHECKS: usize = 256;

/// Bytes of keys and arguments one call carries at most.
const MAX_BYTES: usize = 64 * 1024;

/// Checks that must wait before a call starts beside one in flight. Behind a 0.5 ms round
/// trip, with two calls allowed, 16 took 8% more requests a second than one call in
/// flight, and 8 half as much (docs/performance.md, "Redis across a network"): a call of fewer costs Redis and meshlimit
/// more than the wait it saves.
const FURTHER_CALL_MIN_CHECKS: usize = 16;

/// One node's requests waiting for a script call, and its calls in flight; `A` is what a
/// request is answered (the call's reply, or its failure).
#[derive(Debug)]
pub(crate) struct Batcher<A> {
    /// A `parking_lot` mutex, not a Tokio one: held only to push or take, never across an
    /// await.
    queue: Mutex<Queue<A>>,
}

impl<A> Default for Batcher<A> {
    fn default() -> Self {
        Self {
            queue: Mutex::new(Queue::default()),
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
}

impl<A> Default for Queue<A> {
    fn default() -> Self {
        Self {
            in_flight: 0,
            waiting: VecDeque::new(),
            waiting_checks: 0,
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
    /// when no call is in flight, or fewer than `limit` and enough checks wait; and where
    /// the answer will come.
    pub(super) fn submit(
        &self,
        part: Part,
        slot: u16,
        limit: usize,
    ) -> (oneshot::Receiver<A>, Option<Vec<Waiting<A>>>) {
        let (answer, receiver) = oneshot::channel();
        let mut queue = self.queue.lock();
        queue.waiting_checks += part.checks;
        queue.waiting.push_back(Waiting { part, slot, answer });
        let starts = queue.in_flight == 0
            || (queue.in_flight < limit && queue.waiting_checks >= FURTHER_CALL_MIN_CHECKS);
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

    /// The next batch, or `None`: nothing waits, and the slot is given back in the same
    /// lock, so that a request queued after it finds the slot free.
    pub(super) fn next(&mut self) -> Option<Vec<Waiting<A>>> {
        let mut queue = self.batcher.queue.lock();
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
            sizes(call_slot.next().expect("waiting")),
            [(Shape::General, 1), (Shape::General, 3)]
        );
        assert_eq!(
            sizes(call_slot.next().expect("waiting")),
            [(Shape::Buckets, 1)]
        );
        assert_eq!(
            sizes(call_slot.next().expect("waiting")),
            [(Shape::Buckets, MAX_CHECKS)]
        );
        assert!(call_slot.next().is_none());
        assert_eq!(
            batcher.queue.lock().in_flight,
            0,
            "given back with the last batch"
        );
        drop(call_slot);
        assert_eq!(batcher.queue.lock().in_flight, 0, "given back once");
    }

    #[test]
    fn a_call_beside_one_in_flight_starts_only_once_enough_checks_wait() {
        let batcher = Batcher::<()>::default();
        // The answers' receivers: a request whose receiver is dropped has given up.
        let answers = std::cell::RefCell::new(Vec::new());
        let submit = |checks| {
            let (answer, batch) = batcher.submit(part(Shape::Buckets, checks, 10), 0, 2);
            answers.borrow_mut().push(answer);
            batch.map(|b| b.iter().map(|w| w.part.checks).collect::<Vec<_>>())
        };
        // None in flight: at once, alone.
        assert_eq!(submit(1), Some(vec![1]));
        // A second call is allowed, but waits until FURTHER_CALL_MIN_CHECKS checks wait.
        assert_eq!(submit(FURTHER_CALL_MIN_CHECKS - 2), None);
        assert_eq!(submit(1), None);
        assert_eq!(
            submit(1),
            Some(vec![FURTHER_CALL_MIN_CHECKS - 2, 1, 1]),
            "enough checks wait: the second call takes them all"
        );
        // Both calls in flight: any request waits, however many checks it has.
        assert_eq!(submit(FURTHER_CALL_MIN_CHECKS), None);
        assert_eq!(submit(1), None);
        // A request that gave up stops counting once a batch is taken.
        drop(answers.borrow_mut().pop());
        let mut call_slot = CallSlot::held(&batcher);
        let batch = call_slot.next().expect("waiting");
        assert_eq!(batch.len(), 1, "the request that gave up is not sent");
        {
            let queue = batcher.queue.lock();
            assert_eq!((queue.in_flight, queue.waiting_checks), (2, 0));
        }
        assert!(call_slot.next().is_none());
        // One call in flight again, and a request with enough checks of its own starts
        // the second at once.
        assert_eq!(
            submit(FURTHER_CALL_MIN_CHECKS),
            Some(vec![FURTHER_CALL_MIN_CHECKS])
        );
    }
}
