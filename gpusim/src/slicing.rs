//! Scheduler v3's candidate (d) in the model (issue 23): the shim slices a
//! long training kernel's grid into launches of at most
//! [`SliceCfg::max_ns`] each, so that the duration-aware hold of (c)
//! ([`crate::spatial`]) can stop training between slices instead of only
//! between kernels.
//!
//! A slice is a whole number of the kernel's waves: blocks `[i x n, (i + 1) x
//! n)` of the grid, launched with a block offset (Tally's slicing rewrites
//! the kernel's PTX to add it; Strati et al., Orion, and Zhao et al., Tally,
//! ASPLOS 2025). What it costs, in the model:
//!
//! * **A launch per extra slice**, [`SliceCfg::launch_ns`] of the job's CPU
//!   (the shim issues the slices back to back), and the GPU's
//!   `kernel_floor_ns` it already pays per kernel.
//! * **The tail**: each slice rounds up to its whole waves, so a kernel of 5
//!   waves in 2 slices runs 3 + 2 waves, as before, but in 3 slices 2 + 2 +
//!   1 (no loss), and a partial last wave is paid once per slice it is in.
//!
//! What slicing cannot do: a kernel of one wave (blocks that loop over
//! tiles for the kernel's whole life, a persistent GEMM) has nothing to cut
//! at; Tally turns such kernels into preemptible persistent-thread ones,
//! which this model does not. They are left whole.

use crate::gpu::waves;
use crate::trace::{Kernel, Op, Trace};
use crate::Ns;

/// The slicing's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceCfg {
    /// Longest slice, ns: kernels longer than this are cut.
    pub max_ns: Ns,
    /// CPU time of each extra slice's launch, ns.
    pub launch_ns: Ns,
}

impl Default for SliceCfg {
    /// Issue 23's 1 ms; a launch from the shim's own thread of about 2 us
    /// (assumed: a `cuLaunchKernel` of a loaded function, CPU side).
    fn default() -> Self {
        SliceCfg {
            max_ns: 1_000_000,
            launch_ns: 2_000,
        }
    }
}

/// `k` cut into slices of whole waves on a GPU of `sms` SMs, each at most
/// `cfg.max_ns` where its block time allows; `k` itself when it is short,
/// one wave, part of a CUDA graph, or of unknown occupancy.
#[must_use]
pub fn slice_kernel(k: &Kernel, sms: u32, cfg: &SliceCfg) -> Vec<Kernel> {
    let w = waves(k.blocks(), k.blocks_per_sm, sms);
    if k.duration_ns <= cfg.max_ns || w < 2 || k.graph != 0 || k.blocks_per_sm == 0 {
        return vec![k.clone()];
    }
    let block_ns = k.duration_ns / w;
    let per = (cfg.max_ns / block_ns.max(1)).clamp(1, w);
    let n = w.div_ceil(per);
    if n < 2 {
        return vec![k.clone()];
    }
    let wave_blocks = u64::from(sms) * u64::from(k.blocks_per_sm.max(1));
    let total = k.blocks();
    let mut out = Vec::with_capacity(n as usize);
    let mut done = 0u64;
    for i in 0..n {
        let blocks = (per * wave_blocks).min(total - done);
        let these = waves(blocks, k.blocks_per_sm, sms);
        let share = blocks as f64 / total as f64;
        out.push(Kernel {
            name: k.name.clone(),
            grid: [u32::try_from(blocks).unwrap_or(u32::MAX), 1, 1],
            duration_ns: block_ns * these,
            dram_bytes: (k.dram_bytes as f64 * share).round() as u64,
            host_gap_ns: if i == 0 { k.host_gap_ns } else { cfg.launch_ns },
            ..k.clone()
        });
        done += blocks;
    }
    out
}

