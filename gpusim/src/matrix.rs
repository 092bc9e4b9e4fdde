//! The co-location matrix: the benchmark's pairs x modes, in the model.
//!
//! Pairs and modes are `scripts/bench/colocation.py`'s: inference
//! `resnet50_b4` (100 req/s), `resnet50_b32` (40 req/s), `bert_b8` (half
//! load: 0.5 / its alone service time, the median of 30 requests served
//! back to back) against training `resnet50_train` and `gpt2_train`; modes
//! `alone` (each job by itself), `plain` (time-slicing), `mps`,
//! `mps_lowprio` (training at `CUDA_MPS_CLIENT_PRIORITY=1`), `tandem`
//! (tandem v2 over time-slicing) and `tandem_mps` (tandem v2 over MPS,
//! training at low client priority); on request also `tandem_v1` and
//! `tandem_v1_mps` (v1 alone: gates and launch limits, MPS at default
//! priority), for comparison. Rows have the benchmark's
//! fields; a cell's figures are medians over the seeds (the benchmark's
//! repetitions), with min-max, and ratios are taken against the same
//! seeds' alone medians.

use std::path::Path;

use serde::Serialize;
use tandem_sched::SchedConfig;

use crate::job::{percentile, JobSpec};
use crate::params::{Params, MODEL_VERSION};
use crate::spatial::{Spatial, SpatialCfg};
use crate::tandem::{Off, TandemSide, TandemV1};
use crate::trace::Trace;
use crate::world::{run, Placement, RunCfg};

/// The H100 set's inference jobs: (name, requests per second; `None`: half
/// load). `bert_b8_graph` is `bert_b8` launched as one CUDA graph per
/// request with no host gaps, GPU-bound, as vLLM and TensorRT serve.
pub const INFERENCE: [(&str, Option<f64>); 4] = [
    ("resnet50_b4", Some(100.0)),
    ("resnet50_b32", Some(40.0)),
    ("bert_b8", None),
    ("bert_b8_graph", None),
];
/// The H100 set's training jobs.
pub const TRAINING: [&str; 2] = ["resnet50_train", "gpt2_train"];
/// The A100 set's inference jobs (Tally's, at load 0.5), and BERT launched
/// as CUDA graphs.
pub const A100_INFERENCE: [(&str, Option<f64>); 3] = [
    ("bert_ort", None),
    ("llama2_7b_ort", None),
    ("bert_ort_graph", None),
];
/// The A100 set's training jobs (Tally's).
pub const A100_TRAINING: [&str; 6] = crate::synthetic_a100::TRAINING_JOBS;

/// The GPU a set of pairs runs on, with its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// H100 SXM 80GB: the project's own measurements (DESIGN.md "Facts").
    H100,
    /// A100: Tally's published pairs (DESIGN.md "Facts from peers").
    A100,
}

impl Device {
    /// Both, in report order.
    pub const ALL: [Device; 2] = [Device::H100, Device::A100];

    /// The model's parameters for this GPU.
    #[must_use]
    pub fn params(self) -> Params {
        match self {
            Device::H100 => Params::calibrated(),
            Device::A100 => Params::a100(),
        }
    }

    /// `h100` or `a100`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Device::H100 => "h100",
            Device::A100 => "a100",
        }
    }

    /// Its inference jobs.
    #[must_use]
    pub fn inference(self) -> &'static [(&'static str, Option<f64>)] {
        match self {
            Device::H100 => &INFERENCE,
            Device::A100 => &A100_INFERENCE,
        }
    }

    /// Its training jobs.
    #[must_use]
    pub fn training(self) -> &'static [&'static str] {
        match self {
            Device::H100 => &TRAINING,
            Device::A100 => &A100_TRAINING,
        }
    }

    /// Whether the set's measurements time a request from its start to its
    /// result (the Tally artifact's `infer_monitor.py`: queueing left out)
    /// rather than from its arrival (the H100 benchmark, colocation.py).
    #[must_use]
    pub fn service_latency(self) -> bool {
        self == Device::A100
    }

    /// Every (inference, training) pair of the set.
    #[must_use]
    pub fn pairs(self) -> Vec<(String, String)> {
        self.inference()
            .iter()
            .flat_map(|(i, _)| {
                self.training()
                    .iter()
                    .map(move |t| ((*i).to_string(), (*t).to_string()))
            })
            .collect()
    }

    /// A synthetic trace of one of its jobs (`<job>_graph`: the job as CUDA
    /// graphs).
    #[must_use]
    pub fn synthetic(self, p: &Params, job: &str) -> Option<Trace> {
        if let Some(base) = job.strip_suffix("_graph") {
            return self
                .synthetic(p, base)
                .map(|t| crate::synthetic::as_graph(&t, job, p));
        }
        match self {
            Device::H100 => crate::synthetic::job(p, job),
            Device::A100 => crate::synthetic_a100::job(p, job),
        }
    }
}
/// Modes, in the benchmark's order.
pub const MODES: [&str; 7] = [
    "alone",
    "plain",
    "mps",
    "mps_lowprio",
    "tandem",
    "tandem_mps",
    "tandem_spatial",
];

