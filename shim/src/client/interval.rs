//! The mark interval (`super::marks`): when one ends, and which launch the
//! interval's timing goes to.
//!
//! An interval ends a drawn time after the launch that found the last one
//! over: from `[0, 2 x mark_every_ns)`, `mark_every_ns` on average, by a
//! hash of the clock ([`next_end`]), not one fixed interval after it. A
//! job's launches after an idle spell (a request's, a step's) then meet the
//! intervals' ends at a phase that varies from one request to the next, so
//! the launches timed after them are not the same few positions of every
//! request. A grid of the clock (the next multiple of `mark_every_ns`) did
//! that only for a job whose period drifts against the grid: the test
//! host's requests (four 100 us kernels, a sync, 1.5 ms idle) locked to a
//! 1 ms grid and timed positions 1 (or 1 and 3) of every request in 4 runs
//! of 20.
//!
//! The launch that finds an interval over after it launched cannot be
//! timed itself (its start event had to go before it), so its timing goes
//! to the next launch. After an idle spell, that finder is a request's (a
//! step's) first launch, whose timing would then always go to its second,
//! and the first would be timed only when the interval ended in the few
//! hundred microseconds between the last launch and the sync's return (in a
//! loaded CI run, no request of 34). So a synchronising call that returns
//! arms [`PRECHECK`] ([`sync_returned`]): the next one to four launches
//! (a count drawn by a hash of the clock) each ask before they launch
//! whether the interval is over ([`at_launch`]), and each that finds it
//! over is timed itself. Which position is the first after the
//! pre-checks varies from request to request with that count, so no
//! position is left to the after-launch check alone (which times the one
//! after it, and the pre-checked launch before it almost never finds).
//! Cost: those one to four launches after each sync take the cold path
//! and read the clock; every other launch is as before.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use tandem_proto::monotonic_ns;

use super::timing::{timing_due, timing_every};

/// What the next kernel launch (whichever thread makes it) does about
/// timing: 0, nothing (the launch path's one Relaxed load); [`TIME_IT`],
/// it is timed (a mark interval is over and timing is due); [`PRECHECK`]
/// plus n, it asks before it launches whether the interval is over, and so
/// do the n - 1 launches after it; each that finds it over is timed
/// itself ([`at_launch`]).
pub(super) static TIME_NEXT: AtomicU32 = AtomicU32::new(0);

/// [`TIME_NEXT`]: the next launch is timed.
pub(super) const TIME_IT: u32 = 1;

/// [`TIME_NEXT`]'s flag for pre-checks (the count of launches left is in
/// the low bits).
pub(super) const PRECHECK: u32 = 1 << 16;

/// At most this many launches after a sync are pre-checked (drawn from 1
/// to this).
const PRECHECK_MAX: u64 = 4;

/// What a launch that found [`TIME_NEXT`] set does ([`at_launch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AtLaunch {
    /// Nothing: not this launch (another thread took it, or the interval
    /// is not over yet).
    Nothing,
    /// This launch is timed.
    Time,
    /// This launch found the interval over but timing is not due: its
    /// interval's mark is placed plainly after it.
    Plain,
}

/// Before a kernel launch that found [`TIME_NEXT`] set, with marks every
/// `every` ns (non-zero): what it does. Takes what it acts on, so one
/// thread acts on each.
#[cold]
pub(super) fn at_launch(every: u64) -> AtLaunch {
    let v = TIME_NEXT.load(Ordering::Relaxed);
    if v & PRECHECK == 0 {
        return match TIME_NEXT.compare_exchange(v, 0, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(TIME_IT) => AtLaunch::Time,
            _ => AtLaunch::Nothing,
        };
    }
    let left = v & !PRECHECK;
    let after = if left > 1 { v - 1 } else { 0 };
    if TIME_NEXT
        .compare_exchange(v, after, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return AtLaunch::Nothing;
    }
    // Found or not, the launches left go on asking: the interval this one
    // takes ends a drawn time after it, and the next launch to find that
    // over is timed itself too (were they to stop here, the second launch
    // after a sync would almost never be timed).
    if interval_over(monotonic_ns(), every).is_none() {
        return AtLaunch::Nothing;
    }
    if timing_due() {
        AtLaunch::Time
    } else {
        AtLaunch::Plain
    }
}

/// Earliest time (monotonic ns) of the next mark.
pub(super) static NEXT_NS: AtomicU64 = AtomicU64::new(0);

