//! The artifact's transformer trainers: Whisper, Pegasus-X, GPT-2 large and
//! BERT-base QA, one step each.

use super::builder::B;
use super::layers::{
    conv_bwd, conv_fwd, embedding_bwd, linear_bwd, lm_head_loss, tx_bwd, tx_fwd, ConvShape, Tx,
};
use super::step::{adamw_foreach, fit_step, trainer_tail, Step};
use crate::params::Params;
use crate::trace::{JobClass, Trace};

/// Whisper-small (the artifact's `whisper-large-v3` job), batch 16.
#[must_use]
pub fn whisper_b16(p: &Params) -> Trace {
    let (batch, frames, enc_seq, dec_seq, d, ffn, heads, vocab) = (
        16u64, 3000u64, 1500u64, 96u64, 768u64, 3072u64, 12u64, 51_865u64,
    );
    let mut b = B::new(p);
    let (f, w) = (p.train_fwd_ns, p.train_bwd_ns);
    b.copy(batch * 80 * frames * 4, false, f);
    b.copy(batch * dec_seq * 8, false, f);
    let enc = Tx {
        t: batch * enc_seq,
        d,
        ffn,
        bh: batch * heads,
        seq: enc_seq,
        keys: enc_seq,
        dropout: false,
        gelu_new: false,
        packed_qkv: false,
    };
    let dec = Tx {
        t: batch * dec_seq,
        seq: dec_seq,
        keys: dec_seq,
        ..enc
    };
    let cross = Some((batch * enc_seq, enc_seq));
    // Encoder stem: two conv1d (k = 3), ATen's per-sample loop, GELUs.
    conv_fwd(
        &mut b,
        batch,
        ConvShape {
            cin: 80,
            cout: d,
            k: 3,
            stride: 1,
            h: 1,
            w: frames,
        },
        true,
    );
    b.elt("gelu", batch * d * frames, 8.0, f);
    conv_fwd(
        &mut b,
        batch,
        ConvShape {
            cin: d,
            cout: d,
            k: 3,
            stride: 2,
            h: 1,
            w: frames,
        },
        true,
    );
    b.elt("gelu", batch * d * enc_seq, 8.0, f);
    b.elt("add_positions", batch * d * enc_seq, 12.0, f);
    for _ in 0..12 {
        tx_fwd(&mut b, &enc, None, f);
    }
    b.rows("layer_norm", enc.t, d, 8.0, f);
    b.elt("embed_tokens", dec.t * d, 8.0, f);
    b.elt("add_positions", dec.t * d, 12.0, f);
    for _ in 0..12 {
        tx_fwd(&mut b, &dec, cross, f);
    }
    b.rows("layer_norm", dec.t, d, 8.0, f);
    lm_head_loss(&mut b, dec.t, vocab, d);
    // Backward with gradient checkpointing: each layer's forward again.
    for _ in 0..12 {
        tx_fwd(&mut b, &dec, cross, w);
        tx_bwd(&mut b, &dec, cross, w);
    }
    embedding_bwd(&mut b, dec.t, d, vocab);
    for _ in 0..12 {
        tx_fwd(&mut b, &enc, None, w);
        tx_bwd(&mut b, &enc, None, w);
    }
    b.elt("gelu_backward", batch * d * enc_seq, 12.0, w);
    conv_bwd(
        &mut b,
        batch,
        ConvShape {
            cin: d,
            cout: d,
            k: 3,
            stride: 2,
            h: 1,
            w: frames,
        },
        true,
        true,
    );
    b.elt("gelu_backward", batch * d * frames, 12.0, w);
    conv_bwd(
        &mut b,
        batch,
        ConvShape {
            cin: 80,
            cout: d,
            k: 3,
            stride: 1,
            h: 1,
            w: frames,
        },
        false,
        true,
    );
    adamw_foreach(&mut b, 241_734_912, 243, false);
    trainer_tail(&mut b);
    fit_step(&mut b, &Step { gpu_util: 0.49994 });
    b.trace(
        "whisper_large_v3_b16",
        JobClass::Training,
        "the artifact's whisper-large-v3 job: train_whisper.py loads openai/whisper-small (12+12 layers, width 768); fp32, batch 16, 80x3000 mel frames, 96 label tokens (assumed), gradient checkpointing, Seq2SeqTrainer AdamW; one step; data loading fitted to 50% GPU utilisation",
    )
}

