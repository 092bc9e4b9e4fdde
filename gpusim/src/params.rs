//! Every parameter of the model, with its value and where it comes from.
//!
//! Sources: **measured** (DESIGN.md "Facts", the H100 80GB HBM3 the
//! benchmark ran on), **public** (a published figure, cited), **assumed**
//! (a round engineering value, named as such, that the calibration rows do
//! not constrain much), or **fitted** (chosen so that the model reproduces
//! the measured rows; the fit is reported by `tandem-sim matrix` and in
//! `results/sim/matrix.md`).
//!
//! | parameter | value | source |
//! | --- | ---: | --- |
//! | SMs | 132 | public: H100 SXM5 has 132 SMs (NVIDIA's H100 whitepaper, as summarised at glennklockwood.com/garden/processors/h100) |
//! | tensor peak, fp16/bf16 dense | 989.4 TFLOP/s | public: same source |
//! | DRAM bandwidth | 3.35 TB/s | public: same source |
//! | threads per SM | 2048 (8 blocks of 256 threads) | public: compute capability 9.0 limits (CUDA programming guide) |
//! | tensor efficiency of an eager GEMM/conv tile, `gemm_eff` | 0.15 | fitted, with the timeslice, to the plain-sharing rows (3.1x at batch 4, 1.8x at batch 32: the model gives 3.28x and 1.66x over 3 seeds); it makes ResNet50 bf16 batch 64 a 27.0 ms step (2,370 img/s; public context: DeepLearningExamples' ResNet50 trains at 2,470 img/s with AMP on one A100 80GB, channels-last and DALI) and batch-32 inference 4.3 ms of GPU per request |
//! | co-residence: the share of an SM a kernel's blocks hold | derived per kernel | its registers, shared memory, threads and block slots at its occupancy ([`crate::footprint`]); the synthetic traces carry each kernel family's published launch configuration ([`crate::synthetic`]), a captured trace the function's attributes. Replaces gpusim-1's fitted `gemm_sm_share` (0.6 on every GEMM tile), which a measured trace could not supply |
//! | block dispatch among kernels of one priority, `fifo_dispatch` | arrival order, leftovers to later kernels | public: the hardware's "left-over" policy (Pai et al., ASPLOS 2013; Amert et al., RTSS 2017; Olmedo et al., RTAS 2020); [`crate::mps`] |
//! | DRAM bandwidth sharing, `dram_contention` | on | mechanism: kernels that run at once pull from one DRAM; when their demands (each its bytes over its time alone, in proportion to the SMs it holds) exceed the peak, the memory-bound share of a block's time stretches by the oversubscription ([`crate::gpu`]) |
//! | the share of SMs that saturate DRAM, `dram_saturating_share` | 1 | none yet: 1 keeps gpusim-3's rule (a kernel given fewer SMs than it fills loses bandwidth with them, bandwidth-bound or not), which issue 22 lists among the doubted assumptions; `scripts/gpu/engine_rules.py` (prove part 4) measures a streaming copy's bandwidth by SMs, and its `share_of_sms_for_90pct`, once a GPU run committed `tests/traces/engine_rules.json`, replaces this value in the set of the GPU that measured it only: DRAM differs between an H100 and an H200 ([`crate::measured::sets`]) |
//! | memory efficiency of element-wise kernels, `mem_eff` | 0.7 | assumed |
//! | GPU time of an empty kernel, `kernel_floor_ns` | 2.5 us | assumed; `scripts/gpu/engine_rules.py` measures it (an empty kernel queued back to back), and `tests/traces/engine_rules.json`, once a GPU run committed it, replaces this value in the sets of the measuring GPU's die (an H200's stands for the H100 too; [`crate::measured::sets`]) |
//! | copy bandwidth, latency | 25 GB/s, 10 us | assumed (PCIe Gen5 x16 is 64 GB/s per direction; pinned PyTorch copies reach well under it) |
//! | timeslice, `timeslice_ns` | 5 ms | fitted (see `gemm_eff`); public context: `nvidia-smi compute-policy --set-timeslice` offers levels of 2 ms (short), 10 ms (medium) and 30 ms (long) (Red Hat's GPU time-slicing module); the default's length is not published in NVIDIA's documentation; the driver's source sets a channel group's default timeslice to 1024 us on Volta and later (open-gpu-kernel-modules `kfifoChannelGroupGetDefaultTimeslice_GV100`: `NV_RAMRL_ENTRY_TSG_TIMESLICE_TIMEOUT_128 << NV_RAMRL_ENTRY_TSG_TIMESLICE_SCALE_3`), which this model cannot take (the H100 batch-4 plain point falls from 2.8x to 1.25x against 3.1x: `docs/MODEL.md` row 9), so the fitted value stays. `scripts/gpu/trace_capture.py` measures it, and `tests/traces/timeslice.json`, once a GPU run committed it, replaces this value in the sets of the measuring GPU's die (an H200's stands for the H100 too; [`crate::measured::sets`]) |
//! | context switch, `switch_ns` | 15 us | fitted to plain sharing's training fraction (0.85 measured; the model gives 0.82-0.83); the same microbenchmark measures it (replaced the same way) |
//! | MPS interference, `interference` | 0 (H100), 0.7 (A100) | fitted per device: on the H100, positive values lowered the MPS training fractions below the measured ones; on the A100, to its fit set (the Llama-2 pairs under MPS and MPS + priority: `synthetic_a100::A100_INTERFERENCE`); on the H100, once `tests/traces/engine_rules.json` carries `scripts/gpu/engine_rules.py`'s neighbours (prove part 4), their compute loop's slowdown on SMs of its own beside another kernel on the rest, over that kernel's share of the SMs ([`crate::measured`]) |
//! | cohort spread pieces | 4 | assumed (the approximation of drifting block phases, [`crate::gpu`]) |
//! | inference CPU time per kernel, `resnet_launch_ns` (x1.4 for a convolution, x0.7 for element-wise ops) | 31 us | fitted with `cpu_cv` to the alone p99s (48.7 ms at batch 4 and 100 req/s, 27.2 ms at batch 32 and 40 req/s; the model gives 37.9 and 20.2 ms over 3 seeds, and the facts report 126.5 ms for the same batch-4 job on another machine); public context: DeepLearningExamples' PyTorch ResNet50 with AMP on a V100 has a mean latency of 12.8-14.0 ms for every batch from 1 to 16: an eager forward is launch-bound |
//! | per-request CPU speed variation, `cpu_cv` | 0.4 | fitted with the launch cost (a lower variation with a higher cost put batch 4 so close to saturation that any slowdown exploded its p99) |
//! | BERT CPU time per kernel, `bert_launch_ns` | 31 us | assumed: ResNet's (same eager path); its rate is half its alone service rate, as in the benchmark |
//! | training CPU time per op, `train_fwd_ns` / `train_bwd_ns` / `train_opt_ns` | 15 / 6 / 30 us | assumed (forward from Python, backward from the autograd engine's thread, optimizer `foreach` calls); the training jobs are GPU-bound |
//! | per-step CPU variation of training, `train_cv` | 0.03 | assumed |
//! | CPU time of one whole-request `cuGraphLaunch`, `graph_launch_ns` | 10 us | assumed (a graph launch costs the CPU a few microseconds however many nodes it has; NVIDIA's "Getting started with CUDA Graphs" blog measures the launch of a 20-kernel graph at a few us) |
//! | the shim's gate wait bound, mark poll, mark slots | 50 ms, 200 us, 32 | tandem's code (`shim/src/client/`), checked by a test |
//! | tandemd's reader periods | 1 ms busy, 10 ms idle, 250 us after opening a gate, >= 50 us | tandem's code (`coordinator/src/reader.rs`, called directly) |

