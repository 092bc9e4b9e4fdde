//! Who gets free SMs: the block dispatcher's rule, as MPS exposes it.
//!
//! Under MPS the kernels of every client are in one context and run at once;
//! when SMs free up (a block finished, a kernel ended), the pending blocks of
//! the ready kernels compete for them:
//!
//! * **Client priority** (`CUDA_MPS_CLIENT_PRIORITY`, 0 normal, 1 below
//!   normal; NVIDIA's MPS documentation, "Appendix: Tools and Interface
//!   Reference", `CUDA_MPS_CLIENT_PRIORITY`): the pending blocks of a higher
//!   priority client are dispatched first. It is a dispatch order only: a
//!   block already running is never preempted (the CUDA driver API's
//!   `cuStreamCreateWithPriority` documents the same for stream priorities:
//!   priorities "do not preempt already-running work").
//! * **Equal priority: arrival order, leftovers to the next**
//!   ([`crate::gpu::GpuParams::fifo_dispatch`], on since gpusim-2). The
//!   hardware dispatches the blocks of concurrent kernels in the order the
//!   kernels reached it: a kernel gets SMs only once every earlier
//!   kernel's blocks have all been dispatched, and takes what they leave
//!   over (the "left-over" policy: Pai et al., "Improving GPGPU
//!   concurrency with elastic kernels", ASPLOS 2013; Amert et al., "GPU
//!   scheduling on the NVIDIA TX2: hidden details revealed", RTSS 2017,
//!   its dispatch rules; Olmedo et al., "Dissecting the CUDA scheduling
//!   hierarchy", RTAS 2020). So a small kernel that arrives behind a
//!   training kernel with waves still pending waits until that kernel's
//!   last wave has started, not just for one block: this is what makes
//!   MPS at default priority slow inference down by 2x (H100, batch 32)
//!   to 11.8x (A100, Tally's pairs) where equal shares gave 1.15x. The
//!   engine counts in capacity units (thousandths of an SM): a kernel
//!   whose blocks hold only part of their SMs at their occupancy
//!   (`sm_share`, from its registers, shared memory and threads,
//!   [`crate::footprint`]) leaves the rest to co-resident blocks of other
//!   kernels. With `fifo_dispatch` off, the free SMs are shared equally
//!   among the ready kernels (water-filling), the model before gpusim-2.
//! * **`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`**: a client never holds more than
//!   its cap of SMs (the percentage of the GPU's SMs, rounded up).
//!
//! Without MPS the same rule runs inside the one context that holds the GPU
//! (its streams' kernels share SMs equally); the time-slice arbiter
//! ([`crate::timeslice`]) decides which context that is.

/// One ready kernel competing for SMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Client priority: 0 normal, higher numbers lower priority.
    pub priority: u8,
    /// Arrival order (lower first); breaks ties only in the order the
    /// shares are handed out, never in their size.
    pub seq: u64,
    /// SMs it could use now (its pending blocks over its blocks per SM,
    /// rounded up, within its client's cap).
    pub want: u32,
}

/// SMs per candidate (same order as `cands`) out of `free`: priority groups
/// in order; within a group, in arrival order, each taking all it wants
/// before the next gets the leftover (`fifo`), or equal shares; nobody
/// above its `want`.
#[must_use]
pub fn allocate(free: u32, cands: &[Candidate], fifo: bool) -> Vec<u32> {
    let mut got = Vec::new();
    allocate_into(free, cands, fifo, &mut got, &mut Vec::new());
    got
}

