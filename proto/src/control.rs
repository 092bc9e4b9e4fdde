//! The per-client control block: the gate and the launch limit the scheduler
//! drives, the coordinator's heartbeat, and a few client-side counters.
//!
//! It lives in the ring region at [`CONTROL_OFFSET`](crate::ring::CONTROL_OFFSET)
//! (see [`ring::control_block`](crate::ring::control_block)).
//!
//! # Layout
//!
//! | offset | field | written by | meaning |
//! | ---: | --- | --- | --- |
//! | 0 | `gate: u32` | coordinator | bit 0: closed ([`GATE_CLOSED`]); bits 1-31: a sequence advanced on every raise of `launch_limit`; the futex word |
//! | 4 | `class: u32` | coordinator | the class granted: 0 none yet, 1 inference, 2 training ([`crate::inflight`]) |
//! | 8 | `heartbeat: u64` | coordinator | liveness counter |
//! | 16 | `client_id: u64` | coordinator | the client's id |
//! | 24 | `launch_limit: u64` | coordinator | 0: unlimited; else the shim starts launch n (1-based) only while n <= launch_limit |
//! | 32 | `mark_every_ns: u64` | coordinator | 0: place no completion marks; else the shim records a driver event after a launch at most this often (see [`MARK`](crate::EventKind::MARK)) |
//! | 40 | `budget_idle_ns: u64` | coordinator | local in-flight bound while no inference is active on the GPU; 0: none ([`crate::inflight`]) |
//! | 48 | `budget_active_ns: u64` | coordinator | the same while inference is active |
//! | 56 | `default_est_ns: u64` | coordinator | what a launch whose key has no published estimate is charged |
//! | 64 | `hold_ns: u64` | coordinator | how long after an inference bump the GPU counts as active ([`crate::board`]) |
//! | 72 | `spatial_reserve: u64` | coordinator | share of the GPU's TPCs a training client leaves to inference while it is active, in thousandths; 0: no reservation ([`crate::spatial`]) |
//! | 80 | `spatial_min_ns: u64` | coordinator | launches whose blocks hold their SMs shorter are not masked (`crate::spatial::block_ns`) |
//! | 88 | `spatial_standing_ns: u64` | coordinator | launches whose blocks hold their SMs at least this long carry the mask while inference is idle too (an inference client is on the GPU); 0: only while active |
//! | 96 | `pad0` | - | to 128 |
//! | 128 | `gate_waits: u64` | shim | launches that waited |
//! | 136 | `gate_timeouts: u64` | shim | waits that hit their bound |
//! | 144 | `stale_opens: u64` | shim | waits abandoned (coordinator looked dead) |
//! | 152 | `gate_wait_ns: u64` | shim | ns launches waited |
//! | 160 | `launches: u64` | shim | gated launches started on this session |
//! | 168 | `marks_placed: u64` | shim | completion marks recorded on this session |
//! | 176 | `marks_done: u64` | shim | marks the shim saw complete |
//! | 184 | `charged_ns: u64` | shim | estimated ns of every launch charged on this session |
//! | 192 | `done_ns: u64` | shim | the part of `charged_ns` seen complete (marks, syncs) |
//! | 200 | `local_waits: u64` | shim | launches that waited at the local in-flight bound |
//! | 208 | `local_wait_ns: u64` | shim | ns they waited |
//! | 216 | `requests_open: u64` | shim | explicit requests the shim counted on the board and has not ended (tandemd uncounts them there when the client leaves) |
//! | 224 | `board_slot: u64` | shim | board slot in use, plus one; 0: none |
//! | 232 | `spatial_state: u64` | shim | what became of the reservation ([`crate::spatial::SpatialState`]) |
//! | 240 | `masked_launches: u64` | shim | launches that carried the reservation's mask |
//! | 248 | `pad1` | - | to 256 |
//!
//! # Gate protocol
//!
//! * Per launch the shim does **one Acquire load** of `gate`, **one Acquire
//!   load** of `launch_limit` and one Relaxed load of its own `launches`
//!   ([`ControlBlock::launch_allowed`]): launch number `n = launches + 1` may
//!   start iff bit 0 of `gate` is clear (`GATE_OPEN`, 0, is also the value of
//!   fresh zeroed memory) and `launch_limit` is 0 or `n <= launch_limit`.
//!   Once it may, it counts the launch ([`ControlBlock::count_launch`], one
//!   `fetch_add`). Graph launches count 1, like any launch.
//! * When it may not, the shim calls [`ControlBlock::wait_launch`], which
//!   sleeps in `FUTEX_WAIT` on the gate word in bounded slices and returns
//!   when the launch may start, when the caller's total bound expires, or when
//!   the coordinator's heartbeat has not moved for `stale_after` (the
//!   coordinator is presumed dead or stalled and the shim fails open). Every
//!   outcome lets the job proceed; none waits longer than `max_wait`.
//! * The coordinator [`close_gate`](ControlBlock::close_gate)s (sets bit 0,
//!   Release) and [`open_gate`](ControlBlock::open_gate)s (clears it,
//!   Release, then `FUTEX_WAKE` of all waiters). It sets the limit with
//!   [`set_launch_limit`](ControlBlock::set_launch_limit): a Release store and,
//!   when the limit was raised (or lifted to unlimited), an advance of the
//!   gate word's sequence bits followed by `FUTEX_WAKE`. Changing the word is
//!   what makes the wake race-free: a waiter that read the old limit sleeps
//!   only while the word still holds the value it read with it, so a raise
//!   between its check and its `FUTEX_WAIT` makes the wait return at once.
//!   It calls [`beat`](ControlBlock::beat) at least every heartbeat interval
//!   (announced in the Welcome message).
//! * The limit may be lowered (the coordinator takes back allowance it has
//!   not seen used); a launch already counted in `launches` is never taken
//!   back, since the limit is checked only before a launch starts.
//!
//! With several launching threads, two may both find `launches + 1 <=
//! launch_limit` before either counts: the limit is exact for one launching
//! thread and may be exceeded by at most one launch per other thread that
//! checks at the same instant.
//!
//! The heartbeat is a counter, not a timestamp: the two processes may live in
//! different time namespaces, so only the shim's own clock measures staleness.

