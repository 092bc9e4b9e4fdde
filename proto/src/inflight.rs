//! The local in-flight bound: how a training shim keeps its own queued GPU
//! work under a budget without waiting for tandemd (DESIGN.md contract 8).
//!
//! tandemd's reader polls every millisecond or so, and work queued on a GPU
//! cannot be taken back; a bound that only closes once the reader has seen
//! an inference launch comes too late. So the shim measures and bounds its
//! own queue:
//!
//! * **What it charges.** Each launch is charged its estimate: the entry of
//!   its [`kernel_key`](crate::estimates::kernel_key) in the estimate table
//!   tandemd publishes into the client's region, or the control block's
//!   `default_est_ns` when there is none. `charged_ns` sums them.
//! * **What completed.** The shim's completion marks (driver events it
//!   records after launches, see the shim's `marks` module) carry the value
//!   of `charged_ns` when they were placed; when one is seen complete,
//!   `done_ns` rises to it ([`ControlBlock::complete_through`]), and a
//!   synchronisation that returns does the same with the value read when it
//!   began. So `inflight = charged_ns - done_ns` is the estimated GPU time of
//!   what was launched and not yet seen complete.
//! * **Which budget.** `budget_active_ns` while the GPU board says inference
//!   is active on this GPU ([`crate::board::Presence`]), `budget_idle_ns`
//!   otherwise. tandemd sets both (each training client's share of the GPU's
//!   budgets); 0 means no bound.
//! * **The rule** ([`admits`]): a launch may start when `inflight + est <=
//!   budget`, or when nothing is in flight at all, so a single kernel longer
//!   than the budget runs alone, never on top of queued work ("size-aware
//!   admission"). Otherwise the launching thread waits, bounded (the shim's
//!   50 ms), while the shim looks for completed marks; it places a mark
//!   after its last launch if none covers it, so the wait can end.
//!
//! Nothing here waits on tandemd: once the budgets and estimates are in
//! place the bound holds with tandemd stopped. Every field read is a claim
//! of the other side and bounded by construction (a wrong estimate or
//! budget changes how much this client queues, never whether it proceeds).

use core::sync::atomic::Ordering;

use crate::control::ControlBlock;

/// `class` value: nothing granted yet (fresh block).
pub const CLASS_NONE: u32 = 0;
/// `class` value: inference.
pub const CLASS_INFERENCE: u32 = 1;
/// `class` value: training.
pub const CLASS_TRAINING: u32 = 2;

/// Whether a launch estimated at `est_ns` may start with `inflight_ns` of
/// estimated work in flight under `budget_ns` (0: no bound). Pure: the shim
/// and the GPU-sharing model both decide with it.
#[inline(always)]
#[must_use]
pub const fn admits(budget_ns: u64, inflight_ns: u64, est_ns: u64) -> bool {
    budget_ns == 0 || inflight_ns == 0 || inflight_ns.saturating_add(est_ns) <= budget_ns
}

/// The budgets tandemd set for one client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budgets {
    /// Bound while no inference is active on the GPU (0: none).
    pub idle_ns: u64,
    /// Bound while inference is active (0: none).
    pub active_ns: u64,
    /// Charge for a launch with no published estimate.
    pub default_est_ns: u64,
    /// Hold after an inference bump.
    pub hold_ns: u64,
}

impl Budgets {
    /// Whether tandemd set a bound at all (it writes zeros for none).
    #[inline(always)]
    #[must_use]
    pub const fn bounded(&self) -> bool {
        self.idle_ns != 0 || self.active_ns != 0
    }

    /// The budget in force: the active one while inference is active on the
    /// client's GPU, the idle one otherwise.
    #[inline(always)]
    #[must_use]
    pub const fn in_force(&self, inference_active: bool) -> u64 {
        if inference_active {
            self.active_ns
        } else {
            self.idle_ns
        }
    }
}

