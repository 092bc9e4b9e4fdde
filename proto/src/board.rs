//! The GPU board: how an inference job tells the training jobs on its GPU
//! that it is active, within microseconds and with no coordinator in the
//! loop (DESIGN.md contract 8).
//!
//! One sealed memfd per node, created by tandemd and passed to every shim
//! that asks ([`crate::wire::Message::Board`]). It holds one slot per GPU:
//!
//! * inference shims write it: a slot's `seq` is bumped at a launch when
//!   that process's last bump is older than a quarter of the hold period (so
//!   at its first launch after idle, then a few times per hold while it keeps
//!   launching), and at every explicit request's and every sync's begin and
//!   end; `open` counts explicit requests in flight and syncs waiting (a
//!   thread blocked in a sync has work in flight on the GPU, which a
//!   GPU-bound request runs long after its last launch);
//! * training shims read it on their launch path (one Acquire load of `seq`,
//!   one Relaxed load of `open`) and hold their in-flight work to the
//!   *active* budget while the slot says inference is active, to the *idle*
//!   budget otherwise (see [`crate::control`], "Local in-flight bound").
//!
//! No timestamp crosses processes: jobs may live in different time
//! namespaces. Each reader keeps its own [`Presence`]: when it sees `seq`
//! move it notes the time on its own clock, and counts the GPU active until
//! `hold_ns` after that (or while `open > 0`, up to [`OPEN_STALE_NS`] after
//! it last saw `seq` move). An inference job that stops launching is
//! therefore seen idle at most `hold_ns` after the reader last saw it bump,
//! which errs towards inference, and one parked in a wait that never ends at
//! most [`OPEN_STALE_NS`] after.
//!
//! Trust: the board is writable only by shims tandemd let claim the
//! inference class (it sends the others a read-only descriptor, so their
//! mapping cannot write). A misbehaving inference job can make training
//! yield more than it should (it could do that by launching anyway) or
//! clear the word, which only harms other inference jobs. Every value read
//! is bounded before use: a slot index out of range is no slot, and an
//! `open` count left behind by a job that died is repaired by tandemd when
//! that job's client leaves ([`Board::end_requests`]); until then it costs
//! training throughput for at most [`OPEN_STALE_NS`], never a hang.
//!
//! # Layout
//!
//! | offset | size | field |
//! | ---: | ---: | --- |
//! | 0 | 8 | `magic` (`TANDEMBD`) |
//! | 8 | 4 | `version` ([`BOARD_VERSION`]) |
//! | 12 | 4 | `slots` ([`BOARD_SLOTS`]) |
//! | 16 | 112 | reserved |
//! | 128 + 128 i | 8 | slot i: `gpu`, the GPU's key (tandemd's hash of its uuid); 0: free |
//! | +8 | 8 | `seq`: bumped by inference shims |
//! | +16 | 8 | `open`: explicit requests in flight and inference syncs waiting |
//! | +24 | 104 | reserved |
//!
//! Slots are tandemd's alone to claim and release, from one thread: it
//! claims a GPU's slot (a compare-and-swap of `gpu` from 0,
//! [`Board::claim`]) when a client reports that GPU, and releases it
//! ([`Board::release`]) when the last client it knows on that GPU leaves or
//! moves to another. A client reporting made-up GPUs so holds one slot at a
//! time, not one each, and cannot leave a real GPU reported later without
//! one. Shims only look their GPU's slot up ([`Board::find`]); since a
//! released slot may be claimed for another GPU, a shim checks each time it
//! uses its slot that the slot's `gpu` is still its own
//! ([`Slot::belongs_to`]), and looks it up again when it is not.

use core::mem::{align_of, offset_of, size_of};

// Through the facade, so that `tests/models` checks this file's claims and
// counts under loom (the facade is std's atomics: nothing changes here).
use crate::sync::{AtomicU32, AtomicU64, Ordering};

use crate::error::{Error, Result};