use core::mem::{align_of, offset_of, size_of};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Gate value: launches may proceed (bit 0 clear; the other bits are the
/// limit sequence and say nothing about the gate).
pub const GATE_OPEN: u32 = 0;
/// Gate bit: set, launches should wait (bounded) for the gate to open.
pub const GATE_CLOSED: u32 = 1;
/// What the coordinator adds to the gate word each time it raises the launch
/// limit (the sequence lives in bits 1-31; bit 0 is never touched by it).
pub const GATE_SEQ_STEP: u32 = 2;
/// `launch_limit` value meaning "no limit" (also zeroed memory).
pub const LAUNCH_UNLIMITED: u64 = 0;

/// Size of [`ControlBlock`] in bytes.
pub const CONTROL_BLOCK_SIZE: usize = 256;

/// The control block. All fields, padding included, are atomics because the
/// other process may write any byte at any time.
#[repr(C, align(128))]
pub struct ControlBlock {
    // ---- line 0: coordinator writes, shim reads ----
    pub(crate) gate: AtomicU32,
    pub(crate) class: AtomicU32,
    pub(crate) heartbeat: AtomicU64,
    pub(crate) client_id: AtomicU64,
    pub(crate) launch_limit: AtomicU64,
    pub(crate) mark_every_ns: AtomicU64,
    pub(crate) budget_idle_ns: AtomicU64,
    pub(crate) budget_active_ns: AtomicU64,
    pub(crate) default_est_ns: AtomicU64,
    pub(crate) hold_ns: AtomicU64,
    pub(crate) spatial_reserve: AtomicU64,
    pub(crate) spatial_min_ns: AtomicU64,
    pub(crate) spatial_standing_ns: AtomicU64,
    pub(crate) pad0: [AtomicU64; 4],
    // ---- line 1: shim writes, coordinator reads (untrusted statistics) ----
    pub(crate) gate_waits: AtomicU64,
    pub(crate) gate_timeouts: AtomicU64,
    pub(crate) stale_opens: AtomicU64,
    pub(crate) gate_wait_ns: AtomicU64,
    pub(crate) launches: AtomicU64,
    pub(crate) marks_placed: AtomicU64,
    pub(crate) marks_done: AtomicU64,
    pub(crate) charged_ns: AtomicU64,
    pub(crate) done_ns: AtomicU64,
    pub(crate) local_waits: AtomicU64,
    pub(crate) local_wait_ns: AtomicU64,
    pub(crate) requests_open: AtomicU64,
    pub(crate) board_slot: AtomicU64,
    pub(crate) spatial_state: AtomicU64,
    pub(crate) masked_launches: AtomicU64,
    pub(crate) pad1: [AtomicU64; 1],
}

const _: () = {
    assert!(size_of::<ControlBlock>() == CONTROL_BLOCK_SIZE);
    assert!(align_of::<ControlBlock>() == 128);
    assert!(offset_of!(ControlBlock, gate) == 0);
    assert!(offset_of!(ControlBlock, class) == 4);
    assert!(offset_of!(ControlBlock, heartbeat) == 8);
    assert!(offset_of!(ControlBlock, client_id) == 16);
    assert!(offset_of!(ControlBlock, launch_limit) == 24);
    assert!(offset_of!(ControlBlock, mark_every_ns) == 32);
    assert!(offset_of!(ControlBlock, budget_idle_ns) == 40);
    assert!(offset_of!(ControlBlock, budget_active_ns) == 48);
    assert!(offset_of!(ControlBlock, default_est_ns) == 56);
    assert!(offset_of!(ControlBlock, hold_ns) == 64);
    assert!(offset_of!(ControlBlock, spatial_reserve) == 72);
    assert!(offset_of!(ControlBlock, spatial_min_ns) == 80);
    assert!(offset_of!(ControlBlock, spatial_standing_ns) == 88);
    assert!(offset_of!(ControlBlock, pad0) == 96);
    assert!(offset_of!(ControlBlock, gate_waits) == 128);
    assert!(offset_of!(ControlBlock, gate_timeouts) == 136);
    assert!(offset_of!(ControlBlock, stale_opens) == 144);
    assert!(offset_of!(ControlBlock, gate_wait_ns) == 152);
    assert!(offset_of!(ControlBlock, launches) == 160);
    assert!(offset_of!(ControlBlock, marks_placed) == 168);
    assert!(offset_of!(ControlBlock, marks_done) == 176);
    assert!(offset_of!(ControlBlock, charged_ns) == 184);
    assert!(offset_of!(ControlBlock, done_ns) == 192);
    assert!(offset_of!(ControlBlock, local_waits) == 200);
    assert!(offset_of!(ControlBlock, local_wait_ns) == 208);
    assert!(offset_of!(ControlBlock, requests_open) == 216);
    assert!(offset_of!(ControlBlock, board_slot) == 224);
    assert!(offset_of!(ControlBlock, spatial_state) == 232);
    assert!(offset_of!(ControlBlock, masked_launches) == 240);
    assert!(offset_of!(ControlBlock, pad1) == 248);
};

/// Why [`ControlBlock::wait_open`] returned. In every case the caller proceeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateWait {
    /// The gate was open (possibly after waiting).
    Open,
    /// The caller's bound `max_wait` expired with the gate still closed.
    TimedOut,
    /// The coordinator's heartbeat did not move for `stale_after`: fail open.
    CoordinatorStale,
    /// `FUTEX_WAIT` failed unexpectedly (errno): fail open.
    FutexFailed(i32),
}

