//! The gates: each GPU's state re-evaluated at a time (share windows,
//! inference activity, the budget) and every gate, launch limit and local
//! bound that changes emitted; and when the next re-evaluation is due.

use std::ops::Bound;

use crate::gpu::SHARE_WINDOW_NS;
use crate::input::Class;
use crate::local::{allowance_for, budget_changed, local_budget};
use crate::output::{Allowance, Output};
use crate::scheduler::Scheduler;

/// How long a training client whose GPU is not known yet (group 0) is gated
/// as if inference shared its GPU, while any inference client is registered:
/// its device report normally follows within one reader pass of its first
/// launch; one that never comes stops costing after this.
pub const UNKNOWN_GPU_GRACE_NS: u64 = 1_000_000_000;

impl Scheduler {
    /// When the scheduler next wants a tick, as [`Scheduler::tick`] returns
    /// it; also valid right after [`Scheduler::handle`]. `None`: nothing
    /// changes with time alone.
    #[must_use]
    pub fn next_tick(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut want = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for (gid, g) in &self.gpus {
            let members = || g.members.iter().filter_map(|id| self.clients.get(id));
            if members().all(|c| c.gate_open) {
                continue;
            }
            let budget = self.effective_budget(*gid, g, self.now);
            if budget > 0 {
                for c in members().filter(|c| !c.gate_open) {
                    // backlog(t) < budget  <=>  t > busy_until - budget
                    want(c.busy_until.saturating_sub(budget).saturating_add(1));
                }
            }
            if g.inference_active {
                // The budget grows back to the idle one when the last
                // inference client turns inactive.
                if let Some(t) = members()
                    .filter(|c| c.class == Class::Inference)
                    .map(|c| c.active_until(&self.cfg))
                    .max()
                {
                    want(t);
                }
            }
            if self.knobs.block_while_inference_queued {
                if let Some(t) = members()
                    .filter(|c| c.class == Class::Inference && c.busy_until > self.now)
                    .map(|c| c.busy_until)
                    .max()
                {
                    want(t);
                }
            }
        }
        next.map(|t| t.max(self.now.saturating_add(1)))
    }

    pub(crate) fn eval_all(&mut self, now: u64, out: &mut Vec<Output>) {
        let mut cursor = self.gpus.keys().next().copied();
        while let Some(gid) = cursor {
            self.eval_gpu(gid, now, out);
            cursor = self
                .gpus
                .range((Bound::Excluded(gid), Bound::Unbounded))
                .next()
                .map(|(k, _)| *k);
        }
    }

    /// Recompute `gid`'s state at `now` and emit every gate change.
    /// The unknown GPU's training clients are held while inference runs on
    /// any GPU: after a change of the inference clients on `changed`,
    /// re-evaluate that group too.
    pub(crate) fn eval_unknown_gpu(&mut self, changed: u64, now: u64, out: &mut Vec<Output>) {
        if changed != 0 {
            self.eval_gpu(0, now, out);
        }
    }

    pub(crate) fn eval_gpu(&mut self, gid: u64, now: u64, out: &mut Vec<Output>) {
        let Some(g) = self.gpus.get_mut(&gid) else {
            return;
        };
        // Share windows.
        if now.saturating_sub(g.window_start) >= SHARE_WINDOW_NS {
            let two = now.saturating_sub(g.window_start) >= 2 * SHARE_WINDOW_NS;
            g.work_prev = if two { 0 } else { g.work_cur };
            g.train_prev = if two { 0 } else { g.train_cur };
            g.work_cur = 0;
            g.train_cur = 0;
            g.window_start = now;
            for id in &g.members {
                if let Some(c) = self.clients.get_mut(id) {
                    c.work_prev = if two { 0 } else { c.work_cur };
                    c.work_cur = 0;
                }
            }
        }
        let mut active = false;
        let mut n = 0u32;
        let mut n_inference = 0u32;
        for id in &g.members {
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            c.expire(now, &self.cfg);
            match c.class {
                Class::Training => n += 1,
                Class::Inference => {
                    n_inference += 1;
                    active |= c.inference_active(now, &self.cfg);
                }
            }
        }
        g.inference_active = active;
        g.n_training = n;
        let g = &self.gpus[&gid];
        let budget = self.effective_budget(gid, g, now);
        // The budget protects inference that may arrive; on a GPU with no
        // inference client there is nothing to protect, and a budget computed
        // from estimates (never corrected for a job that does not sync) would
        // only throttle training below what the GPU can do.
        let unguarded = n_inference == 0;
        // Except on the unknown GPU while inference runs anywhere: a training
        // job whose device report tandemd has not read yet may share a GPU
        // with it, and must not queue unbounded work there meanwhile.
        let inference_somewhere =
            gid == 0 && unguarded && self.clients.values().any(|c| c.class == Class::Inference);
        let default_ns = self.cfg.default_kernel_ns;
        let active_total = g.active_budget_ns;
        for id in &g.members {
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            let unknown_yet =
                inference_somewhere && now.saturating_sub(c.since) < UNKNOWN_GPU_GRACE_NS;
            let held_open =
                !self.cfg.enabled || (unguarded && !unknown_yet) || c.class == Class::Inference;
            let allowance = if held_open {
                Allowance::Unlimited
            } else {
                match allowance_for(budget, c.backlog(now), c.kernels.mean_launch_ns(default_ns)) {
                    // Unmeasured estimates are a guess: one launch at a time.
                    Allowance::Launches(n) if !c.kernels.measured() => {
                        Allowance::Launches(n.min(1))
                    }
                    a => a,
                }
            };
            let open = held_open || c.backlog(now) < budget;
            debug_assert_eq!(open, allowance != Allowance::Launches(0));
            // The shim sees its work complete only through completion marks:
            // without them no local bound (it could only wait out its bound).
            let local = (!held_open && self.cfg.mark_every_ns != 0).then(|| {
                local_budget(
                    &self.cfg,
                    active_total,
                    n.max(1),
                    c.kernels.measured(),
                    c.kernels.mean_launch_ns(default_ns),
                )
            });
            if budget_changed(c.budget, local) {
                c.budget = local;
                out.push(Output::Budget {
                    client: *id,
                    budget: local,
                });
            }
            // The limit first: a gate that opens finds its allowance in place.
            if allowance != c.allowance {
                c.allowance = allowance;
                out.push(Output::Limit {
                    client: *id,
                    beyond: allowance,
                });
            }
            if open != c.gate_open {
                c.gate_open = open;
                out.push(Output::Gate { client: *id, open });
            }
        }
    }
}
