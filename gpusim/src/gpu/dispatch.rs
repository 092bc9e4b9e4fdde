//! Handing out SMs: the time-slicer's arbitration, then free SMs to the
//! ready kernels by client priority and arrival (within each client's cap
//! and SM mask), in cohorts whose block time carries the interference and
//! DRAM contention of the moment they start.

use super::{round_ns, Client, Gpu, Ns, Running, MIN_COHORT, UNITS};
use crate::mps::{allocate_into, Candidate};
use crate::timeslice::{Action, Slicer};

impl Gpu {
    /// Arbitrate (time-slicing), then hand out free SMs.
    pub(super) fn schedule(&mut self, now: Ns) {
        if self.slicer.is_some() {
            loop {
                let has = self.has_work();
                let s = self.slicer.as_mut().expect("slicer");
                let action = s.decide(now, &has);
                self.alloc_scratch.2 = has;
                let s = self.slicer.as_mut().expect("slicer");
                match action {
                    Action::Stay => {
                        s.renew_if_due(now);
                        break;
                    }
                    Action::Idle => {
                        s.idle();
                        break;
                    }
                    Action::Resume(c) => {
                        s.resume(now, c);
                        self.resume_suspended(now, c);
                    }
                    Action::SwitchTo(c) => {
                        let holder = s.active;
                        s.start_switch(now, c);
                        if let Some(h) = holder {
                            self.suspend(now, h);
                        }
                        break;
                    }
                }
            }
        }
        self.dispatch(now);
    }

    fn dispatch(&mut self, now: Ns) {
        // The scratch buffers are fields of their own, borrowed apart from
        // the kernels and clients they are filled from (no moves per call).
        let (ids, cands, blocked) = &mut self.scratch;
        ids.clear();
        cands.clear();
        blocked.clear();
        fill_candidates(
            &self.kernels,
            &self.clients,
            self.params.sms,
            self.slicer.as_ref(),
            self.free_units,
            (ids, cands, blocked),
        );
        if cands.is_empty() {
            if !blocked.is_empty() {
                let blocked = std::mem::take(&mut self.scratch.2);
                self.spread_others(now, &blocked);
                self.scratch.2 = blocked;
            }
            return;
        }
        let free = u32::try_from(self.free_units).unwrap_or(u32::MAX);
        let (got, order, _) = &mut self.alloc_scratch;
        allocate_into(free, cands, self.params.fifo_dispatch, got, order);
        for i in 0..self.alloc_scratch.0.len() {
            let g = self.alloc_scratch.0[i];
            let (kid, units) = self.scratch.0[i];
            let sms = u64::from(g) / units;
            // Cohorts of fewer than MIN_COHORT SMs (unless that is all
            // the kernel wants) wait for more SMs to free up: a
            // granularity of the approximation that bounds the events.
            let want_sms = u64::from(self.scratch.1[i].want) / units;
            if sms >= MIN_COHORT.min(want_sms) && sms > 0 {
                self.start_cohort(now, kid, sms as u32);
            }
        }
    }

    fn start_cohort(&mut self, now: Ns, kid: usize, sms: u32) {
        let k = self.kernels[kid].as_ref().expect("kernel");
        let client = k.client;
        let others: u32 = self
            .clients
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != client)
            .map(|(_, c)| c.held)
            .sum();
        // (Exactly 1 without interference or without other clients' blocks:
        // the division is skipped, not the rule.)
        let slow = if self.params.interference == 0.0 || others == 0 {
            1.0
        } else {
            1.0 + self.params.interference * f64::from(others) / f64::from(self.params.sms)
        };
        let blocks = k.pending.min(u64::from(sms) * u64::from(k.bps));
        let sms = (blocks.div_ceil(u64::from(k.bps)) as u32).min(sms);
        let gain = super::dram::dram_gain(
            self.params.dram_saturating_share,
            self.params.sms,
            k.alone_sms,
            k.held + sms,
        );
        let mem = if self.params.dram_contention && k.mem_frac > 0.0 {
            self.dram_demand(kid, k.held + sms, gain).max(1.0)
        } else {
            1.0
        };
        let d = round_ns(k.block_ns * slow * ((1.0 - k.mem_frac) + k.mem_frac * mem / gain)).max(1);
        // A kernel's first wave starts together and ends together: only
        // its later blocks are taken to drift apart.
        let lockstep = !k.completed_any;
        let k = self.kernels[kid].as_mut().expect("kernel");
        k.dram_gain = gain;
        k.pending -= blocks;
        k.outstanding += blocks;
        k.held += sms;
        self.clients[client].held += sms;
        self.clients[client].sm_ns += f64::from(sms) * d as f64 * k.units as f64 / UNITS as f64;
        self.free_units -= u64::from(sms) * k.units;
        self.add_cohort(now + d, kid, sms, blocks, lockstep);
    }
}

/// The ready kernels that could take SMs now (`ids`: kernel and its units
/// per SM), and those that could use SMs but none is free.
fn fill_candidates(
    kernels: &[Option<Running>],
    clients: &[Client],
    gpu_sms: u32,
    slicer: Option<&Slicer>,
    free_units: u64,
    (ids, cands, blocked): (&mut Vec<(usize, u64)>, &mut Vec<Candidate>, &mut Vec<usize>),
) {
    for (kid, k) in kernels.iter().enumerate() {
        let Some(k) = k else { continue };
        if k.pending == 0 || !slicer.is_none_or(|s| s.runs(k.client)) {
            continue;
        }
        let c = &clients[k.client];
        let room = c.cfg.sm_cap.saturating_sub(c.held);
        let mut physical = gpu_sms.saturating_sub(k.held);
        if k.limit > 0 {
            // The client's masked kernels share the mask's SMs.
            let masked: u32 = kernels
                .iter()
                .flatten()
                .filter(|o| o.client == k.client && o.limit > 0)
                .map(|o| o.held)
                .sum();
            physical = physical.min(k.limit.saturating_sub(masked));
        }
        let sms = (k
            .pending
            .div_ceil(u64::from(k.bps))
            .min(u64::from(physical)) as u32)
            .min(room);
        // In capacity units: what it could take, what one SM costs it.
        let want = u64::from(sms) * k.units;
        if want == 0 || free_units < k.units {
            if want > 0 {
                blocked.push(kid);
            }
            continue;
        }
        ids.push((kid, k.units));
        cands.push(Candidate {
            priority: c.cfg.priority,
            seq: k.seq,
            want: u32::try_from(want).unwrap_or(u32::MAX),
        });
    }
}