/// What to run.
#[derive(Clone, Debug)]
pub struct MatrixCfg {
    /// The GPU and its set of jobs.
    pub device: Device,
    /// The model's parameters.
    pub params: Params,
    /// (inference, training) pairs.
    pub pairs: Vec<(String, String)>,
    /// Modes besides `alone` (which always runs).
    pub modes: Vec<String>,
    /// One run per seed (the benchmark's repetitions).
    pub seeds: Vec<u64>,
    /// Warm-up excluded, ns.
    pub warmup_ns: u64,
    /// Measured window, ns: at least this, and long enough for
    /// `min_requests` requests, up to `max_window_ns`.
    pub window_ns: u64,
    /// Requests an inference job should see in one cell's window.
    pub min_requests: u64,
    /// Longest window a cell gets for `min_requests`, ns.
    pub max_window_ns: u64,
    /// Drain after the window, ns.
    pub drain_max_ns: u64,
    /// Worker threads.
    pub threads: usize,
    /// tandem's settings in the `tandem*` modes.
    pub tandem: TandemCfg,
}

/// tandem's settings in the model (tandemd's `[scheduler]` and `[mps]`).
#[derive(Clone, Debug)]
pub struct TandemCfg {
    /// `[scheduler]`.
    pub sched: SchedConfig,
    /// `[mps] training_inflight_ns` (0: no local bound under MPS beyond the
    /// scheduler's budgets), in `tandem_mps`.
    pub mps_inflight_ns: u64,
    /// Whether tandemd's gates and launch limits apply in `tandem_mps`.
    pub mps_v1_gates: bool,
    /// Whether they apply in `tandem` (time-slicing).
    pub v1_gates: bool,
    /// The SM-reservation candidate's settings, in `tandem_spatial`.
    pub spatial: SpatialCfg,
}

impl Default for TandemCfg {
    fn default() -> Self {
        TandemCfg {
            sched: SchedConfig::default(),
            mps_inflight_ns: 2_000_000,
            mps_v1_gates: true,
            v1_gates: true,
            spatial: SpatialCfg::default(),
        }
    }
}

impl MatrixCfg {
    /// The full matrix of one device's set (the benchmark's 3 s warm-up, a
    /// window of at least 20 s and 2,000 requests up to 60 s, 3 seeds: the
    /// Llama-2 pairs, whose requests take 2 s, see about 15 per cell).
    #[must_use]
    pub fn full(device: Device, params: Params) -> MatrixCfg {
        MatrixCfg {
            device,
            params,
            pairs: device.pairs(),
            modes: MODES[1..].iter().map(|m| (*m).to_string()).collect(),
            seeds: vec![1, 2, 3],
            warmup_ns: 3_000_000_000,
            window_ns: 20_000_000_000,
            min_requests: 2_000,
            max_window_ns: 60_000_000_000,
            drain_max_ns: 10_000_000_000,
            threads: 2,
            tandem: TandemCfg::default(),
        }
    }

    /// The window a cell of an inference job at `rate` req/s gets.
    #[must_use]
    pub fn window_for(&self, rate: f64) -> u64 {
        let want = (self.min_requests as f64 / rate.max(1e-9) * 1e9) as u64;
        want.clamp(self.window_ns, self.max_window_ns.max(self.window_ns))
    }
}

