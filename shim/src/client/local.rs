//! Scheduler v2 on the shim's side: the GPU board and the local in-flight
//! bound (`tandem_proto::board`, `tandem_proto::inflight`).
//!
//! * An **inference** client bumps its GPU's board slot at a launch when its
//!   last bump is older than a quarter of the hold period (one clock read and
//!   one Relaxed load per launch; the bump itself a few times per hold), and
//!   at every explicit request begin and end.
//! * A **training** client charges each launch its estimate (the published
//!   estimate of its function and grid, else the default) and, before the
//!   launch, checks `tandem_proto::inflight::admits` against the active
//!   budget while the board says inference is active on its GPU, the idle
//!   one otherwise: a few Relaxed loads, one Acquire load of the slot's
//!   sequence and one clock read. When the launch does not fit, the thread
//!   waits (bounded, [`MAX_LOCAL_WAIT`]) for its own work to complete: it
//!   makes sure a completion mark covers its last launch, and polls the
//!   marks itself every [`WAIT_SLICE`].
//!
//! tandemd is not in this loop: the budgets, the hold and the estimates are
//! what it last wrote, and the board is shared memory between the shims, so
//! the bound holds while tandemd is stopped. The board is mapped by the
//! watcher when the Board message arrives, and its slot found once the GPU
//! is known and tandemd has claimed its slot: the watcher looks again every
//! [`super::watcher`] turn (at most 20 ms apart) until it is there.

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use tandem_proto::board::{Announcer, Board, Presence, Slot, BOARD_LEN};
use tandem_proto::estimates::EstimateTable;
use tandem_proto::inflight::{Budgets, CLASS_INFERENCE};
use tandem_proto::{monotonic_ns, ControlBlock};

/// Longest one launch waits at the local bound (as at a closed gate).
pub const MAX_LOCAL_WAIT: Duration = Duration::from_millis(50);
/// How often a waiting launch looks for completed marks.
pub const WAIT_SLICE: Duration = Duration::from_micros(50);

/// A session's board state and estimate table.
pub struct Local {
    estimates: &'static EstimateTable,
    /// `&'static Board` as an address, or 0 before the Board message.
    board: AtomicUsize,
    writable: AtomicBool,
    /// Slot index + 1; 0: none yet.
    slot: AtomicUsize,
    /// This client's GPU key (`tandem_proto::board::gpu_key`); 0: unknown.
    gpu: AtomicU64,
    presence: Presence,
    announcer: Announcer,
    /// Explicit requests this process counted on the board and has not
    /// ended (it alone decrements them).
    open: AtomicU64,
    /// `charged_ns` covered by the latest completion mark placed.
    covered: AtomicU64,
}

impl Local {
    pub(crate) fn new(estimates: &'static EstimateTable) -> Local {
        Local {
            estimates,
            board: AtomicUsize::new(0),
            writable: AtomicBool::new(false),
            slot: AtomicUsize::new(0),
            gpu: AtomicU64::new(0),
            presence: Presence::default(),
            announcer: Announcer::default(),
            open: AtomicU64::new(0),
            covered: AtomicU64::new(0),
        }
    }

    /// A mark was placed covering `charged` ns.
    pub(crate) fn cover(&self, charged: u64) {
        self.covered.fetch_max(charged, Ordering::Relaxed);
    }

    /// What the latest mark covers.
    pub(crate) fn covered(&self) -> u64 {
        self.covered.load(Ordering::Relaxed)
    }