/// Counters the shim keeps in the control block (claims, not facts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// Launches that found the gate closed and waited.
    pub gate_waits: u64,
    /// Waits that hit their bound.
    pub gate_timeouts: u64,
    /// Waits abandoned because the coordinator looked dead.
    pub stale_opens: u64,
    /// Nanoseconds launches spent waiting at a closed gate, all waits together.
    pub gate_wait_ns: u64,
    /// Gated launches the shim has started on this session.
    pub launches: u64,
    /// Completion marks the shim recorded.
    pub marks_placed: u64,
    /// Marks the shim saw complete.
    pub marks_done: u64,
    /// Estimated ns of work launched and not yet seen complete (the local
    /// in-flight bound's measure; see [`crate::inflight`]).
    pub inflight_ns: u64,
    /// Launches that waited at the local in-flight bound.
    pub local_waits: u64,
    /// Nanoseconds they waited, all together.
    pub local_wait_ns: u64,
    /// Explicit requests the shim says are open.
    pub requests_open: u64,
    /// The board slot the shim uses, plus one (0: none).
    pub board_slot: u64,
    /// What the shim made of the SM reservation
    /// ([`crate::spatial::SpatialState::encode`]).
    pub spatial_state: u64,
    /// Launches the shim says carried the reservation's mask.
    pub masked_launches: u64,
}