/// One row, in the GPU benchmark's format plus the model's fields.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Row {
    /// The device set (`h100`, `a100`).
    pub set: String,
    /// Inference job.
    pub inference: String,
    /// Training job.
    pub training: String,
    /// Mode.
    pub mode: String,
    /// Inference p50, ms (median over seeds).
    pub p50_ms: Option<f64>,
    /// Inference p99, ms (median over seeds).
    pub p99_ms: Option<f64>,
    /// p99 over the alone p99.
    pub p99_ratio: Option<f64>,
    /// Training steps/s over alone.
    pub train_fraction: Option<f64>,
    /// Min of the paired p99 ratios over seeds (each seed's p99 over the
    /// same seed's alone p99).
    pub p99_ratio_min: Option<f64>,
    /// Max of the paired p99 ratios: the worst seed.
    pub p99_ratio_max: Option<f64>,
    /// Min of the paired training fractions: the worst seed.
    pub train_fraction_min: Option<f64>,
    /// Max of the paired training fractions.
    pub train_fraction_max: Option<f64>,
    /// Requests measured per seed (median).
    pub requests: usize,
    /// Alone p99, ms.
    pub alone_p99_ms: Option<f64>,
    /// Alone training steps/s.
    pub alone_steps_per_s: Option<f64>,
    /// Training steps/s in this mode.
    pub train_steps_per_s: Option<f64>,
    /// Inference rate, req/s.
    pub rate_rps: f64,
    /// Requests never served, all seeds.
    pub unfinished_requests: usize,
    /// Context switches (plain sharing), median over seeds.
    pub switches: u64,
    /// Seeds run.
    pub reps: usize,
    /// `synthetic` or `measured` (every trace of the row captured on a GPU).
    pub source: String,
    /// The model's version.
    pub model_version: String,
    /// What the mode means here.
    pub note: String,
    /// For colocation.py's report and plot: the machine.
    pub device: String,
    /// Idem.
    pub driver: String,
    /// Idem.
    pub date: String,
}

