//! libFuzzer target `ring`: see `tandem_fuzz_harness::ring` for the input's
//! shape and the oracle.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tandem_fuzz_harness::ring::run(data));
