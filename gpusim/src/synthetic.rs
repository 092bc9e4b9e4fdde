//! Synthetic traces of the co-location benchmark's five jobs, until traces
//! captured on the GPU replace them (`tests/traces/*.json`, `source:
//! measured`).
//!
//! Each job's kernels follow its architecture layer by layer, as eager
//! PyTorch launches them (torchvision's ResNet50, Hugging Face's BERT-base
//! and GPT-2 small): one kernel per convolution, batch norm, activation,
//! addition, GEMM, attention, cast and optimizer `foreach` call. A kernel's
//! footprint and duration come from its shape and the H100's public figures
//! ([`crate::params`]):
//!
//! * **GEMM / convolution** (implicit GEMM, `m x n x k`): output tiles of
//!   128 x 128 (128 x 64 when `n <= 64`, two per SM), split along `k` when
//!   the tiles would not fill the GPU and `k` is long (weight gradients);
//!   a tile takes its FLOPs over one SM's share of the tensor peak at
//!   `gemm_eff`; the kernel takes its waves of tiles, or its bytes at
//!   `mem_eff` of DRAM bandwidth if that is longer, plus `kernel_floor_ns`.
//! * **Element-wise** (batch norm, ReLU, add, casts, dropout, optimizer):
//!   256 threads x 4 elements per block, 8 blocks per SM; its bytes at
//!   `mem_eff` of DRAM bandwidth plus `kernel_floor_ns`.
//!
//! Host gaps are the launch costs of [`crate::params::Params`]. The figures
//! this produces are reported by `tandem-sim traces` (GPU time and CPU time
//! per request or step) and checked for plausibility by the tests below.

use crate::params::Params;
use crate::trace::{JobClass, Kernel, Op, Trace, FORMAT};

/// What one block of a kernel family holds (registers per thread, shared
/// memory per block) and the bytes the kernel moves.
#[derive(Clone, Copy, Debug)]
struct Res {
    regs: u32,
    smem: u32,
    bytes: f64,
}

/// A Hopper tensor-core GEMM/implicit-GEMM tile of 128 x 128 (CUTLASS 3's
/// sm90 warp-specialized kernels, which cuBLAS and cuDNN use on H100: 384
/// threads, one producer warp group at 40 registers and two consumer warp
/// groups at 232 (`setmaxnreg`), 168 on average; 4 pipeline stages of 128 x
/// 64 + 64 x 128 bf16 operands, 128 KB of shared memory). It holds 98% of
/// an SM's registers: nothing of another client fits beside it.
const TILE_128X128: Res = Res {
    regs: 168,
    smem: 128 * 1024,
    bytes: 0.0,
};
/// A 128 x 64 tile (narrow outputs), two per SM: 256 threads at 120
/// registers, 4 stages of 128 x 64 + 64 x 64 bf16 operands (96 KB).
const TILE_128X64: Res = Res {
    regs: 120,
    smem: 96 * 1024,
    bytes: 0.0,
};
/// FlashAttention-2's forward and backward blocks: 4 warps at up to 255
/// registers (its kernels are register-bound), 48 KB of shared memory.
const FLASH_ATTENTION: Res = Res {
    regs: 255,
    smem: 48 * 1024,
    bytes: 0.0,
};
/// PyTorch's vectorized element-wise kernels: 32 registers, no shared memory.
const ELEMENTWISE: Res = Res {
    regs: 32,
    smem: 0,
    bytes: 0.0,
};

struct Builder<'a> {
    p: &'a Params,
    ops: Vec<Op>,
}

