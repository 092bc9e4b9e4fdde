//! What one block of a kernel holds of its SM, and what the kernel pulls
//! from DRAM: the two figures the engine needs to decide whether another
//! client's blocks fit beside it (co-residence) and how kernels that run at
//! once share the memory bandwidth.
//!
//! **Share of an SM.** An SM holds a block only while it has the block's
//! threads, registers, shared memory and a block slot free (CUDA
//! Programming Guide, "Hardware Multithreading" and the per-compute-
//! capability limits). A kernel at occupancy `b` blocks per SM holds the
//! largest of `b x` its block's share of each of the four; the rest of the
//! SM is room for another kernel's blocks. Registers are allocated per warp
//! in units of 256 (the occupancy calculator's register allocation unit on
//! compute capability 8.x and 9.x). A trace that carries neither registers
//! nor shared memory keeps its `sm_share` (default 1: the kernel holds its
//! SMs whole), so an unknown kernel never leaves room it may not have.
//!
//! One approximation: the engine pools the four resources into one number
//! per SM (the largest share), so two kernels co-reside only where the sum
//! of their largest shares fits, which is stricter than the hardware when
//! one is thread-heavy and the other shared-memory-heavy.

//!
//! **Occupancy of a live trace.** tandemd's capture knows a kernel's block,
//! registers per thread and shared memory (the shim sends what
//! `cuFuncGetAttribute` reports), not how many of its blocks an SM holds:
//! it writes `blocks_per_sm: 0`, and [`resolve_occupancy`] derives it here
//! by the occupancy rules of the device the model runs
//! ([`crate::synthetic_a100::occupancy`]: threads, registers rounded to 8
//! per thread and 256 per warp, shared memory plus 1 KB per block, block
//! slots). An unknown register count (0) binds nothing.

use crate::gpu::SmResources;
use crate::synthetic_a100::{occupancy, Family};
use crate::trace::{Kernel, Op, Trace};

/// Registers are allocated per warp in units of this many.
const REG_ALLOC_UNIT: u64 = 256;

/// The share (0..=1] of an SM that `k`'s blocks hold at its occupancy.
#[must_use]
pub fn sm_share(k: &Kernel, sm: &SmResources) -> f64 {
    if k.regs_per_thread == 0 && k.smem_per_block == 0 {
        return k.sm_share;
    }
    let threads: u64 = k.block.iter().map(|&b| u64::from(b.max(1))).product();
    let warps = threads.div_ceil(32);
    let regs =
        (u64::from(k.regs_per_thread) * 32).div_ceil(REG_ALLOC_UNIT) * REG_ALLOC_UNIT * warps;
    let per_block = [
        threads as f64 / f64::from(sm.threads),
        regs as f64 / f64::from(sm.regs),
        f64::from(k.smem_per_block) / f64::from(sm.smem),
        1.0 / f64::from(sm.blocks),
    ];
    let share = per_block.iter().copied().fold(0.0, f64::max) * f64::from(k.blocks_per_sm.max(1));
    share.clamp(0.001, 1.0)
}

/// The blocks of `k` one SM holds: the trace's, or where it gives 0 (a
/// live capture), the occupancy rules' for its block, registers and shared
/// memory on `sm`.
#[must_use]
pub fn blocks_per_sm(k: &Kernel, sm: &SmResources) -> u32 {
    if k.blocks_per_sm > 0 {
        return k.blocks_per_sm;
    }
    let f = Family {
        threads: k.block.iter().map(|&b| b.max(1)).product(),
        regs: k.regs_per_thread,
        smem: k.smem_per_block,
    };
    occupancy(f, *sm)
}

/// `t` with every kernel's `blocks_per_sm` of 0 derived ([`blocks_per_sm`]).
#[must_use]
pub fn resolve_occupancy(mut t: Trace, sm: &SmResources) -> Trace {
    for op in &mut t.ops {
        if let Op::Kernel(k) = op {
            k.blocks_per_sm = blocks_per_sm(k, sm);
        }
    }
    t
}

