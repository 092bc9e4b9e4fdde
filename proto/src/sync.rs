//! The atomics and the futex that the ring ([`crate::ring`]), the control
//! block ([`crate::control`]) and the GPU board ([`crate::board`]) are
//! written against: std's atomics and the `futex(2)` system call (through
//! the OS layer, `tandem_os::futex`).
//!
//! They are named here, and only here, so that the model checker can put
//! its own in their place: `tests/models` compiles `ring/`, `control.rs`
//! and `board.rs` unchanged against loom's atomics and a loom-modelled futex
//! (a `sync` module of the same shape) and checks the protocols over every
//! interleaving its bound allows. Keep this module's surface small: whatever
//! it exports, the stand-in must export too.

pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// `futex(FUTEX_WAIT)` on `word` while it holds `expected`, for at most a
/// timeout, and `futex(FUTEX_WAKE)` of up to n waiters: the OS layer's
/// (`tandem_os::futex`), whose signatures the model's stand-in repeats.
pub(crate) use tandem_os::futex::{wait as futex_wait, wake as futex_wake};