pub use crate::magic::{BOARD_MAGIC, BOARD_VERSION};
/// GPU slots on the board.
pub const BOARD_SLOTS: usize = 64;
/// Bytes of the board (header line + one 128-byte line per slot).
pub const BOARD_LEN: usize = 128 * (1 + BOARD_SLOTS);

/// One GPU's line. Every field is atomic: any mapping process may write it.
#[repr(C, align(128))]
pub struct Slot {
    gpu: AtomicU64,
    seq: AtomicU64,
    open: AtomicU64,
    pad: [AtomicU64; 13],
}

#[repr(C, align(128))]
struct Header {
    magic: AtomicU64,
    version: AtomicU32,
    slots: AtomicU32,
    pad: [AtomicU64; 14],
}

/// The board as mapped: the header line, then [`BOARD_SLOTS`] slots.
#[repr(C, align(128))]
pub struct Board {
    header: Header,
    slots: [Slot; BOARD_SLOTS],
}

const _: () = {
    assert!(size_of::<Board>() == BOARD_LEN);
    assert!(align_of::<Board>() == 128);
    assert!(size_of::<Slot>() == 128);
    assert!(offset_of!(Board, slots) == 128);
    assert!(offset_of!(Slot, gpu) == 0);
    assert!(offset_of!(Slot, seq) == 8);
    assert!(offset_of!(Slot, open) == 16);
};

/// The GPU key of a device uuid: the scheduler's GPU group and the board
/// slot's `gpu` (never 0, which means unknown). Shim and tandemd both use
/// this one function.
#[must_use]
pub fn gpu_key(uuid: &[u8; 16]) -> u64 {
    let (a, b) = uuid.split_at(8);
    let a = u64::from_le_bytes(a.try_into().unwrap_or_default());
    let b = u64::from_le_bytes(b.try_into().unwrap_or_default());
    (a ^ b.rotate_left(29)).max(1)
}

impl Board {
    /// The board in `len` bytes at `base`, whose header is checked.
    ///
    /// # Safety
    /// `base..base+len` is a live mapping for `'a` (read-only is enough for
    /// the readers; the writers need it writable), only accessed atomically.
    pub unsafe fn from_raw<'a>(base: *const u8, len: usize) -> Result<&'a Board> {
        if base.is_null() || !(base as usize).is_multiple_of(128) {
            return Err(Error::RegionMisaligned {
                addr: base as usize,
                align: 128,
            });
        }
        if len < BOARD_LEN {
            return Err(Error::RegionTooSmall {
                len,
                needed: BOARD_LEN,
            });
        }
        // SAFETY: aligned, at least BOARD_LEN bytes, live for 'a (caller);
        // every field is an atomic, so any bytes are a valid Board.
        let b = unsafe { &*base.cast::<Board>() };
        let magic = b.header.magic.load(Ordering::Acquire);
        let version = b.header.version.load(Ordering::Relaxed);
        if magic != BOARD_MAGIC || version != BOARD_VERSION {
            return Err(Error::BoardHeader { magic, version });
        }
        Ok(b)
    }

    /// Initialise a fresh (zeroed) board in `base..base+len` (tandemd).
    ///
    /// # Safety
    /// As [`Board::from_raw`], and the mapping is writable.
    pub unsafe fn init<'a>(base: *mut u8, len: usize) -> Result<&'a Board> {
        if base.is_null() || !(base as usize).is_multiple_of(128) || len < BOARD_LEN {
            return Err(Error::RegionTooSmall {
                len,
                needed: BOARD_LEN,
            });
        }
        // SAFETY: as in from_raw (checked above); writable (caller).
        let b = unsafe { &*base.cast_const().cast::<Board>() };
        b.header.version.store(BOARD_VERSION, Ordering::Relaxed);
        b.header.slots.store(BOARD_SLOTS as u32, Ordering::Relaxed);
        b.header.magic.store(BOARD_MAGIC, Ordering::Release);
        Ok(b)
    }

