//! Scheduler v2's shim side in the model: the GPU board and the local
//! in-flight bound, with the shim's own pieces of `tandem-proto` (the real
//! [`Board`] in shared memory, [`Presence`], [`Announcer`], [`admits`], the
//! control block's budgets and charge/complete counters, the estimate
//! table), driven as `shim/src/client/local.rs` drives them:
//!
//! * an inference job bumps its GPU's slot when [`Announcer::due`] says so
//!   (before each launch), and at explicit request begin and end;
//! * a training job, before each launch, charges the launch the published
//!   estimate of its (function, grid) key or the default, and launches only
//!   when [`admits`] agrees under the active budget (the board says
//!   inference is active) or the idle one; otherwise it waits, and a
//!   completion mark is placed after its last launch if none covers what it
//!   charged;
//! * what completed: each mark carries `charged_ns` at its placement; when
//!   the GPU reaches it, `done_ns` rises to it at the next poll: the waiting
//!   thread's own poll ([`WAIT_POLL_NS`]) if a launch is waiting, else the
//!   watcher's (every [`crate::tandem::MARK_POLL_NS`] from the mark).
//!
//! The one simplification: the shim's wait polls every 50 us; here a wait
//! is re-checked exactly when something it depends on changes (a
//! completion seen, the board's hold running out, new budgets), which is at
//! most 50 us earlier than the shim would see it.

use tandem_proto::board::{Announcer, Board, Presence, BOARD_LEN};
use tandem_proto::estimates::{kernel_key, EstimateTable};
use tandem_proto::inflight::{admits, CLASS_INFERENCE, CLASS_TRAINING};
use tandem_proto::{ControlBlock, Mapping};

use crate::gpu::Ns;
use crate::trace::func_id;
use crate::trace::Kernel;

/// How often a launch waiting at the local bound polls its marks
/// (`WAIT_SLICE` in `shim/src/client/local.rs`; a test checks they agree).
pub const WAIT_POLL_NS: Ns = 50_000;
/// The GPU key every job of the model's one GPU reports.
pub const GPU_KEY: u64 = 1;

/// The node's board (one GPU: one slot).
pub struct NodeBoard {
    map: Mapping,
    slot: usize,
}

impl NodeBoard {
    /// A fresh board with the slot of [`GPU_KEY`] claimed (as tandemd does
    /// at the first Device report).
    #[must_use]
    pub fn new() -> NodeBoard {
        let map = Mapping::anonymous_shared(BOARD_LEN).expect("anonymous memory");
        // SAFETY: a fresh writable shared mapping of BOARD_LEN bytes, owned
        // by the NodeBoard and only accessed through atomics.
        let b = unsafe { Board::init(map.as_ptr(), map.len()) }.expect("a fresh board");
        let slot = b.claim(GPU_KEY).expect("an empty board has room");
        NodeBoard { map, slot }
    }

    fn slot(&self) -> &tandem_proto::board::Slot {
        // SAFETY: as in `new`; the mapping lives as long as `self`.
        let b = unsafe { Board::from_raw(self.map.as_ptr(), self.map.len()) }.expect("our board");
        b.slot(self.slot).expect("a claimed slot")
    }
}

impl Default for NodeBoard {
    fn default() -> Self {
        NodeBoard::new()
    }
}

/// What [`Local::before_launch`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The local bound lets the launch go (it is charged).
    Go,
    /// Wait; `mark`: place a completion mark after the job's last launch.
    Wait {
        /// No mark covers what the job has charged yet.
        mark: bool,
    },
}

/// One job's shim-side v2 state.
#[derive(Default)]
pub struct Local {
    presence: Presence,
    announcer: Announcer,
    /// Explicit requests open.
    open: u64,
    /// The launch being decided was charged already (it then waits at
    /// tandemd's gate, not at the local bound).
    charged_pending: bool,
    /// Waiting at the local bound (for a launch estimated at this).
    pub waiting: Option<u64>,
    /// `charged_ns` covered by the latest mark placed.
    covered: u64,
    /// Launches that waited at the local bound.
    pub waits: u64,
}

impl Local {
    /// Before a launch of `k` at `now` (see the module docs).
    pub fn before_launch(
        &mut self,
        now: Ns,
        cb: &ControlBlock,
        est: &EstimateTable,
        board: &NodeBoard,
        k: &Kernel,
    ) -> Verdict {
        let b = cb.budgets();
        match cb.class() {
            CLASS_INFERENCE => {
                if self.announcer.due(now, b.hold_ns) {
                    board.slot().bump();
                }
                Verdict::Go
            }
            CLASS_TRAINING if !self.charged_pending => {
                let key = kernel_key(func_id(&k.name), k.grid);
                let e = est.lookup(key).unwrap_or(b.default_est_ns);
                if cb.bounds_locally(&b)
                    && !admits(self.budget(now, cb, board), cb.inflight_ns(), e)
                {
                    if self.waiting.is_none() {
                        self.waits += 1;
                    }
                    self.waiting = Some(e);
                    let mark = self.covered < cb.charged_ns();
                    if mark {
                        self.covered = cb.charged_ns();
                    }
                    return Verdict::Wait { mark };
                }
                self.waiting = None;
                cb.charge(e);
                self.charged_pending = true;
                Verdict::Go
            }
            _ => Verdict::Go,
        }
    }

    /// The launch went ahead (after the local bound and tandemd's gate).
    pub fn launched(&mut self) {
        self.charged_pending = false;
        self.waiting = None;
    }

    /// A mark was placed after a launch: it covers what is charged now.
    pub fn mark_placed(&mut self, cb: &ControlBlock) -> u64 {
        self.covered = self.covered.max(cb.charged_ns());
        cb.charged_ns()
    }

    /// The budget in force at `now`.
    fn budget(&self, now: Ns, cb: &ControlBlock, board: &NodeBoard) -> u64 {
        let b = cb.budgets();
        let s = board.slot();
        b.in_force(self.presence.active(s.seq(), s.open(), now, b.hold_ns))
    }

    /// A waiting launch's second look at `now` (a completion was seen, the
    /// hold ran out, budgets changed): whether it now fits.
    #[must_use]
    pub fn fits(&self, now: Ns, cb: &ControlBlock, board: &NodeBoard) -> bool {
        self.waiting
            .is_some_and(|e| admits(self.budget(now, cb, board), cb.inflight_ns(), e))
    }

    /// When the board's hold last seen runs out (a waiting launch under the
    /// active budget looks again then).
    #[must_use]
    pub fn hold_ends(&self) -> Ns {
        self.presence.active_until()
    }

    /// An explicit request began or ended (an inference job).
    pub fn request(&mut self, begin: bool, cb: &ControlBlock, board: &NodeBoard) {
        // As the shim: only an inference client counts a request, and what
        // was counted is uncounted whatever the class is by then.
        if begin {
            if cb.class() != CLASS_INFERENCE {
                return;
            }
            self.open += 1;
            cb.count_request();
            board.slot().begin_request();
        } else if self.open > 0 {
            self.open -= 1;
            board.slot().end_request();
            cb.uncount_request();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_poll_is_the_shims() {
        let local = include_str!("../../shim/src/client/local.rs");
        assert!(local.contains("WAIT_SLICE: Duration = Duration::from_micros(50)"));
        assert_eq!(WAIT_POLL_NS, 50_000);
    }
}