impl ControlBlock {
    /// Reset every field (coordinator, at region initialisation).
    pub(crate) fn init(&self, client_id: u64) {
        self.gate.store(GATE_OPEN, Ordering::Relaxed);
        self.class.store(0, Ordering::Relaxed);
        self.budget_idle_ns.store(0, Ordering::Relaxed);
        self.budget_active_ns.store(0, Ordering::Relaxed);
        self.default_est_ns.store(0, Ordering::Relaxed);
        self.hold_ns.store(0, Ordering::Relaxed);
        self.spatial_reserve.store(0, Ordering::Relaxed);
        self.spatial_min_ns.store(0, Ordering::Relaxed);
        self.spatial_standing_ns.store(0, Ordering::Relaxed);
        self.spatial_state.store(0, Ordering::Relaxed);
        self.masked_launches.store(0, Ordering::Relaxed);
        self.charged_ns.store(0, Ordering::Relaxed);
        self.done_ns.store(0, Ordering::Relaxed);
        self.local_waits.store(0, Ordering::Relaxed);
        self.local_wait_ns.store(0, Ordering::Relaxed);
        self.requests_open.store(0, Ordering::Relaxed);
        self.board_slot.store(0, Ordering::Relaxed);
        self.heartbeat.store(0, Ordering::Relaxed);
        self.client_id.store(client_id, Ordering::Relaxed);
        self.launch_limit.store(LAUNCH_UNLIMITED, Ordering::Relaxed);
        self.mark_every_ns.store(0, Ordering::Relaxed);
        self.launches.store(0, Ordering::Relaxed);
        self.marks_placed.store(0, Ordering::Relaxed);
        self.marks_done.store(0, Ordering::Relaxed);
        self.gate_waits.store(0, Ordering::Relaxed);
        self.gate_timeouts.store(0, Ordering::Relaxed);
        self.stale_opens.store(0, Ordering::Relaxed);
        self.gate_wait_ns.store(0, Ordering::Relaxed);
    }

    // ---------------- shim side ----------------

    /// Whether the gate is open (bit 0 of the gate word clear): one Acquire
    /// load. Acquire pairs with the coordinator's Release in
    /// [`open_gate`](Self::open_gate), so anything it wrote before opening is
    /// visible after this returns `true`.
    #[inline(always)]
    #[must_use]
    pub fn gate_is_open(&self) -> bool {
        self.gate.load(Ordering::Acquire) & GATE_CLOSED == 0
    }

    /// The launch fast path: may the next launch (number `launches + 1`)
    /// start now? Two Acquire loads (gate, limit) and one Relaxed load of the
    /// shim's own counter. Call [`count_launch`](Self::count_launch) once
    /// the launch goes ahead (whether or not it had to wait).
    #[inline(always)]
    #[must_use]
    pub fn launch_allowed(&self) -> bool {
        self.gate_is_open() && self.within_limit()
    }

    /// `launch_limit` allows launch number `launches + 1`.
    #[inline(always)]
    fn within_limit(&self) -> bool {
        // Acquire pairs with the Release store in set_launch_limit.
        let limit = self.launch_limit.load(Ordering::Acquire);
        limit == LAUNCH_UNLIMITED || self.launches.load(Ordering::Relaxed) < limit
    }

