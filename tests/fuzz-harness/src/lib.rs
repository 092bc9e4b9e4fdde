//! The bodies of tandem's fuzz targets, one module per input tandemd or the
//! shim takes from a peer it does not control. `fuzz/` (cargo fuzz, nightly)
//! wraps each in a libFuzzer target; `tests/replay.rs` runs every committed
//! seed and every crash input that was fixed through the same function on
//! the stable compiler, in `cargo test`.
//!
//! Each body returns normally on any input the product must survive and
//! panics (a crash to libFuzzer, a failed test here) when the product
//! panics, or when an oracle that holds for every input fails (a decoded
//! message that does not encode back to itself, an honest ring that loses a
//! record).
#![deny(unsafe_op_in_unsafe_fn)]

pub mod config;
pub mod drain;
pub mod input;
pub mod ring;
pub mod stats_http;
pub mod tandemd;
pub mod wire;

/// A target's body: one input.
pub type Target = fn(&[u8]);

/// Every target, by the name `fuzz/` and `scripts/fuzz` use.
pub const TARGETS: &[(&str, Target)] = &[
    ("wire", wire::run),
    ("ring", ring::run),
    ("drain", drain::run),
    ("stats_http", stats_http::run),
    ("config", config::run),
];
