//! Bounded waits, and the deadlines the tests give them.

use std::time::{Duration, Instant};

/// Deadline for anything a healthy system does "at once" (a coordinator
/// starting, a client registering, counts settling). Generous: the tests run
/// on loaded 2-core CI machines. Not a performance bound.
pub const SETTLE: Duration = Duration::from_secs(20);

/// Deadline for a host process that was told to finish.
pub const EXIT: Duration = Duration::from_secs(60);

/// Calls `f` until it returns `Ok`, at most `timeout`; panics with `what` and
/// the last error otherwise. A bounded wait for something that must happen,
/// never a timing assertion.
#[track_caller]
pub fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut sleep = Duration::from_millis(5);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if start.elapsed() >= timeout => {
                panic!("gave up after {timeout:?} waiting for {what}: {e}")
            }
            Err(_) => {}
        }
        std::thread::sleep(sleep);
        sleep = (sleep * 2).min(Duration::from_millis(50));
    }
}
