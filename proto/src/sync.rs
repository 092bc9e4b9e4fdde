//! The atomics and the futex that the ring ([`crate::ring`]) and the control
//! block ([`crate::control`]) are written against: std's atomics and the
//! `futex(2)` system call.
//!
//! They are named here, and only here, so that the model checker can put
//! its own in their place: `tests/models` compiles `ring.rs` and
//! `control.rs` unchanged against loom's atomics and a loom-modelled futex
//! (a `sync` module of the same shape) and checks the protocols over every
//! interleaving its bound allows. Keep this module's surface small: whatever
//! it exports, the stand-in must export too.

pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// `futex(FUTEX_WAIT)` on `word` while it holds `expected`, for at most
/// `timeout`: the system call's return value (0, or -1 with `errno` set).
pub(crate) fn futex_wait(
    word: &AtomicU32,
    expected: u32,
    timeout: &libc::timespec,
) -> libc::c_long {
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call and
    // `timeout` a valid timespec; FUTEX_WAIT reads both and touches nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            timeout as *const libc::timespec,
            core::ptr::null::<u32>(),
            0u32,
        )
    }
}

/// `futex(FUTEX_WAKE)` of up to `waiters` threads waiting on `word`: the
/// system call's return value (how many it woke, or -1 with `errno` set).
pub(crate) fn futex_wake(word: &AtomicU32, waiters: i32) -> libc::c_long {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE only uses its address.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, waiters) }
}
