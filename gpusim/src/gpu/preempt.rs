//! The engine's two ways of taking SMs back from running blocks: spreading
//! lock-step cohorts (blocks drift apart; MPS never preempts) and
//! suspending a context's blocks at the end of its slice (time-slicing).

use super::{round_ns, Gpu, Ns};

impl Gpu {
    /// Ready kernels `waiting` found no free SM: the cohorts of other
    /// kernels that still run in lock-step are spread (see the module docs).
    pub(super) fn spread_others(&mut self, now: Ns, waiting: &[usize]) {
        let pieces = self.params.spread_pieces.max(1);
        // Pieces are added spread, so the slots they reuse or append are
        // never taken for targets: one pass over the slots as they were.
        for id in 0..self.cohorts.len() {
            let target = self.cohorts[id]
                .is_some_and(|c| !c.spread && c.sms > 1 && !waiting.contains(&c.kernel));
            if !target {
                continue;
            }
            let c = self.cohorts[id].take().expect("cohort");
            self.free_cohorts.push(id);
            let k = self.kernels[c.kernel].as_ref().expect("kernel");
            let d = k.block_ns;
            let n = pieces.min(c.sms);
            let (mut sms_left, mut blocks_left) = (c.sms, c.blocks);
            for i in 0..n {
                let sms = sms_left / (n - i);
                let blocks = if i + 1 == n {
                    blocks_left
                } else {
                    (c.blocks * u64::from(sms) / u64::from(c.sms)).min(blocks_left)
                };
                sms_left -= sms;
                blocks_left -= blocks;
                let end = now + round_ns(d * (f64::from(i) + 0.5) / f64::from(n)).max(1);
                self.add_cohort(end, c.kernel, sms, blocks, true);
            }
        }
    }

    /// Preempt `client`'s running cohorts (end of its slice).
    pub(super) fn suspend(&mut self, now: Ns, client: usize) {
        for id in 0..self.cohorts.len() {
            let Some(c) = self.cohorts[id] else { continue };
            let k = self.kernels[c.kernel].as_mut().expect("kernel");
            if k.client != client {
                continue;
            }
            self.cohorts[id] = None;
            self.free_cohorts.push(id);
            k.held -= c.sms;
            self.clients[client].held -= c.sms;
            self.free_units += u64::from(c.sms) * k.units;
            let remaining = c.end.saturating_sub(now).max(1);
            self.clients[client]
                .suspended
                .push((c.kernel, c.sms, c.blocks, remaining, c.spread));
        }
    }

    pub(super) fn resume_suspended(&mut self, now: Ns, client: usize) {
        let list = std::mem::take(&mut self.clients[client].suspended);
        for (kid, sms, blocks, remaining, spread) in list {
            let k = self.kernels[kid].as_mut().expect("kernel");
            k.held += sms;
            self.clients[client].held += sms;
            self.free_units -= u64::from(sms) * k.units;
            self.add_cohort(now + remaining, kid, sms, blocks, spread);
        }
    }
}
