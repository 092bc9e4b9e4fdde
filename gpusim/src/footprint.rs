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

use crate::gpu::SmResources;
use crate::trace::Kernel;

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
            name: "k".into(),
            grid: [1000, 1, 1],
            block: [threads, 1, 1],
            blocks_per_sm: bps,
            duration_ns: 1000,
            sm_share: 1.0,
            regs_per_thread: regs,
            smem_per_block: smem,
            dram_bytes: 0,
            graph: 0,
            stream: 0,
            host_gap_ns: 0,
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
    fn memory_share_is_bytes_over_peak_and_time() {
        let mut x = k(128, 4, 16, 0);
        assert_eq!(mem_frac(&x, 1555.0), 0.0, "unknown bytes");
        x.dram_bytes = 1_555_000 / 2;
        assert!((mem_frac(&x, 1555.0) - 0.5).abs() < 1e-9);
        x.dram_bytes = 10_000_000;
        assert_eq!(mem_frac(&x, 1555.0), 1.0, "clamped");
    }
}
