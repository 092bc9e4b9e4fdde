//! libFuzzer target `wire`: see `tandem_fuzz_harness::wire` for the input's
//! shape and the oracle.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tandem_fuzz_harness::wire::run(data));