impl Builder<'_> {
    #[allow(clippy::too_many_arguments)]
    fn kernel(
        &mut self,
        name: &str,
        blocks: u64,
        block_threads: u32,
        bps: u32,
        ns: f64,
        gap: u64,
        res: Res,
    ) {
        let gx = u32::try_from(blocks.max(1)).unwrap_or(u32::MAX);
        self.ops.push(Op::Kernel(Kernel {
            name: name.to_string(),
            grid: [gx, 1, 1],
            block: [block_threads, 1, 1],
            blocks_per_sm: bps,
            duration_ns: (ns + self.p.kernel_floor_ns as f64).round() as u64,
            sm_share: 1.0,
            regs_per_thread: res.regs,
            smem_per_block: res.smem,
            dram_bytes: res.bytes.round() as u64,
            graph: 0,
            stream: 0,
            host_gap_ns: gap,
        }));
    }

    /// An `m x n x k` GEMM (fp16/bf16 operands).
    fn gemm(&mut self, name: &str, m: u64, n: u64, k: u64, gap: u64) {
        let sms = u64::from(self.p.gpu.sms);
        let (tm, tn, bps, threads, tile) = if n <= 64 {
            (128, 64, 2u32, 256, TILE_128X64)
        } else {
            (128, 128, 1u32, 384, TILE_128X128)
        };
        // Each tile is its own function, named for its tile as cuBLAS and
        // cuDNN name theirs: one name with two register and shared-memory
        // footprints would be one function to the shim (its id is the
        // name's), which captures one footprint for both.
        let name = if tn == 64 {
            format!("{name}_128x64")
        } else {
            name.to_string()
        };
        let name = name.as_str();
        let tiles = m.div_ceil(tm) * n.div_ceil(tn);
        let split = if tiles < sms && k >= 2048 {
            sms.div_ceil(tiles).min(k / 1024).max(1)
        } else {
            1
        };
        let blocks = tiles * split;
        let tile_flop = 2.0 * (tm * tn) as f64 * (k as f64 / split as f64);
        let tile_ns = tile_flop * f64::from(bps) / (self.p.sm_flop_per_ns * self.p.gemm_eff);
        let waves = blocks.div_ceil(sms * u64::from(bps));
        let bytes = 2.0 * (m * k + k * n + m * n) as f64;
        let mem_ns = bytes / (self.p.gpu.dram_bytes_per_ns * self.p.mem_eff);
        self.kernel(
            name,
            blocks,
            threads,
            bps,
            (waves as f64 * tile_ns).max(mem_ns),
            gap,
            Res { bytes, ..tile },
        );
    }

    /// An element-wise kernel over `elems` elements moving `bytes_per` bytes each.
    fn elt(&mut self, name: &str, elems: u64, bytes_per: f64, gap: u64) {
        let bytes = elems as f64 * bytes_per;
        let ns = bytes / (self.p.gpu.dram_bytes_per_ns * self.p.mem_eff);
        let res = Res {
            bytes,
            ..ELEMENTWISE
        };
        self.kernel(name, elems.div_ceil(1024), 256, 8, ns, gap, res);
    }

    fn copy(&mut self, bytes: u64, d2h: bool, gap: u64) {
        self.ops.push(Op::copy(bytes, d2h, gap));
    }

    fn sync(&mut self, gap: u64) {
        self.ops.push(Op::Sync { host_gap_ns: gap });
    }

    fn trace(self, job: &str, class: JobClass, notes: &str) -> Trace {
        Trace {
            format: FORMAT.into(),
            job: job.into(),
            class,
            source: "synthetic".into(),
            device: "H100 SXM (132 SMs), synthetic".into(),
            notes: notes.into(),
            ops: self.ops,
        }
    }
}

/// One convolution of ResNet50: (in channels, out channels, kernel, stride,
/// input height = width).
#[derive(Clone, Copy, Debug)]
struct Conv {
    cin: u64,
    cout: u64,
    k: u64,
    stride: u64,
    h: u64,
}

impl Conv {
    fn hout(&self) -> u64 {
        self.h / self.stride
    }
}

/// A layer of ResNet50 in forward order.
#[derive(Clone, Copy, Debug)]
enum Layer {
    Conv(Conv),
    /// Batch norm over (channels, height).
    Bn(u64, u64),
    Relu(u64, u64),
    Add(u64, u64),
    MaxPool,
    AvgPool,
    Fc,
}

