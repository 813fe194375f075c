//! The conformance table (tests/conformance/cases.rs) on the embedded store.

mod support;

#[path = "conformance/cases.rs"]
mod cases;

use meshlimit::clock::ManualClock;
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;

/// The service on the embedded store; nothing to keep alive beside it.
fn service(files: &[(&str, &str)], algorithm: Algorithm) -> (Service, ManualClock, ()) {
    let (service, clock) = support::service(files, algorithm);
    (service, clock, ())
}