impl ControlBlock {
    // ---------------- shim side ----------------

    /// Whether the shim holds its launches to `b` (this block's budgets):
    /// only when tandemd set a bound and asks for completion marks, since
    /// without marks nothing in flight is ever seen to end (tandemd sets no
    /// bound then either).
    #[inline(always)]
    #[must_use]
    pub fn bounds_locally(&self, b: &Budgets) -> bool {
        b.bounded() && self.mark_every_ns() != 0
    }

    /// The class tandemd granted ([`CLASS_NONE`], [`CLASS_INFERENCE`],
    /// [`CLASS_TRAINING`]; anything else reads as none).
    #[inline(always)]
    #[must_use]
    pub fn class(&self) -> u32 {
        match self.class.load(Ordering::Relaxed) {
            c @ (CLASS_INFERENCE | CLASS_TRAINING) => c,
            _ => CLASS_NONE,
        }
    }

    /// The budgets in force (Relaxed loads: a stale value only moves one
    /// launch's decision).
    #[inline(always)]
    #[must_use]
    pub fn budgets(&self) -> Budgets {
        Budgets {
            idle_ns: self.budget_idle_ns.load(Ordering::Relaxed),
            active_ns: self.budget_active_ns.load(Ordering::Relaxed),
            default_est_ns: self.default_est_ns.load(Ordering::Relaxed),
            hold_ns: self.hold_ns.load(Ordering::Relaxed),
        }
    }

    /// Estimated ns launched and not yet seen complete.
    #[inline(always)]
    #[must_use]
    pub fn inflight_ns(&self) -> u64 {
        self.charged_ns
            .load(Ordering::Relaxed)
            .saturating_sub(self.done_ns.load(Ordering::Relaxed))
    }

    /// Charge a launch; returns `charged_ns` after it (what a mark placed
    /// right after this launch covers).
    #[inline(always)]
    pub fn charge(&self, est_ns: u64) -> u64 {
        self.charged_ns
            .fetch_add(est_ns, Ordering::Relaxed)
            .wrapping_add(est_ns)
    }

    /// `charged_ns` now.
    #[inline(always)]
    #[must_use]
    pub fn charged_ns(&self) -> u64 {
        self.charged_ns.load(Ordering::Relaxed)
    }

    /// Everything charged up to `charged` has completed (a mark or a sync).
    /// Returns whether that moved `done_ns`.
    #[inline]
    pub fn complete_through(&self, charged: u64) -> bool {
        self.done_ns.fetch_max(charged, Ordering::Relaxed) < charged
    }