/// `trace` with every kernel sliced ([`slice_kernel`]); other ops as they
/// are.
#[must_use]
pub fn slice_trace(trace: &Trace, sms: u32, cfg: &SliceCfg) -> Trace {
    let mut ops = Vec::with_capacity(trace.ops.len());
    for op in &trace.ops {
        match op {
            Op::Kernel(k) => ops.extend(slice_kernel(k, sms, cfg).into_iter().map(Op::Kernel)),
            other => ops.push(other.clone()),
        }
    }
    Trace {
        ops,
        ..trace.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(blocks: u32, bps: u32, duration_ns: Ns) -> Kernel {
        Kernel {
            dram_bytes: 1_000_000,
            host_gap_ns: 7_000,
            ..Kernel::new("sgemm_128x128", blocks, 256, bps, duration_ns)
        }
    }

    #[test]
    fn a_long_kernel_is_cut_into_whole_waves_of_at_most_the_limit() {
        // 10 waves of 400 us on 100 SMs, 2 blocks an SM: 4 ms. At most
        // 1 ms a slice is 2 waves (800 us): 5 slices of 400 blocks.
        let k = kernel(2_000, 2, 4_000_000);
        let s = slice_kernel(&k, 100, &SliceCfg::default());
        assert_eq!(s.len(), 5);
        assert!(s
            .iter()
            .all(|x| x.blocks() == 400 && x.duration_ns == 800_000));
        assert_eq!(s.iter().map(Kernel::blocks).sum::<u64>(), k.blocks());
        assert_eq!(s.iter().map(|x| x.duration_ns).sum::<u64>(), k.duration_ns);
        assert_eq!(s.iter().map(|x| x.dram_bytes).sum::<u64>(), k.dram_bytes);
        assert_eq!(s[0].host_gap_ns, 7_000, "the first slice is the launch");
        assert!(s[1..].iter().all(|x| x.host_gap_ns == 2_000));
    }

    #[test]
    fn a_partial_last_wave_stays_in_the_last_slice() {
        // 1,050 blocks, 100 an SM-wave (1 an SM, 100 SMs): 11 waves of
        // 300 us; 3 waves a slice: 3 + 3 + 3 + 2, the last with 150 blocks.
        let k = kernel(1_050, 1, 3_300_000);
        let s = slice_kernel(&k, 100, &SliceCfg::default());
        let blocks: Vec<u64> = s.iter().map(Kernel::blocks).collect();
        assert_eq!(blocks, [300, 300, 300, 150]);
        assert_eq!(s[3].duration_ns, 600_000);
    }

    /// In the matrix, beside A100 Whisper training (whose long GEMMs run
    /// many waves), slicing lets the hold stop training between slices:
    /// inference's p99 falls well below the hold's without slicing.
    #[test]
    fn slices_let_the_hold_stop_a_long_kernel_between_them() {
        use crate::matrix::{one_pair, Device};
        let get = one_pair(
            Device::A100,
            ("bert_ort", "whisper_large_v3_b16"),
            &["tandem_hold", "tandem_slice"],
            |_| {},
        );
        let p99 = |mode: &str| get(mode).0;
        assert!(
            p99("tandem_slice") < p99("tandem_hold") * 0.75,
            "sliced {} vs held whole {}",
            p99("tandem_slice"),
            p99("tandem_hold")
        );
    }

    #[test]
    fn short_one_wave_and_graph_kernels_stay_whole() {
        let cfg = SliceCfg::default();
        let short = kernel(2_000, 2, 900_000);
        assert_eq!(slice_kernel(&short, 100, &cfg), vec![short.clone()]);
        let persistent = kernel(100, 1, 5_000_000);
        assert_eq!(
            slice_kernel(&persistent, 100, &cfg),
            vec![persistent.clone()]
        );
        let node = Kernel {
            graph: 3,
            ..kernel(2_000, 2, 4_000_000)
        };
        assert_eq!(slice_kernel(&node, 100, &cfg), vec![node.clone()]);
        // Blocks longer than the limit: one wave a slice.
        let long_blocks = kernel(400, 2, 4_000_000);
        let s = slice_kernel(&long_blocks, 100, &cfg);
        assert_eq!(s.len(), 2);
        assert!(s.iter().all(|x| x.duration_ns == 2_000_000));
    }
}
