//! The training budget: the SLO loop that adapts a GPU's active budget from
//! its inference clients' p99 latencies, and the budget's division among the
//! GPU's training clients.

use crate::client::Verdict;
use crate::estimate::quantile;
use crate::gpu::Gpu;
use crate::input::{Class, ClientId};
use crate::scheduler::{Scheduler, Split};

/// Completed requests between two SLO evaluations of one client; each
/// evaluation takes the p99 of exactly these requests.
pub const SLO_EVAL_EVERY: usize = 100;

impl Scheduler {
    /// A request of `id` completed at `end` after `lat` ns: statistics, hold,
    /// and the SLO loop.
    pub(crate) fn finish_request(&mut self, id: ClientId, lat: u64, end: u64) {
        let hold = self.cfg.request_hold_ns;
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        c.latencies.push(lat);
        c.histogram.record(lat);
        c.requests_done += 1;
        c.hold_until = c.hold_until.max(end.saturating_add(hold));
        let Some(target) = c.slo_p99_ns else { return };
        if c.class != Class::Inference {
            return;
        }
        c.since_eval += 1;
        if c.since_eval < SLO_EVAL_EVERY {
            return;
        }
        c.since_eval = 0;
        c.latencies.last_into(SLO_EVAL_EVERY, &mut self.scratch);
        let Some(p99) = quantile(&mut self.scratch, 0.99) else {
            return;
        };
        c.verdict = if p99 > target {
            Verdict::Above
        } else if (p99 as u128) * 10 < (target as u128) * 8 {
            Verdict::Below
        } else {
            Verdict::Within
        };
        let (verdict, gpu) = (c.verdict, c.gpu);
        let (lo, hi) = (self.cfg.min_active_budget_ns, self.cfg.max_active_budget_ns);
        let others_above = self.gpus.get(&gpu).is_some_and(|g| {
            g.members.iter().any(|m| {
                *m != id
                    && self
                        .clients
                        .get(m)
                        .is_some_and(|o| o.class == Class::Inference && o.verdict == Verdict::Above)
            })
        });
        if let Some(g) = self.gpus.get_mut(&gpu) {
            match verdict {
                Verdict::Above => {
                    g.active_budget_ns = (g.active_budget_ns / 10 * 7).max(lo);
                }
                Verdict::Below if !others_above => {
                    g.active_budget_ns = (g.active_budget_ns + (hi - lo) / 10).min(hi);
                }
                _ => {}
            }
        }
    }

    /// The budget each training client of `gid` gets now.
    pub(crate) fn client_budget(&self, _gid: u64, g: &Gpu) -> u64 {
        let total = if g.inference_active {
            g.active_budget_ns
        } else {
            self.cfg.idle_budget_ns
        };
        // At least 1 ns: a share that rounds down to 0 (a budget smaller than
        // the number of training clients) would keep a client with no backlog
        // closed for good. Only the block rule in effective_budget gives 0.
        match self.knobs.split {
            Split::Equal => (total / u64::from(g.n_training.max(1))).max(1),
            Split::Whole => total,
        }
    }

    /// [`Scheduler::client_budget`], or 0 while the variant that blocks
    /// training behind queued inference work applies.
    pub(crate) fn effective_budget(&self, gid: u64, g: &Gpu, now: u64) -> u64 {
        if self.knobs.block_while_inference_queued
            && g.members.iter().any(|id| {
                self.clients
                    .get(id)
                    .is_some_and(|c| c.class == Class::Inference && c.busy_until > now)
            })
        {
            0
        } else {
            self.client_budget(gid, g)
        }
    }
}
