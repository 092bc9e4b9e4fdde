//! libFuzzer target `stats_http`: see `tandem_fuzz_harness::stats_http` for the input's
//! shape and the oracle.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tandem_fuzz_harness::stats_http::run(data));
