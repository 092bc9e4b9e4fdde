//! The artifact's two inference servers on ONNX Runtime: BERT-large and
//! Llama-2-7B, one request each, with the CPU costs fitted to their
//! single-stream latencies.

use super::builder::B;
use super::device::{FLASH_F16, ORT_NODE_NS};
use crate::params::Params;
use crate::trace::{JobClass, Trace};

/// BERT: Python and `session.run` before the first node, with the previous
/// request's argmax and decode, ns (fitted to the 4.05 ms mean).
const BERT_PRE_NS: u64 = 400_000;
/// Llama: `apply_io_binding`'s ~130 binds and `synchronize_inputs`, ns
/// (fitted with the post-run ops to the 1963.9 ms mean).
const LLAMA_BIND_NS: u64 = 1_470_000;
/// Llama: PyTorch's token selection after a run, CPU per op, ns (fitted, as above).
const LLAMA_POST_OP_NS: u64 = 30_000;
/// Llama: model runs per request (prompt of 30 tokens to `max_length` 128).
pub const LLAMA_RUNS: u64 = 99;
/// Llama: prompt tokens (assumed).
const LLAMA_PROMPT: u64 = 30;

/// BERT-large on ONNX Runtime, fp16, batch 1, sequence 128: one request.
#[must_use]
pub fn bert_ort(p: &Params) -> Trace {
    let (seq, d, ffn, heads, layers) = (128u64, 1024u64, 4096u64, 16u64, 24);
    let g = ORT_NODE_NS;
    let mut b = B::new(p);
    // input_ids, input_mask, segment_ids: int64 numpy arrays, copied in.
    b.copy(seq * 8, false, BERT_PRE_NS);
    b.copy(seq * 8, false, g);
    b.copy(seq * 8, false, g);
    b.rows("EmbedLayerNormalization", seq, d, 6.0, g);
    for _ in 0..layers {
        b.hgemm("MatMul_qkv", seq, 3 * d, d, g);
        b.ort_elt("AddBiasTranspose", seq * 3 * d, 4.0, g);
        b.attention(
            "fused_mha_fp16",
            FLASH_F16,
            (heads, seq, seq, d / heads),
            2.0,
            p.sm_flop_per_ns * p.gemm_eff,
            2.0,
            g,
        );
        b.hgemm("MatMul_attn_out", seq, d, d, g);
        b.rows("SkipLayerNormalization", seq, d, 8.0, g);
        b.hgemm("MatMul_ffn1", seq, ffn, d, g);
        b.ort_elt("BiasGelu", seq * ffn, 4.0, g);
        b.hgemm("MatMul_ffn2", seq, d, ffn, g);
        b.rows("SkipLayerNormalization", seq, d, 8.0, g);
    }
    b.hgemm("MatMul_qa_outputs", seq, 2, d, g);
    b.ort_elt("Split_start_end", seq * 2, 6.0, g);
    b.copy(seq * 4, true, g);
    b.copy(seq * 4, true, g);
    b.sync(g);
    b.trace(
        "bert_ort",
        JobClass::Inference,
        "BERT-large (24 layers, width 1024) SQuAD, ONNX Runtime fp16 (fused attention, bias+GELU, skip+layer norm), batch 1, sequence 128; one request (tally-bench bert_infer.py)",
    )
}

/// One Llama-2-7B forward of ORT over `m` new tokens with `ctx` tokens of
/// KV cache after them.
fn llama_run(b: &mut B<'_>, m: u64, ctx: u64) {
    let (d, ffn, heads, vocab) = (4096u64, 11_008u64, 32u64, 32_000u64);
    let g = ORT_NODE_NS;
    let p_flop = b.p.sm_flop_per_ns * b.p.gemm_eff;
    b.ort_elt("Gather_embed", m * d, 4.0, 30_000);
    for _ in 0..32 {
        b.rows("SkipSimplifiedLayerNorm", m, d, 6.0, g);
        b.gemv("MatMul_qkv", m, 3 * d, d, g);
        b.ort_elt("RotaryEmbedding_qk", m * 2 * d, 4.0, g);
        // GQA: the new K/V written into the shared buffer, attention over ctx.
        b.attention(
            "GroupQueryAttention",
            FLASH_F16,
            (heads, m, ctx, d / heads),
            2.0,
            p_flop,
            2.0,
            g,
        );
        b.gemv("MatMul_o_proj", m, d, d, g);
        b.rows("SkipSimplifiedLayerNorm", m, d, 8.0, g);
        b.gemv("MatMul_gate_up", m, 2 * ffn, d, g);
        b.ort_elt("SwiGLU", m * ffn, 6.0, g);
        b.gemv("MatMul_down", m, d, ffn, g);
    }
    b.rows("SimplifiedLayerNorm", m, d, 4.0, g);
    b.gemv("MatMul_lm_head", m, vocab, d, g);
}

/// Llama-2-7B on ONNX Runtime, fp16, batch 1: one request is one whole
/// generation (prefill of 30 tokens, 98 decode steps).
#[must_use]
pub fn llama2_7b_ort(p: &Params) -> Trace {
    let mut b = B::new(p);
    let t = LLAMA_POST_OP_NS;
    // get_initial_inputs_and_outputs: ids and mask to the GPU, position ids,
    // the shared KV buffers (32 layers x K and V of 1 x 32 x 4096 x 128 fp16)
    // and the logits zeroed.
    b.copy(LLAMA_PROMPT * 8, false, 200_000);
    b.copy(LLAMA_PROMPT * 8, false, t);
    b.elt("cumsum_masked_fill", LLAMA_PROMPT, 24.0, t);
    for _ in 0..64 {
        b.elt("zeros_kv", 32 * 4096 * 128, 2.0, 8_000);
    }
    b.elt("zeros_logits", LLAMA_PROMPT * 32_000, 2.0, t);
    for r in 0..LLAMA_RUNS {
        let (m, ctx) = if r == 0 {
            (LLAMA_PROMPT, LLAMA_PROMPT)
        } else {
            (1, LLAMA_PROMPT + r)
        };
        // apply_io_binding + synchronize_inputs.
        b.sync(LLAMA_BIND_NS);
        llama_run(&mut b, m, ctx);
        // synchronize_outputs.
        b.sync(g_small());
        // gather (prefill) / slice, argmax, eos checks, masked_fill, cat,
        // then torch.all(has_eos) read back.
        for name in [
            "argmax",
            "eq_eos",
            "or_has_eos",
            "masked_fill",
            "cat_tokens",
            "all_eos",
        ] {
            b.elt(name, 32_000.min(m * 32_000), 2.0, t);
        }
        b.copy(1, true, t);
        b.sync(t / 2);
        // position ids, attention mask, logits.zero_().
        for name in [
            "max_position",
            "add_one",
            "not_eos",
            "cat_mask",
            "zero_logits",
        ] {
            b.elt(name, 128, 8.0, t);
        }
    }
    b.sync(t);
    b.trace(
        "llama2_7b_ort",
        JobClass::Inference,
        "Llama-2-7B, ONNX Runtime fp16 with GQA and a shared KV buffer, batch 1; one request = one generation of 99 model runs (30-token prefill, 98 decode steps) with Python IO binding and PyTorch token selection per run (tally-bench llama.py)",
    )
}

fn g_small() -> u64 {
    ORT_NODE_NS
}
