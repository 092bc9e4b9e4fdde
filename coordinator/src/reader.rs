//! The ring reader: one thread drains every client's ring (feeding the
//! scheduler and applying its gate changes), beats heartbeats and updates
//! rates. Adaptive polling: about every millisecond while records flow,
//! backing off to every 10 ms when idle (never a busy core); sooner when the
//! scheduler asks for a tick, and [`REACT_PERIOD`] after a gate was opened,
//! because its job launches at once and the gate must close again before it
//! has queued more than its budget.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::shared::Shared;

/// Poll period while records flow.
pub const BUSY_PERIOD: Duration = Duration::from_millis(1);
/// Longest poll period when idle.
pub const IDLE_PERIOD: Duration = Duration::from_millis(10);
/// Poll period right after a pass that opened a gate.
pub const REACT_PERIOD: Duration = Duration::from_micros(250);

/// Next sleep after a pass that consumed `records` (pure, for tests).
#[must_use]
pub fn next_period(prev: Duration, records: usize) -> Duration {
    if records > 0 {
        BUSY_PERIOD
    } else {
        (prev * 2).clamp(BUSY_PERIOD, IDLE_PERIOD)
    }
}

/// [`next_period`] after a pass that also opened `gates_opened` gates.
#[must_use]
pub fn next_period_gated(prev: Duration, records: usize, gates_opened: usize) -> Duration {
    if gates_opened > 0 {
        REACT_PERIOD
    } else {
        next_period(prev, records)
    }
}

/// Shortest sleep before a scheduler tick (no busy loop even if a tick is due
/// at once, every pass).
pub const MIN_TICK_SLEEP: Duration = Duration::from_micros(50);

/// How long to sleep: the adaptive `period`, shortened to reach the
/// scheduler's next tick at `next_tick_ns` (same clock as `now_ns`), but never
/// below [`MIN_TICK_SLEEP`] (pure, for tests).
#[must_use]
pub fn sleep_for(period: Duration, now_ns: u64, next_tick_ns: Option<u64>) -> Duration {
    match next_tick_ns {
        Some(t) => period
            .min(Duration::from_nanos(t.saturating_sub(now_ns)))
            .max(MIN_TICK_SLEEP),
        None => period,
    }
}

/// The thread body; returns when `shared.stop` is set.
pub fn run(shared: Arc<Shared>) {
    let mut period = IDLE_PERIOD;
    while !shared.stop.load(Ordering::Acquire) {
        let p = shared.registry().poll(Instant::now());
        period = next_period_gated(period, p.records, p.gates_opened);
        std::thread::sleep(sleep_for(
            period,
            tandem_proto::monotonic_ns(),
            p.next_tick_ns,
        ));
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
        // An opened gate: look again soon, then back to the usual rhythm.
        assert_eq!(next_period_gated(IDLE_PERIOD, 0, 1), REACT_PERIOD);
        assert_eq!(next_period_gated(REACT_PERIOD, 3, 0), BUSY_PERIOD);
        assert_eq!(next_period_gated(REACT_PERIOD, 0, 0), BUSY_PERIOD);
    }

    #[test]
    fn sleeps_until_the_next_tick_but_never_spins() {
        assert_eq!(sleep_for(IDLE_PERIOD, 1_000, None), IDLE_PERIOD);
        assert_eq!(
            sleep_for(IDLE_PERIOD, 1_000, Some(1_000 + 300_000)),
            Duration::from_micros(300)
        );
        assert_eq!(sleep_for(BUSY_PERIOD, 0, Some(u64::MAX)), BUSY_PERIOD);
        assert_eq!(sleep_for(BUSY_PERIOD, 5_000, Some(10)), MIN_TICK_SLEEP);
    }
}
