//! The layers the trainers are built from, forward and backward: a
//! transformer layer (self- and cross-attention, MLP), the LM head and
//! embedding, convolutions (im2col + GEMM) and batch norm.

use super::builder::B;
use super::device::{ATEN_LOOP_NS, IM2COL};

/// One transformer layer's shape.
#[derive(Clone, Copy)]
pub(super) struct Tx {
    /// Tokens (batch x sequence).
    pub(super) t: u64,
    /// Width.
    pub(super) d: u64,
    /// MLP width.
    pub(super) ffn: u64,
    /// Batch x heads.
    pub(super) bh: u64,
    /// Sequence (queries per head).
    pub(super) seq: u64,
    /// Keys each query attends to (self-attention).
    pub(super) keys: u64,
    /// Dropout kernels on (p > 0).
    pub(super) dropout: bool,
    /// GPT-2's python GELU (8 kernels) instead of one.
    pub(super) gelu_new: bool,
    /// q, k, v in one GEMM.
    pub(super) packed_qkv: bool,
}

impl Tx {
    /// Head dimension: width over heads, heads = (batch x heads) / batch.
    pub(super) fn dh(&self) -> u64 {
        (self.d * (self.t / self.seq) / self.bh).max(1)
    }
}

pub(super) fn tx_fwd(b: &mut B<'_>, x: &Tx, cross: Option<(u64, u64)>, f: u64) {
    let (t, d) = (x.t, x.d);
    let dh = x.dh();
    b.rows("layer_norm", t, d, 8.0, f);
    if x.packed_qkv {
        b.sgemm("addmm_qkv", t, 3 * d, d, f);
    } else {
        for name in ["linear_q", "linear_k", "linear_v"] {
            b.sgemm(name, t, d, d, f);
        }
    }
    b.attn_f32("sdpa_mem_efficient_fwd", (x.bh, x.seq, x.keys, dh), 2.0, f);
    b.sgemm("linear_out", t, d, d, f);
    if x.dropout {
        b.elt("dropout", t * d, 9.0, f);
    }
    b.elt("residual_add", t * d, 12.0, f);
    if let Some((kv_t, kv_keys)) = cross {
        b.rows("layer_norm", t, d, 8.0, f);
        b.sgemm("linear_q_cross", t, d, d, f);
        b.sgemm("linear_k_cross", kv_t, d, d, f);
        b.sgemm("linear_v_cross", kv_t, d, d, f);
        b.attn_f32("sdpa_mem_efficient_fwd", (x.bh, x.seq, kv_keys, dh), 2.0, f);
        b.sgemm("linear_out_cross", t, d, d, f);
        b.elt("residual_add", t * d, 12.0, f);
    }
    b.rows("layer_norm", t, d, 8.0, f);
    b.sgemm("linear_fc1", t, x.ffn, d, f);
    if x.gelu_new {
        for name in ["pow", "mul", "add", "mul", "tanh", "add", "mul", "mul"] {
            b.elt(name, t * x.ffn, 8.0, f);
        }
    } else {
        b.elt("gelu", t * x.ffn, 8.0, f);
    }
    b.sgemm("linear_fc2", t, d, x.ffn, f);
    if x.dropout {
        b.elt("dropout", t * d, 9.0, f);
    }
    b.elt("residual_add", t * d, 12.0, f);
}

/// A linear layer's backward: input gradient, weight gradient, bias sum.
pub(super) fn linear_bwd(b: &mut B<'_>, name: &str, t: u64, n_in: u64, n_out: u64, w: u64) {
    b.sgemm(&format!("{name}_dgrad"), t, n_in, n_out, w);
    b.sgemm(&format!("{name}_wgrad"), n_out, n_in, t, w);
    b.rows(
        &format!("{name}_bias_grad"),
        n_out.div_ceil(32),
        t * 32,
        4.0,
        w,
    );
}