    /// The slot of GPU `gpu` (non-zero), if one is claimed.
    #[must_use]
    pub fn find(&self, gpu: u64) -> Option<usize> {
        if gpu == 0 {
            return None;
        }
        self.slots
            .iter()
            .position(|s| s.gpu.load(Ordering::Acquire) == gpu)
    }

    /// The slot of `gpu`, claiming the first free one if none is (tandemd,
    /// which claims and releases from one thread). `None` for GPU 0 or a
    /// full board. Released slots leave holes below claimed ones, so the
    /// GPU's own slot is looked for first; the claim itself is a
    /// compare-and-swap from 0, so a writable mapping's stray write to a
    /// free slot is never overwritten and never taken for a claim.
    #[must_use]
    pub fn claim(&self, gpu: u64) -> Option<usize> {
        if gpu == 0 {
            return None;
        }
        if let Some(i) = self.find(gpu) {
            return Some(i);
        }
        // A swap that fails on the GPU's own key found its slot claimed
        // since the look-up.
        self.slots.iter().position(|s| {
            match s
                .gpu
                .compare_exchange(0, gpu, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => true,
                Err(g) => g == gpu,
            }
        })
    }

    /// Releases the slot of GPU `gpu` (tandemd: no client it knows is on
    /// that GPU any more), returning its index, or `None` when `gpu` has no
    /// slot. Its `open` count is cleared first, then `gpu` is set free with
    /// a compare-and-swap, so the next GPU to claim the slot starts with no
    /// request counted (`seq` keeps counting: readers take only its moves).
    /// A shim that still held the index finds the slot no longer its own
    /// ([`Slot::belongs_to`]) and looks its GPU's slot up again.
    pub fn release(&self, gpu: u64) -> Option<usize> {
        let i = self.find(gpu)?;
        let s = &self.slots[i];
        s.open.store(0, Ordering::Relaxed);
        s.gpu
            .compare_exchange(gpu, 0, Ordering::AcqRel, Ordering::Acquire)
            .ok()
            .map(|_| i)
    }

    /// Slot `i`, if in range.
    #[inline(always)]
    #[must_use]
    pub fn slot(&self, i: usize) -> Option<&Slot> {
        self.slots.get(i)
    }
}

impl Slot {
    /// The GPU key this slot belongs to (0: free).
    #[must_use]
    pub fn gpu(&self) -> u64 {
        self.gpu.load(Ordering::Acquire)
    }

    /// Whether this slot is GPU `gpu`'s (one Relaxed load of the line the
    /// caller reads `seq` and `open` from): false once tandemd released it,
    /// and for whatever GPU claimed it since.
    #[inline(always)]
    #[must_use]
    pub fn belongs_to(&self, gpu: u64) -> bool {
        gpu != 0 && self.gpu.load(Ordering::Relaxed) == gpu
    }

    /// Inference activity: bump the sequence (a writable mapping only).
    #[inline]
    pub fn bump(&self) {
        self.seq.fetch_add(1, Ordering::Release);
    }

    /// The activity sequence (one Acquire load).
    #[inline(always)]
    #[must_use]
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Explicit requests in flight on this GPU (one Relaxed load).
    #[inline(always)]
    #[must_use]
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Relaxed)
    }

    /// An explicit request began: count it open and bump.
    pub fn begin_request(&self) {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.bump();
    }

    /// An explicit request ended (one this process counted): uncount it and
    /// bump. Never goes below zero.
    pub fn end_request(&self) {
        self.end_requests(1);
        self.bump();
    }

    /// Uncount `n` requests (tandemd, for a client that left with `n` open;
    /// never below zero).
    pub fn end_requests(&self, n: u64) {
        let _ = self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(n))
            });
    }
}

impl Board {
    /// [`Slot::end_requests`] on slot `i` (out of range: nothing).
    pub fn end_requests(&self, i: usize, n: u64) {
        if let Some(s) = self.slot(i) {
            s.end_requests(n);
        }
    }
}