/// Whether the mark interval is over at `now`, taken by this thread (one
/// thread per interval places the mark): the end it had. The next one ends
/// at [`next_end`].
#[inline]
pub(super) fn interval_over(now: u64, every: u64) -> Option<u64> {
    let next = NEXT_NS.load(Ordering::Relaxed);
    if now < next {
        return None;
    }
    NEXT_NS
        .compare_exchange(
            next,
            next_end(now, every),
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .ok()
}

/// While the GPU is behind the host, intervals are this many times
/// shorter ([`gpu_behind`]).
pub(super) const BEHIND_SPLIT: u64 = 8;

/// How long (in intervals of the job's own length) from the first timed
/// launch that found the GPU behind the shorter intervals last, until the GPU is
/// seen to have caught up ([`gpu_caught_up`]): at most
/// `BEHIND_SPLIT * BEHIND_INTERVALS` extra timings per backlog.
pub(super) const BEHIND_INTERVALS: u64 = 32;

/// Marks in flight beyond which the interval keeps its own length: half
/// the slots stay for the job's own marks.
pub(super) const BEHIND_MAX_OUTSTANDING: u32 = (super::slots::SLOTS / 2) as u32;

/// When the current backlog was first seen (monotonic ns; 0: none).
static BEHIND_SINCE: AtomicU64 = AtomicU64::new(0);

/// A timed launch found its start event not yet complete after it was
/// launched at `now` (`outstanding`: marks in flight): the GPU is behind
/// the host (the kernel queued behind earlier work), so more timings cost
/// host time that the GPU's backlog hides, and each is exact (nothing to
/// take off). For the first [`BEHIND_INTERVALS`] intervals of the backlog
/// the interval ends [`BEHIND_SPLIT`] times sooner on average (at a drawn
/// time, [`jittered`]): a job that
/// launches a step's or a request's kernels in one burst far ahead of the
/// GPU gets the burst timed at many launches, not at one per `every` of
/// host time (a Whisper step's 1,948 launches come in about 15 ms: at the
/// scheduler's 500 us that was about 30 timings a step, and 4 steps never
/// timed its 35 ms kernels). A job whose backlog never drains goes back to
/// its own interval after that.
pub(super) fn gpu_behind(now: u64, every: u64, outstanding: u32) {
    if every == 0 || outstanding >= BEHIND_MAX_OUTSTANDING {
        return;
    }
    let since = match BEHIND_SINCE.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => now,
        Err(t) => t,
    };
    if now.saturating_sub(since) >= BEHIND_INTERVALS.saturating_mul(every) {
        return;
    }
    let fine = (every / BEHIND_SPLIT).max(1);
    NEXT_NS.fetch_min(now.saturating_add(jittered(now, fine)), Ordering::Relaxed);
}

/// A wait of `fine` ns on average, drawn from `[fine / 2, 3 * fine / 2)` by
/// a hash of `now`: a replayed or very regular job's bursts would otherwise
/// meet a fixed grid at the same launches every step (the grid's phase
/// moves by the step's length modulo the interval, a few us a step), and
/// the launches between them would never be timed.
fn jittered(now: u64, fine: u64) -> u64 {
    fine / 2 + mix(now) % fine.max(1)
}

