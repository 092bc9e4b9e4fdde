//! Live traces (`tandemctl trace`, `GET /trace`): each client's recent
//! launches, copies, syncs, request boundaries and completion marks kept in
//! a bounded window, and turned on request into one `tandem-trace/1`
//! document: one representative request of an inference job, one step of a
//! training job.
//!
//! * this file — the window ([`Window`]: a preallocated ring of the ring
//!   records themselves, filled by the drain with one copy per record and
//!   no allocation) and `[trace]` in `tandemd.toml` ([`TraceConfig`]);
//! * `durations` — kernel durations from completion marks and syncs;
//! * `unit` — which records are one request or one step;
//! * `build` — the trace document from those.
//!
//! `GET /trace` itself is [`crate::trace_query`].
//!
//! Everything but [`Window::push`] runs on the stats thread, on a copy of
//! the window taken under the registry's lock, never on the drain path.
//!
//! **Kernel durations.** The shim reports when the GPU reached a completion
//! mark (MARK / MARK_DONE, `shim/src/client/marks.rs`) and when a sync
//! returned (SYNC_END). Each such drain point ends a *segment*: the launches
//! since the previous drain point, which all completed by then. The GPU runs
//! a stream's work in order, so a launch completes at `max(its launch time,
//! the previous completion) + its duration`: with its kernels' durations
//! scaled by `x`, a segment's end is the latest of `start + x * S(first)`
//! and `t(i) + x * S(i)` over its launches `i` (`S(i)`: the durations from
//! `i` to its end), so the `x` that puts it at its measured end is the
//! least of those lines' own solutions (idle gaps between launches are not
//! counted as kernel time). The durations, per kernel (function, grid,
//! block), are fitted over every segment in the window: each round scales
//! each segment's kernels by its `x` and takes each kernel's mean, 30
//! rounds. The shim sees a mark's completion late (it polls every 200 us,
//! and its watcher thread must be scheduled), a sync's return at once: the
//! marks give the durations' proportions, and the median `x` over the
//! segments from one sync to the next (marks ignored) their scale, when the
//! job syncs. A kernel no segment measured takes the mean of its function's
//! measured kernels, else 1 ns (the format's least), and the trace's
//! `notes` say how many were estimated so. The resolution is the marks':
//! kernels much shorter than the poll interval are told apart only where
//! the marks fall between them differently (a GPU-bound job), not one by
//! one in a launch-bound job, where each isolated marked kernel looks about
//! a poll interval long (the syncs still give the scale). But a kernel the
//! shim timed on the GPU (a MARK_DONE with `FLAG_TIMED`: the shim brackets
//! one launch per mark interval with events, more while the GPU is behind)
//! takes the median of its timings, whatever the fit says. Where a key's
//! timings disagree (two modes, `durations::agree`), several kernels share
//! it, and the fit learns that key per position in the request or step
//! (the launch's ordinal): a position timed takes its own timings' median;
//! one no timing reached starts from the key's trimmed mean and, where that
//! is the marks' resolution (200 us) or more, is solved on the marks'
//! segments with every other duration held. A kernel of its own key that
//! no timing reached, where others were, takes the median of the segments
//! in which it is the only untimed kernel (each measures it alone), where
//! the fit gave it the marks' resolution or more; with no such segment it
//! keeps the fit's. Then the syncs'
//! scale is solved for the kernels not timed with the timed ones fixed,
//! where they hold a quarter of a sync segment's kernel time or more
//! (`durations.rs`). Last, the kernels not timed are held to what the
//! syncs leave them: a stream runs its work in order, so each untimed
//! kernel gets at most the room the timed ones leave between two syncs,
//! and all of them together at most the syncs' time (a late mark once gave
//! a 147 us convolution 2.9 ms, a tenth of its step).
//!
//! tandemd asks the shim for marks only of training clients for its own
//! use (`[scheduler] mark_every_ns`); `[trace] mark_every_ns` (1 ms by
//! default, while capture is on) asks clients the scheduler asks none of
//! (inference) too, so that their kernels' durations are told apart. Each
//! mark costs the job one `cuEventRecord` and two ring records
//! (BENCHMARKS.md); its completion, pushed by the watcher thread, waits out
//! a launch holding the ring rather than drop (`SyncProducer`). With
//! `[trace] mark_every_ns = 0` an inference job's durations come from its
//! syncs: their sum is measured, their proportions are not.
//!
//! **The representative unit.** An inference job: its requests are the
//! explicit ones (`tandem_request_begin` / `tandem_request_end`) when the
//! window holds any, else those the scheduler detects (a request begins at
//! a launch after at least `[scheduler] request_idle_gap_ns` of quiet and
//! ends at the next sync's return); of the requests wholly inside the
//! window, the one of median duration. A training job: its step is the
//! shortest period `p` of its launch sequence (each launch as its function
//! and grid) such that the sequence repeats with period `p` over the last
//! `max(2p, n/2)` of the window's `n` launches (the steps are taken from as
//! far back as it repeats; the search is linear in `n`, so a step is found
//! once the window holds two of it: `[trace] window` bounds the longest
//! step); the step starts at the launch after the period's sync that the
//! longest host time follows (a `loss.item()`, then the next batch: a
//! step's own syncs come right before more launches), else at the launch
//! after the period's longest host gap; of the whole steps in the window,
//! the one of median duration.