    /// Count a launch that starts (shim; one `fetch_add`, Relaxed: the
    /// coordinator reads it as a statistic and to place the next limit).
    #[inline(always)]
    pub fn count_launch(&self) {
        self.launches.fetch_add(1, Ordering::Relaxed);
    }

    /// How often the coordinator wants completion marks, ns (0: none). One
    /// Relaxed load: a stale value only moves one mark.
    #[inline(always)]
    #[must_use]
    pub fn mark_every_ns(&self) -> u64 {
        self.mark_every_ns.load(Ordering::Relaxed)
    }

    /// Count a completion mark placed (`done`: one seen complete).
    pub fn count_mark(&self, done: bool) {
        let c = if done {
            &self.marks_done
        } else {
            &self.marks_placed
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Wait (bounded) for the gate to open. See the module docs.
    ///
    /// `max_wait` bounds the whole call; `stale_after` is how long the
    /// heartbeat may stand still before the coordinator is presumed dead
    /// (use a few heartbeat intervals). Returns immediately if the gate is open.
    /// The launch limit is not looked at (see [`wait_launch`](Self::wait_launch)).
    pub fn wait_open(&self, max_wait: Duration, stale_after: Duration) -> GateWait {
        self.wait_until(max_wait, stale_after, Self::gate_is_open)
    }

    /// Wait (bounded) until the next launch may start: the gate is open and
    /// the launch limit allows it ([`launch_allowed`](Self::launch_allowed)).
    /// Same bounds and outcomes as [`wait_open`](Self::wait_open); a wait for
    /// the limit is counted in `gate_waits`/`gate_timeouts`/`gate_wait_ns`
    /// exactly like a wait for a closed gate. Does not count the launch.
    pub fn wait_launch(&self, max_wait: Duration, stale_after: Duration) -> GateWait {
        self.wait_until(max_wait, stale_after, Self::launch_allowed)
    }

    fn wait_until(
        &self,
        max_wait: Duration,
        stale_after: Duration,
        go: fn(&Self) -> bool,
    ) -> GateWait {
        if go(self) {
            return GateWait::Open;
        }
        // Several launching threads may wait at once: fetch_add, Relaxed (a statistic).
        self.gate_waits.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let outcome = self.wait_closed(start, max_wait, stale_after, go);
        let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.gate_wait_ns.fetch_add(waited, Ordering::Relaxed);
        outcome
    }

    /// The body of [`Self::wait_until`] once `go` was found false at `start`.
    fn wait_closed(
        &self,
        start: Instant,
        max_wait: Duration,
        stale_after: Duration,
        go: fn(&Self) -> bool,
    ) -> GateWait {
        let mut beat = self.heartbeat.load(Ordering::Acquire);
        let mut beat_seen = start;
        loop {
            let now = Instant::now();
            let waited = now.duration_since(start);
            if waited >= max_wait {
                self.gate_timeouts.fetch_add(1, Ordering::Relaxed);
                return GateWait::TimedOut;
            }
            let b = self.heartbeat.load(Ordering::Acquire);
            if b != beat {
                beat = b;
                beat_seen = now;
            } else if now.duration_since(beat_seen) >= stale_after {
                self.stale_opens.fetch_add(1, Ordering::Relaxed);
                return GateWait::CoordinatorStale;
            }
            let slice =
                (max_wait - waited).min(stale_after.saturating_sub(now.duration_since(beat_seen)));
            // Read the word, then decide on it: every change the coordinator
            // makes that could let us go (opening the gate, raising the limit)
            // changes the word after its other stores, so either `go` sees the
            // change or FUTEX_WAIT finds the word changed and returns at once
            // (EAGAIN); the kernel compares atomically, no wake is missed.
            let word = self.gate.load(Ordering::Acquire);
            if go(self) {
                return GateWait::Open;
            }
            match futex_wait(&self.gate, word, slice) {
                Ok(_) => {}
                Err(e) => return GateWait::FutexFailed(e.errno().unwrap_or(0)),
            }
            if go(self) {
                return GateWait::Open;
            }
        }
    }

    /// The client id the coordinator assigned.
    #[must_use]
    pub fn client_id(&self) -> u64 {
        self.client_id.load(Ordering::Relaxed)
    }

    /// The coordinator's heartbeat counter.
    #[must_use]
    pub fn heartbeat(&self) -> u64 {
        self.heartbeat.load(Ordering::Acquire)
    }

    // ---------------- coordinator side ----------------

    /// Close the gate: launches that load it from now on will wait (bounded).
    pub fn close_gate(&self) {
        self.gate.fetch_or(GATE_CLOSED, Ordering::Release);
    }

    /// Open the gate and wake every waiting thread of the client.
    pub fn open_gate(&self) -> Result<u32> {
        // Release: pairs with the shim's Acquire load in gate_is_open.
        self.gate.fetch_and(!GATE_CLOSED, Ordering::Release);
        futex_wake(&self.gate, u32::MAX)
    }

    /// Set the launch limit ([`LAUNCH_UNLIMITED`]: none). When the new limit
    /// lets more launches start than the old one (raised, or lifted), the
    /// gate word's sequence is advanced and every waiter woken, so a thread
    /// waiting for the limit re-checks at once. Returns whether it woke.
    pub fn set_launch_limit(&self, limit: u64) -> Result<bool> {
        // Release: pairs with the shim's Acquire load in launch_allowed.
        let old = self.launch_limit.swap(limit, Ordering::AcqRel);
        let raised = old != LAUNCH_UNLIMITED && (limit == LAUNCH_UNLIMITED || limit > old);
        if !raised {
            return Ok(false);
        }
        // Release: the new limit is visible to whoever sees the new word.
        self.gate.fetch_add(GATE_SEQ_STEP, Ordering::Release);
        futex_wake(&self.gate, u32::MAX)?;
        Ok(true)
    }

    /// The launch limit as last set ([`LAUNCH_UNLIMITED`]: none).
    #[must_use]
    pub fn launch_limit(&self) -> u64 {
        self.launch_limit.load(Ordering::Relaxed)
    }

    /// Gated launches the shim says it started (untrusted).
    #[must_use]
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Acquire)
    }