/// torchvision's ResNet50, layer by layer.
fn resnet50() -> Vec<Layer> {
    let mut l = vec![
        Layer::Conv(Conv {
            cin: 3,
            cout: 64,
            k: 7,
            stride: 2,
            h: 224,
        }),
        Layer::Bn(64, 112),
        Layer::Relu(64, 112),
        Layer::MaxPool,
    ];
    let mut cin = 64;
    let mut h = 56;
    for (mid, blocks, stride) in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)] {
        let out = mid * 4;
        for b in 0..blocks {
            let s = if b == 0 { stride } else { 1 };
            let ho = h / s;
            l.push(Layer::Conv(Conv {
                cin,
                cout: mid,
                k: 1,
                stride: 1,
                h,
            }));
            l.push(Layer::Bn(mid, h));
            l.push(Layer::Relu(mid, h));
            l.push(Layer::Conv(Conv {
                cin: mid,
                cout: mid,
                k: 3,
                stride: s,
                h,
            }));
            l.push(Layer::Bn(mid, ho));
            l.push(Layer::Relu(mid, ho));
            l.push(Layer::Conv(Conv {
                cin: mid,
                cout: out,
                k: 1,
                stride: 1,
                h: ho,
            }));
            l.push(Layer::Bn(out, ho));
            if b == 0 {
                l.push(Layer::Conv(Conv {
                    cin,
                    cout: out,
                    k: 1,
                    stride: s,
                    h,
                }));
                l.push(Layer::Bn(out, ho));
            }
            l.push(Layer::Add(out, ho));
            l.push(Layer::Relu(out, ho));
            cin = out;
            h = ho;
        }
    }
    l.push(Layer::AvgPool);
    l.push(Layer::Fc);
    l
}

/// Relative CPU cost of launching each kind of layer in eager PyTorch
/// (a cuDNN convolution's call path is longer than an element-wise op's).
fn cpu_weight(l: &Layer) -> f64 {
    match l {
        Layer::Conv(_) => 1.4,
        Layer::Bn(..) => 1.0,
        _ => 0.7,
    }
}

/// The forward pass of ResNet50 at `batch`, 2-byte activations.
fn resnet_forward(b: &mut Builder<'_>, batch: u64, gap: impl Fn(&Layer) -> u64, training: bool) {
    for layer in resnet50() {
        let g = gap(&layer);
        match layer {
            Layer::Conv(c) => {
                if training {
                    // autocast casts each fp32 weight to bf16 on every forward.
                    b.elt(
                        "autocast_cast_weight",
                        c.cin * c.cout * c.k * c.k,
                        6.0,
                        g / 2,
                    );
                }
                let m = batch * c.hout() * c.hout();
                b.gemm("cudnn_conv_fwd", m, c.cout, c.cin * c.k * c.k, g);
            }
            Layer::Bn(ch, h) => b.elt("batch_norm", batch * ch * h * h, 4.0, g),
            Layer::Relu(ch, h) => b.elt("relu", batch * ch * h * h, 4.0, g),
            Layer::Add(ch, h) => b.elt("add", batch * ch * h * h, 6.0, g),
            Layer::MaxPool => b.elt("max_pool", batch * 64 * 112 * 112, 2.5, g),
            Layer::AvgPool => b.elt("avg_pool", batch * 2048 * 49, 2.0, g),
            Layer::Fc => b.gemm("fc_gemm", batch, 1000, 2048, g),
        }
    }
}

/// ResNet50 fp16 inference, one request of `batch` images.
#[must_use]
pub fn resnet50_inference(p: &Params, job: &str, batch: u64) -> Trace {
    let mut b = Builder { p, ops: Vec::new() };
    let l = p.resnet_launch_ns as f64;
    b.copy(batch * 3 * 224 * 224 * 2, false, (l * 0.8) as u64);
    resnet_forward(&mut b, batch, |layer| (l * cpu_weight(layer)) as u64, false);
    b.elt("to_float", batch * 1000, 6.0, (l * 0.7) as u64);
    b.copy(batch * 1000 * 4, true, (l * 0.5) as u64);
    b.sync(0);
    b.trace(job, JobClass::Inference, &format!("torchvision ResNet50, fp16, batch {batch}, eval, one request: input copy, 174 forward kernels, result cast and copy"))
}

