//! Synthetic traces of the Tally artifact's eight jobs on its A100 (issue
//! 22, "the A100 set"), from public figures, until traces captured on an
//! A100 replace them. The measurements they are held to are in
//! [`crate::tally`].
//!
//! # The device
//!
//! The artifact's environment is an Ampere data-centre GPU of compute
//! capability 8.0: `tally-bench`'s `docker/Dockerfile.base` builds PyTorch
//! (the `v2.2.0-tally` fork), torchvision, NCCL and Tally for `sm_80` only
//! (`TORCH_CUDA_ARCH_LIST="8.0"`, `CUDA_ARCH_LIST="80"`), and the Llama
//! server (`python/workloads/inference/onnxruntime/llama/llama.py`) loads
//! its H100 model only when the GPU's name contains "H100". Which A100
//! (40 or 80 GB, PCIe or SXM) is not said in the repository, and the paper's
//! evaluation section could not be read here; the jobs' peak memory alone
//! (`single-job-perf.csv`: 9.6 to 18.1 GB) fits either. The model uses
//! issue 22's device, the **A100 40 GB: 108 SMs, 1,555 GB/s of HBM2**
//! (NVIDIA A100 datasheet; the 80 GB part has 1,935 GB/s (PCIe) or
//! 2,039 GB/s (SXM), which would make the memory-bound kernels below 20-24%
//! shorter, and is absorbed by the fitted efficiencies below). Figures:
//!
//! | figure | value | source |
//! | --- | ---: | --- |
//! | SMs | 108 | public: NVIDIA A100 Tensor Core GPU Architecture whitepaper (GA100 has 128, A100 enables 108) |
//! | fp16/bf16 tensor peak, dense | 312 TFLOP/s | public: A100 datasheet |
//! | fp32 (SIMT) peak | 19.5 TFLOP/s | public: A100 datasheet (TF32 tensor, 156 TFLOP/s, is off here: see "Training") |
//! | DRAM | 40 GB HBM2, 1,555 GB/s | public: A100 datasheet (40 GB) |
//! | one SM | 2048 threads, 64 K registers, 163 KB shared memory for blocks, 32 blocks | public: CUDA Programming Guide, compute capability 8.0 ([`SmResources::AMPERE`]) |
//!
//! # The jobs, as the artifact runs them
//!
//! * **`bert_ort`**: `python/workloads/inference/onnxruntime/bert/bert_infer.py`:
//!   ONNX Runtime (the nightly 1.17.0 wheel of `docker/Dockerfile.bench`), CUDA
//!   execution provider, batch 1 (asserted), sequence 128, the model
//!   `bert-large-uncased-whole-word-masking-finetuned-squad` (24 layers,
//!   width 1024, 16 heads; exported by `export_bert_onnx.py`, whose file name
//!   says "bert-base-cased" as ONNX Runtime's tutorial it is copied from does)
//!   optimised with `onnxruntime.transformers.optimizer --float16 --use_gpu`:
//!   fused embedding + layer norm, attention, bias + GELU and skip + layer
//!   norm nodes. One request: three input copies, 8 kernels per layer, the
//!   span head, two output copies, a synchronous return; then Python's
//!   argmax and `tokenizer.decode`.
//! * **`llama2_7b_ort`**: `llama.py`: ONNX Runtime, fp16, the
//!   `llama-2-7b-hf` decoder exported with grouped-query attention and a
//!   shared KV buffer (`use_buffer_share`), batch 1, one fixed prompt, greedy
//!   decoding to `max_length` 128. One request is one whole generation: the
//!   prompt (30 tokens with the BOS token, assumed: the Llama tokenizer on
//!   the script's 103-character prompt) gives `128 - 30 + 1 = 99` model runs
//!   (one prefill, 98 decode steps; the same every request, which is why the
//!   alone p99 is only 1% above the mean). Each run: Python binds ~130
//!   inputs and outputs (`apply_io_binding`), syncs, runs the graph, syncs,
//!   then ~10 PyTorch ops pick the next token and `torch.all(has_eos)`
//!   reads a flag back.
//! * **Training** (`python/configs/train_config.py`: every job `amp:
//!   [False]`): fp32, PyTorch 2.2 built **without cuDNN** (`USE_CUDNN=0` in
//!   `Dockerfile.base`), transformers 4.45.1. So GEMMs are cuBLAS fp32 SIMT
//!   (TF32 is off for matmuls by default since PyTorch 1.12, and there is no
//!   cuDNN to use it for convolutions), and every convolution is ATen's
//!   `slow_conv2d` (`aten/src/ATen/native/cuda/ConvolutionMM2d.cu`): a C++
//!   loop over the batch, one im2col (unless 1x1, stride 1, no padding) and
//!   one GEMM per sample forward; a GEMM and a col2im per sample for the
//!   input gradient; an im2col and a GEMM per sample for the weight
//!   gradient. That loop, not the model, sets the conv jobs' kernel counts
//!   and widths.
//!   * `whisper_large_v3_b16`: `train_whisper.py` overrides the model name
//!     with **`openai/whisper-small`** (12 + 12 layers, width 768); batch 16
//!     of Common Voice Hindi, 80 x 3000 log-mel frames (1500 encoder
//!     positions), labels padded to 96 tokens (assumed), gradient
//!     checkpointing on (each layer's forward runs again in backward),
//!     dropout 0, HF `Seq2SeqTrainer`.
//!   * `resnet50_b128`: `train_resnet.py`: torchvision ResNet50, synthetic
//!     224 x 224 batch kept on the GPU, plain SGD (foreach, no momentum).
//!   * `pointnet_b128`: `train_pointnet.py`: PointNet classification with
//!     the feature transform, 2500 points, 16 classes (ShapeNet), Adam, a
//!     DataLoader with 2 workers.
//!   * `pegasus_x_base_b4`: `train_pegasus.py`: `google/pegasus-x-base`
//!     (12 + 12 layers, width 768, block-local attention of 512 with 128
//!     global tokens) on the first 1000 XSum documents, padded to the
//!     longest: 3072 tokens (assumed; 6x XSum's mean of ~430 words) and
//!     summaries to 64 (assumed); HF `Trainer`, AdamW, weight decay 0.01.
//!   * `gpt2_large_b1`: `train_gpt2.py`: `gpt2-large` (36 layers, width
//!     1280), blocks of 512 tokens, HF `Trainer`.
//!   * `bert_b32`: `train_bert.py`: `bert-base-uncased` for SQuAD v2,
//!     sequence 384, batch 32, a plain loop with transformers' own `AdamW`
//!     (a Python loop over the 199 parameters, 7 kernels each).
//!
//!   HF `Trainer` jobs use its defaults: `adamw_torch` (PyTorch's `foreach`
//!   AdamW: 7 `multi_tensor_apply` ops, 8 with weight decay), gradient
//!   clipping at norm 1 (`_foreach_norm`, a stack and norm, `_foreach_mul_`),
//!   the NaN/Inf check of each step's loss (two reads back), and single-
//!   process data loading.
//!
//! # Kernels
//!
//! Each kernel's launch configuration is its family's (below); its
//! `blocks_per_sm` follows from threads, registers (rounded up to 8 per
//! thread, 256 per warp) and shared memory (+1 KB the driver reserves per
//! block on compute capability 8.x) against one SM ([`occupancy`]). Its
//! duration: a GEMM's tiles at its family's efficiency of the peak, in
//! waves over the SMs, or its bytes at `mem_eff` of DRAM bandwidth if that
//! is longer; an element-wise or reduction kernel's bytes at `mem_eff`;
//! plus `kernel_floor_ns`. `dram_bytes` is the bytes the kernel moves.
//!
//! | family | threads | registers | shared memory | source |
//! | --- | ---: | ---: | ---: | --- |
//! | fp16 tensor-core GEMM (ORT's cuBLAS), 128 x 128 x 32 tiles, 4 stages | 256 | 255 | 64 KB | assumed from the published Ampere configurations: CUTLASS's sm80 tensor-op GEMMs (128 x 128 x 32 threadblock, 8 warps, 3-5 stages of 16 KB) and cuBLAS's `ampere_h16816gemm_128x128_ldg8_stages_32x5` names; registers at the 255 cap (conservative for co-residence) |
//! | fp16 GEMV (cuBLAS, `m = 1` decode) | 128 | 64 | 0 | assumed (cuBLAS `gemv2T_kernel_val`-style: one warp per output slice, no tiles) |
//! | fp32 SIMT GEMM, 128 x 128 x 8, 2 stages | 256 | 128 | 16 KB | CUTLASS `default_gemm_configuration.h`, `OpClassSimt`/`Sm80`: threadblock 128 x 128 x 8, warp 32 x 64 x 8, 2 stages ((128 x 8 + 8 x 128) x 4 B x 2); 64 accumulators per thread plus fragments (registers assumed) |
//! | fp32 SIMT GEMM, 64 x 64 x 8 (narrow shapes) | 128 | 96 | 8 KB | same family, 4 warps of 32 x 32 (assumed) |
//! | PyTorch element-wise (`vectorized_elementwise_kernel`) | 128 | 32 | 0 | PyTorch `ATen/native/cuda/Loops.cuh`: `num_threads() = 4 warps`, `thread_work_size() = 4` (512 elements a block); registers assumed |
//! | ORT element-wise (bias + GELU, transposes) | 256 | 32 | 0 | ONNX Runtime `GridDim::maxThreadsPerBlock = 256`, 4 elements a thread (registers assumed) |
//! | row reductions (layer norm, softmax, batch-norm statistics) | 256 | 40 | 1 KB | assumed (one block per row or channel) |
//! | `multi_tensor_apply` (foreach optimizers, norms) | 512 | 48 | 0 | PyTorch `MultiTensorApply.cuh`: `kBlockSize = 512`, `kChunkSize = 65536`, at most 320 blocks and 110/64/48/36 tensors (depth 1-4) a launch |
//! | `im2col` / `col2im` | 1024 | 32 | 0 | PyTorch `ATen/native/cuda/im2col.cuh`: `CUDA_NUM_THREADS = 1024` |
//! | fused attention, fp16 (ORT, FlashAttention-2 style) | 128 | 255 | 48 KB | FlashAttention-2 forward for head dimension 64 on sm80: 4 warps, 128-row Q tile and 128-row K/V tiles in fp16 (48 KB) |
//! | memory-efficient attention, fp32 (PyTorch SDPA) | 128 | 168 | 48 KB | PyTorch's CUTLASS-based `fmha_cutlassF_f32_aligned_64x64_rf_sm80`: 4 warps, 64 queries x 64 keys a block (registers and shared memory assumed) |
//!
//! # Efficiencies and CPU costs
//!
//! | parameter | value | source |
//! | --- | ---: | --- |
//! | fp16 tensor GEMM efficiency of ORT, [`ORT_GEMM_EFF`] (`Params::gemm_eff`) | see const | fitted: BERT's kernels busy for 89.08% of a single-stream request (`single-job-perf.csv`, `gpu_util`) of 4.05 ms; the candidates for why batch-1 GEMMs of 128 rows reach so little of the peak are cuBLAS's small-`m` tiles and split-K, which the tile model only approximates |
//! | fp16 decode GEMV bandwidth efficiency, [`ORT_DECODE_EFF`] | see const | fitted: Llama's kernels busy 90.85% of 1963.9 ms over 99 runs (the 13.2 GB of weights read per run at 1,555 GB/s would take 8.5 ms; the runs' kernels take 18.0) |
//! | fp32 SIMT GEMM efficiency, [`SGEMM_EFF`] | 0.7 | assumed (cuBLAS SGEMM reaches 85-95% of 19.5 TFLOP/s on large squares; training shapes less). The 64 x 64 tiles get 0.7 of it |
//! | fp32 attention efficiency, [`ATTN_F32_EFF`] | 0.4 | assumed |
//! | element-wise bandwidth, `mem_eff` | 0.7 | assumed (the H100 model's) |
//! | ORT CPU per node, [`ORT_NODE_NS`] | 4 us | assumed: ONNX Runtime's executor is C++ (a few us a node), not Python's 15-30 us an op |
//! | ORT CPU before the first node (Python, `session.run` / IO binding) | fitted | to the alone mean latency (below) |
//! | ATen loop launch, [`ATEN_LOOP_NS`] | 5 us | assumed: a launch from ATen's C++ loop, no Python in between (`cudaLaunchKernel` is 2-5 us) |
//! | training CPU per op | `Params::train_fwd_ns` / `train_bwd_ns` / `train_opt_ns` | the H100 model's (assumed) |
//! | per-step data loading and trainer time | fitted | so that the step's kernels are busy for the job's `gpu_util` share of it (`single-job-perf.csv`): whisper 50.0%, resnet50 99.5%, pointnet 93.2%, pegasus 89.8%, gpt2-large 89.5%, bert 98.0% |
//! | per-request CPU variation, [`ORT_CPU_CV`] (`Params::cpu_cv`) | see const | fitted to the alone spreads: p99 over mean is 1.012 (BERT) and 1.0096 (Llama) |
//!
//! The artifact publishes no absolute training throughput (every job's
//! `original_throughput` is 1), so the step times below are the model's
//! own, from the jobs' shapes and the figures above; what is held to a
//! measurement is each step's GPU-busy share.
//!
//! # What the traces reproduce alone
//!
//! Alone at half load (the tests below; service time, as the artifact
//! measures it, [`crate::job::Outcome::service_ms`]):
//!
//! | job | kernels | artifact mean / p90 / p95 / p99 | model |
//! | --- | ---: | --- | --- |
//! | `bert_ort` | 219 a request | 4.05 / 4.066 / 4.076 / 4.098 ms | 4.044 / 4.068 / 4.074 / 4.087 ms (1,972 requests) |
//! | `llama2_7b_ort` | 29,964 a request | 1963.9 / 1970.4 / 1975.8 / 1982.7 ms | 1963.0 / 1971.5 / 1976.1 / 1978.5 ms (22 requests) |
//!
//! | job | kernels a step | step alone (model) | GPU busy: artifact / model |
//! | --- | ---: | ---: | --- |
//! | `whisper_large_v3_b16` | 1,948 | 5,799 ms | 0.500 / 0.500 |
//! | `resnet50_b128` | 32,518 | 772 ms | 0.995 / 0.995 |
//! | `pointnet_b128` | 4,556 | 236 ms | 0.932 / 0.932 |
//! | `pegasus_x_base_b4` | 2,133 | 1,144 ms | 0.898 / 0.898 |
//! | `gpt2_large_b1` | 2,133 | 424 ms | 0.895 / 0.895 |
//! | `bert_b32` | 1,976 | 733 ms | 0.980 / 0.980 |
//!
//! For the matrix: the artifact's p99 ratios are service-time ratios
//! against the single-stream run, not arrival-to-result ratios against the
//! server run alone; with arrival-to-result latencies an M/D/1 queue at
//! load 0.5 alone would put the p99 at several service times.
//!
//! # Coarsening
//!
//! Llama's 32 layers per run are 9 kernels each: the q, k and v
//! projections as one GEMV of their summed width (ORT's graph has three),
//! the gate and up projections as one, the two rotary embeddings as one,
//! and the sigmoid and two multiplications of SwiGLU as one. Weight bytes,
//! the GEMVs' widths and the kernel time per run are kept; the count drops
//! from about 14 to 9 a layer, about 30,000 kernels per request.

