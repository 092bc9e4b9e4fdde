//! `--why`: which kernels of which job carry the predicted delay.
//!
//! The engine's observer ([`crate::gpu::Attribution`]) charges each job's
//! waiting for SMs to the other jobs' kernels holding them, by submission
//! token; a job's tokens number its kernels and copies in trace order, one
//! per op issued (`World::token`), so a token names an op of the trace (and
//! so a kernel by its function's name). The entries are summed over seeds and over every
//! launch of the same kernel (same job, same op of the trace), and ranked
//! by time waited. The waiting jobs are the inference jobs (whose p99 the
//! delay is), or the training jobs where the GPU has no inference job.

use std::collections::HashMap;

use serde::Serialize;

use crate::gpu::{Attribution, Culprit as Charged};
use crate::job::{JobSpec, JobState, Outcome};
use crate::trace::{JobClass, Op};

/// One kernel that delays a job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WhyEntry {
    /// The job that waits.
    pub delayed: String,
    /// The job whose kernel it waits for (`-` for the time-slicer).
    pub by_job: String,
    /// The kernel (its function's name, or the trace's stable id), or
    /// `(time-slice: another context's slice or a switch)`.
    pub kernel: String,
    /// How many ops of that job's trace launch it (per request or step).
    pub launches_per_unit: usize,
    /// Predicted waiting for it, ms per request (per step for training),
    /// mean over seeds.
    pub predicted_wait_ms_per_unit: f64,
    /// Its share of the delayed job's predicted waiting charged to other
    /// jobs (and the time-slicer): the entries of one job add up to 1.
    pub share: f64,
}

/// Whom a wait is charged to, by name: (job, kernel name), or `None`
/// for the time-slicer.
type Culprit<'a> = Option<(usize, &'a str)>;

/// The op index of each token of a job (its tokens number its kernels and
/// copies, in trace order, over and over).
fn token_ops(spec: &JobSpec) -> Vec<usize> {
    spec.trace
        .ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !matches!(o, Op::Sync { .. }))
        .map(|(i, _)| i)
        .collect()
}

/// The top `n` entries over the seeds' observers and outcomes.
#[must_use]
pub fn top(
    specs: &[JobSpec],
    labels: &[&str],
    seeds: &[(&Attribution, Vec<&Outcome>)],
    window_s: f64,
    n: usize,
) -> Vec<WhyEntry> {
    let ops: Vec<Vec<usize>> = specs.iter().map(token_ops).collect();
    // The world hands out a job's tokens counting up from its state's
    // `next_token`, incremented before each use.
    let first_token = JobState::new().next_token + 1;
    let any_inference = specs.iter().any(|s| s.class() == JobClass::Inference);
    let delayed = |v: usize| (specs[v].class() == JobClass::Inference) == any_inference;
    // (victim, culprit job or none, kernel name) -> ns; victim -> ns
    // charged, units.
    let mut sum: HashMap<(usize, Culprit<'_>), f64> = HashMap::new();
    let mut waited: HashMap<usize, f64> = HashMap::new();
    let name = |j: usize, op: usize| match &specs[j].trace.ops[op] {
        Op::Kernel(k) => k.name.as_str(),
        Op::CopyH2d { .. } => "(copy to the device)",
        Op::CopyD2h { .. } => "(copy to the host)",
        Op::Sync { .. } => "(sync)",
    };
    let mut units: HashMap<usize, f64> = HashMap::new();
    for (a, outs) in seeds {
        for (&(v, c), &ns) in &a.waits {
            if !delayed(v) {
                continue;
            }
            let key = match c {
                Charged::Kernel(j, token) => {
                    let Some(&op) = ops[j].get(
                        (token.saturating_sub(first_token) % ops[j].len().max(1) as u64) as usize,
                    ) else {
                        continue;
                    };
                    Some((j, name(j, op)))
                }
                Charged::Timeslice => None,
            };
            *sum.entry((v, key)).or_default() += ns;
            *waited.entry(v).or_default() += ns;
        }
        for (v, o) in outs.iter().enumerate() {
            let u = match specs[v].class() {
                JobClass::Inference => o.latencies_ms.len() as f64,
                JobClass::Training => o.steps_per_s.unwrap_or(0.0) * window_s,
            };
            *units.entry(v).or_default() += u;
        }
    }
    let mut entries: Vec<(f64, WhyEntry)> = sum
        .into_iter()
        .map(|((v, key), ns)| {
            let (by_job, kernel, launches) = match key {
                Some((j, kname)) => (
                    labels[j].to_string(),
                    kname.to_string(),
                    ops[j].iter().filter(|&&op| name(j, op) == kname).count(),
                ),
                None => (
                    "-".to_string(),
                    "(time-slice: another context's slice or a switch)".to_string(),
                    0,
                ),
            };
            let u = units.get(&v).copied().unwrap_or(0.0);
            let per_unit = if u > 0.0 { ns / 1e6 / u } else { 0.0 };
            let total = waited.get(&v).copied().unwrap_or(0.0);
            (
                ns,
                WhyEntry {
                    delayed: labels[v].to_string(),
                    by_job,
                    kernel,
                    launches_per_unit: launches,
                    predicted_wait_ms_per_unit: per_unit,
                    share: if total > 0.0 { ns / total } else { 0.0 },
                },
            )
        })
        .collect();
    entries.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.kernel.cmp(&b.1.kernel))
    });
    entries.into_iter().take(n).map(|(_, e)| e).collect()
}
