//! Bounded, cross-process futex waits and wakes on a word in shared memory.
//!
//! The shared (non-`PRIVATE`) operations, so a waiter in one process is
//! woken by a store and wake in another, on a `MAP_SHARED` mapping.

use core::sync::atomic::AtomicU32;
use std::time::Duration;

use rustix::io::Errno;
use rustix::thread::futex::{self, Flags};

use crate::error::{Error, Result};

/// How a [`wait`] that did not fail ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Woken by a wake (or spuriously): re-check the word.
    Woken,
    /// The word did not hold `expected` when the call started (`EAGAIN`).
    ValueChanged,
    /// The timeout expired (`ETIMEDOUT`).
    TimedOut,
    /// A signal interrupted the wait (`EINTR`).
    Interrupted,
}

/// `FUTEX_WAIT` on `word` while it holds `expected`, for at most `timeout`.
/// The timeout is mandatory: nothing in tandem waits without a bound.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Result<Wait> {
    let ts = rustix::event::Timespec {
        tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    };
    match futex::wait(word, Flags::empty(), expected, Some(&ts)) {
        Ok(()) => Ok(Wait::Woken),
        Err(Errno::AGAIN) => Ok(Wait::ValueChanged),
        Err(Errno::TIMEDOUT) => Ok(Wait::TimedOut),
        Err(Errno::INTR) => Ok(Wait::Interrupted),
        Err(e) => Err(Error::new("futex(FUTEX_WAIT)", e.raw_os_error())),
    }
}

/// `FUTEX_WAKE` up to `waiters` threads (any process) waiting on `word`.
/// Returns how many were woken.
pub fn wake(word: &AtomicU32, waiters: u32) -> Result<u32> {
    let n = waiters.min(i32::MAX as u32);
    futex::wake(word, Flags::empty(), n)
        .map(|woken| woken as u32)
        .map_err(Error::at("futex(FUTEX_WAKE)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn waits_are_bounded_and_a_store_and_wake_ends_one() {
        let w = Arc::new(AtomicU32::new(0));
        assert_eq!(
            wait(&w, 1, Duration::from_millis(1)).unwrap(),
            Wait::ValueChanged
        );
        assert_eq!(
            wait(&w, 0, Duration::from_millis(1)).unwrap(),
            Wait::TimedOut
        );
        assert_eq!(wake(&w, 1).unwrap(), 0, "nobody waits");
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            while w2.load(Ordering::Acquire) == 0 {
                let _ = wait(&w2, 0, Duration::from_secs(5)).unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        w.store(1, Ordering::Release);
        wake(&w, u32::MAX).unwrap();
        t.join().unwrap();
    }
}
