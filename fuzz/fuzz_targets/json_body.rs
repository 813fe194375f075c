//! Arbitrary bytes as a `/json` body, through the handler's parsing and decision.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| meshlimit_fuzz::json_body(data));