    /// A launch waited `ns` at the local bound.
    pub fn count_local_wait(&self, ns: u64) {
        self.local_waits.fetch_add(1, Ordering::Relaxed);
        self.local_wait_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The shim counted one more explicit request on its GPU's board
    /// (`requests_open` is what tandemd uncounts there when the client
    /// leaves, so it holds only requests the board counted). Called before
    /// the board's count: a process killed in between is repaired one too
    /// many, which the board stops at zero, rather than leaving the board
    /// counting a request nobody will end.
    pub fn count_request(&self) {
        self.requests_open.fetch_add(1, Ordering::Relaxed);
    }

    /// The shim uncounted one of them on the board (called after the
    /// board's, for the same reason). Never below zero.
    pub fn uncount_request(&self) {
        let _ = self
            .requests_open
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1));
    }

    /// The board slot the shim uses (`None`: none).
    pub fn set_board_slot(&self, slot: Option<usize>) {
        self.board_slot
            .store(slot.map_or(0, |s| s as u64 + 1), Ordering::Relaxed);
    }

    // ---------------- coordinator side ----------------

    /// Tell the shim its class ([`CLASS_INFERENCE`] or [`CLASS_TRAINING`]).
    pub fn set_class(&self, class: u32) {
        self.class.store(class, Ordering::Relaxed);
    }

    /// Set the budgets (see the module docs). Waiters notice within their
    /// wait slice.
    pub fn set_budgets(&self, b: Budgets) {
        self.default_est_ns
            .store(b.default_est_ns, Ordering::Relaxed);
        self.hold_ns.store(b.hold_ns, Ordering::Relaxed);
        self.budget_active_ns.store(b.active_ns, Ordering::Relaxed);
        self.budget_idle_ns.store(b.idle_ns, Ordering::Relaxed);
    }

    /// The board slot the shim reports using (untrusted; `None`: none).
    #[must_use]
    pub fn board_slot(&self) -> Option<usize> {
        match self.board_slot.load(Ordering::Relaxed) {
            0 => None,
            n => usize::try_from(n - 1).ok(),
        }
    }

    /// The open requests the shim reports (untrusted).
    #[must_use]
    pub fn requests_open(&self) -> u64 {
        self.requests_open.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::control_block;
    use crate::{Consumer, Mapping, RingLayout};

    #[test]
    fn admission_bounds_queued_work_and_lets_one_long_kernel_run_alone() {
        assert!(admits(0, u64::MAX, u64::MAX), "no budget: no bound");
        assert!(
            admits(1_000, 0, 50_000),
            "nothing in flight: even a long one"
        );
        assert!(admits(1_000, 400, 600));
        assert!(!admits(1_000, 400, 601));
        assert!(
            !admits(1_000, 1, 5_000),
            "a long kernel never joins a queue"
        );
        assert!(!admits(1_000, u64::MAX, 1), "saturates, never wraps");
    }

    #[test]
    fn counted_requests_never_go_below_zero() {
        let layout = RingLayout::new(16).unwrap();
        let m = Mapping::anonymous_shared(layout.region_len()).unwrap();
        let _c = Consumer::init(&m, layout, 3).unwrap();
        let cb = control_block(&m, layout).unwrap();
        cb.count_request();
        cb.count_request();
        assert_eq!(cb.requests_open(), 2);
        cb.uncount_request();
        cb.uncount_request();
        cb.uncount_request();
        assert_eq!(cb.requests_open(), 0, "an extra end uncounts nothing");
        cb.count_request();
        assert_eq!(cb.requests_open(), 1);
    }

    #[test]
    fn inflight_is_charged_minus_completed() {
        let layout = RingLayout::new(16).unwrap();
        let m = Mapping::anonymous_shared(layout.region_len()).unwrap();
        let _c = Consumer::init(&m, layout, 3).unwrap();
        let cb = control_block(&m, layout).unwrap();
        assert_eq!(cb.class(), CLASS_NONE);
        assert_eq!(cb.budgets(), Budgets::default(), "fresh: no bound");
        let a = cb.charge(300);
        let b = cb.charge(200);
        assert_eq!((a, b), (300, 500));
        assert_eq!(cb.inflight_ns(), 500);
        assert!(cb.complete_through(a));
        assert_eq!(cb.inflight_ns(), 200);
        assert!(!cb.complete_through(a), "an older mark moves nothing");
        assert!(cb.complete_through(b));
        assert_eq!(cb.inflight_ns(), 0);
        assert_eq!(cb.client_counters().inflight_ns, 0);
        cb.set_class(CLASS_TRAINING);
        cb.set_budgets(Budgets {
            idle_ns: 4_000_000,
            active_ns: 500_000,
            default_est_ns: 50_000,
            hold_ns: 1_000_000,
        });
        assert_eq!(cb.class(), CLASS_TRAINING);
        assert_eq!(cb.budgets().active_ns, 500_000);
        cb.class.store(77, Ordering::Relaxed);
        assert_eq!(cb.class(), CLASS_NONE, "garbage reads as none");
        cb.set_board_slot(Some(4));
        assert_eq!(cb.board_slot(), Some(4));
        cb.set_board_slot(None);
        assert_eq!(cb.board_slot(), None);
    }
}