/// How long, at most, an `open` count keeps the GPU active while nothing
/// moves on the slot (its reader's clock), ns. A job that launches, polls,
/// or begins or ends a sync or a request bumps `seq`, which starts it again;
/// so only an inference job parked in one wait for longer (a hung kernel, a
/// stream waiting for an event nobody records, a request left open by a job
/// that stopped using the GPU) stops counting, and training stops yielding
/// to it. A wait that long on real work then costs inference some of its
/// reservation, never training its share for good. Far above any request
/// the model or the benchmarks run.
pub const OPEN_STALE_NS: u64 = 10_000_000_000;

/// A training shim's view of one slot: the last `seq` it saw, when it saw it
/// move and until when (its own clock) it counts the GPU active.
/// Process-local; pure logic, so that the GPU-sharing model runs the very
/// same rule.
#[derive(Debug, Default)]
pub struct Presence {
    seen: AtomicU64,
    until: AtomicU64,
    moved: AtomicU64,
}

impl Presence {
    /// Whether the GPU counts as inference-active at `now_ns` (the caller's
    /// clock), given the slot's `seq` and `open` as just loaded and the hold
    /// period. A moved `seq` starts a new hold from `now_ns`; an `open`
    /// count keeps it active until [`OPEN_STALE_NS`] after `seq` last moved.
    #[inline(always)]
    pub fn active(&self, seq: u64, open: u64, now_ns: u64, hold_ns: u64) -> bool {
        if seq != self.seen.load(Ordering::Relaxed) {
            self.seen.store(seq, Ordering::Relaxed);
            self.until
                .store(now_ns.saturating_add(hold_ns), Ordering::Relaxed);
            self.moved.store(now_ns, Ordering::Relaxed);
            return true;
        }
        now_ns < self.until.load(Ordering::Relaxed)
            || (open > 0
                && now_ns.saturating_sub(self.moved.load(Ordering::Relaxed)) < OPEN_STALE_NS)
    }

    /// Until when (the caller's clock) the last seen bump keeps the GPU
    /// active, if nothing else moves: when a waiting launch should look
    /// again.
    #[must_use]
    pub fn active_until(&self) -> u64 {
        self.until.load(Ordering::Relaxed)
    }

    /// Forget what was seen (a new board or slot).
    pub fn reset(&self) {
        self.seen.store(0, Ordering::Relaxed);
        self.until.store(0, Ordering::Relaxed);
        self.moved.store(0, Ordering::Relaxed);
    }
}

/// An inference shim's side: when it last bumped, and when a launch last
/// did (its own clock).
#[derive(Debug, Default)]
pub struct Announcer {
    last: AtomicU64,
    launched: AtomicU64,
}

impl Announcer {
    /// Whether a launch at `now_ns` should bump the slot: the last bump is
    /// older than a quarter of `hold_ns` (or there was none). Notes the bump,
    /// as a launch's.
    #[inline(always)]
    pub fn due(&self, now_ns: u64, hold_ns: u64) -> bool {
        if !self.bump_due(now_ns, hold_ns) {
            return false;
        }
        self.launched.store(now_ns.max(1), Ordering::Relaxed);
        true
    }

    /// Whether a poll at `now_ns` that found the process's work still on the
    /// GPU should bump the slot: as [`Self::due`], and only within
    /// [`OPEN_STALE_NS`] of the last bump a launch made, so that a job
    /// polling for work that never completes stops counting after that, as
    /// one parked in a sync does. Notes the bump, not as a launch's.
    #[inline(always)]
    pub fn due_polling(&self, now_ns: u64, hold_ns: u64) -> bool {
        let launched = self.launched.load(Ordering::Relaxed);
        if launched == 0 || now_ns.saturating_sub(launched) >= OPEN_STALE_NS {
            return false;
        }
        self.bump_due(now_ns, hold_ns)
    }

    /// The one rule both share: the last bump is older than a quarter of
    /// `hold_ns` (or there was none). Notes the bump.
    #[inline(always)]
    fn bump_due(&self, now_ns: u64, hold_ns: u64) -> bool {
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && now_ns.saturating_sub(last) < hold_ns / 4 {
            return false;
        }
        self.last.store(now_ns.max(1), Ordering::Relaxed);
        true
    }

