//! Scheduler v3's reservation size (issue 23 (a)): how many SMs a training
//! job's mask leaves to inference while inference is active, learnt from the
//! widths of inference's own kernels. One definition, used by tandemd (fed
//! by the inference clients' LAUNCH records) and by the GPU-sharing model's
//! `tandem_spatial` (`gpusim/src/spatial.rs`), so that what the model
//! predicts is what the daemon does.
//!
//! * **Occupancy** ([`blocks_per_sm`]): the blocks of one kernel an SM holds
//!   at once, the least of its thread, register, shared-memory and block
//!   limits (CUDA Programming Guide, "Hardware Multithreading"; registers
//!   per thread rounded up to 8 and allocated per warp in units of 256,
//!   1 KB of shared memory reserved per block, as the occupancy calculator
//!   does on compute capability 8.x and 9.x). A register count or shared
//!   memory of 0 (unknown) binds nothing.
//! * **Width** ([`width`]): the SMs a launch's first wave fills, its blocks
//!   over its occupancy, at most the GPU.
//! * **`R`** ([`Widths::reserve`]): the [`ReserveRule::quantile`] of the last
//!   [`ReserveRule::window`] widths, rounded up to whole steps of
//!   [`ReserveRule::step`] SMs (2: a TPC, what a per-launch mask can leave),
//!   clamped to `[min_reserve, max_reserve_share x SMs]` (the latter to the
//!   nearest step), and whatever the training side's whole steps leave.

use std::collections::VecDeque;

/// One SM's capacity, as the device reports it
/// (`cuDeviceGetAttribute`: `MAX_THREADS_PER_MULTIPROCESSOR`,
/// `MAX_REGISTERS_PER_MULTIPROCESSOR`, `MAX_SHARED_MEMORY_PER_MULTIPROCESSOR`,
/// `MAX_BLOCKS_PER_MULTIPROCESSOR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmLimits {
    /// Resident threads.
    pub threads: u32,
    /// 32-bit registers.
    pub regs: u32,
    /// Shared memory for blocks, bytes.
    pub smem: u32,
    /// Resident blocks.
    pub blocks: u32,
}

/// Blocks of a kernel one SM holds (at least 1): `threads` per block,
/// `regs` per thread and `smem` bytes of shared memory per block (static
/// plus dynamic) on an SM of `sm`.
#[must_use]
pub fn blocks_per_sm(sm: SmLimits, threads: u32, regs: u32, smem: u32) -> u32 {
    let by_threads = sm.threads / threads.max(1);
    let warps = threads.max(1).div_ceil(32);
    let regs_per_warp = (regs.div_ceil(8) * 8 * 32).div_ceil(256) * 256;
    let by_regs = if regs == 0 {
        u32::MAX
    } else {
        sm.regs / (regs_per_warp * warps).max(1)
    };
    let by_smem = if smem == 0 {
        u32::MAX
    } else {
        sm.smem / smem.saturating_add(1024)
    };
    by_threads.min(by_regs).min(by_smem).min(sm.blocks).max(1)
}

/// The SMs a launch of `blocks` blocks at `blocks_per_sm` fills on a GPU of
/// `sms` SMs: its first wave.
#[must_use]
pub fn width(blocks: u64, blocks_per_sm: u32, sms: u32) -> u32 {
    blocks
        .div_ceil(u64::from(blocks_per_sm.max(1)))
        .min(u64::from(sms)) as u32
}

/// How `R` follows the widths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReserveRule {
    /// Fewest SMs reserved.
    pub min_reserve: u32,
    /// Most SMs reserved, as a share of the GPU's.
    pub max_reserve_share: f64,
    /// Inference launches whose widths `R` is learnt from.
    pub window: usize,
    /// The quantile of those widths `R` covers.
    pub quantile: f64,
    /// `R` in whole steps of this many SMs (2: a TPC).
    pub step: u32,
}

impl Default for ReserveRule {
    /// The GPU-sharing model's: at least 8 SMs, at most a quarter of the
    /// GPU, covering 9 in 10 of the last 128 launches, in TPCs.
    fn default() -> Self {
        ReserveRule {
            min_reserve: 8,
            max_reserve_share: 0.25,
            window: 128,
            quantile: 0.9,
            step: 2,
        }
    }
}

/// The last [`ReserveRule::window`] widths of one GPU's inference launches.
#[derive(Clone, Debug)]
pub struct Widths {
    rule: ReserveRule,
    sms: u32,
    widths: VecDeque<u32>,
    /// `widths`, sorted (kept so as each launch comes).
    sorted: Vec<u32>,
}

impl Widths {
    /// None yet, on a GPU of `sms` SMs.
    #[must_use]
    pub fn new(sms: u32, rule: ReserveRule) -> Widths {
        Widths {
            rule,
            sms,
            widths: VecDeque::new(),
            sorted: Vec::new(),
        }
    }

    /// The GPU's SMs.
    #[must_use]
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// Widths held (at most the window).
    #[must_use]
    pub fn len(&self) -> usize {
        self.widths.len()
    }

