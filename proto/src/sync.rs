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
//!
//! The waits of a contended [`SyncProducer`](crate::ring::SyncProducer) push
//! (a spin, giving up the CPU, a short sleep) are here too: under loom each
//! is a yield to the other threads.

pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// `futex(FUTEX_WAIT)` on `word` while it holds `expected`, for at most a
/// timeout, and `futex(FUTEX_WAKE)` of up to n waiters: the OS layer's
/// (`tandem_os::futex`), whose signatures the model's stand-in repeats.
pub(crate) use tandem_os::futex::{wait as futex_wait, wake as futex_wake};

/// One iteration of a spin loop (`core::hint::spin_loop`).
#[inline(always)]
pub(crate) fn spin_loop() {
    core::hint::spin_loop();
}

/// Gives up the CPU to another runnable thread (`sched_yield(2)`).
pub(crate) fn yield_now() {
    std::thread::yield_now();
}

/// Sleeps for about `d` (`nanosleep(2)`; at least `d`).
pub(crate) fn nap(d: core::time::Duration) {
    std::thread::sleep(d);
}