    /// Ask the shim for completion marks at most every `ns` (0: none).
    pub fn set_mark_every_ns(&self, ns: u64) {
        self.mark_every_ns.store(ns, Ordering::Relaxed);
    }

    /// Advance the heartbeat (call at least once per heartbeat interval).
    pub fn beat(&self) {
        self.heartbeat.fetch_add(1, Ordering::Release);
    }

    /// The gate's current raw value.
    #[must_use]
    pub fn gate(&self) -> u32 {
        self.gate.load(Ordering::Relaxed)
    }

    /// The shim's counters (written by the client: untrusted).
    #[must_use]
    pub fn client_counters(&self) -> ClientCounters {
        ClientCounters {
            gate_waits: self.gate_waits.load(Ordering::Relaxed),
            gate_timeouts: self.gate_timeouts.load(Ordering::Relaxed),
            stale_opens: self.stale_opens.load(Ordering::Relaxed),
            gate_wait_ns: self.gate_wait_ns.load(Ordering::Relaxed),
            launches: self.launches.load(Ordering::Relaxed),
            marks_placed: self.marks_placed.load(Ordering::Relaxed),
            marks_done: self.marks_done.load(Ordering::Relaxed),
            inflight_ns: self
                .charged_ns
                .load(Ordering::Relaxed)
                .saturating_sub(self.done_ns.load(Ordering::Relaxed)),
            local_waits: self.local_waits.load(Ordering::Relaxed),
            local_wait_ns: self.local_wait_ns.load(Ordering::Relaxed),
            requests_open: self.requests_open.load(Ordering::Relaxed),
            board_slot: self.board_slot.load(Ordering::Relaxed),
            spatial_state: self.spatial_state.load(Ordering::Relaxed),
            masked_launches: self.masked_launches.load(Ordering::Relaxed),
        }
    }
}

