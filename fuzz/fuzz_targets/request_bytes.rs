//! Arbitrary bytes as a `ShouldRateLimit` message, answered as sent and as prost re-encodes
//! it: the in-place reader and prost must agree.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| meshlimit_fuzz::request_bytes(data));
