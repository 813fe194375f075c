//! `cargo bench --bench allocations`: heap allocations per request in the service layer,
//! counted by a wrapping global allocator (a binary of its own, so that the counting does
//! not weigh on the timed benches).
//!
//! Between the decoded request and the built response, a request may allocate only the
//! response's own memory: the statuses' vector (and a name per named rule, none here).
//! Plans, bucket keys and store checks must reuse buffers or stay on the stack. The same
//! holds through the gRPC method from the message's bytes (`Rls::should_rate_limit_traced`), which
//! reads the request in place. Exits non-zero when a request allocates more, so that a
//! regression shows.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

#[allow(dead_code)] // its thread runner is for benches/main.rs
mod fixture;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use fixture::{ready, service, three_descriptor_requests};
use meshlimit::grpc::Rls;
use meshlimit::request::{Descriptor, Request};

/// Allocations the response itself needs: its statuses' vector.
const RESPONSE_ALLOCATIONS: u64 = 1;

/// The system allocator, counting this thread's allocations while `COUNTING` is set.
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the allocator also runs while thread-locals are being torn down.
    let _ = COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; counting touches
// only `const`-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Allocations made on this thread by `f`.
fn allocations(f: impl FnOnce()) -> u64 {
    ALLOCATIONS.with(|n| n.set(0));
    COUNTING.with(|on| on.set(true));
    f();
    COUNTING.with(|on| on.set(false));
    ALLOCATIONS.with(Cell::get)
}

fn main() {
    // `cargo bench` passes criterion's flags (`--bench`); there is nothing to parse.
    let requests = three_descriptor_requests();
    let mut worst = 0;
    for (name, with_metrics) in [("with metrics", true), ("without metrics", false)] {
        let service = service(with_metrics);
        // The first pass creates the buckets and grows the reused buffers.
        for request in &requests {
            ready(service.should_rate_limit(Request::new("bench", request, 1))).unwrap();
        }
        let mut total = 0;
        for request in &requests {
            let mut answer = None;
            total += allocations(|| {
                answer = Some(
                    ready(service.should_rate_limit(Request::new("bench", request, 1))).unwrap(),
                );
            });
            // Dropped outside the count: freeing is not what is measured.
            drop(answer);
        }
        let per_request = total as f64 / requests.len() as f64;
        println!(
            "service/three_descriptors {name}: {per_request:.2} heap allocations per request \
             (the response's own: {RESPONSE_ALLOCATIONS})"
        );
        worst = worst.max(total.div_ceil(requests.len() as u64));
    }
    // The gRPC method, from each request's protobuf bytes.
    let rls = Rls::new(service(true));
    let messages: Vec<Bytes> = requests.iter().map(|r| message(r)).collect();
    for message in &messages {
        ready(rls.should_rate_limit_traced(message.clone(), None, None)).unwrap();
    }
    let mut total = 0;
    for message in &messages {
        // Cloned outside the count: the bytes are tonic's, received before the method runs.
        let message = message.clone();
        let mut answer = None;
        total += allocations(|| {
            answer = Some(ready(rls.should_rate_limit_traced(message, None, None)).unwrap())
        });
        drop(answer);
    }
    println!(
        "grpc ShouldRateLimit from the message's bytes: {:.2} heap allocations per request \
         (the response's own: {RESPONSE_ALLOCATIONS})",
        total as f64 / messages.len() as f64
    );
    worst = worst.max(total.div_ceil(messages.len() as u64));
    if worst > RESPONSE_ALLOCATIONS {
        eprintln!("a request allocates beyond its response");
        std::process::exit(1);
    }
}

/// The `RateLimitRequest` of domain `bench` and `descriptors`, encoded.
fn message(descriptors: &[Descriptor]) -> Bytes {
    let request = RateLimitRequest {
        domain: "bench".into(),
        descriptors: descriptors
            .iter()
            .map(|d| RateLimitDescriptor {
                entries: d
                    .entries
                    .iter()
                    .map(|(key, value)| Entry {
                        key: key.clone(),
                        value: value.clone(),
                    })
                    .collect(),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 1,
    };
    // A clone of a `Bytes` made from a vector allocates once, to share it; sharing it
    // here keeps that out of the count.
    let message = Bytes::from(prost::Message::encode_to_vec(&request));
    drop(message.clone());
    message
}