    /// The slot in use, if any (one Relaxed load, then the board's), while
    /// it is still this client's GPU's: tandemd releases a GPU's slot when
    /// the last client it knows there leaves, and may give it to another
    /// GPU (a client whose Device report it had not read yet, or ignored,
    /// can still hold the index). A slot found to be another's is dropped,
    /// and the watcher looks the GPU's up again.
    #[inline(always)]
    fn slot(&self) -> Option<&'static Slot> {
        let i = self.slot.load(Ordering::Acquire);
        if i == 0 {
            return None;
        }
        let b = self.board.load(Ordering::Acquire);
        if b == 0 {
            return None;
        }
        // SAFETY: a non-zero `board` is the address of a leaked, validated
        // Board mapping (set in `attach_board`, never unmapped).
        let b = unsafe { &*(b as *const Board) };
        let s = b.slot(i - 1)?;
        if s.belongs_to(self.gpu.load(Ordering::Relaxed)) {
            Some(s)
        } else {
            self.lost_slot(i);
            None
        }
    }

    /// The slot at index `i - 1` is no longer this GPU's (see [`Self::slot`]).
    #[cold]
    #[inline(never)]
    fn lost_slot(&self, i: usize) {
        let _ = self
            .slot
            .compare_exchange(i, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// The estimate a launch of `key` is charged.
    #[inline(always)]
    pub(super) fn estimate(&self, key: u32, default_ns: u64) -> u64 {
        self.estimates.lookup(key).unwrap_or(default_ns)
    }

    /// The budget of `b` in force at `now`: the active one while the board
    /// says inference is active on this client's GPU.
    #[inline(always)]
    pub(super) fn budget(&self, now: u64, b: &Budgets) -> u64 {
        b.in_force(self.inference_active(now, b.hold_ns))
    }

    /// Whether the board says inference is active on this client's GPU at
    /// `now`, a bump keeping it so for `hold_ns`.
    #[inline(always)]
    pub(super) fn inference_active(&self, now: u64, hold_ns: u64) -> bool {
        self.slot()
            .is_some_and(|s| self.presence.active(s.seq(), s.open(), now, hold_ns))
    }

    /// The GPU became known (first launch's Device report).
    /// While tandemd has not claimed its slot yet (it does when it reads the
    /// Device report this precedes), the watcher is woken to look for it
    /// every [`super::watcher`] rescan instead of at its next slice.
    pub(crate) fn set_gpu(&self, gpu: u64, cb: &ControlBlock) {
        self.gpu.store(gpu, Ordering::Relaxed);
        self.resolve_slot(cb);
        if self.wants_slot() {
            super::wake::wake_watcher();
        }
    }

    /// Maps the board tandemd sent (watcher thread). Once per session, but
    /// for one upgrade: a client given a read-only board and later granted
    /// the inference class (an operator's set-class, a reload) is sent a
    /// writable one, which replaces it. The replaced mapping stays (launching
    /// threads may hold it); both map the same memory, so a slot keeps its
    /// index.
    pub(crate) fn attach_board(&self, fd: OwnedFd, writable: bool, cb: &ControlBlock) {
        if self.board.load(Ordering::Acquire) != 0
            && (!writable || self.writable.load(Ordering::Acquire))
        {
            return;
        }
        let map = if writable {
            tandem_proto::shm::map_received(fd.as_fd(), BOARD_LEN)
        } else {
            tandem_proto::shm::map_received_read_only(fd.as_fd(), BOARD_LEN)
        };
        let map = match map {
            Ok(m) => m,
            Err(e) => {
                crate::log!(Debug, "cannot map the GPU board: {e}");
                return;
            }
        };
        // Leaked: launching threads may hold the board for the rest of the process.
        let (base, len) = map.leak();
        // SAFETY: a live shared mapping of `len` bytes that is never unmapped,
        // accessed only through atomics (and only read when mapped read-only:
        // the shim writes a slot only after loading `writable` as true with
        // Acquire, which orders this Release store of the writable mapping's
        // address before it).
        match unsafe { Board::from_raw(base, len) } {
            Ok(b) => {
                self.board
                    .store(b as *const Board as usize, Ordering::Release);
                self.writable.store(writable, Ordering::Release);
                self.resolve_slot(cb);
            }
            Err(e) => crate::log!(Debug, "ignoring the GPU board: {e}"),
        }
    }

    /// Finds the slot of this client's GPU once both are known (tandemd
    /// claims it when it reads the client's Device report). Cheap when done;
    /// called again by the watcher while the board has no slot for the GPU.
    pub(crate) fn resolve_slot(&self, cb: &ControlBlock) {
        if self.slot.load(Ordering::Acquire) != 0 {
            return;
        }
        let (b, gpu) = (
            self.board.load(Ordering::Acquire),
            self.gpu.load(Ordering::Relaxed),
        );
        if b == 0 || gpu == 0 {
            return;
        }
        // SAFETY: as in `slot`.
        let b = unsafe { &*(b as *const Board) };
        if let Some(i) = b.find(gpu) {
            self.presence.reset();
            self.announcer.reset();
            self.slot.store(i + 1, Ordering::Release);
            cb.set_board_slot(Some(i));
        }
    }

    /// Whether the watcher should look for the slot again soon.
    pub(crate) fn wants_slot(&self) -> bool {
        self.slot.load(Ordering::Relaxed) == 0
            && self.board.load(Ordering::Relaxed) != 0
            && self.gpu.load(Ordering::Relaxed) != 0
    }

    /// An inference client's launch: bump the board slot when the last bump
    /// is older than a quarter of the hold period.
    #[inline(always)]
    pub(crate) fn announce(&self, cb: &ControlBlock) {
        // Acquire: a writable board seen here is the mapping `slot` loads.
        if !self.writable.load(Ordering::Acquire) {
            return;
        }
        if let Some(s) = self.slot() {
            if self.announcer.due(monotonic_ns(), cb.budgets().hold_ns) {
                s.bump();
            }
        }
    }

    /// An inference client's poll that found its work still on the GPU:
    /// bump as at a launch, while its last launch's bump is recent
    /// ([`Announcer::due_polling`]).
    #[inline(always)]
    pub(crate) fn announce_polling(&self, cb: &ControlBlock) {
        // Acquire: as in `announce`.
        if !self.writable.load(Ordering::Acquire) {
            return;
        }
        if let Some(s) = self.slot() {
            if self
                .announcer
                .due_polling(monotonic_ns(), cb.budgets().hold_ns)
            {
                s.bump();
            }
        }
    }

    /// An explicit request began (`begin`) or ended in this process.
    pub(crate) fn request(&self, begin: bool, cb: &ControlBlock) {
        // Only requests counted on the board are counted here and in the
        // control block (tandemd uncounts those on the board when this client
        // leaves): a request begun without a writable board, a slot or the
        // inference class is not counted at all, and one that was counted is
        // uncounted at its end even if the class or the board changed in
        // between.
        if begin {
            // Acquire: as in `announce`.
            if !self.writable.load(Ordering::Acquire) || cb.class() != CLASS_INFERENCE {
                return;
            }
            if let Some(s) = self.slot() {
                self.open.fetch_add(1, Ordering::Relaxed);
                cb.count_request();
                s.begin_request();
            }
        } else if self
            .open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1))
            .is_ok()
        {
            // Counted, so the writable board and its slot are there (a
            // writable board is never replaced by a read-only one); checked
            // anyway, since a write through a read-only mapping would kill
            // the program.
            if self.writable.load(Ordering::Acquire) {
                if let Some(s) = self.slot() {
                    s.end_request();
                }
            }
            cb.uncount_request();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::session::tests::session_on;

    /// tandemd releases a GPU's board slot when no client it knows is on
    /// that GPU and may give it to another GPU, while a client it did not
    /// count there (its Device report not read yet) still holds the index.
    /// That client must neither announce inference on the other GPU's slot
    /// nor take the other GPU's activity for its own, and must find its
    /// GPU's new slot.
    #[test]
    fn a_slot_given_to_another_gpu_is_dropped_and_looked_up_again() {
        let (fd, map) = tandem_proto::shm::create(c"tandem-test-board", BOARD_LEN).unwrap();
        // SAFETY: a fresh writable shared mapping of BOARD_LEN bytes, kept
        // for the test's length and accessed only through atomics.
        let board = unsafe { Board::init(map.as_ptr(), map.len()) }.unwrap();
        let (s, _ring) = session_on(-1);
        let (l, cb) = (&s.local, s.control());
        let hold = 1_000_000;
        let i = board.claim(7).unwrap();
        l.attach_board(fd, true, cb);
        l.set_gpu(7, cb);
        assert!(!l.wants_slot(), "found GPU 7's slot");
        l.announce(cb);
        let slot = board.slot(i).unwrap();
        let seq = slot.seq();
        assert!(seq > 0, "the launch announced inference on GPU 7");

        assert_eq!(board.release(7), Some(i));
        assert_eq!(board.claim(9), Some(i), "GPU 9 takes the freed slot");
        l.announcer.reset();
        l.announce(cb);
        assert_eq!(slot.seq(), seq, "GPU 9's slot is not bumped for GPU 7");
        assert!(l.wants_slot(), "the stale index was dropped");
        slot.bump();
        assert!(
            !l.inference_active(monotonic_ns(), hold),
            "GPU 9's inference is not GPU 7's"
        );

        let j = board.claim(7).unwrap();
        assert_ne!(i, j);
        l.resolve_slot(cb);
        assert!(!l.wants_slot());
        l.announce(cb);
        assert!(board.slot(j).unwrap().seq() > 0, "GPU 7's new slot");
        assert_eq!(cb.board_slot(), Some(j), "tandemd's repair goes there");
    }
}
