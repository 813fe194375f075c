//! Arbitrary `RateLimitRequest`s, in sequence and with time passing between them, through
//! the gRPC handler and the service on the embedded store, with a fixed small config.
#![no_main]

libfuzzer_sys::fuzz_target!(|steps: Vec<meshlimit_fuzz::Step>| meshlimit_fuzz::requests(steps));
