//! The per-client control block: the gate the scheduler drives, the
//! coordinator's heartbeat, and a few client-side counters.
//!
//! It lives in the ring region at [`CONTROL_OFFSET`](crate::ring::CONTROL_OFFSET)
//! (see [`ring::control_block`](crate::ring::control_block)).
//!
//! # Gate protocol
//!
//! * The shim does **one Acquire load** of `gate` per launch
//!   ([`ControlBlock::gate_is_open`]). `GATE_OPEN` (0, also the value of fresh
//!   zeroed memory) or any value other than `GATE_CLOSED` means go.
//! * When closed, the shim calls [`ControlBlock::wait_open`], which sleeps in
//!   `FUTEX_WAIT` on the gate word in bounded slices and returns when the gate
//!   opens, when the caller's total bound expires, or when the coordinator's
//!   heartbeat has not moved for `stale_after` (the coordinator is presumed
//!   dead or stalled and the shim fails open). Every outcome lets the job
//!   proceed; none waits longer than `max_wait`.
//! * The coordinator [`close_gate`](ControlBlock::close_gate)s with a Release
//!   store and [`open_gate`](ControlBlock::open_gate)s with a Release store
//!   followed by `FUTEX_WAKE` of all waiters, and calls
//!   [`beat`](ControlBlock::beat) at least every heartbeat interval (announced
//!   in the Welcome message).
//!
//! The heartbeat is a counter, not a timestamp: the two processes may live in
//! different time namespaces, so only the shim's own clock measures staleness.

use core::mem::{align_of, offset_of, size_of};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Gate value: launches may proceed.
pub const GATE_OPEN: u32 = 0;
/// Gate value: launches should wait (bounded) for the gate to open.
pub const GATE_CLOSED: u32 = 1;

/// Size of [`ControlBlock`] in bytes.
pub const CONTROL_BLOCK_SIZE: usize = 256;

/// The control block. All fields, padding included, are atomics because the
/// other process may write any byte at any time.
#[repr(C, align(128))]
pub struct ControlBlock {
    // ---- line 0: coordinator writes, shim reads ----
    pub(crate) gate: AtomicU32,
    pub(crate) reserved0: AtomicU32,
    pub(crate) heartbeat: AtomicU64,
    pub(crate) client_id: AtomicU64,
    pub(crate) pad0: [AtomicU64; 13],
    // ---- line 1: shim writes, coordinator reads (untrusted statistics) ----
    pub(crate) gate_waits: AtomicU64,
    pub(crate) gate_timeouts: AtomicU64,
    pub(crate) stale_opens: AtomicU64,
    pub(crate) gate_wait_ns: AtomicU64,
    pub(crate) pad1: [AtomicU64; 12],
}

const _: () = {
    assert!(size_of::<ControlBlock>() == CONTROL_BLOCK_SIZE);
    assert!(align_of::<ControlBlock>() == 128);
    assert!(offset_of!(ControlBlock, gate) == 0);
    assert!(offset_of!(ControlBlock, reserved0) == 4);
    assert!(offset_of!(ControlBlock, heartbeat) == 8);
    assert!(offset_of!(ControlBlock, client_id) == 16);
    assert!(offset_of!(ControlBlock, pad0) == 24);
    assert!(offset_of!(ControlBlock, gate_waits) == 128);
    assert!(offset_of!(ControlBlock, gate_timeouts) == 136);
    assert!(offset_of!(ControlBlock, stale_opens) == 144);
    assert!(offset_of!(ControlBlock, gate_wait_ns) == 152);
    assert!(offset_of!(ControlBlock, pad1) == 160);
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
}

impl ControlBlock {
    /// Reset every field (coordinator, at region initialisation).
    pub(crate) fn init(&self, client_id: u64) {
        self.gate.store(GATE_OPEN, Ordering::Relaxed);
        self.reserved0.store(0, Ordering::Relaxed);
        self.heartbeat.store(0, Ordering::Relaxed);
        self.client_id.store(client_id, Ordering::Relaxed);
        self.gate_waits.store(0, Ordering::Relaxed);
        self.gate_timeouts.store(0, Ordering::Relaxed);
        self.stale_opens.store(0, Ordering::Relaxed);
        self.gate_wait_ns.store(0, Ordering::Relaxed);
    }