pub(super) fn tx_bwd(b: &mut B<'_>, x: &Tx, cross: Option<(u64, u64)>, w: u64) {
    let (t, d) = (x.t, x.d);
    let dh = x.dh();
    if x.dropout {
        b.elt("dropout_backward", t * d, 9.0, w);
    }
    linear_bwd(b, "linear_fc2", t, x.ffn, d, w);
    if x.gelu_new {
        for name in [
            "mul_bwd",
            "mul_bwd",
            "tanh_bwd",
            "add_bwd",
            "mul_bwd",
            "pow_bwd",
            "add_grads",
        ] {
            b.elt(name, t * x.ffn, 12.0, w);
        }
    } else {
        b.elt("gelu_backward", t * x.ffn, 12.0, w);
    }
    linear_bwd(b, "linear_fc1", t, d, x.ffn, w);
    b.rows("layer_norm_backward", t, d, 12.0, w);
    b.rows(
        "layer_norm_gamma_beta_backward",
        d.div_ceil(32),
        t * 32,
        8.0,
        w,
    );
    b.elt("grad_accumulate", t * d, 12.0, w);
    if let Some((kv_t, kv_keys)) = cross {
        linear_bwd(b, "linear_out_cross", t, d, d, w);
        b.elt("sdpa_backward_delta", t * d, 8.0, w);
        b.attn_f32("sdpa_mem_efficient_bwd", (x.bh, x.seq, kv_keys, dh), 5.0, w);
        for name in ["linear_v_cross", "linear_k_cross"] {
            linear_bwd(b, name, kv_t, d, d, w);
        }
        linear_bwd(b, "linear_q_cross", t, d, d, w);
        b.rows("layer_norm_backward", t, d, 12.0, w);
        b.rows(
            "layer_norm_gamma_beta_backward",
            d.div_ceil(32),
            t * 32,
            8.0,
            w,
        );
        b.elt("grad_accumulate", t * d, 12.0, w);
    }
    if x.dropout {
        b.elt("dropout_backward", t * d, 9.0, w);
    }
    linear_bwd(b, "linear_out", t, d, d, w);
    b.elt("sdpa_backward_delta", t * d, 8.0, w);
    b.attn_f32("sdpa_mem_efficient_bwd", (x.bh, x.seq, x.keys, dh), 5.0, w);
    if x.packed_qkv {
        linear_bwd(b, "addmm_qkv", t, d, 3 * d, w);
    } else {
        for name in ["linear_v", "linear_k", "linear_q"] {
            linear_bwd(b, name, t, d, d, w);
        }
        b.elt("grad_accumulate", t * d, 12.0, w);
        b.elt("grad_accumulate", t * d, 12.0, w);
    }
    b.rows("layer_norm_backward", t, d, 12.0, w);
    b.rows(
        "layer_norm_gamma_beta_backward",
        d.div_ceil(32),
        t * 32,
        8.0,
        w,
    );
    b.elt("grad_accumulate", t * d, 12.0, w);
}

/// Cross-entropy over `rows` rows of `vocab` logits after an LM head of
/// width `d` (tied weights): forward, loss, backward into the head.
pub(super) fn lm_head_loss(b: &mut B<'_>, rows: u64, vocab: u64, d: u64) {
    let (f, w) = (b.p.train_fwd_ns, b.p.train_bwd_ns);
    b.sgemm("lm_head", rows, vocab, d, f);
    b.rows("log_softmax", rows, vocab, 8.0, f);
    b.elt("nll_loss", rows, 8.0, f);
    b.elt("ones_like", 1, 4.0, f);
    b.elt("nll_loss_backward", rows * vocab, 4.0, w);
    b.rows("log_softmax_backward", rows, vocab, 12.0, w);
    b.sgemm("lm_head_dgrad", rows, d, vocab, w);
    b.sgemm("lm_head_wgrad", vocab, d, rows, w);
}

/// Embedding backward (sort-based `embedding_dense_backward`) of `t` tokens.
pub(super) fn embedding_bwd(b: &mut B<'_>, t: u64, d: u64, vocab: u64) {
    let w = b.p.train_bwd_ns;
    b.elt("embedding_grad_zero", vocab * d, 4.0, w);
    for name in ["sort_indices", "count_unique", "segment_offsets"] {
        b.elt(name, t, 16.0, w);
    }
    b.elt("embedding_backward_feature", t * d, 12.0, w);
}

