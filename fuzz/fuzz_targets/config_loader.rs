//! Arbitrary bytes as one YAML domain file, through the loading and validation that
//! `meshlimit validate` and reloads use.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| meshlimit_fuzz::config_loader(data));