    // ---------------- shim side ----------------

    /// The launch fast path: one Acquire load. Acquire pairs with the
    /// coordinator's Release store in [`open_gate`](Self::open_gate), so
    /// anything it wrote before opening is visible after this returns `true`.
    #[inline(always)]
    #[must_use]
    pub fn gate_is_open(&self) -> bool {
        self.gate.load(Ordering::Acquire) != GATE_CLOSED
    }

    /// Wait (bounded) for the gate to open. See the module docs.
    ///
    /// `max_wait` bounds the whole call; `stale_after` is how long the
    /// heartbeat may stand still before the coordinator is presumed dead
    /// (use a few heartbeat intervals). Returns immediately if the gate is open.
    pub fn wait_open(&self, max_wait: Duration, stale_after: Duration) -> GateWait {
        if self.gate_is_open() {
            return GateWait::Open;
        }
        // Several launching threads may wait at once: fetch_add, Relaxed (a statistic).
        self.gate_waits.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        let outcome = self.wait_closed(start, max_wait, stale_after);
        let waited = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.gate_wait_ns.fetch_add(waited, Ordering::Relaxed);
        outcome
    }

    /// The body of [`Self::wait_open`] once the gate was found closed at `start`.
    fn wait_closed(&self, start: Instant, max_wait: Duration, stale_after: Duration) -> GateWait {
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
            // Sleep only while the word still says CLOSED; the kernel checks
            // that atomically, so an open_gate between our load and this call
            // is never missed (FUTEX_WAIT returns EAGAIN instead).
            match futex_wait(&self.gate, GATE_CLOSED, slice) {
                Ok(_) => {}
                Err(e) => return GateWait::FutexFailed(e.errno().unwrap_or(0)),
            }
            if self.gate_is_open() {
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
        self.gate.store(GATE_CLOSED, Ordering::Release);
    }

    /// Open the gate and wake every waiting thread of the client.
    pub fn open_gate(&self) -> Result<u32> {
        // Release: pairs with the shim's Acquire load in gate_is_open.
        self.gate.store(GATE_OPEN, Ordering::Release);
        futex_wake(&self.gate, u32::MAX)
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
        }
    }
}

/// Outcome of a [`futex_wait`] that did not fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FutexWait {
    /// Woken by `FUTEX_WAKE` (or spuriously): re-check the word.
    Woken,
    /// The word did not hold `expected` when the call started (`EAGAIN`).
    ValueChanged,
    /// The timeout expired (`ETIMEDOUT`).
    TimedOut,
    /// A signal interrupted the wait (`EINTR`).
    Interrupted,
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: libc::time_t::try_from(d.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// `FUTEX_WAIT` on `word` while it equals `expected`, for at most `timeout`.
///
/// The timeout is mandatory: nothing in tandem waits without a bound. The
/// operation is the shared (non-`PRIVATE`) form, so it works across processes
/// on a `MAP_SHARED` mapping.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) -> Result<FutexWait> {
    let ts = timespec(timeout);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call and
    // `ts` a valid timespec; FUTEX_WAIT reads both and touches nothing else.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            core::ptr::null::<u32>(),
            0u32,
        )
    };
    if r == 0 {
        return Ok(FutexWait::Woken);
    }
    let e = Error::last_os("futex(FUTEX_WAIT)");
    match e.errno() {
        Some(libc::EAGAIN) => Ok(FutexWait::ValueChanged),
        Some(libc::ETIMEDOUT) => Ok(FutexWait::TimedOut),
        Some(libc::EINTR) => Ok(FutexWait::Interrupted),
        _ => Err(e),
    }
}

/// `FUTEX_WAKE` up to `waiters` threads (any process) waiting on `word`.
/// Returns how many were woken.
pub fn futex_wake(word: &AtomicU32, waiters: u32) -> Result<u32> {
    let n = i32::try_from(waiters).unwrap_or(i32::MAX);
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE only uses its address.
    let r = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
    if r < 0 {
        return Err(Error::last_os("futex(FUTEX_WAKE)"));
    }
    Ok(r as u32)
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
        // Unknown gate values fail open.
        cb.gate.store(7, Ordering::Relaxed);
        assert!(cb.gate_is_open());
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
