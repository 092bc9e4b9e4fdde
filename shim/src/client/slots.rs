//! The completion marks' slots (`super::marks`): a fixed pool, each slot
//! one mark in flight, its events created on first use and never
//! destroyed.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Marks in flight at most. A GPU-bound burst can have this many timed
/// marks outstanding (`interval::gpu_behind`); the watcher asks only the
/// oldest incomplete one of each created stream (`marks::poll_armed`), so more
/// slots cost no more queries per poll.
pub const SLOTS: usize = 512;
pub(super) const FREE: u32 = 0;
/// A launching thread is placing a mark in it.
pub(super) const BUSY: u32 = 1;
/// Recorded and reported: the watcher queries it.
pub(super) const ARMED: u32 = 2;

pub(super) struct Slot {
    pub(super) state: AtomicU32,
    /// The slot's event (created on first use), or 0.
    pub(super) event: AtomicUsize,
    pub(super) seq: AtomicU64,
    pub(super) stream: AtomicU64,
    /// The control block's `charged_ns` when the mark was placed: what its
    /// completion says is done (the local in-flight bound, `super::local`).
    pub(super) charged: AtomicU64,
    /// The session (`Session::gen`) whose counter `charged` is.
    pub(super) gen: AtomicU32,
    /// Whether the mark bracketed its launch: then `end` is the mark's event
    /// and `start` the one recorded before the launch.
    pub(super) timed: AtomicU32,
    /// The slot's timing events (created on first use), or 0.
    pub(super) start: AtomicUsize,
    pub(super) end: AtomicUsize,
    /// A bracketed launch's stream was idle when asked just before `start`
    /// was recorded (set by `marks::begin_timed`).
    pub(super) idle: AtomicU32,
    /// The host clock (monotonic ns) right after `start`'s record returned
    /// (set by `marks::begin_timed`).
    pub(super) t0: AtomicU64,
    /// The host clock right after the launch call returned, before the
    /// shim's own work after it (set by `marks::launch_returned`), or 0.
    pub(super) t1: AtomicU64,
    /// What the watcher subtracts from a bracketed launch's elapsed time (the
    /// host time between `start` completing and the launch reaching the
    /// driver), or `timing::UNKNOWN_LEAD`: report the mark untimed (set by
    /// `marks::finish_timed`).
    pub(super) lead: AtomicU64,
}

pub(super) static POOL: [Slot; SLOTS] = [const {
    Slot {
        state: AtomicU32::new(FREE),
        event: AtomicUsize::new(0),
        seq: AtomicU64::new(0),
        stream: AtomicU64::new(0),
        charged: AtomicU64::new(0),
        gen: AtomicU32::new(0),
        timed: AtomicU32::new(0),
        start: AtomicUsize::new(0),
        end: AtomicUsize::new(0),
        idle: AtomicU32::new(0),
        t0: AtomicU64::new(0),
        t1: AtomicU64::new(0),
        lead: AtomicU64::new(0),
    }
}; SLOTS];
/// The slot a mark's sequence number (a token) lives in.
#[inline]
pub(super) fn slot_of(seq: u64) -> &'static Slot {
    &POOL[(seq % SLOTS as u64) as usize]
}

/// The next sequence number and its slot, taken (FREE to BUSY), or `None`
/// when that slot still holds an earlier mark.
pub(super) fn claim() -> Option<(u64, &'static Slot)> {
    let seq = SEQ.fetch_add(1, Ordering::Relaxed) + 1;
    let slot = slot_of(seq);
    slot.state
        .compare_exchange(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
        .ok()
        .map(|_| (seq, slot))
}

/// Last sequence number handed out (marks are numbered from 1 per process).
static SEQ: AtomicU64 = AtomicU64::new(0);
