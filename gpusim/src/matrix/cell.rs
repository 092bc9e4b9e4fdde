//! One cell of the matrix: a mode for one seed, each job alone, and the
//! alone service time that sets an inference job's half load.

use super::config::MatrixCfg;
use crate::job::{percentile, JobSpec};
use crate::slicing::slice_trace;
use crate::spatial::Spatial;
use crate::tandem::{Off, TandemSide, TandemV1};
use crate::trace::Trace;
use crate::world::{run, Placement, RunCfg};

fn run_cfg(m: &MatrixCfg, sharing_plain: bool, seed: u64) -> RunCfg {
    RunCfg {
        gpu: m.params.gpu.clone(),
        sharing: if sharing_plain {
            m.params.plain()
        } else {
            crate::gpu::Sharing::Mps
        },
        seed,
        warmup_ns: m.warmup_ns,
        window_ns: m.window_ns,
        drain_max_ns: m.drain_max_ns,
        explicit_requests: false,
    }
}

/// The alone service time of an inference job: the median latency of 30
/// requests served one at a time (how colocation.py measures it).
#[must_use]
pub fn alone_service_ms(m: &MatrixCfg, trace: &Trace) -> f64 {
    // Requests far enough apart that they rarely queue: one per five of
    // its GPU-plus-CPU time alone, 30 of them.
    let bound_s = (trace.kernel_ns() + trace.host_ns()).max(1) as f64 / 1e9;
    let rate = 0.2 / bound_s;
    let spec = JobSpec {
        trace: trace.clone(),
        rate_per_s: rate,
        cpu_cv: m.params.cpu_cv,
        sm_pct: 100,
    };
    let cfg = RunCfg {
        warmup_ns: 0,
        window_ns: (30.0 / rate * 1e9) as u64,
        ..run_cfg(m, true, 99)
    };
    let (out, _) = run(&cfg, &[spec], &[Placement { priority: 0 }], &mut Off);
    percentile(&out[0].latencies_ms, 50.0).unwrap_or(f64::NAN)
}

/// One run's figures.
#[derive(Clone, Copy, Debug)]
pub struct Cell {
    /// Inference latency p50, ms.
    pub p50: Option<f64>,
    /// Inference latency p99, ms.
    pub p99: Option<f64>,
    /// Inference mean latency, ms.
    pub mean: Option<f64>,
    /// Training steps/s.
    pub steps_per_s: Option<f64>,
    /// Requests never served.
    pub unfinished: usize,
    /// Context switches (time-slicing).
    pub switches: u64,
    /// Requests measured.
    pub requests: usize,
    /// The inference job's share of the GPU's SM capacity over the window
    /// ([`crate::job::Outcome::gpu_share`]).
    pub inference_gpu_share: f64,
    /// The training job's.
    pub training_gpu_share: f64,
}

impl Cell {
    /// An inference run's latencies with a training run's throughput (how
    /// the alone cell pairs the two jobs, each run by itself).
    #[must_use]
    pub fn alone_pair(inf: &Cell, train: &Cell) -> Cell {
        Cell {
            steps_per_s: train.steps_per_s,
            switches: 0,
            training_gpu_share: train.training_gpu_share,
            ..*inf
        }
    }
}

/// The latencies the set's measurements report (service time on the A100:
/// Tally times a request from its start to its result).
fn latencies<'a>(m: &MatrixCfg, o: &'a crate::job::Outcome) -> &'a [f64] {
    if m.device.service_latency() {
        &o.service_ms
    } else {
        &o.latencies_ms
    }
}

/// A run's cell: its inference job `o`'s latencies, its training job
/// `t`'s throughput (either may be absent: a job alone).
fn figures(
    m: &MatrixCfg,
    o: Option<&crate::job::Outcome>,
    t: Option<&crate::job::Outcome>,
    sw: u64,
) -> Cell {
    let none = crate::job::Outcome::default();
    let o = o.unwrap_or(&none);
    let lat = latencies(m, o);
    let steps_per_s = t.and_then(|t| t.steps_per_s);
    Cell {
        p50: percentile(lat, 50.0),
        p99: percentile(lat, 99.0),
        mean: (!lat.is_empty()).then(|| lat.iter().sum::<f64>() / lat.len() as f64),
        steps_per_s,
        unfinished: o.unfinished,
        switches: sw,
        requests: o.latencies_ms.len(),
        inference_gpu_share: o.gpu_share,
        training_gpu_share: t.map_or(0.0, |t| t.gpu_share),
    }
}

/// One job by itself over a cell's window: its latencies (inference) or
/// its throughput (training). The same for every pair that holds the job
/// with the same window and seed, so the matrix runs it once.
#[must_use]
pub fn alone(m: &MatrixCfg, spec: &JobSpec, window_ns: u64, seed: u64) -> Cell {
    let cfg = RunCfg {
        window_ns,
        ..run_cfg(m, true, seed)
    };
    let (o, _) = run(
        &cfg,
        std::slice::from_ref(spec),
        &[Placement { priority: 0 }],
        &mut Off,
    );
    match spec.class() {
        crate::trace::JobClass::Inference => figures(m, Some(&o[0]), None, 0),
        crate::trace::JobClass::Training => figures(m, None, Some(&o[0]), 0),
    }
}