use crate::gpu::{GpuParams, Ns, Sharing, SmResources};

/// The model's parameters (see the module docs for each one's source).
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    /// The GPU.
    pub gpu: GpuParams,
    /// Tensor FLOP per ns of one SM at peak.
    pub sm_flop_per_ns: f64,
    /// Fraction of peak a GEMM/conv tile reaches.
    pub gemm_eff: f64,
    /// Fraction of peak bandwidth an element-wise kernel reaches.
    pub mem_eff: f64,
    /// GPU time of the smallest kernel.
    pub kernel_floor_ns: Ns,
    /// Plain sharing's slice.
    pub timeslice_ns: Ns,
    /// Plain sharing's switch cost.
    pub switch_ns: Ns,
    /// Inference CPU time per kernel launched (ResNet50).
    pub resnet_launch_ns: Ns,
    /// Inference CPU time per kernel launched (BERT).
    pub bert_launch_ns: Ns,
    /// Per-request CPU speed variation (coefficient of variation).
    pub cpu_cv: f64,
    /// Training CPU time per forward op.
    pub train_fwd_ns: Ns,
    /// Training CPU time per backward kernel.
    pub train_bwd_ns: Ns,
    /// Training CPU time per optimizer launch.
    pub train_opt_ns: Ns,
    /// Per-step CPU speed variation of training.
    pub train_cv: f64,
    /// CPU time of one `cuGraphLaunch` of a whole request's graph.
    pub graph_launch_ns: Ns,
}

