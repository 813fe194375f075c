//! `cargo bench`: the embedded store's decision and the service layer, no network.
//!
//! - `store/decide_one`: one descriptor whose bucket is already in the store (target ≤ 50 ns).
//! - `store/threads/N`: the same from N threads on their own keys, as time per decision
//!   across all threads (it should fall as N grows up to the core count), with a
//!   `Mutex<HashMap>` baseline that collapses instead; `store/threads/one_key/N`: all N
//!   threads on one key.
//! - `store/flood`: a new key into a full store, per key (creation plus the eviction of the
//!   least recently used bucket).
//! - `store/check_many/N`: one request of N distinct descriptors, per descriptor (flat as N
//!   grows: linear cost).
//! - `service/three_descriptors`: a three-descriptor request through its plan (matching,
//!   replaces, hits), the store, the statistics and the answer; `_no_metrics` without the
//!   statistics.
//! - `store/limits/{one,two}`: a descriptor with one limit, and with two (a `rate_limits`
//!   list: two buckets decided together); target: two at most 1.6× one.
//!   `store/limits/sliding`: one sliding-window decision (target ≤ 100 ns), and its
//!   arithmetic alone (`sliding_step_only`).
//! - `service/limits/{one,two,sliding}`: the same through the whole service.
//! - `store/charges/{take,charge}`: a normal decision of 100 hits and a charge of the same
//!   shape (target: charge at most take); `charge_into_debt`: one that ends in debt.
//! - `store/holds/{take_then_charge,hold_then_settle}`: today's recipe's two calls (a
//!   decision of 100 hits, a charge of 100) against a reservation's (a hold of 100, its
//!   settle): the hold's own bookkeeping is the difference.
//! - `service/per_descriptor/N`: requests of N = 1, 8, 64 distinct descriptors, as time per
//!   descriptor (flat when a request's cost is linear in its descriptors).
//! - `service/threads/{one_key,own_keys}/N`: two-descriptor requests from N = 1, 2 threads,
//!   as time per request across all threads, on one user's buckets or each thread's own:
//!   how the service scales across cores, and what sharing one key's buckets costs.
//! - `tracing/...`: a call through the gRPC route without `--tracing`, with it but not
//!   sampled, and sampled; the sampling decision alone (see `spans.rs`).

use criterion::{criterion_group, criterion_main};

mod fixture;
mod service;
mod spans;
mod store;

criterion_group!(
    benches,
    store::decide_one,
    store::threads,
    store::flood,
    store::check_many,
    store::charges,
    store::holds,
    store::limits,
    service::three_descriptors,
    service::per_descriptor,
    service::limits,
    service::threads,
    spans::tracing
);
criterion_main!(benches);