/// A job's trace: the measured one under `traces_dir` (`<job>.json`) if
/// there is one, else the synthetic one.
///
/// # Errors
/// A measured trace that does not parse.
pub fn load_trace(
    device: Device,
    params: &Params,
    traces_dir: Option<&Path>,
    job: &str,
) -> Result<Trace, String> {
    if let Some(dir) = traces_dir {
        let path = dir.join(format!("{job}.json"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            return Trace::from_json(&text).map_err(|e| format!("{}: {e}", path.display()));
        }
    }
    device
        .synthetic(params, job)
        .ok_or_else(|| format!("unknown {} job {job}", device.name()))
}

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

/// One run's figures: (p50, p99, steps/s, unfinished, switches, requests).
type Cell = (Option<f64>, Option<f64>, Option<f64>, usize, u64, usize);

/// The latency percentile the set's measurements report (service time on
/// the A100: Tally times a request from its start to its result).
fn latency_pct(m: &MatrixCfg, o: &crate::job::Outcome, q: f64) -> Option<f64> {
    if m.device.service_latency() {
        percentile(&o.service_ms, q)
    } else {
        o.percentile(q)
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
    (
        latency_pct(m, &o[0], 50.0),
        latency_pct(m, &o[0], 99.0),
        o[0].steps_per_s,
        o[0].unfinished,
        0,
        o[0].latencies_ms.len(),
    )
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
    let pct = |o: &crate::job::Outcome, q: f64| latency_pct(m, o, q);
    let ((outs, sw), train_idx) = match mode {
        "alone" => {
            let w = m.window_for(inf.rate_per_s);
            let i = alone(m, inf, w, seed);
            let t = alone(m, train, w, seed);
            return (i.0, i.1, t.2, i.3, 0, i.5);
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
        "tandem_spatial" => {
            let mut t = Spatial::new(m.params.gpu.sms, m.tandem.spatial.clone());
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
        other => panic!("unknown mode {other}"),
    };
    (
        pct(&outs[0], 50.0),
        pct(&outs[0], 99.0),
        outs[train_idx].steps_per_s,
        outs[0].unfinished,
        sw,
        outs[0].latencies_ms.len(),
    )
}

fn median(xs: &[f64]) -> Option<f64> {
    percentile(xs, 50.0)
}

fn note(mode: &str) -> &'static str {
    match mode {
        "alone" => "each job by itself",
        "plain" => "time-slicing, no MPS",
        "mps" => "MPS, both clients at default priority",
        "mps_lowprio" => "MPS, training at CUDA_MPS_CLIENT_PRIORITY=1",
        "tandem" => "tandem v2 (local in-flight bound on the GPU board, per-kernel estimates; v1's gates and limits behind it; scheduler defaults) over time-slicing",
        "tandem_mps" => "tandem v2 over MPS, training at CUDA_MPS_CLIENT_PRIORITY=1",
        "tandem_spatial" => "scheduler v3 candidate (a) over MPS: training at client priority 1, and its launches masked to leave inference R SMs (learnt from its kernels' widths) while inference is active",
        "tandem_v1" => "tandem v1 alone (shim gate, launch limits, reader, scheduler defaults) over time-slicing",
        "tandem_v1_mps" => "tandem v1 gates with both jobs under MPS at default priority",
        _ => "",
    }
}

/// Runs the matrix; rows in pair order, modes in [`MODES`] order.
///
/// # Errors
/// A trace that cannot be loaded.
pub fn run_matrix(m: &MatrixCfg, traces_dir: Option<&Path>) -> Result<Vec<Row>, String> {
    // Every (pair, mode, seed) is one job for the worker threads.
    struct Pair {
        inf: JobSpec,
        train: JobSpec,
        source: String,
    }
    let mut pairs = Vec::new();
    for (i, t) in &m.pairs {
        let it = load_trace(m.device, &m.params, traces_dir, i)?;
        let tt = load_trace(m.device, &m.params, traces_dir, t)?;
        let rate = match m.device.inference().iter().find(|(n, _)| n == i) {
            Some((_, Some(r))) => *r,
            _ => 0.5 / (alone_service_ms(m, &it) / 1e3),
        };
        let source = if it.source == "measured" && tt.source == "measured" {
            "measured"
        } else {
            "synthetic"
        };
        pairs.push(Pair {
            inf: JobSpec {
                trace: it,
                rate_per_s: rate,
                cpu_cv: m.params.cpu_cv,
                sm_pct: 100,
            },
            train: JobSpec {
                trace: tt,
                rate_per_s: 0.0,
                cpu_cv: m.params.train_cv,
                sm_pct: 100,
            },
            source: source.into(),
        });
    }
    let modes: Vec<&str> = std::iter::once("alone")
        .chain(
            MODES[1..]
                .iter()
                .copied()
                .filter(|md| m.modes.iter().any(|x| x == md)),
        )
        .collect();
    // Each job alone runs once per (job, window, seed), however many pairs
    // hold it: the A100's six trainers share one inference window per
    // server, and each server meets six trainers.
    let mut alone_keys: Vec<(String, u64, usize, usize, bool)> = Vec::new();
    let mut alone_of = vec![(0usize, 0usize); pairs.len() * m.seeds.len()];
    for (p, pair) in pairs.iter().enumerate() {
        let w = m.window_for(pair.inf.rate_per_s);
        for s in 0..m.seeds.len() {
            let mut key = |spec: &JobSpec, train: bool| {
                let k = (spec.trace.job.clone(), w, s);
                match alone_keys
                    .iter()
                    .position(|(j, kw, ks, _, _)| (j, kw, ks) == (&k.0, &k.1, &k.2))
                {
                    Some(i) => i,
                    None => {
                        alone_keys.push((k.0, w, s, p, train));
                        alone_keys.len() - 1
                    }
                }
            };
            alone_of[p * m.seeds.len() + s] = (key(&pair.inf, false), key(&pair.train, true));
        }
    }
    // Work items: the alone runs, then every (pair, mode, seed).
    enum Job {
        Alone(usize),
        Mode(usize, usize, usize),
    }
    let jobs: Vec<Job> = (0..alone_keys.len())
        .map(Job::Alone)
        .chain((0..pairs.len()).flat_map(|p| {
            (1..modes.len())
                .flat_map(move |md| (0..m.seeds.len()).map(move |s| Job::Mode(p, md, s)))
        }))
        .collect();
    let results = std::sync::Mutex::new(vec![None; jobs.len()]);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..m.threads.max(1) {
            sc.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(k) else {
                    break;
                };
                let c = match *job {
                    Job::Alone(a) => {
                        let (_, w, s, p, train) = alone_keys[a];
                        let spec = if train {
                            &pairs[p].train
                        } else {
                            &pairs[p].inf
                        };
                        alone(m, spec, w, m.seeds[s])
                    }
                    Job::Mode(p, md, s) => {
                        cell(m, &pairs[p].inf, &pairs[p].train, modes[md], m.seeds[s])
                    }
                };
                results.lock().expect("results")[k] = Some(c);
            });
        }
    });
    let results = results.into_inner().expect("results");
    let n_alone = alone_keys.len();
    let get = |p: usize, md: usize| -> Vec<Cell> {
        (0..m.seeds.len())
            .map(|s| {
                if md == 0 {
                    let (i, t) = alone_of[p * m.seeds.len() + s];
                    let i = results[i].expect("every alone run ran");
                    let t = results[t].expect("every alone run ran");
                    (i.0, i.1, t.2, i.3, 0, i.5)
                } else {
                    let k = n_alone + (p * (modes.len() - 1) + md - 1) * m.seeds.len() + s;
                    results[k].expect("every cell ran")
                }
            })
            .collect()
    };
    let mut rows = Vec::new();
    for (p, (i, t)) in m.pairs.iter().enumerate() {
        let alone = get(p, 0);
        let alone_p99 = median(&alone.iter().filter_map(|c| c.1).collect::<Vec<_>>());
        let alone_sps = median(&alone.iter().filter_map(|c| c.2).collect::<Vec<_>>());
        for (md, mode) in modes.iter().enumerate() {
            let cells = get(p, md);
            let p99s: Vec<f64> = cells.iter().filter_map(|c| c.1).collect();
            let sps: Vec<f64> = cells.iter().filter_map(|c| c.2).collect();
            // Paired: each seed against the same seed's alone run.
            let paired = |f: fn(&Cell) -> Option<f64>| -> Vec<f64> {
                cells
                    .iter()
                    .zip(&alone)
                    .filter_map(|(c, a)| f(c).zip(f(a)).map(|(x, y)| x / y))
                    .collect()
            };
            let ratios = paired(|c| c.1);
            let fracs = paired(|c| c.2);
            let mut reqs: Vec<usize> = cells.iter().map(|c| c.5).collect();
            reqs.sort_unstable();
            let mut sw: Vec<u64> = cells.iter().map(|c| c.4).collect();
            sw.sort_unstable();
            let minmax = |v: &[f64]| {
                (
                    v.iter().copied().reduce(f64::min),
                    v.iter().copied().reduce(f64::max),
                )
            };
            let (rmin, rmax) = minmax(&ratios);
            let (fmin, fmax) = minmax(&fracs);
            let p99 = median(&p99s);
            let sps_med = median(&sps);
            rows.push(Row {
                set: m.device.name().into(),
                inference: i.clone(),
                training: t.clone(),
                mode: (*mode).to_string(),
                p50_ms: median(&cells.iter().filter_map(|c| c.0).collect::<Vec<_>>()),
                p99_ms: p99,
                p99_ratio: median(&ratios),
                train_fraction: median(&fracs),
                p99_ratio_min: rmin,
                p99_ratio_max: rmax,
                train_fraction_min: fmin,
                train_fraction_max: fmax,
                requests: reqs[reqs.len() / 2],
                alone_p99_ms: alone_p99,
                alone_steps_per_s: alone_sps,
                train_steps_per_s: sps_med,
                rate_rps: pairs[p].inf.rate_per_s,
                unfinished_requests: cells.iter().map(|c| c.3).sum(),
                switches: sw[sw.len() / 2],
                reps: cells.len(),
                source: pairs[p].source.clone(),
                model_version: MODEL_VERSION.into(),
                note: note(mode).into(),
                device: format!(
                    "model {MODEL_VERSION} ({}, {} traces)",
                    m.device.name(),
                    pairs[p].source
                ),
                driver: "-".into(),
                date: "-".into(),
            });
        }
    }
    Ok(rows)
}
