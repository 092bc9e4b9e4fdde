//! The ring reader: one thread drains every client's ring, beats heartbeats
//! and updates rates. Adaptive polling: about every millisecond while records
//! flow, backing off to every 10 ms when idle (never a busy core).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::daemon::Shared;

/// Poll period while records flow.
pub const BUSY_PERIOD: Duration = Duration::from_millis(1);
/// Longest poll period when idle.
pub const IDLE_PERIOD: Duration = Duration::from_millis(10);

/// Next sleep after a pass that consumed `records` (pure, for tests).
#[must_use]
pub fn next_period(prev: Duration, records: usize) -> Duration {
    if records > 0 {
        BUSY_PERIOD
    } else {
        (prev * 2).clamp(BUSY_PERIOD, IDLE_PERIOD)
    }
}

/// The thread body; returns when `shared.stop` is set.
pub fn run(shared: Arc<Shared>) {
    let mut period = IDLE_PERIOD;
    while !shared.stop.load(Ordering::Acquire) {
        let n = shared.registry().poll(Instant::now());
        period = next_period(period, n);
        std::thread::sleep(period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_when_idle_and_speeds_up_on_records() {
        let mut p = BUSY_PERIOD;
        for _ in 0..10 {
            p = next_period(p, 0);
        }
        assert_eq!(p, IDLE_PERIOD);
        assert_eq!(next_period(p, 5), BUSY_PERIOD);
    }
}