/// Pegasus-X-base, fp32, batch 4, 3072 input and 64 summary tokens.
#[must_use]
pub fn pegasus_x_base_b4(p: &Params) -> Trace {
    let (batch, src, tgt, d, ffn, heads, vocab, block, globals) = (
        4u64, 3072u64, 64u64, 768u64, 3072u64, 12u64, 96_103u64, 512u64, 128u64,
    );
    let mut b = B::new(p);
    let (f, w) = (p.train_fwd_ns, p.train_bwd_ns);
    b.copy(batch * src * 8 * 2, false, f);
    b.copy(batch * tgt * 8, false, f);
    // Encoder: block-local attention over 512-token blocks plus the 128
    // global tokens; the global tokens' own attention and MLP are small.
    let enc = Tx {
        t: batch * src,
        d,
        ffn,
        bh: batch * heads,
        seq: src,
        keys: block + globals,
        dropout: true,
        gelu_new: false,
        packed_qkv: false,
    };
    let glob = Tx {
        t: batch * globals,
        seq: globals,
        keys: src + globals,
        ..enc
    };
    let dec = Tx {
        t: batch * tgt,
        seq: tgt,
        keys: tgt,
        ..enc
    };
    b.elt("embed_tokens", enc.t * d, 8.0, f);
    b.elt("embed_scale_add_positions", enc.t * d, 12.0, f);
    for i in 0..12 {
        if i % 2 == 1 {
            // Staggered blocks: pad by half a block, and slice back after.
            b.elt("pad_stagger", enc.t * d, 8.0, f);
        }
        b.elt("block_reshape_concat_globals", enc.t * d, 8.0, f);
        tx_fwd(&mut b, &enc, None, f);
        tx_fwd(&mut b, &glob, None, f);
        b.elt(
            "masked_fill_softmax_mask",
            enc.bh * src * (block + globals) / 64,
            8.0,
            f,
        );
    }
    b.rows("layer_norm", enc.t, d, 8.0, f);
    b.elt("embed_tokens", dec.t * d, 8.0, f);
    for _ in 0..12 {
        tx_fwd(&mut b, &dec, Some((enc.t, src)), f);
    }
    b.rows("layer_norm", dec.t, d, 8.0, f);
    lm_head_loss(&mut b, dec.t, vocab, d);
    for _ in 0..12 {
        tx_bwd(&mut b, &dec, Some((enc.t, src)), w);
    }
    embedding_bwd(&mut b, dec.t, d, vocab);
    for _ in 0..12 {
        b.elt(
            "masked_fill_softmax_mask_backward",
            enc.bh * src * (block + globals) / 64,
            8.0,
            w,
        );
        tx_bwd(&mut b, &glob, None, w);
        tx_bwd(&mut b, &enc, None, w);
        b.elt("block_reshape_backward", enc.t * d, 8.0, w);
    }
    embedding_bwd(&mut b, enc.t, d, vocab);
    adamw_foreach(&mut b, 272_466_432, 326, true);
    trainer_tail(&mut b);
    fit_step(&mut b, &Step { gpu_util: 0.89767 });
    b.trace(
        "pegasus_x_base_b4",
        JobClass::Training,
        "google/pegasus-x-base (12+12 layers, width 768, local blocks of 512 + 128 global tokens), fp32, batch 4, XSum documents padded to 3072 tokens and summaries to 64 (assumed), Trainer AdamW wd 0.01 (tally-bench train_pegasus.py); one step",
    )
}

/// GPT-2 large, fp32, batch 1, 512 tokens.
#[must_use]
pub fn gpt2_large_b1(p: &Params) -> Trace {
    let (seq, d, ffn, heads, vocab) = (512u64, 1280u64, 5120u64, 20u64, 50_257u64);
    let mut b = B::new(p);
    let (f, w) = (p.train_fwd_ns, p.train_bwd_ns);
    b.copy(seq * 8 * 3, false, f);
    let x = Tx {
        t: seq,
        d,
        ffn,
        bh: heads,
        seq,
        keys: seq,
        dropout: true,
        gelu_new: true,
        packed_qkv: true,
    };
    b.elt("wte", seq * d, 8.0, f);
    b.elt("wpe_add", seq * d, 12.0, f);
    b.elt("dropout", seq * d, 9.0, f);
    for _ in 0..36 {
        tx_fwd(&mut b, &x, None, f);
        b.elt("merge_heads_contiguous", seq * d, 8.0, f);
    }
    b.rows("layer_norm", seq, d, 8.0, f);
    // Shifted labels: the loss over 511 positions (contiguous copies).
    b.elt("shift_logits_contiguous", seq * vocab, 8.0, f);
    lm_head_loss(&mut b, seq, vocab, d);
    for _ in 0..36 {
        tx_bwd(&mut b, &x, None, w);
    }
    embedding_bwd(&mut b, seq, d, vocab);
    b.elt("wpe_backward", seq * d, 8.0, w);
    adamw_foreach(&mut b, 774_030_080, 292, false);
    trainer_tail(&mut b);
    fit_step(&mut b, &Step { gpu_util: 0.8945 });
    b.trace(
        "gpt2_large_b1",
        JobClass::Training,
        "gpt2-large (36 layers, width 1280), fp32, batch 1 x 512 tokens, Trainer AdamW with clipping (tally-bench train_gpt2.py); one step",
    )
}

