//! proto's ring, control block and GPU board, compiled from their own source
//! files (`proto/src/ring/`, `proto/src/control.rs`, `proto/src/record.rs`,
//! `proto/src/board.rs`) against [`sync`]: loom's atomics and a
//! loom-modelled futex in place of std's atomics and `futex(2)`. The models in `tests/` run the product's
//! protocol code, not a copy of it, under loom's exhaustive (bounded)
//! exploration of interleavings and of the values relaxed and acquire loads
//! may return.
//!
//! Only the files' `crate::sync` imports are swapped; every other
//! `crate::` path they use (errors, the record, the mapping) is the real
//! crate's or the real file's.
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(dead_code, unreachable_pub, missing_docs)]

pub use tandem_proto::{error, estimates, magic, shm};

#[path = "../../../proto/src/board.rs"]
pub mod board;
#[path = "../../../proto/src/control.rs"]
pub mod control;
#[path = "../../../proto/src/record.rs"]
pub mod record;
#[path = "../../../proto/src/ring/mod.rs"]
pub mod ring;
pub mod sync;