/// The share (0..=1) of `k`'s time alone that it pulls DRAM at the peak
/// bandwidth `dram_bytes_per_ns` (0 where its bytes are unknown).
#[must_use]
pub fn mem_frac(k: &Kernel, dram_bytes_per_ns: f64) -> f64 {
    if k.dram_bytes == 0 || k.duration_ns == 0 {
        return 0.0;
    }
    (k.dram_bytes as f64 / (dram_bytes_per_ns * k.duration_ns as f64)).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(threads: u32, bps: u32, regs: u32, smem: u32) -> Kernel {
        Kernel {
            regs_per_thread: regs,
            smem_per_block: smem,
            ..Kernel::new("k", 1000, threads, bps, 1000)
        }
    }

    #[test]
    fn the_scarcest_resource_decides_the_share() {
        let sm = SmResources::AMPERE;
        // A CUTLASS-style GEMM tile: 256 threads at 232 registers, 48 KB of
        // shared memory, one per SM: registers bind (59,392 of 65,536).
        let gemm = sm_share(&k(256, 1, 232, 48 * 1024), &sm);
        assert!((gemm - 59_392.0 / 65_536.0).abs() < 1e-9, "{gemm}");
        // An element-wise kernel: 128 threads, 16 registers, 4 per SM:
        // threads bind (512 of 2048).
        let elt = sm_share(&k(128, 4, 16, 0), &sm);
        assert!((elt - 0.25).abs() < 1e-9, "{elt}");
        // Shared memory binds: 2 x 80 KB of 163 KB.
        let attn = sm_share(&k(128, 2, 64, 80 * 1024), &sm);
        assert!((attn - 160.0 / 163.0).abs() < 1e-9, "{attn}");
        // Registers round up per warp: 33 registers take 40 per thread.
        let odd = sm_share(&k(1024, 1, 33, 1), &sm);
        assert!((odd - 1024.0 * 40.0 / 65_536.0).abs() < 1e-9, "{odd}");
        // Unknown resources: the trace's sm_share (default: the whole SM).
        assert!((sm_share(&k(128, 1, 0, 0), &sm) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_captured_kernel_gets_the_occupancy_its_resources_allow() {
        let sm = SmResources::AMPERE;
        // 256 threads at 128 registers: 32 K a block, two fit (as the
        // synthetic A100 traces' SGEMM family).
        assert_eq!(blocks_per_sm(&k(256, 0, 128, 0), &sm), 2);
        // Shared memory binds: 100 KB blocks, one per 163 KB.
        assert_eq!(blocks_per_sm(&k(64, 0, 32, 100 * 1024), &sm), 1);
        // Registers unknown: threads bind (2048 / 128).
        assert_eq!(blocks_per_sm(&k(128, 0, 0, 0), &sm), 16);
        // A trace that gives it keeps it.
        assert_eq!(blocks_per_sm(&k(128, 3, 32, 0), &sm), 3);
        let mut t = Trace {
            format: crate::trace::FORMAT.into(),
            job: "j".into(),
            class: crate::trace::JobClass::Training,
            source: "measured".into(),
            device: String::new(),
            notes: String::new(),
            ops: vec![Op::Kernel(k(256, 0, 128, 0))],
        };
        t = resolve_occupancy(t, &sm);
        assert_eq!(t.kernels().next().map(|k| k.blocks_per_sm), Some(2));
        t.check().expect("a resolved trace is valid");
    }

    #[test]
    fn memory_share_is_bytes_over_peak_and_time() {
        let mut x = k(128, 4, 16, 0);
        assert_eq!(mem_frac(&x, 1555.0), 0.0, "unknown bytes");
        x.dram_bytes = 1_555_000 / 2;
        assert!((mem_frac(&x, 1555.0) - 0.5).abs() < 1e-9);
        x.dram_bytes = 10_000_000;
        assert_eq!(mem_frac(&x, 1555.0), 1.0, "clamped");
    }
}
