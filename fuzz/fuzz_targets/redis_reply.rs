//! Arbitrary bytes as the Redis decision script's reply, through the store's parser.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| meshlimit_fuzz::redis_reply(data));