/// splitmix64's finaliser: the clock's low bits spread over the word.
fn mix(now: u64) -> u64 {
    let mut z = now.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The GPU caught up with the host (a timed launch found its stream idle,
/// or a synchronising call returned): the next backlog gets its shorter
/// intervals again.
pub(super) fn gpu_caught_up() {
    if BEHIND_SINCE.load(Ordering::Relaxed) != 0 {
        BEHIND_SINCE.store(0, Ordering::Relaxed);
    }
}

/// When the interval that starts at `now` ends: `now` plus a wait drawn
/// from `[1, 2 x every)` by a hash of `now` (`every` on average).
fn next_end(now: u64, every: u64) -> u64 {
    let span = every.saturating_mul(2).max(2);
    now.saturating_add(1 + mix(now) % (span - 1))
}

/// After a synchronising call returned, with marks every `every` ns (0:
/// off): the next one to four launches are pre-checked ([`PRECHECK`]),
/// unless a launch is already to be timed or pre-checked.
#[cold]
pub(super) fn sync_returned(every: u64) {
    if every == 0 || timing_every() == 0 {
        return;
    }
    gpu_caught_up();
    let n = 1 + (mix(monotonic_ns()) % PRECHECK_MAX) as u32;
    let _ = TIME_NEXT.compare_exchange(0, PRECHECK | n, Ordering::Relaxed, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jittered_wait_averages_its_interval_and_varies() {
        let fine = 62_500;
        let waits: Vec<u64> = (0..10_000u64)
            .map(|i| jittered(1_000_000 + i * 137, fine))
            .collect();
        assert!(waits.iter().all(|&w| (fine / 2..fine * 3 / 2).contains(&w)));
        let mean = waits.iter().sum::<u64>() as f64 / waits.len() as f64;
        assert!((mean / fine as f64 - 1.0).abs() < 0.02, "mean {mean}");
        let mut distinct = waits.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 9_000, "{} distinct", distinct.len());
    }

    /// A strictly periodic job (a 2 ms request loop, launches at the same
    /// phase of a 1 ms grid) still meets the intervals' ends anywhere in its
    /// cycle: the ends it draws fall in the first 0.4 ms after a request's
    /// first launch (where its sync finds them over) about 0.4 / 2 of the
    /// time, and on average one interval after the launch.
    #[test]
    fn intervals_end_a_drawn_time_after_the_launch_not_on_a_fixed_phase() {
        let every = 1_000_000;
        let waits: Vec<u64> = (0..10_000u64)
            .map(|i| {
                let now = 5_000_000_000 + i * 2_000_000 + i % 7;
                next_end(now, every) - now
            })
            .collect();
        assert!(waits.iter().all(|&w| (1..2 * every).contains(&w)));
        let mean = waits.iter().sum::<u64>() as f64 / waits.len() as f64;
        assert!((mean / every as f64 - 1.0).abs() < 0.03, "mean {mean}");
        let early = waits.iter().filter(|&&w| w < 400_000).count() as f64 / 1e4;
        assert!((early - 0.2).abs() < 0.03, "{early} within 0.4 ms");
        let now = 7_777_777;
        assert_eq!(next_end(now, every), next_end(now, every));
        assert_eq!(next_end(u64::MAX - 1, every), u64::MAX);
        assert!(next_end(now, 0) > now);
    }

    /// After a sync the next one to four launches ask before they launch;
    /// each that finds the interval over is timed itself. This test
    /// alone in the crate touches the interval's statics.
    #[test]
    fn launches_after_a_sync_are_timed_themselves_when_they_find_the_interval_over() {
        let every = 1_000_000;
        let load = || TIME_NEXT.load(Ordering::Relaxed);
        // Not over: each pre-checked launch does nothing, and after one to
        // four of them (a drawn count) nothing is left to check.
        let mut counts = Vec::new();
        for _ in 0..64 {
            TIME_NEXT.store(0, Ordering::Relaxed);
            NEXT_NS.store(u64::MAX, Ordering::Relaxed);
            sync_returned(every);
            assert_ne!(load() & PRECHECK, 0);
            let mut checks = 0;
            while load() != 0 {
                assert_eq!(at_launch(every), AtLaunch::Nothing);
                checks += 1;
                assert!(checks <= PRECHECK_MAX, "{checks} pre-checks");
            }
            counts.push(checks);
        }
        counts.sort_unstable();
        counts.dedup();
        assert!(counts.len() >= 3, "pre-check counts {counts:?}");
        assert_eq!(counts[0], 1);
        // Over at the sync: the first launch is timed and draws the next
        // end; the launches left still ask, and the one that finds that end
        // over is timed too.
        TIME_NEXT.store(PRECHECK | 3, Ordering::Relaxed);
        NEXT_NS.store(0, Ordering::Relaxed);
        let before = monotonic_ns();
        assert_eq!(at_launch(every), AtLaunch::Time);
        assert!(NEXT_NS.load(Ordering::Relaxed) > before);
        assert_eq!(load(), PRECHECK | 2);
        assert_eq!(at_launch(every), AtLaunch::Nothing);
        assert_eq!(load(), PRECHECK | 1);
        NEXT_NS.store(0, Ordering::Relaxed);
        assert_eq!(at_launch(every), AtLaunch::Time);
        assert_eq!(load(), 0);
        assert_eq!(at_launch(every), AtLaunch::Nothing);
        // A launch already to be timed stays so across a sync.
        TIME_NEXT.store(TIME_IT, Ordering::Relaxed);
        NEXT_NS.store(u64::MAX, Ordering::Relaxed);
        sync_returned(every);
        assert_eq!(load(), TIME_IT);
        assert_eq!(at_launch(every), AtLaunch::Time);
        assert_eq!(load(), 0);
        // Marks off: a sync arms nothing.
        sync_returned(0);
        assert_eq!(load(), 0);
    }
}