    /// Whether none was seen.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.widths.is_empty()
    }

    /// One inference launch `width` SMs wide; the oldest leaves a full window.
    pub fn push(&mut self, width: u32) {
        let width = width.min(self.sms);
        if self.widths.len() == self.rule.window.max(1) {
            if let Some(old) = self.widths.pop_front() {
                let at = self.sorted.partition_point(|&x| x < old);
                self.sorted.remove(at);
            }
        }
        self.widths.push_back(width);
        let at = self.sorted.partition_point(|&x| x < width);
        self.sorted.insert(at, width);
    }

    /// The most `R` may be: the share of the GPU to the nearest step.
    #[must_use]
    pub fn max_reserve(&self) -> u32 {
        let step = self.step();
        ((f64::from(self.sms) * self.rule.max_reserve_share / f64::from(step)).round() as u32
            * step)
            .clamp(step, self.sms.max(1))
    }

    fn step(&self) -> u32 {
        self.rule.step.clamp(1, self.sms.max(1))
    }

    /// The SMs reserved for inference now: the quantile of its widths in
    /// whole steps, clamped to the bounds (the minimum when none was seen),
    /// and whatever the training side's whole steps leave.
    #[must_use]
    pub fn reserve(&self) -> u32 {
        let step = self.step();
        let max = self.max_reserve();
        let min = self.rule.min_reserve.min(max);
        let want = if self.sorted.is_empty() {
            min
        } else {
            let w = &self.sorted;
            let i = ((w.len() - 1) as f64 * self.rule.quantile).round() as usize;
            (w[i.min(w.len() - 1)].div_ceil(step) * step).clamp(min, max)
        };
        self.sms - (self.sms.saturating_sub(want) / step * step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMPERE: SmLimits = SmLimits {
        threads: 2048,
        regs: 65_536,
        smem: 163 * 1024,
        blocks: 32,
    };

    #[test]
    fn occupancy_follows_the_tightest_resource() {
        // A 256-thread GEMM tile at 255 registers: registers bind (one).
        assert_eq!(blocks_per_sm(AMPERE, 256, 255, 0), 1);
        // 128 threads at 168 registers: 65,536 / (5,376 x 4 warps) = 3.
        assert_eq!(blocks_per_sm(AMPERE, 128, 168, 0), 3);
        // Element-wise, 128 threads, 16 registers: threads bind at 16.
        assert_eq!(blocks_per_sm(AMPERE, 128, 16, 0), 16);
        // 80 KB of shared memory and its 1 KB reserve: two fit in 163 KB.
        assert_eq!(blocks_per_sm(AMPERE, 128, 0, 80 * 1024), 2);
        // One-thread blocks: the block slots bind.
        assert_eq!(blocks_per_sm(AMPERE, 1, 0, 0), 32);
        // More than the SM holds still counts one.
        assert_eq!(blocks_per_sm(AMPERE, 1024, 255, 200 * 1024), 1);
    }

    #[test]
    fn a_width_is_the_first_wave_at_most_the_gpu() {
        assert_eq!(width(8, 32, 132), 1);
        assert_eq!(width(33, 32, 132), 2);
        assert_eq!(width(100_000, 2, 132), 132);
        assert_eq!(width(5, 0, 132), 5, "0 per SM counts as 1");
    }

    #[test]
    fn the_reserve_follows_the_widths_within_its_bounds() {
        let mut w = Widths::new(132, ReserveRule::default());
        assert_eq!(w.reserve(), 8, "nothing learnt: the minimum");
        for _ in 0..9 {
            w.push(3);
        }
        w.push(132);
        assert_eq!(w.reserve(), 8, "narrow kernels: the minimum");
        for _ in 0..10 {
            w.push(21);
        }
        assert_eq!(w.reserve(), 22, "21 SMs rounds up to 11 TPCs");
        for _ in 0..200 {
            w.push(1000);
        }
        assert_eq!(w.len(), 128, "the window");
        assert_eq!(w.reserve(), 34, "a quarter, 33, to the nearest TPC");
        assert_eq!(w.max_reserve(), 34);
    }

    #[test]
    fn the_reserve_is_the_quantile_of_the_last_window_of_widths() {
        let rule = ReserveRule {
            min_reserve: 1,
            max_reserve_share: 1.0,
            window: 5,
            quantile: 0.9,
            step: 1,
        };
        let mut w = Widths::new(132, rule);
        let widths = [40u32, 2, 90, 90, 7, 61, 3, 3, 120, 18, 55, 40, 9];
        for (n, &x) in widths.iter().enumerate() {
            w.push(x);
            let mut last: Vec<u32> = widths[(n + 1).saturating_sub(5)..=n].to_vec();
            last.sort_unstable();
            let i = ((last.len() - 1) as f64 * 0.9).round() as usize;
            assert_eq!(w.reserve(), last[i], "after {n}: {last:?}");
        }
    }

    #[test]
    fn training_keeps_whole_steps() {
        // Steps of 8 on 132 SMs: training keeps a multiple of 8, inference
        // the rest (the minimum of 8 and 132's remainder of 4).
        let rule = ReserveRule {
            step: 8,
            ..ReserveRule::default()
        };
        let w = Widths::new(132, rule);
        assert_eq!(w.reserve(), 12);
        assert_eq!((132 - w.reserve()) % 8, 0);
    }
}