/// ResNet50 bf16-autocast training, batch 64, SGD with momentum.
#[must_use]
pub fn resnet50_training(p: &Params) -> Trace {
    let batch = 64;
    let mut b = Builder { p, ops: Vec::new() };
    let (f, w, o) = (p.train_fwd_ns, p.train_bwd_ns, p.train_opt_ns);
    resnet_forward(&mut b, batch, |_| f, true);
    b.elt("log_softmax", batch * 1000, 8.0, f);
    b.elt("nll_loss", batch * 1000, 4.0, f);
    // Backward, in reverse layer order.
    for layer in resnet50().into_iter().rev() {
        match layer {
            Layer::Conv(c) => {
                let (m_out, m_in) = (batch * c.hout() * c.hout(), batch * c.h * c.h);
                if c.cin > 3 {
                    b.gemm("cudnn_conv_dgrad", m_in, c.cin, c.cout * c.k * c.k, w);
                }
                b.gemm("cudnn_conv_wgrad", c.cout, c.cin * c.k * c.k, m_out, w);
                b.elt("autocast_cast_grad", c.cin * c.cout * c.k * c.k, 6.0, w);
            }
            Layer::Bn(ch, h) => b.elt("batch_norm_backward", batch * ch * h * h, 8.0, w),
            Layer::Relu(ch, h) => b.elt("threshold_backward", batch * ch * h * h, 6.0, w),
            Layer::Add(ch, h) => b.elt("add_grad", batch * ch * h * h, 6.0, w),
            Layer::MaxPool => b.elt("max_pool_backward", batch * 64 * 112 * 112, 6.0, w),
            Layer::AvgPool => b.elt("avg_pool_backward", batch * 2048 * 49, 4.0, w),
            Layer::Fc => {
                b.gemm("fc_dgrad", batch, 2048, 1000, w);
                b.gemm("fc_wgrad", 1000, 2048, batch, w);
            }
        }
    }
    // SGD with momentum, foreach over 25.6 M fp32 parameters (161 tensors):
    // weight decay, momentum update, parameter update, each in 2 launches.
    for name in [
        "foreach_add_weight_decay",
        "foreach_momentum",
        "foreach_sgd_update",
    ] {
        for _ in 0..2 {
            b.elt(name, 25_557_032 / 2, 12.0, o);
        }
    }
    b.copy(4, true, f);
    b.sync(0);
    b.trace("resnet50_train", JobClass::Training, "torchvision ResNet50, bf16 autocast, batch 64, SGD momentum (foreach); one step, ending in loss.item()")
}

/// A transformer layer's forward kernels (tokens `t`, width `d`), eager.
fn transformer_forward(
    b: &mut Builder<'_>,
    t: u64,
    d: u64,
    heads_seq: (u64, u64),
    gap: u64,
    training: bool,
) {
    let (batch, seq) = heads_seq;
    let casts = |b: &mut Builder<'_>, n: u64| {
        if training {
            b.elt("autocast_cast_weight", n, 6.0, gap / 2);
        }
    };
    casts(b, d * 3 * d);
    b.gemm("qkv_gemm", t, 3 * d, d, gap);
    // flash attention: 2 * 2 * batch * heads * seq^2 * head_dim flops.
    let attn_flop = 4.0 * (batch * seq * seq * d) as f64;
    let tiles = batch * 12 * seq.div_ceil(128);
    let ns =
        attn_flop / (b.p.sm_flop_per_ns * b.p.gemm_eff * f64::from(b.p.gpu.sms).min(tiles as f64));
    let res = Res {
        bytes: 8.0 * (t * d) as f64,
        ..FLASH_ATTENTION
    };
    b.kernel("flash_attention_fwd", tiles, 128, 2, ns, gap, res);
    casts(b, d * d);
    b.gemm("attn_out_gemm", t, d, d, gap);
    if training {
        b.elt("dropout", t * d, 5.0, gap);
    }
    b.elt("residual_add", t * d, 6.0, gap);
    b.elt("layer_norm", t * d, 4.5, gap);
    casts(b, d * 4 * d);
    b.gemm("mlp_fc_gemm", t, 4 * d, d, gap);
    b.elt("gelu", t * 4 * d, 4.0, gap);
    casts(b, 4 * d * d);
    b.gemm("mlp_proj_gemm", t, d, 4 * d, gap);
    if training {
        b.elt("dropout", t * d, 5.0, gap);
    }
    b.elt("residual_add", t * d, 6.0, gap);
    b.elt("layer_norm", t * d, 4.5, gap);
}