mod builder;
mod convnets;
mod device;
mod inference;
mod layers;
mod step;
mod transformers;

pub use self::convnets::{pointnet_b128, resnet50_b128};
pub use self::device::{
    occupancy, Family, A100_DRAM_GBPS, A100_FP32_TFLOPS, A100_INTERFERENCE, A100_TENSOR_TFLOPS,
    ATEN_LOOP_NS, ATTN_F32_EFF, ELT, FLASH_F16, FOREACH, GEMV, HGEMM, IM2COL, MEMEFF_F32,
    ORT_CPU_CV, ORT_DECODE_EFF, ORT_ELT, ORT_GEMM_EFF, ORT_NODE_NS, ROWS, SGEMM, SGEMM_EFF,
    SGEMM_SMALL,
};
pub use self::inference::{bert_ort, llama2_7b_ort, LLAMA_RUNS};
pub use self::step::alone_step_ns;
pub use self::transformers::{bert_b32, gpt2_large_b1, pegasus_x_base_b4, whisper_b16};

use crate::gpu::{GpuParams, SmResources};
use crate::params::Params;
use crate::trace::Trace;

/// The A100 set's jobs by name.
pub const INFERENCE_JOBS: [&str; 2] = ["bert_ort", "llama2_7b_ort"];
/// Idem, training.
pub const TRAINING_JOBS: [&str; 6] = [
    "whisper_large_v3_b16",
    "resnet50_b128",
    "pointnet_b128",
    "pegasus_x_base_b4",
    "gpt2_large_b1",
    "bert_b32",
];

