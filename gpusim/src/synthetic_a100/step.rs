//! What every trainer's step shares beyond its layers: PyTorch's AdamW,
//! the HF Trainer's loss bookkeeping, and the data-loading gap fitted so
//! that the step keeps the GPU as busy as the artifact measured alone.

use super::builder::B;
use crate::params::Params;
use crate::trace::Op;

/// What a training job adds to each step beyond its kernels (fitted CPU).
pub(super) struct Step {
    /// The job's kernels-busy share of a step alone (`single-job-perf.csv`).
    pub(super) gpu_util: f64,
}

/// Sets the step's data-loading gap so that its kernels are busy for
/// `util` of the step (alone, kernels back to back after their gaps).
pub(super) fn fit_step(b: &mut B<'_>, s: &Step) {
    let kernel: u64 = b
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::Kernel(k) => Some(k.duration_ns),
            _ => None,
        })
        .sum();
    let host = alone_step_ns(&b.ops, b.p);
    let want = (kernel as f64 / s.gpu_util).round() as u64;
    b.prepend_gap(want.saturating_sub(host));
}

/// A step's time alone: one stream, each op issued after its gap, a kernel
/// starting when both it is issued and the previous one is done, a sync
/// waiting for all (copies at the model's copy cost).
#[must_use]
pub fn alone_step_ns(ops: &[Op], p: &Params) -> u64 {
    let (mut cpu, mut gpu) = (0u64, 0u64);
    for op in ops {
        cpu += op.host_gap_ns();
        match op {
            Op::Kernel(k) => gpu = gpu.max(cpu) + k.duration_ns,
            Op::CopyH2d { bytes, .. } | Op::CopyD2h { bytes, .. } => {
                let c = p.gpu.copy_latency_ns + (*bytes as f64 / p.gpu.copy_bytes_per_ns) as u64;
                gpu = gpu.max(cpu) + c;
            }
            Op::Sync { .. } => {
                cpu = cpu.max(gpu);
            }
        }
    }
    cpu.max(gpu)
}

/// PyTorch's `foreach` AdamW over `numel` fp32 parameters in `tensors`
/// tensors (two parameter groups, with and without decay).
pub(super) fn adamw_foreach(b: &mut B<'_>, numel: u64, tensors: u64, decay: bool) {
    let o = b.p.train_opt_ns;
    // Trainer's gradient clipping: norms, stack, total norm, coefficient, scale.
    b.foreach("foreach_norm", numel, tensors, 1, 4.0, o);
    for name in ["stack", "vector_norm", "add_eps", "div", "clamp"] {
        b.elt(name, tensors, 8.0, o / 3);
    }
    b.foreach("foreach_mul_clip", numel, tensors, 1, 8.0, o);
    let mut ops: Vec<(&str, usize, f64)> = vec![
        ("foreach_lerp", 2, 12.0),
        ("foreach_mul", 1, 8.0),
        ("foreach_addcmul", 2, 16.0),
        ("foreach_sqrt", 2, 8.0),
        ("foreach_div", 1, 8.0),
        ("foreach_add_eps", 1, 8.0),
        ("foreach_addcdiv", 3, 16.0),
    ];
    if decay {
        ops.insert(0, ("foreach_mul_decay", 1, 8.0));
    }
    for (name, lists, bytes) in ops {
        b.foreach(name, numel, tensors, lists, bytes, o);
    }
}

/// HF Trainer's per-step loss bookkeeping: NaN/Inf checks read back, the
/// running sum.
pub(super) fn trainer_tail(b: &mut B<'_>) {
    let f = b.p.train_fwd_ns;
    for name in ["isnan", "isinf"] {
        b.elt(name, 1, 8.0, f);
        b.copy(1, true, f / 2);
        b.sync(f / 2);
    }
    b.elt("tr_loss_add", 1, 12.0, f);
    // BenchCallback.on_step_end: torch.cuda.synchronize().
    b.sync(f);
}