/// Outcome of a [`futex_wait`] that did not fail (`tandem_os::futex::Wait`).
pub use tandem_os::futex::Wait as FutexWait;

/// `FUTEX_WAIT` on `word` while it equals `expected`, for at most `timeout`.
///
/// The timeout is mandatory: nothing in tandem waits without a bound. The
/// operation is the shared (non-`PRIVATE`) form, so it works across processes
/// on a `MAP_SHARED` mapping.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Result<FutexWait> {
    Ok(crate::sync::futex_wait(word, expected, timeout)?)
}

/// `FUTEX_WAKE` up to `waiters` threads (any process) waiting on `word`.
/// Returns how many were woken.
pub fn futex_wake(word: &AtomicU32, waiters: u32) -> Result<u32> {
    Ok(crate::sync::futex_wake(word, waiters)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{control_block, Consumer, RingLayout};
    use crate::shm::Mapping;

    fn setup() -> (Mapping, RingLayout) {
        let layout = RingLayout::new(16).unwrap();
        let m = Mapping::anonymous_shared(layout.region_len()).unwrap();
        (m, layout)
    }

    #[test]
    fn fresh_block_is_open_and_carries_id() {
        let (m, layout) = setup();
        let _c = Consumer::init(&m, layout, 42).unwrap();
        let cb = control_block(&m, layout).unwrap();
        assert!(cb.gate_is_open());
        assert_eq!(cb.client_id(), 42);
        assert_eq!(
            cb.wait_open(Duration::from_secs(5), Duration::from_secs(5)),
            GateWait::Open
        );
        assert_eq!(cb.client_counters(), ClientCounters::default());
        // Only bit 0 closes; the sequence bits say nothing about the gate.
        cb.gate.store(6, Ordering::Relaxed);
        assert!(cb.gate_is_open());
        cb.gate.store(7, Ordering::Relaxed);
        assert!(!cb.gate_is_open());
        cb.gate.store(0, Ordering::Relaxed);
        // No limit: any number of launches.
        assert_eq!(cb.launch_limit(), LAUNCH_UNLIMITED);
        for _ in 0..1000 {
            assert!(cb.launch_allowed());
            cb.count_launch();
        }
        assert_eq!(cb.launches(), 1000);
    }

    #[test]
    fn closed_gate_times_out_when_coordinator_beats() {
        let (m, layout) = setup();
        let _c = Consumer::init(&m, layout, 1).unwrap();
        let cb = control_block(&m, layout).unwrap();
        cb.close_gate();
        assert!(!cb.gate_is_open());
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    cb.beat();
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            let r = cb.wait_open(Duration::from_millis(50), Duration::from_secs(10));
            stop.store(true, Ordering::Relaxed);
            r
        });
        assert_eq!(r, GateWait::TimedOut);
        assert_eq!(cb.client_counters().gate_timeouts, 1);
        assert_eq!(cb.client_counters().gate_waits, 1);
        // TimedOut is returned only once the wait reached its 50 ms bound.
        assert!(
            cb.client_counters().gate_wait_ns >= 50_000_000,
            "{:?}",
            cb.client_counters()
        );
    }

    #[test]
    fn stale_heartbeat_fails_open() {
        let (m, layout) = setup();
        let _c = Consumer::init(&m, layout, 1).unwrap();
        let cb = control_block(&m, layout).unwrap();
        cb.close_gate();
        // No beats at all; stale_after is shorter than max_wait.
        let r = cb.wait_open(Duration::from_secs(30), Duration::from_millis(20));
        assert_eq!(r, GateWait::CoordinatorStale);
        assert_eq!(cb.client_counters().stale_opens, 1);
    }

    #[test]
    fn open_gate_wakes_waiter() {
        let (m, layout) = setup();
        let _c = Consumer::init(&m, layout, 1).unwrap();
        let cb = control_block(&m, layout).unwrap();
        cb.close_gate();
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| cb.wait_open(Duration::from_secs(60), Duration::from_secs(60)));
            // Open once the waiter has registered (gate_waits bumped); the
            // futex value check makes the order irrelevant for correctness.
            while cb.client_counters().gate_waits == 0 {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5));
            cb.open_gate().unwrap();
            h.join().unwrap()
        });
        assert_eq!(r, GateWait::Open);
    }

    #[test]
    fn the_limit_counts_launches_and_a_raise_wakes_the_waiter() {
        let (m, layout) = setup();
        let _c = Consumer::init(&m, layout, 1).unwrap();
        let cb = control_block(&m, layout).unwrap();
        assert!(!cb.set_launch_limit(3).unwrap(), "limiting is not a raise");
        for _ in 0..3 {
            assert!(cb.launch_allowed());
            cb.count_launch();
        }
        assert!(!cb.launch_allowed(), "launch 4 is beyond a limit of 3");
        assert!(cb.gate_is_open(), "the gate itself stays open");
        // Over the limit, a wait is a gate wait: counted, bounded.
        let stop = std::sync::atomic::AtomicBool::new(false);
        let r = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    cb.beat();
                    std::thread::sleep(Duration::from_millis(2));
                }
            });
            let r = cb.wait_launch(Duration::from_millis(30), Duration::from_secs(10));
            stop.store(true, Ordering::Relaxed);
            r
        });
        assert_eq!(r, GateWait::TimedOut);
        let k = cb.client_counters();
        assert_eq!((k.gate_waits, k.gate_timeouts, k.launches), (1, 1, 3));
        assert!(k.gate_wait_ns >= 30_000_000, "{k:?}");
        // A raise wakes a waiter that would otherwise sleep a minute.
        let r = std::thread::scope(|s| {
            let h = s.spawn(|| cb.wait_launch(Duration::from_secs(60), Duration::from_secs(60)));
            while cb.client_counters().gate_waits < 2 {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_millis(5));
            assert!(cb.set_launch_limit(4).unwrap(), "3 -> 4 is a raise");
            h.join().unwrap()
        });
        assert_eq!(r, GateWait::Open);
        cb.count_launch();
        assert!(!cb.launch_allowed());
        // Lowering never wakes; lifting the limit does.
        assert!(!cb.set_launch_limit(2).unwrap());
        assert!(
            !cb.launch_allowed(),
            "counted launches are never taken back"
        );
        assert!(cb.set_launch_limit(LAUNCH_UNLIMITED).unwrap());
        assert!(cb.launch_allowed());
    }

    #[test]
    fn a_raise_changes_the_gate_word_and_keeps_the_gate_bit() {
        let (m, layout) = setup();
        let _c = Consumer::init(&m, layout, 1).unwrap();
        let cb = control_block(&m, layout).unwrap();
        cb.set_launch_limit(1).unwrap();
        cb.count_launch();
        cb.close_gate();
        let word = cb.gate();
        cb.set_launch_limit(2).unwrap();
        assert!(!cb.gate_is_open(), "a raise leaves a closed gate closed");
        assert_ne!(cb.gate(), word, "the sequence moved");
        // A waiter that read the word before the raise does not sleep on it.
        assert_eq!(
            futex_wait(&cb.gate, word, Duration::from_secs(10)),
            Ok(FutexWait::ValueChanged)
        );
        assert!(!cb.launch_allowed(), "closed gate");
        cb.open_gate().unwrap();
        assert!(cb.launch_allowed());
        assert_eq!(cb.gate() & GATE_CLOSED, 0);
        // The sequence wraps without touching bit 0.
        cb.gate.store(u32::MAX - 1, Ordering::Relaxed);
        cb.set_launch_limit(3).unwrap();
        assert!(cb.gate_is_open());
    }

    #[test]
    fn futex_wrappers() {
        let w = AtomicU32::new(5);
        assert_eq!(
            futex_wait(&w, 4, Duration::from_secs(10)),
            Ok(FutexWait::ValueChanged)
        );
        assert_eq!(
            futex_wait(&w, 5, Duration::from_millis(1)),
            Ok(FutexWait::TimedOut)
        );
        assert_eq!(futex_wake(&w, 1), Ok(0));
    }
}