/// BERT-base (12 layers, width 768) fp16 inference, batch 8, sequence 128.
#[must_use]
pub fn bert_inference(p: &Params) -> Trace {
    let (batch, seq, d) = (8u64, 128u64, 768u64);
    let t = batch * seq;
    let mut b = Builder { p, ops: Vec::new() };
    let g = p.bert_launch_ns;
    b.copy(t * 8, false, g);
    for name in [
        "word_embedding",
        "position_embedding",
        "type_embedding",
        "embedding_add",
        "embedding_add",
        "layer_norm",
    ] {
        b.elt(name, t * d, 4.0, g);
    }
    for _ in 0..12 {
        transformer_forward(&mut b, t, d, (batch, seq), g, false);
    }
    b.gemm("pooler_gemm", batch, d, d, g);
    b.elt("tanh", batch * d, 4.0, g);
    b.elt("to_float", batch * d, 6.0, g);
    b.copy(batch * d * 4, true, g / 2);
    b.sync(0);
    b.trace(
        "bert_b8",
        JobClass::Inference,
        "BERT-base encoder (12 layers, width 768), fp16, batch 8, sequence 128, eval; one request",
    )
}

/// GPT-2 small (12 layers, width 768, vocabulary 50257) bf16-autocast
/// training, batch 8, sequence 512, AdamW.
#[must_use]
pub fn gpt2_training(p: &Params) -> Trace {
    let (batch, seq, d, vocab) = (8u64, 512u64, 768u64, 50_257u64);
    let t = batch * seq;
    let mut b = Builder { p, ops: Vec::new() };
    let (f, w, o) = (p.train_fwd_ns, p.train_bwd_ns, p.train_opt_ns);
    for name in [
        "token_embedding",
        "position_embedding",
        "embedding_add",
        "dropout",
        "layer_norm",
    ] {
        b.elt(name, t * d, 4.0, f);
    }
    for _ in 0..12 {
        transformer_forward(&mut b, t, d, (batch, seq), f, true);
    }
    b.elt("autocast_cast_weight", vocab * d, 6.0, f / 2);
    b.gemm("lm_head_gemm", t, vocab, d, f);
    // Loss in fp32 over the logits: cast, log-softmax, gather.
    b.elt("logits_to_float", t * vocab, 6.0, f);
    b.elt("log_softmax", t * vocab, 8.0, f);
    b.elt("nll_loss", t, 8.0, f);
    // Backward.
    b.elt("log_softmax_backward", t * vocab, 12.0, w);
    b.gemm("lm_head_dgrad", t, d, vocab, w);
    b.gemm("lm_head_wgrad", vocab, d, t, w);
    for _ in 0..12 {
        for (name, m, n, k) in [
            ("mlp_proj_dgrad", t, 4 * d, d),
            ("mlp_proj_wgrad", 4 * d, d, t),
            ("mlp_fc_dgrad", t, d, 4 * d),
            ("mlp_fc_wgrad", d, 4 * d, t),
            ("attn_out_dgrad", t, d, d),
            ("attn_out_wgrad", d, d, t),
            ("qkv_dgrad", t, d, 3 * d),
            ("qkv_wgrad", 3 * d, d, t),
        ] {
            b.gemm(name, m, n, k, w);
        }
        let attn_flop = 10.0 * (batch * seq * seq * d) as f64;
        let tiles = batch * 12 * seq.div_ceil(128);
        let ns =
            attn_flop / (p.sm_flop_per_ns * p.gemm_eff * f64::from(p.gpu.sms).min(tiles as f64));
        let res = Res {
            bytes: 20.0 * (t * d) as f64,
            ..FLASH_ATTENTION
        };
        b.kernel("flash_attention_bwd", tiles, 128, 2, ns, w, res);
        for (name, elems, bytes) in [
            ("layer_norm_backward", t * d, 8.0),
            ("dropout_backward", t * d, 5.0),
            ("gelu_backward", t * 4 * d, 6.0),
            ("layer_norm_backward", t * d, 8.0),
            ("dropout_backward", t * d, 5.0),
            ("grad_accumulate", t * d, 6.0),
            ("autocast_cast_grad", 12 * d * d, 6.0),
        ] {
            b.elt(name, elems, bytes, w);
        }
    }
    b.elt("embedding_backward", t * d, 8.0, w);
    // AdamW (foreach) over 124.4 M fp32 parameters: 8 foreach ops, each in 2 launches.
    for name in [
        "lerp",
        "mul",
        "addcmul",
        "sqrt",
        "div",
        "add",
        "mul_decay",
        "addcdiv",
    ] {
        for _ in 0..2 {
            b.elt(&format!("foreach_{name}"), 124_439_808 / 2, 12.0, o);
        }
    }
    b.copy(4, true, f);
    b.sync(0);
    b.trace("gpt2_train", JobClass::Training, "GPT-2 small (12 layers, width 768), bf16 autocast, batch 8, sequence 512, AdamW (foreach); one step, ending in loss.item()")
}

