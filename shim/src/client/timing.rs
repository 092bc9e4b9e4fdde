//! Timed launches (`super::marks`): which mark intervals time a launch,
//! and what is taken off a timing.
//!
//! Every [`timing_every`]-th mark interval (`TANDEM_MARK_TIMING`, default 1:
//! every one; 0: none) the mark brackets the next kernel launch with two
//! timing events (`super::marks`' docs say how).
//!
//! The two events bracket the launch call too. On an idle stream (a
//! launch-bound job's usual state) the start event completes as it is
//! recorded, but the kernel starts only when the launch call reaches the
//! driver, so the elapsed time also holds the host time between the two
//! submissions (the launch path, the driver call): tens of percent of a
//! 10 us kernel. So the start event's record is preceded by a
//! `cuStreamQuery` of the stream and followed by a clock read (t0), and
//! after the launch (t1: a clock read right after the launch call
//! returned, before the shim's own capture query and record) a `cuEventQuery` of the start event settles how
//! much to take off ([`lead_ns`]): not complete, the kernel queued right
//! behind it (nothing); complete on a stream that was idle, t1 - t0;
//! complete on one that was busy, the stream drained between the query and
//! the launch at a time unknown here, and that mark is reported untimed (a
//! plain MARK_DONE), never with a biased figure. The watcher subtracts the
//! lead, saturating; a result of 0 is reported as 1 ns. What is left is the
//! difference between the tails of the two calls (the record's after its
//! event completed, the launch's after its kernel started).

use core::sync::atomic::{AtomicU64, Ordering};

/// Mark intervals over so far (counts which are timed).
static INTERVALS: AtomicU64 = AtomicU64::new(0);
/// `TANDEM_MARK_TIMING` once read (`u64::MAX`: not yet).
static TIMING_EVERY: AtomicU64 = AtomicU64::new(u64::MAX);

/// A slot's `lead` when the start event's completion time is unknown: the
/// mark is reported untimed.
pub(super) const UNKNOWN_LEAD: u64 = u64::MAX;

/// Every how many mark intervals one launch is timed (`TANDEM_MARK_TIMING`,
/// 0 to 1,000,000, default 1; 0: never). Read from the environment once,
/// by [`read_env`] (when the watcher starts), never on a launch.
pub fn timing_every() -> u64 {
    match TIMING_EVERY.load(Ordering::Relaxed) {
        u64::MAX => 1,
        n => n,
    }
}

/// Reads `TANDEM_MARK_TIMING` (cold: before the watcher starts).
pub(super) fn read_env() {
    let n = super::config::env_u64(c"TANDEM_MARK_TIMING", 1, 0, 1_000_000);
    TIMING_EVERY.store(n, Ordering::Relaxed);
}

/// The host time to take off a bracketed launch's elapsed time (its start
/// event's completion to the kernel's start), or `None` when it is unknown.
/// `idle`: the stream was idle just before the start event was recorded, at
/// `t0` (right after the record returned); `t1`: right after the launch
/// returned; `start_done`: whether the start event had completed then
/// (asked after the launch).
pub(super) fn lead_ns(idle: bool, t0: u64, t1: u64, start_done: Option<bool>) -> Option<u64> {
    match start_done {
        // Not complete after the launch: the kernel queued right behind it.
        Some(false) => Some(0),
        // Complete, on a stream that was idle: it completed when recorded,
        // and the kernel started when the launch reached the driver.
        Some(true) if idle => Some(t1.saturating_sub(t0)),
        // Complete, on a stream that was busy: it drained between the query
        // and the launch, at a time not known here (or the query failed).
        _ => None,
    }
}

/// A bracketed launch's GPU time: the events' `elapsed` ns less the `lead`
/// before the kernel started, saturating; 0 is reported as 1 ns (a timed
/// MARK_DONE always carries a duration).
pub(super) fn kernel_ns(elapsed: u64, lead: u64) -> u64 {
    elapsed.saturating_sub(lead).max(1)
}

/// Whether this mark interval's mark times a launch (cold: once per interval).
#[cold]
pub(super) fn timing_due() -> bool {
    let every = timing_every();
    every != 0
        && INTERVALS
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(every)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_is_the_host_time_only_where_the_start_event_completed_on_an_idle_stream() {
        // Not complete after the launch: the kernel queued right behind it.
        assert_eq!(lead_ns(true, 1_000, 3_500, Some(false)), Some(0));
        assert_eq!(lead_ns(false, 1_000, 3_500, Some(false)), Some(0));
        // Complete on an idle stream: it completed at its record.
        assert_eq!(lead_ns(true, 1_000, 3_500, Some(true)), Some(2_500));
        assert_eq!(lead_ns(true, 3_500, 1_000, Some(true)), Some(0));
        // Complete on a busy stream (drained meanwhile), or not known: none.
        assert_eq!(lead_ns(false, 1_000, 3_500, Some(true)), None);
        assert_eq!(lead_ns(true, 1_000, 3_500, None), None);
    }

    #[test]
    fn a_timing_loses_its_lead_saturating_at_one_ns() {
        assert_eq!(kernel_ns(12_000, 2_500), 9_500);
        assert_eq!(kernel_ns(12_000, 0), 12_000);
        assert_eq!(kernel_ns(2_000, 2_500), 1);
        assert_eq!(kernel_ns(2_500, 2_500), 1);
    }
}