    /// Forget the last bumps (a new board or slot).
    pub fn reset(&self) {
        self.last.store(0, Ordering::Relaxed);
        self.launched.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::Mapping;

    fn board(m: &Mapping) -> &Board {
        // SAFETY: a fresh anonymous mapping of BOARD_LEN bytes, page-aligned.
        unsafe { Board::init(m.as_ptr(), m.len()).unwrap() }
    }

    #[test]
    fn slots_are_claimed_once_per_gpu_and_found_again() {
        let m = Mapping::anonymous_shared(BOARD_LEN).unwrap();
        let b = board(&m);
        assert_eq!(b.find(7), None);
        assert_eq!(b.claim(0), None, "GPU 0 (unknown) has no slot");
        let a = b.claim(7).unwrap();
        assert_eq!(b.claim(7), Some(a));
        let c = b.claim(9).unwrap();
        assert_ne!(a, c);
        assert_eq!(b.find(9), Some(c));
        // SAFETY: as above; the same memory read as a second view.
        let again = unsafe { Board::from_raw(m.as_ptr(), m.len()).unwrap() };
        assert_eq!(again.find(7), Some(a));
        for g in 100..100 + BOARD_SLOTS as u64 - 2 {
            assert!(b.claim(g).is_some());
        }
        assert_eq!(b.claim(5000), None, "a full board claims nothing");
        assert!(b.slot(BOARD_SLOTS).is_none());
    }

    #[test]
    fn a_released_slot_is_free_for_another_gpu_with_no_request_counted() {
        let m = Mapping::anonymous_shared(BOARD_LEN).unwrap();
        let b = board(&m);
        assert_eq!(b.release(7), None, "GPU 7 has no slot");
        assert_eq!(b.release(0), None);
        let i = b.claim(7).unwrap();
        let s = b.slot(i).unwrap();
        s.begin_request();
        s.begin_request();
        assert!(s.belongs_to(7));
        assert_eq!(b.release(7), Some(i));
        assert!(!s.belongs_to(7), "released");
        assert!(!s.belongs_to(0), "a free slot is nobody's");
        assert_eq!(b.find(7), None);
        assert_eq!(b.claim(9), Some(i), "the first free slot is reused");
        // A hole below a GPU's slot is not a second slot for it.
        let k = b.claim(11).unwrap();
        assert!(b.release(9).is_some());
        assert_eq!(b.claim(11), Some(k), "GPU 11's own slot, not the hole");
        assert_eq!(b.claim(9), Some(i));
        assert!(s.belongs_to(9) && !s.belongs_to(7));
        assert_eq!(s.open(), 0, "GPU 9 inherits no open request of GPU 7");
        // Every slot can be had again: a board filled and emptied, GPU by
        // GPU, still takes a new GPU.
        for g in 100..100 + BOARD_SLOTS as u64 - 2 {
            assert!(b.claim(g).is_some());
        }
        assert_eq!(b.claim(5000), None, "full");
        assert!(b.release(100).is_some());
        assert!(b.claim(5000).is_some(), "a released slot takes a new GPU");
    }

    #[test]
    fn a_foreign_or_old_board_is_refused() {
        let m = Mapping::anonymous_shared(BOARD_LEN).unwrap();
        let read = |len| {
            // SAFETY: a live, aligned mapping of BOARD_LEN bytes; a shorter
            // `len` is refused before any read.
            unsafe { Board::from_raw(m.as_ptr(), len) }.map(|_| ())
        };
        assert!(matches!(
            read(BOARD_LEN),
            Err(Error::BoardHeader { magic: 0, .. })
        ));
        let b = board(&m);
        assert!(read(BOARD_LEN).is_ok());
        b.header.version.store(BOARD_VERSION + 1, Ordering::Relaxed);
        assert!(matches!(
            read(BOARD_LEN),
            Err(Error::BoardHeader { version, .. }) if version == BOARD_VERSION + 1
        ));
        assert!(matches!(read(64), Err(Error::RegionTooSmall { .. })));
    }

    #[test]
    fn presence_holds_after_each_bump_and_while_requests_are_open() {
        let m = Mapping::anonymous_shared(BOARD_LEN).unwrap();
        let b = board(&m);
        let s = b.slot(b.claim(3).unwrap()).unwrap();
        let p = Presence::default();
        let hold = 1_000;
        assert!(!p.active(s.seq(), s.open(), 10_000, hold), "never bumped");
        s.bump();
        assert!(p.active(s.seq(), s.open(), 20_000, hold));
        assert!(p.active(s.seq(), s.open(), 20_999, hold));
        assert!(!p.active(s.seq(), s.open(), 21_000, hold), "hold over");
        s.begin_request();
        assert!(p.active(s.seq(), s.open(), 50_000, hold));
        assert!(
            p.active(s.seq(), s.open(), 90_000, hold),
            "an open request keeps it active past the hold"
        );
        s.end_request();
        assert!(p.active(s.seq(), s.open(), 90_500, hold), "the end bumped");
        assert!(!p.active(s.seq(), s.open(), 91_500, hold));
        // An open count with nothing moving stops counting after
        // OPEN_STALE_NS (a job parked in a wait that never ends); the next
        // bump counts again.
        s.begin_request();
        let t = 200_000;
        assert!(p.active(s.seq(), s.open(), t, hold));
        assert!(p.active(s.seq(), s.open(), t + OPEN_STALE_NS - 1, hold));
        assert!(
            !p.active(s.seq(), s.open(), t + OPEN_STALE_NS, hold),
            "stale"
        );
        s.bump();
        let t = t + OPEN_STALE_NS + 5;
        assert!(p.active(s.seq(), s.open(), t, hold));
        assert!(
            p.active(s.seq(), s.open(), t + 5 * hold, hold),
            "open again past the hold"
        );
        s.end_request();
        // A dead client's open requests are repaired, never below zero.
        s.begin_request();
        s.begin_request();
        b.end_requests(b.find(3).unwrap(), 5);
        assert_eq!(s.open(), 0);
    }

    #[test]
    fn polls_bump_like_launches_but_only_within_the_stale_bound_of_a_launch() {
        let a = Announcer::default();
        let hold = 1_000_000;
        assert!(!a.due_polling(5, hold), "no launch yet");
        assert!(a.due(10, hold));
        assert!(!a.due_polling(100_000, hold), "a quarter hold not passed");
        assert!(a.due_polling(250_010, hold));
        assert!(!a.due(300_000, hold), "the poll's bump counts for launches");
        // Polling alone keeps bumping until OPEN_STALE_NS after the launch's.
        let polls = (1..100u64)
            .map(|i| i * OPEN_STALE_NS / 100)
            .filter(|&t| a.due_polling(t, hold))
            .count();
        assert_eq!(polls, 99);
        assert!(!a.due_polling(10 + OPEN_STALE_NS, hold), "stale");
        assert!(!a.due_polling(20 * OPEN_STALE_NS, hold));
        // A launch starts it again.
        let t = 20 * OPEN_STALE_NS;
        assert!(a.due(t, hold));
        assert!(a.due_polling(t + hold, hold));
        a.reset();
        assert!(!a.due_polling(t + 2 * hold, hold), "forgotten");
    }

    #[test]
    fn announcer_bumps_at_the_first_launch_after_idle_and_a_few_times_per_hold() {
        let a = Announcer::default();
        let hold = 1_000_000;
        assert!(a.due(5, hold), "first launch");
        assert!(!a.due(100_000, hold));
        assert!(a.due(250_005, hold), "a quarter hold later");
        let bumps = (0..1000u64)
            .filter(|i| a.due(250_005 + i * 10_000, hold))
            .count();
        // 10 ms of launches every 10 us: one bump per 250 us.
        assert!((38..=41).contains(&bumps), "{bumps} bumps");
    }
}
