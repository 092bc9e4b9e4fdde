//! Stream time: the monotonic clock from the moment the fake first looked at it, sleeping
//! until a time, and where a piece of work lands on a stream.

use std::sync::OnceLock;
use std::time::Duration;

/// `CLOCK_MONOTONIC` in ns (system-wide: comparable between processes).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` (ns) at the moment the fake driver first looked at the clock: stream time
/// 0. (`Instant` is `CLOCK_MONOTONIC` on Linux, so this is the same clock as before.)
pub fn base_ns() -> u64 {
    static BASE: OnceLock<u64> = OnceLock::new();
    *BASE.get_or_init(monotonic_ns)
}

/// Nanoseconds on the monotonic clock since the fake driver first looked at it.
pub fn now_ns() -> u64 {
    let base = base_ns();
    monotonic_ns().saturating_sub(base)
}

/// Sleeps (without holding the state lock) until the monotonic clock reaches `t`.
pub fn wait_until(t: u64) {
    loop {
        let now = now_ns();
        if now >= t {
            return;
        }
        std::thread::sleep(Duration::from_nanos(t - now));
    }
}

/// Where a piece of work with `duration` runs: `(start, end)`. Pure stream-time arithmetic.
pub fn schedule(now: u64, ready_at: u64, implicit_wait: u64, duration: u64) -> (u64, u64) {
    let start = now.max(ready_at).max(implicit_wait);
    (start, start.saturating_add(duration))
}