/// A job of the A100 set by name ([`crate::tally`]'s names).
#[must_use]
pub fn job(p: &Params, name: &str) -> Option<Trace> {
    Some(match name {
        "bert_ort" => bert_ort(p),
        "llama2_7b_ort" => llama2_7b_ort(p),
        "whisper_large_v3_b16" => whisper_b16(p),
        "resnet50_b128" => resnet50_b128(p),
        "pointnet_b128" => pointnet_b128(p),
        "pegasus_x_base_b4" => pegasus_x_base_b4(p),
        "gpt2_large_b1" => gpt2_large_b1(p),
        "bert_b32" => bert_b32(p),
        _ => return None,
    })
}

// The A100's parameters live beside its traces, so that `params` does not
// import this module (which imports `params`).
impl Params {
    /// The A100 of the Tally artifact ([`crate::tally`]): the device the
    /// A100 traces ([`crate::synthetic_a100`]) are built for. Its figures and
    /// their sources are in `synthetic_a100`'s module docs ("The device"):
    /// 108 SMs of compute capability 8.0, 1,555 GB/s of HBM2 (A100 40 GB),
    /// 312 TFLOP/s dense fp16/bf16 on tensor cores. `interference` is
    /// fitted on the A100's fit set, the six Llama-2-7B pairs under MPS and
    /// MPS + priority ([`A100_INTERFERENCE`]); the time-slicing figures
    /// (`timeslice_ns`, `switch_ns`) are the H100 fit's, carried over (the
    /// A100 time-slicing points do not constrain them: see `docs/MODEL.md`),
    /// as is the launch floor (`kernel_floor_ns`, assumed), and where a GPU
    /// measured them the measurement is carried instead ([`Params::a100_over`]);
    /// the launch costs of the
    /// H100 jobs (`resnet_launch_ns`, `bert_launch_ns`, `train_*`) are kept
    /// for the H100 jobs' builders and unused by the A100 ones, which carry
    /// their own (`synthetic_a100`). `cpu_cv` is fitted to the Tally
    /// inference jobs' alone spread (p99 only 1.0-1.2% above the mean).
    #[must_use]
    pub fn a100() -> Params {
        Params::a100_over(&Params::calibrated())
    }