/// Runs one cell: `mode` for one seed (`alone`: inference alone for the
/// latencies, training alone for the throughput).
#[must_use]
pub fn cell(m: &MatrixCfg, inf: &JobSpec, train: &JobSpec, mode: &str, seed: u64) -> Cell {
    let both = [inf.clone(), train.clone()];
    let normal = [Placement { priority: 0 }, Placement { priority: 0 }];
    let v1 = || TandemV1::new(m.tandem.sched.clone());
    // tandem over MPS runs training at MPS client priority 1.
    let v2 = |training_priority| {
        let mut t = TandemV1::v2(m.tandem.sched.clone(), training_priority);
        if training_priority > 0 {
            t.mps_inflight_ns = Some(m.tandem.mps_inflight_ns);
            t.v1_gates = m.tandem.mps_v1_gates;
        } else {
            t.v1_gates = m.tandem.v1_gates;
        }
        t
    };
    let window = |plain: bool| RunCfg {
        window_ns: m.window_for(inf.rate_per_s),
        ..run_cfg(m, plain, seed)
    };
    let go = |plain: bool, place: &[Placement], t: &mut dyn TandemSide| {
        run(&window(plain), &both, place, t)
    };
    let ((outs, sw), train_idx) = match mode {
        "alone" => {
            let w = m.window_for(inf.rate_per_s);
            return Cell::alone_pair(&alone(m, inf, w, seed), &alone(m, train, w, seed));
        }
        "plain" => (go(true, &normal, &mut Off), 1),
        "mps" => (go(false, &normal, &mut Off), 1),
        "mps_lowprio" => (
            go(
                false,
                &[Placement { priority: 0 }, Placement { priority: 1 }],
                &mut Off,
            ),
            1,
        ),
        "tandem" => (go(true, &normal, &mut v2(0)), 1),
        "tandem_v1" => (go(true, &normal, &mut v1()), 1),
        "tandem_mps" | "tandem_v1_mps" => {
            // The side decides the training client's MPS priority.
            let mut t = if mode == "tandem_mps" { v2(1) } else { v1() };
            let place = [
                Placement {
                    priority: t.mps_priority(tandem_sched::Class::Inference),
                },
                Placement {
                    priority: t.mps_priority(tandem_sched::Class::Training),
                },
            ];
            (go(false, &place, &mut t), 1)
        }
        "tandem_spatial" | "tandem_green" | "tandem_hold" | "tandem_slice" => {
            let base = m.tandem.spatial.clone();
            let cfg = match mode {
                "tandem_green" => base.green(m.device.compute_major()),
                "tandem_hold" | "tandem_slice" => base.holding(),
                _ => base,
            };
            let mut t = Spatial::new(m.params.gpu.sms, cfg);
            let place = [
                Placement {
                    priority: t.mps_priority(tandem_sched::Class::Inference),
                },
                Placement {
                    priority: t.mps_priority(tandem_sched::Class::Training),
                },
            ];
            if mode == "tandem_slice" {
                let sliced = [
                    inf.clone(),
                    JobSpec {
                        trace: slice_trace(&train.trace, m.params.gpu.sms, &m.tandem.slicing),
                        ..train.clone()
                    },
                ];
                (run(&window(false), &sliced, &place, &mut t), 1)
            } else {
                (go(false, &place, &mut t), 1)
            }
        }
        other => panic!("unknown mode {other}"),
    };
    figures(m, Some(&outs[0]), Some(&outs[train_idx]), sw)
}

pub(super) fn note(mode: &str) -> &'static str {
    match mode {
        "alone" => "each job by itself",
        "plain" => "time-slicing, no MPS",
        "mps" => "MPS, both clients at default priority",
        "mps_lowprio" => "MPS, training at CUDA_MPS_CLIENT_PRIORITY=1",
        "tandem" => "tandem v2 (local in-flight bound on the GPU board, per-kernel estimates; v1's gates and limits behind it; scheduler defaults) over time-slicing",
        "tandem_mps" => "tandem v2 over MPS, training at CUDA_MPS_CLIENT_PRIORITY=1",
        "tandem_spatial" => "scheduler v3 candidate (a) over MPS: training at client priority 1, and its launches whose blocks hold their SMs 100 us or more masked to leave inference R SMs (learnt from its kernels' widths) while inference is active",
        "tandem_green" => "scheduler v3 candidate (b) over MPS: as tandem_spatial, in the partition steps of green contexts (8 SMs on the H100, 2 from 4 on the A100)",
        "tandem_hold" => "scheduler v3 candidates (a) + (c) over MPS: tandem_spatial, and training launches whose blocks hold their SMs longer than a tenth of inference's shortest active period held while inference is active (at most 10 ms)",
        "tandem_slice" => "scheduler v3 candidates (a) + (c) + (d) over MPS: tandem_hold, with training kernels over 1 ms sliced into whole waves (2 us of CPU per extra slice)",
        "tandem_v1" => "tandem v1 alone (shim gate, launch limits, reader, scheduler defaults) over time-slicing",
        "tandem_v1_mps" => "tandem v1 gates with both jobs under MPS at default priority",
        _ => "",
    }
}
