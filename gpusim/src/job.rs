//! The CPU side of each job, and what is measured of it.
//!
//! * **Inference** (the benchmark's server loop, `scripts/bench/colocation.py`
//!   `inference_worker`): requests arrive as a Poisson process (seeded); one
//!   thread serves them in arrival order, each one the trace's ops: host gaps
//!   (Python, the framework, the launch call), launches through tandem's
//!   gate, copies, and the final sync that brings the result to the host.
//!   Latency runs from arrival to that sync's return, so queueing counts.
//! * **Training**: the trace's ops are one step, looped for ever; a step
//!   ends when its last op (the loss read back, a sync) returns. Throughput
//!   is steps completed per second over the window, interpolated between
//!   step completions as colocation.py's `steps_per_s` does.
//!
//! Each request (each step) draws one CPU speed factor (lognormal, median
//! 1, [`JobSpec::cpu_cv`]) that scales all of its host gaps: the CPU time of
//! a Python server varies from request to request.

use std::collections::VecDeque;

use crate::gpu::Ns;
use crate::trace::{JobClass, Trace};

/// One job of a simulated run.
#[derive(Clone, Debug)]
pub struct JobSpec {
    /// What it does.
    pub trace: Trace,
    /// Inference: requests per second.
    pub rate_per_s: f64,
    /// Coefficient of variation of the per-request (per-step) CPU speed.
    pub cpu_cv: f64,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` (100: no cap).
    pub sm_pct: u32,
}

impl JobSpec {
    /// Inference or training.
    #[must_use]
    pub fn class(&self) -> JobClass {
        self.trace.class
    }
}

/// Where a job's thread is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Nothing to do (inference between requests).
    Idle,
    /// Spending a host gap; the op at `op` is issued when it ends.
    Cpu,
    /// Waiting at tandem's gate to launch the op at `op`.
    Gate,
    /// Inside a sync, waiting for its GPU work to drain.
    Sync,
}

/// A job's state during a run.
#[derive(Clone, Debug)]
pub struct JobState {
    /// Where its thread is.
    pub phase: Phase,
    /// The next op of the current request or step.
    pub op: usize,
    /// The CPU speed factor of the current request or step.
    pub factor: f64,
    /// Arrivals not yet served (the first is in service when not idle).
    pub queue: VecDeque<Ns>,
    /// Served requests: (arrival, result).
    pub served: Vec<(Ns, Ns)>,
    /// Step completion times.
    pub steps: Vec<Ns>,
    /// Generation of the current gate wait (stale bounds are ignored).
    pub gate_gen: u64,
    /// Tokens of submitted GPU work: next one.
    pub next_token: u64,
}

impl JobState {
    /// A job about to start.
    #[must_use]
    pub fn new() -> JobState {
        JobState {
            phase: Phase::Idle,
            op: 0,
            factor: 1.0,
            queue: VecDeque::new(),
            served: Vec::new(),
            steps: Vec::new(),
            gate_gen: 0,
            next_token: 1,
        }
    }
}

impl Default for JobState {
    fn default() -> Self {
        JobState::new()
    }
}

/// What a run measured of one job over the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Outcome {
    /// Latencies (ms) of the requests that arrived in the window; one never
    /// served counts with its time until the end (a lower bound).
    pub latencies_ms: Vec<f64>,
    /// Of those, never served.
    pub unfinished: usize,
    /// Service times (ms) of the served requests that arrived in the
    /// window: from the moment the server began the request (its arrival,
    /// or the previous request's end if it had to wait) to its result. This
    /// is the Tally artifact's latency (`infer_monitor.py` times each
    /// request from its own begin, so queueing is not in it; see
    /// [`crate::tally`]).
    pub service_ms: Vec<f64>,
    /// Training steps per second over the window.
    pub steps_per_s: Option<f64>,
    /// The job's share of the GPU's SM capacity over the window: the
    /// SM-time of the blocks it dispatched then (a block that shares its SM
    /// counts its share of it) over the GPU's SMs times the window.
    pub gpu_share: f64,
}

impl Outcome {
    /// The `q`-th percentile (0..=100) of the latencies, as the benchmark
    /// computes it (`benchlib.percentile`: linear between closest ranks).
    #[must_use]
    pub fn percentile(&self, q: f64) -> Option<f64> {
        percentile(&self.latencies_ms, q)
    }
}

/// Linear interpolation between closest ranks (numpy's default), as
/// `scripts/bench/benchlib.py` `percentile`.
#[must_use]
pub fn percentile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = (v.len() - 1) as f64 * q / 100.0;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// Steps completed by `t`, interpolated between completions (step i
/// completes at `completions[i-1]`; 0 steps at `start`).
fn completed_by(completions: &[Ns], start: Ns, t: Ns) -> f64 {
    let (mut prev_t, mut prev_n) = (start as f64, 0.0);
    for (n, &c) in completions.iter().enumerate() {
        let c = c as f64;
        if c >= t as f64 {
            if c == prev_t {
                return (n + 1) as f64;
            }
            return prev_n + (t as f64 - prev_t) / (c - prev_t);
        }
        prev_t = c;
        prev_n = (n + 1) as f64;
    }
    completions.len() as f64
}

/// The most of its throughput training (taking `training_share` of the
/// GPU's SM capacity alone) can keep beside inference (taking
/// `inference_share` alone) in any run that serves inference's load: the
/// engine makes no SM capacity ([`Outcome::gpu_share`]). None without
/// training's share.
#[must_use]
pub fn training_kept_at_most(inference_share: f64, training_share: f64) -> Option<f64> {
    (training_share > 0.0).then(|| ((1.0 - inference_share) / training_share).max(0.0))
}

/// Steps per second over `[w0, w1]`.
#[must_use]
pub fn steps_per_s(completions: &[Ns], start: Ns, w0: Ns, w1: Ns) -> Option<f64> {
    (w1 > w0).then(|| {
        (completed_by(completions, start, w1) - completed_by(completions, start, w0))
            / ((w1 - w0) as f64 / 1e9)
    })
}

/// The outcome of `state` over the window `[w0, w1)`, the run ending at `end`.
#[must_use]
pub fn outcome(spec: &JobSpec, state: &JobState, start: Ns, w0: Ns, w1: Ns, end: Ns) -> Outcome {
    match spec.class() {
        JobClass::Inference => {
            let mut lat = Vec::new();
            let mut service = Vec::new();
            let mut prev_done = 0;
            for &(a, d) in &state.served {
                if (w0..w1).contains(&a) {
                    lat.push((d - a) as f64 / 1e6);
                    service.push((d - a.max(prev_done)) as f64 / 1e6);
                }
                prev_done = d;
            }
            let mut unfinished = 0;
            for &a in state.queue.iter().filter(|&&a| (w0..w1).contains(&a)) {
                unfinished += 1;
                lat.push(end.saturating_sub(a) as f64 / 1e6);
            }
            Outcome {
                latencies_ms: lat,
                unfinished,
                service_ms: service,
                steps_per_s: None,
                gpu_share: 0.0,
            }
        }
        JobClass::Training => Outcome {
            steps_per_s: steps_per_s(&state.steps, start, w0, w1),
            ..Outcome::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_match_the_benchmarks_rule() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), Some(50.5));
        assert!((percentile(&xs, 99.0).unwrap() - 99.01).abs() < 1e-9);
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn service_time_leaves_out_the_wait_in_the_queue() {
        let spec = JobSpec {
            trace: crate::trace::Trace {
                format: crate::trace::FORMAT.into(),
                job: "t".into(),
                class: JobClass::Inference,
                source: "synthetic".into(),
                device: String::new(),
                notes: String::new(),
                ops: vec![],
            },
            rate_per_s: 1.0,
            cpu_cv: 0.0,
            sm_pct: 100,
        };
        let mut st = JobState::new();
        // Arrivals at 10, 12 and 40; each served for 5: the second waits
        // from 12 to 15 (the first's end), the third finds the server idle.
        st.served = vec![(10, 15), (12, 20), (40, 45)];
        let o = outcome(&spec, &st, 0, 0, 100, 100);
        assert_eq!(o.latencies_ms, vec![5e-6, 8e-6, 5e-6]);
        assert_eq!(o.service_ms, vec![5e-6, 5e-6, 5e-6]);
    }

    #[test]
    fn steps_are_interpolated_over_the_window() {
        // A step every 10 ms from t = 0: 100 steps/s over any window.
        let c: Vec<Ns> = (1..=100).map(|i| i * 10_000_000).collect();
        let s = steps_per_s(&c, 0, 105_000_000, 505_000_000).unwrap();
        assert!((s - 100.0).abs() < 1e-9, "{s}");
        // A stall inside the window counts fully.
        let mut c2 = c.clone();
        for x in c2.iter_mut().skip(20) {
            *x += 100_000_000;
        }
        let s2 = steps_per_s(&c2, 0, 105_000_000, 505_000_000).unwrap();
        assert!((s2 - 75.0).abs() < 1e-9, "{s2}");
    }
}