/// [`allocate`] into `got`, with `order` as scratch: no allocation once the
/// buffers have grown (the engine calls it at every dispatch).
pub fn allocate_into(
    free: u32,
    cands: &[Candidate],
    fifo: bool,
    got: &mut Vec<u32>,
    order: &mut Vec<usize>,
) {
    got.clear();
    if let [c] = cands {
        // One candidate (most calls): whichever the policy, it gets what
        // it wants of what is free.
        got.push(c.want.min(free));
        order.clear();
        return;
    }
    got.resize(cands.len(), 0);
    order.clear();
    order.extend((0..cands.len()).filter(|&i| cands[i].want > 0));
    // Almost every call has one or two candidates: skip the sort's call.
    let key = |i: usize| (cands[i].priority, cands[i].seq);
    match order.len() {
        0 | 1 => {}
        2 => {
            if key(order[1]) < key(order[0]) {
                order.swap(0, 1);
            }
        }
        _ => order.sort_unstable_by_key(|&i| key(i)),
    }
    let mut left = free;
    let mut start = 0;
    while start < order.len() && left > 0 {
        let p = cands[order[start]].priority;
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&i| cands[i].priority == p)
                .count();
        let group = &order[start..end];
        if fifo {
            for &i in group {
                let g = cands[i].want.min(left);
                got[i] = g;
                left -= g;
            }
        } else {
            // Water-filling: repeatedly give each unsatisfied member an
            // equal share of what is left (the first ones get the remainder).
            loop {
                let n = group.iter().filter(|&&i| got[i] < cands[i].want).count() as u32;
                if n == 0 || left == 0 {
                    break;
                }
                let share = (left / n).max(1);
                for &i in group {
                    if left == 0 {
                        break;
                    }
                    if got[i] < cands[i].want {
                        let g = share.min(cands[i].want - got[i]).min(left);
                        got[i] += g;
                        left -= g;
                    }
                }
            }
        }
        start = end;
    }
}

/// The SM cap of `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = pct` on a GPU of `sms` SMs.
#[must_use]
pub fn sm_cap(sms: u32, pct: u32) -> u32 {
    (u64::from(sms) * u64::from(pct.clamp(1, 100))).div_ceil(100) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(priority: u8, seq: u64, want: u32) -> Candidate {
        Candidate {
            priority,
            seq,
            want,
        }
    }

    #[test]
    fn higher_priority_pending_blocks_go_first() {
        // Low-priority training asked first and wants everything; the
        // high-priority kernel still gets all it wants.
        for fifo in [false, true] {
            let got = allocate(40, &[c(1, 1, 132), c(0, 2, 30)], fifo);
            assert_eq!(got, vec![10, 30]);
            let got = allocate(20, &[c(1, 1, 132), c(0, 2, 30)], fifo);
            assert_eq!(got, vec![0, 20]);
        }
    }

    #[test]
    fn equal_priority_shares_equally_and_leaves_no_sm_idle() {
        let fair = |free, cands: &[Candidate]| allocate(free, cands, false);
        assert_eq!(fair(132, &[c(0, 1, 132), c(0, 2, 132)]), vec![66, 66]);
        // One needs little: the other takes the rest.
        assert_eq!(fair(132, &[c(0, 1, 132), c(0, 2, 20)]), vec![112, 20]);
        // Odd numbers: every SM handed out, nobody above its want.
        let got = fair(7, &[c(0, 1, 5), c(0, 2, 5), c(0, 3, 5)]);
        assert_eq!(got.iter().sum::<u32>(), 7);
        assert!(got.iter().all(|&g| (2..=3).contains(&g)), "{got:?}");
        assert_eq!(fair(0, &[c(0, 1, 5)]), vec![0]);
    }

    #[test]
    fn equal_priority_in_arrival_order_gives_later_kernels_the_leftovers() {
        let fifo = |free, cands: &[Candidate]| allocate(free, cands, true);
        // The earlier kernel takes every SM it can use, whatever the order
        // the candidates are listed in.
        assert_eq!(fifo(132, &[c(0, 1, 132), c(0, 2, 132)]), vec![132, 0]);
        assert_eq!(fifo(132, &[c(0, 2, 10), c(0, 1, 132)]), vec![0, 132]);
        // Its last wave needs fewer: the next one gets the leftover.
        assert_eq!(fifo(132, &[c(0, 1, 100), c(0, 2, 132)]), vec![100, 32]);
        assert_eq!(fifo(0, &[c(0, 1, 5)]), vec![0]);
    }

    #[test]
    fn the_thread_percentage_caps_sms() {
        assert_eq!(sm_cap(132, 100), 132);
        assert_eq!(sm_cap(132, 50), 66);
        assert_eq!(sm_cap(132, 10), 14);
        assert_eq!(sm_cap(132, 0), 2, "clamped to 1 %");
    }
}