/// `t`, an inference request, launched as one CUDA graph (the way vLLM and
/// TensorRT serve: the request's kernels captured once and replayed): its
/// copies stay where they are, its kernels become the nodes of one graph
/// launch, which costs the thread one launch (`graph_launch_ns`, the first
/// node's gap) and the rest none. GPU-bound where the eager job was
/// launch-bound.
#[must_use]
pub fn as_graph(t: &Trace, job: &str, p: &Params) -> Trace {
    let mut first = true;
    let ops = t
        .ops
        .iter()
        .map(|op| match op {
            Op::Kernel(k) => {
                let mut k = k.clone();
                k.graph = 1;
                k.host_gap_ns = if first { p.graph_launch_ns } else { 0 };
                first = false;
                Op::Kernel(k)
            }
            other => other.clone(),
        })
        .collect();
    Trace {
        job: job.into(),
        notes: format!("{}; launched as one CUDA graph per request", t.notes),
        ops,
        ..t.clone()
    }
}

/// The benchmark's five jobs by name (`scripts/bench/colocation.py`).
#[must_use]
pub fn job(p: &Params, name: &str) -> Option<Trace> {
    Some(match name {
        "resnet50_b4" => resnet50_inference(p, name, 4),
        "resnet50_b32" => resnet50_inference(p, name, 32),
        "bert_b8" => bert_inference(p),
        "resnet50_train" => resnet50_training(p),
        "gpt2_train" => gpt2_training(p),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_is_a_valid_trace_of_plausible_size() {
        let p = Params::calibrated();
        for name in [
            "resnet50_b4",
            "resnet50_b32",
            "bert_b8",
            "resnet50_train",
            "gpt2_train",
        ] {
            let t = job(&p, name).unwrap();
            t.check().unwrap();
            let back = Trace::from_json(&t.to_json()).unwrap();
            assert_eq!(back, t, "{name}");
        }
        // ResNet50's forward: 53 convolutions, 53 batch norms, 49 ReLUs,
        // 16 additions, 2 pools, the classifier.
        let b4 = job(&p, "resnet50_b4").unwrap();
        assert_eq!(
            b4.kernels()
                .filter(|k| k.name.starts_with("cudnn_conv_fwd"))
                .count(),
            53
        );
        assert_eq!(b4.kernels().count(), 53 + 53 + 49 + 16 + 2 + 1 + 1);
        // Batch 4 is launch-bound: the CPU's time far exceeds the GPU's.
        assert!(
            b4.host_ns() > 3 * b4.kernel_ns(),
            "{} {}",
            b4.host_ns(),
            b4.kernel_ns()
        );
        // Batch 32 does 8x the work on the GPU, not 8x the time.
        let b32 = job(&p, "resnet50_b32").unwrap();
        let r = b32.kernel_ns() as f64 / b4.kernel_ns() as f64;
        assert!(r > 2.0 && r < 8.0, "{r}");
        // Training is GPU-bound.
        let tr = job(&p, "resnet50_train").unwrap();
        assert!(
            tr.kernel_ns() > tr.host_ns(),
            "{} {}",
            tr.kernel_ns(),
            tr.host_ns()
        );
        assert!(job(&p, "nope").is_none());
    }
}