    /// [`a100`](Self::a100), carrying `h100`'s time slice, context switch
    /// and launch floor: the fitted and assumed ones, or what a GPU measured
    /// where [`crate::measured`] applied it to `h100`. The slice is the
    /// driver's (the same default on Volta and later, docs/MODEL.md row 9).
    /// What is the A100's own stays: its SMs, DRAM, interference, and the
    /// share of its SMs that saturate DRAM, which an H100's measurement does
    /// not give (its bandwidth per SM differs).
    #[must_use]
    pub fn a100_over(h100: &Params) -> Params {
        let h100 = h100.clone();
        Params {
            gpu: GpuParams {
                sms: 108,
                // PCIe Gen4 x16 is 32 GB/s per direction; pinned copies reach
                // well under it (assumed, as the H100's 25 GB/s of 64).
                copy_bytes_per_ns: 20.0,
                sm: SmResources::AMPERE,
                dram_bytes_per_ns: A100_DRAM_GBPS,
                interference: A100_INTERFERENCE,
                dram_saturating_share: Params::calibrated().gpu.dram_saturating_share,
                ..h100.gpu.clone()
            },
            sm_flop_per_ns: A100_TENSOR_TFLOPS * 1e3 / 108.0,
            gemm_eff: ORT_GEMM_EFF,
            mem_eff: 0.7,
            cpu_cv: ORT_CPU_CV,
            ..h100
        }
    }
}

#[cfg(test)]
mod tests;