use serde::{Deserialize, Serialize};
use tandem_proto::{EventKind, Record};

mod build;
mod durations;
mod key;
mod solve;
mod unit;

pub use build::{build, Missing, Source};
pub use durations::{fit, Fitted, Found};
pub use key::{is_launch, Key};
pub use unit::{median_unit, requests, step_period, steps, Unit};

/// Most records one client's window may hold (`[trace] window`).
pub const MAX_WINDOW: u32 = 1 << 20;
// The step search looks at every launch the largest window can hold.
const _: () = assert!(unit::MAX_STEP_LAUNCHES == MAX_WINDOW as usize);
/// Longest look back a trace may ask for, seconds.
pub const MAX_SECONDS: u64 = 600;
/// The look back when a request names none, seconds.
pub const DEFAULT_SECONDS: u64 = 10;

/// `[trace]` in `tandemd.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TraceConfig {
    /// Records kept per client (0: capture off, no window is allocated).
    pub window: u32,
    /// Completion-mark interval asked of clients the scheduler asks none of
    /// (inference), ns; 0: only the scheduler's marks.
    pub mark_every_ns: u64,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig {
            window: 32_768,
            mark_every_ns: 1_000_000,
        }
    }
}

impl TraceConfig {
    /// Checks serde cannot express. Returns (key, problem).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.window > MAX_WINDOW {
            return Err((
                "trace.window".into(),
                format!("{} is more than {MAX_WINDOW} records", self.window),
            ));
        }
        let min = tandem_sched::MIN_MARK_EVERY_NS;
        if self.mark_every_ns != 0 && !(min..=10_000_000_000).contains(&self.mark_every_ns) {
            return Err((
                "trace.mark_every_ns".into(),
                format!(
                    "{} is out of range: use 0 (none) or {min} to 10000000000",
                    self.mark_every_ns
                ),
            ));
        }
        Ok(())
    }

    /// The mark interval to write into a client's control block when the
    /// scheduler asks `sched_every_ns` of it.
    #[must_use]
    pub fn marks(&self, sched_every_ns: u64) -> u64 {
        if sched_every_ns == 0 && self.window > 0 {
            self.mark_every_ns
        } else {
            sched_every_ns
        }
    }
}

/// One client's recent records: a ring of ring records, allocated once.
#[derive(Debug, Default)]
pub struct Window {
    buf: Box<[Record]>,
    /// Where the next record goes.
    next: usize,
    /// Records held (at most `buf.len()`).
    len: usize,
}

impl Window {
    /// A window of `capacity` records (0: keeps nothing, allocates nothing).
    #[must_use]
    pub fn new(capacity: u32) -> Window {
        Window {
            buf: vec![Record::ZERO; capacity as usize].into_boxed_slice(),
            next: 0,
            len: 0,
        }
    }

    /// Whether a record of `kind` is kept (what a trace is made of).
    #[inline]
    #[must_use]
    pub fn keeps(kind: u16) -> bool {
        kind != EventKind::ALLOC.raw() && kind != EventKind::FREE.raw()
    }

    /// Keep `r` (the drain path: one copy, no allocation), dropping the
    /// oldest when full.
    #[inline]
    pub fn push(&mut self, r: &Record) {
        let cap = self.buf.len();
        if cap == 0 || !Self::keeps(r.kind) {
            return;
        }
        self.buf[self.next] = *r;
        self.next = if self.next + 1 == cap {
            0
        } else {
            self.next + 1
        };
        if self.len < cap {
            self.len += 1;
        }
    }

    /// Records held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records held, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        let cap = self.buf.len();
        let start = (self.next + cap - self.len) % cap.max(1);
        (0..self.len).map(move |i| &self.buf[(start + i) % cap])
    }

    /// A copy of the records at or after `since_ns` (the client's clock),
    /// oldest first.
    #[must_use]
    pub fn copy_since(&self, since_ns: u64) -> Vec<Record> {
        self.iter()
            .filter(|r| r.ts_ns >= since_ns)
            .copied()
            .collect()
    }

    /// The latest record's timestamp, if any.
    #[must_use]
    pub fn last_ts(&self) -> Option<u64> {
        let cap = self.buf.len();
        (self.len > 0).then(|| self.buf[(self.next + cap - 1) % cap].ts_ns)
    }
}

#[cfg(test)]
mod tests;