/// The model's version: bump it whenever a parameter or a mechanic changes,
/// so that committed results say which model made them.
pub const MODEL_VERSION: &str = "gpusim-3";

impl Params {
    /// The calibrated parameters.
    #[must_use]
    pub fn calibrated() -> Params {
        Params {
            gpu: GpuParams {
                sms: 132,
                interference: 0.0,
                copy_bytes_per_ns: 25.0,
                copy_latency_ns: 10_000,
                spread_pieces: 4,
                sm: SmResources::HOPPER,
                dram_bytes_per_ns: 3350.0,
                fifo_dispatch: true,
                dram_contention: true,
                dram_saturating_share: 1.0,
            },
            sm_flop_per_ns: 989.4e3 / 132.0,
            gemm_eff: 0.15,
            mem_eff: 0.7,
            kernel_floor_ns: 2_500,
            timeslice_ns: 5_000_000,
            switch_ns: 15_000,
            resnet_launch_ns: 31_000,
            bert_launch_ns: 31_000,
            cpu_cv: 0.4,
            train_fwd_ns: 15_000,
            train_bwd_ns: 6_000,
            train_opt_ns: 30_000,
            train_cv: 0.03,
            graph_launch_ns: 10_000,
        }
    }

    /// The H200 SXM 141GB over `h100`'s parameters: the same GH100 die (132
    /// SMs, the same tensor peak and clocks), with HBM3e at 4.8 TB/s for the
    /// H100's 3.35 (public: NVIDIA's H200 datasheet, as summarised at
    /// aiwiki.ai/wiki/nvidia_h200). Everything else is the H100's: fitted,
    /// or what a GPU measured where `crate::measured` applied it to `h100`.
    /// The fitted CPU costs are the H100 benchmark machine's, not the H200
    /// machine's.
    /// The share of SMs that saturate DRAM is the DRAM's: not the H100's
    /// measured one, but the fitted rule until an H200 measures its own.
    #[must_use]
    pub fn h200_over(h100: &Params) -> Params {
        Params {
            gpu: GpuParams {
                dram_bytes_per_ns: 4800.0,
                dram_saturating_share: Params::calibrated().gpu.dram_saturating_share,
                ..h100.gpu.clone()
            },
            ..h100.clone()
        }
    }

    /// Plain sharing with these parameters.
    #[must_use]
    pub fn plain(&self) -> Sharing {
        Sharing::TimeSlice {
            timeslice_ns: self.timeslice_ns,
            switch_ns: self.switch_ns,
        }
    }

    /// Overrides one parameter by name (`tandem-sim --set KEY=VALUE`, for
    /// fitting and what-if runs).
    ///
    /// # Errors
    /// An unknown key or a value that does not parse.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let v: f64 = value
            .parse()
            .map_err(|_| format!("{key}: {value:?} is not a number"))?;
        let ns = v.max(0.0).round() as Ns;
        match key {
            "interference" => self.gpu.interference = v,
            "spread_pieces" => self.gpu.spread_pieces = ns as u32,
            "gemm_eff" => self.gemm_eff = v,
            "mem_eff" => self.mem_eff = v,
            "fifo_dispatch" => self.gpu.fifo_dispatch = v != 0.0,
            "dram_contention" => self.gpu.dram_contention = v != 0.0,
            "dram_saturating_share" if v > 0.0 && v <= 1.0 => self.gpu.dram_saturating_share = v,
            "dram_saturating_share" => {
                return Err(format!("dram_saturating_share: {v} is not in (0, 1]"))
            }
            "kernel_floor_ns" => self.kernel_floor_ns = ns,
            "timeslice_ns" => self.timeslice_ns = ns,
            "switch_ns" => self.switch_ns = ns,
            "resnet_launch_ns" => self.resnet_launch_ns = ns,
            "bert_launch_ns" => self.bert_launch_ns = ns,
            "cpu_cv" => self.cpu_cv = v,
            "train_fwd_ns" => self.train_fwd_ns = ns,
            "train_bwd_ns" => self.train_bwd_ns = ns,
            "train_opt_ns" => self.train_opt_ns = ns,
            "train_cv" => self.train_cv = v,
            "graph_launch_ns" => self.graph_launch_ns = ns,
            _ => return Err(format!("unknown parameter {key}")),
        }
        Ok(())
    }
}
