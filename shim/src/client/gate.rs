//! The gate stage on the shim's side: what a launch passes through before
//! the real driver call (`Session::gate`).
//!
//! First scheduler v2's local part (`super::local`: an inference client
//! announces itself on the GPU board; a training client waits, bounded,
//! until the launch fits its in-flight budget, making sure a completion mark
//! (`super::marks`) covers its queued work and polling the marks itself),
//! then the coordinator's gate and launch limit in the control block
//! (`tandem_proto::control`), waiting at most [`MAX_GATE_WAIT`] and less when
//! the coordinator's heartbeat stands still.

use core::sync::atomic::Ordering;
use std::time::Duration;

use tandem_proto::inflight::{admits, CLASS_INFERENCE, CLASS_TRAINING};
use tandem_proto::{monotonic_ns, ControlBlock};

use super::local::{MAX_LOCAL_WAIT, WAIT_SLICE};
use super::marks;
use super::session::Session;
use super::spatial::{self, MaskAsk};

/// Longest a closed gate holds one launch (contract: 50 ms).
pub const MAX_GATE_WAIT: Duration = Duration::from_millis(50);

impl Session {
    /// Before a launch of kernel `key`
    /// (`tandem_proto::estimates::kernel_key`): first scheduler v2's local
    /// part ([`super::local`]: a training client waits, bounded, until the
    /// launch fits its in-flight budget; an inference client announces itself
    /// on the board), then the coordinator's gate and launch limit, then the
    /// launch is counted: when allowed, two Acquire loads (gate, limit), one
    /// Relaxed load and one `fetch_add` of the session's launch counter; when
    /// the gate is closed or the launch is beyond the limit, a bounded wait
    /// first (at most 50 ms; less when the coordinator looks dead). Call once
    /// per launch (a graph launch is one), just before the real call.
    ///
    /// Returns whether the launch should carry the SM reservation's mask
    /// ([`super::spatial`], [`MaskAsk`]): only a training client's, only
    /// when tandemd asked for it, only while inference is active or (with a
    /// standing threshold, which tandemd publishes while an inference client
    /// is on the GPU) while it is idle, and only when the estimate reaches
    /// the minimum that applies (a necessary condition: the launch path then
    /// checks its blocks' time against it, [`super::spatial::holds_long`]).
    #[inline(always)]
    pub fn gate(&self, key: u32) -> MaskAsk {
        let mask = self.local_gate(key);
        if !self.control.launch_allowed() {
            self.wait_gate();
        }
        self.control.count_launch();
        mask
    }

    #[cold]
    #[inline(never)]
    fn wait_gate(&self) {
        let now = tandem_proto::monotonic_ns();
        let beat = self.control.heartbeat();
        if beat != self.last_beat.swap(beat, Ordering::Relaxed) {
            self.beat_seen_ns.store(now, Ordering::Relaxed);
        } else {
            let still = now.saturating_sub(self.beat_seen_ns.load(Ordering::Relaxed));
            if u128::from(still) >= self.stale_after.as_nanos() {
                // The coordinator stopped beating with the gate closed: fail open
                // without waiting (the watcher reconnects if it is gone).
                return;
            }
        }
        let _ = self.control.wait_launch(MAX_GATE_WAIT, self.stale_after);
    }

    /// Scheduler v2 before a launch of `key`: an inference client announces
    /// itself on the board; a training client waits (bounded) until the
    /// launch fits its local budget, then charges it, and learns whether the
    /// launch may carry the reservation's mask. Others: nothing.
    #[inline(always)]
    pub(crate) fn local_gate(&self, key: u32) -> MaskAsk {
        let cb = self.control();
        match cb.class() {
            CLASS_TRAINING => self.admit(cb, key),
            CLASS_INFERENCE => {
                self.local.announce(cb);
                MaskAsk::NONE
            }
            _ => MaskAsk::NONE,
        }
    }

    /// A query found this process's work still in flight: an inference
    /// client announces itself on the board, as at a launch (its host waits
    /// by polling), for up to `OPEN_STALE_NS` after its last launch's bump.
    /// Others: nothing.
    #[inline(always)]
    pub(crate) fn work_in_flight(&self) {
        let cb = self.control();
        if cb.class() == CLASS_INFERENCE {
            self.local.announce_polling(cb);
        }
    }

    #[inline(always)]
    fn admit(&self, cb: &ControlBlock, key: u32) -> MaskAsk {
        let b = cb.budgets();
        let est = self.local.estimate(key, b.default_est_ns);
        let sp = cb.spatial();
        let bounds = cb.bounds_locally(&b);
        let wants_mask = sp.reserve_permille != 0 && est >= sp.min_ns;
        let mut ask = MaskAsk::NONE;
        if bounds || wants_mask {
            let mut active = self.local.inference_active(monotonic_ns(), b.hold_ns);
            if bounds && !admits(b.in_force(active), cb.inflight_ns(), est) {
                self.wait_local(cb, est);
                active = self.local.inference_active(monotonic_ns(), b.hold_ns);
            }
            // Idle, only launches long enough to stand (0: none).
            let standing = sp.standing_ns != 0 && est >= sp.standing_ns;
            if wants_mask && (active || standing) && spatial::ready(cb, sp.reserve_permille) {
                ask = MaskAsk {
                    est: est.max(1),
                    min_block_ns: if active {
                        sp.min_ns
                    } else {
                        sp.min_ns.max(sp.standing_ns)
                    },
                };
            }
        }
        cb.charge(est);
        ask
    }

    /// Waits until a launch estimated at `est` fits, or [`MAX_LOCAL_WAIT`].
    #[cold]
    #[inline(never)]
    fn wait_local(&self, cb: &ControlBlock, est: u64) {
        let start = monotonic_ns();
        let max = MAX_LOCAL_WAIT.as_nanos() as u64;
        loop {
            // Our queued work can only be seen to complete through a mark
            // placed after it: make sure one is.
            marks::cover(self, cb.charged_ns());
            marks::poll_here(self);
            let now = monotonic_ns();
            let budget = self.local.budget(now, &cb.budgets());
            if admits(budget, cb.inflight_ns(), est) || now.saturating_sub(start) >= max {
                cb.count_local_wait(now.saturating_sub(start));
                return;
            }
            std::thread::sleep(WAIT_SLICE);
        }
    }
}