/// BERT-base for SQuAD, fp32, batch 32, sequence 384, transformers' AdamW.
#[must_use]
pub fn bert_b32(p: &Params) -> Trace {
    let (batch, seq, d, ffn, heads, vocab) = (32u64, 384u64, 768u64, 3072u64, 12u64, 30_522u64);
    let mut b = B::new(p);
    let (f, w, o) = (p.train_fwd_ns, p.train_bwd_ns, p.train_opt_ns);
    let t = batch * seq;
    for _ in 0..5 {
        b.copy(batch * seq * 8 / 3 + 8 * batch, false, f / 2);
    }
    let x = Tx {
        t,
        d,
        ffn,
        bh: batch * heads,
        seq,
        keys: seq,
        dropout: true,
        gelu_new: false,
        packed_qkv: false,
    };
    for name in [
        "word_embeddings",
        "token_type_embeddings",
        "add",
        "position_embeddings",
        "add",
    ] {
        b.elt(name, t * d, 8.0, f);
    }
    b.rows("layer_norm", t, d, 8.0, f);
    b.elt("dropout", t * d, 9.0, f);
    b.elt("extended_attention_mask", batch * seq, 8.0, f);
    for _ in 0..12 {
        tx_fwd(&mut b, &x, None, f);
    }
    // qa_outputs (d -> 2), split, two cross-entropies, mean.
    b.sgemm("addmm_qa_outputs", t, 2, d, f);
    for name in ["split_contiguous", "clamp_start", "clamp_end"] {
        b.elt(name, t * 2, 8.0, f);
    }
    for _ in 0..2 {
        b.rows("log_softmax", batch, seq, 8.0, f);
        b.elt("nll_loss", batch, 8.0, f);
    }
    b.elt("add_div_loss", 1, 12.0, f);
    b.elt("ones_like", 1, 4.0, f);
    for _ in 0..2 {
        b.elt("nll_loss_backward", batch * seq, 8.0, w);
        b.rows("log_softmax_backward", batch, seq, 12.0, w);
    }
    b.elt("cat_grads", t * 2, 8.0, w);
    linear_bwd(&mut b, "qa_outputs", t, d, 2, w);
    for _ in 0..12 {
        tx_bwd(&mut b, &x, None, w);
    }
    b.elt("dropout_backward", t * d, 9.0, w);
    b.rows("layer_norm_backward", t, d, 12.0, w);
    for v in [vocab, 2, 512] {
        embedding_bwd(&mut b, t, d, v);
    }
    // transformers.AdamW: a Python loop, 7 kernels per parameter
    // (mul_, add_, mul_, addcmul_, sqrt, add_, addcdiv_), wd 0.
    let sizes = bert_param_sizes();
    for numel in sizes {
        for (name, bytes) in [
            ("adamw_mul", 8.0),
            ("adamw_add", 12.0),
            ("adamw_mul", 8.0),
            ("adamw_addcmul", 16.0),
            ("adamw_sqrt", 8.0),
            ("adamw_add_eps", 8.0),
            ("adamw_addcdiv", 16.0),
        ] {
            b.elt(name, numel, bytes, o / 3);
        }
    }
    b.sync(f);
    b.copy(4, true, f);
    b.sync(f / 2);
    fit_step(&mut b, &Step { gpu_util: 0.98041 });
    b.trace(
        "bert_b32",
        JobClass::Training,
        "bert-base-uncased for SQuAD v2, fp32, batch 32, sequence 384, transformers' per-parameter AdamW (tally-bench train_bert.py); one step",
    )
}

/// BERT-base QA's 199 parameter tensors' sizes.
fn bert_param_sizes() -> Vec<u64> {
    let d = 768u64;
    let mut v = vec![30_522 * d, 512 * d, 2 * d, d, d];
    for _ in 0..12 {
        v.extend([
            d * d,
            d,
            d * d,
            d,
            d * d,
            d,
            d * d,
            d,
            d,
            d,
            4 * d * d,
            4 * d,
            4 * d * d,
            d,
            d,
            d,
        ]);
    }
    v.extend([2 * d, 2]);
    v
}