/// A convolution's shape: (in channels, out channels, kernel, stride,
/// input height, input width); padding keeps `h / stride`.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConvShape {
    pub(super) cin: u64,
    pub(super) cout: u64,
    pub(super) k: u64,
    pub(super) stride: u64,
    pub(super) h: u64,
    pub(super) w: u64,
}

impl ConvShape {
    /// Output positions (a 1-D convolution has `h == 1`).
    pub(super) fn out_hw(&self) -> u64 {
        let ho = if self.h == 1 {
            1
        } else {
            self.h.div_ceil(self.stride)
        };
        ho * self.w.div_ceil(self.stride)
    }
    pub(super) fn needs_columns(&self) -> bool {
        self.k != 1 || self.stride != 1
    }
    pub(super) fn taps(&self) -> u64 {
        if self.h == 1 {
            self.k
        } else {
            self.k * self.k
        }
    }
}

/// ATen `slow_conv2d` forward over `batch` samples: the output filled
/// (bias copy or zero), then per sample an im2col (unless 1x1 stride 1)
/// and a GEMM accumulating into the output.
pub(super) fn conv_fwd(b: &mut B<'_>, batch: u64, c: ConvShape, bias: bool) {
    let f = b.p.train_fwd_ns;
    let l = ATEN_LOOP_NS;
    let hw_out = c.out_hw();
    let kk = c.cin * c.taps();
    b.elt(
        if bias { "conv_bias_fill" } else { "conv_zero" },
        batch * c.cout * hw_out,
        4.0,
        f,
    );
    for _ in 0..batch {
        if c.needs_columns() {
            b.elt_on("im2col", IM2COL, 1024, kk * hw_out, 8.0, l);
        }
        b.sgemm_acc("sgemm_conv_fwd", hw_out, c.cout, kk, l);
    }
}

/// ATen `slow_conv2d` backward: per sample a GEMM into the columns and a
/// col2im into the input gradient (when `grad_input`), then the weight
/// gradient zeroed and, per sample, an im2col (unless 1x1 stride 1) and a
/// GEMM accumulating into it; the bias gradient a reduction.
pub(super) fn conv_bwd(b: &mut B<'_>, batch: u64, c: ConvShape, grad_input: bool, bias: bool) {
    let w = b.p.train_bwd_ns;
    let l = ATEN_LOOP_NS;
    let hw_out = c.out_hw();
    let kk = c.cin * c.taps();
    let hw_in = c.h * c.w;
    if grad_input {
        for _ in 0..batch {
            b.sgemm("sgemm_conv_dgrad", hw_out, kk, c.cout, l);
            b.elt_on(
                "col2im",
                IM2COL,
                1024,
                c.cin * hw_in,
                4.0 + 4.0 * c.taps() as f64 * hw_out as f64 / hw_in as f64,
                l,
            );
        }
    }
    if bias {
        b.rows("conv_bias_grad", c.cout, batch * hw_out, 4.0, w);
    }
    b.elt("conv_grad_weight_zero", c.cout * kk, 4.0, w);
    for _ in 0..batch {
        if c.needs_columns() {
            b.elt_on("im2col", IM2COL, 1024, kk * hw_out, 8.0, l);
        }
        b.sgemm_acc("sgemm_conv_wgrad", c.cout, kk, hw_out, l);
    }
}

/// Native batch norm in training: statistics, running-stat update,
/// normalisation.
pub(super) fn bn_fwd(b: &mut B<'_>, n: u64, ch: u64, hw: u64) {
    let f = b.p.train_fwd_ns;
    b.rows("batch_norm_collect_statistics", ch, n * hw, 4.0, f);
    b.elt("batch_norm_update_stats", ch * 4, 8.0, 0);
    b.elt("batch_norm_transform_input", n * ch * hw, 8.0, 0);
}

pub(super) fn bn_bwd(b: &mut B<'_>, n: u64, ch: u64, hw: u64) {
    let w = b.p.train_bwd_ns;
    b.rows("batch_norm_backward_reduce", ch, n * hw, 8.0, w);
    b.elt("batch_norm_backward_elemt", n * ch * hw, 12.0, 0);
}
