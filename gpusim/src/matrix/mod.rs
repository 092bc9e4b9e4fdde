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

mod cell;
mod config;
mod device;

use std::path::Path;

use serde::Serialize;

pub use self::cell::{alone, alone_service_ms, cell, Cell};
pub use self::config::{MatrixCfg, TandemCfg, CANDIDATE_MODES, MODES};
pub use self::device::{
    load_trace, Device, A100_INFERENCE, A100_TRAINING, INFERENCE, NOT_THIS_GPU, TRAINING,
};

use self::cell::note;
use crate::job::{percentile, JobSpec};
use crate::params::MODEL_VERSION;

/// One row, in the GPU benchmark's format plus the model's fields.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
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
    /// Mean latency over the alone mean (paired by seed, median), what
    /// Tally's table also reports beside its p99.
    pub mean_ratio: Option<f64>,
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
    /// The inference job's share of the GPU's SM capacity in this mode
    /// (median over seeds): the SM-time of its blocks over SMs x window.
    pub inference_gpu_share: f64,
    /// The training job's.
    pub training_gpu_share: f64,
    /// The most training any mode that serves inference's whole load can
    /// keep, whatever its latency: the SM capacity inference leaves alone
    /// over what training takes alone, `(1 - inference's share) /
    /// training's share` of the alone runs (the worst seed's). The model
    /// makes no SM capacity: a kernel on fewer SMs runs longer, slowdowns
    /// only add SM-time, so this bounds `train_fraction` of every mode in
    /// which inference keeps up. Below 0.90 the goal is out of reach.
    pub kept_at_most: Option<f64>,
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

fn median(xs: &[f64]) -> Option<f64> {
    percentile(xs, 50.0)
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
                    Cell::alone_pair(&i, &t)
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
        let alone_p99 = median(&alone.iter().filter_map(|c| c.p99).collect::<Vec<_>>());
        let alone_sps = median(
            &alone
                .iter()
                .filter_map(|c| c.steps_per_s)
                .collect::<Vec<_>>(),
        );
        let kept_at_most = alone
            .iter()
            .filter_map(|c| {
                crate::job::training_kept_at_most(c.inference_gpu_share, c.training_gpu_share)
            })
            .reduce(f64::min);
        for (md, mode) in modes.iter().enumerate() {
            let cells = get(p, md);
            let p99s: Vec<f64> = cells.iter().filter_map(|c| c.p99).collect();
            let sps: Vec<f64> = cells.iter().filter_map(|c| c.steps_per_s).collect();
            let share = |f: fn(&Cell) -> f64| {
                median(&cells.iter().map(f).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            // Paired: each seed against the same seed's alone run.
            let paired = |f: fn(&Cell) -> Option<f64>| -> Vec<f64> {
                cells
                    .iter()
                    .zip(&alone)
                    .filter_map(|(c, a)| f(c).zip(f(a)).map(|(x, y)| x / y))
                    .collect()
            };
            let ratios = paired(|c| c.p99);
            let fracs = paired(|c| c.steps_per_s);
            let means = paired(|c| c.mean);
            let mut reqs: Vec<usize> = cells.iter().map(|c| c.requests).collect();
            reqs.sort_unstable();
            let mut sw: Vec<u64> = cells.iter().map(|c| c.switches).collect();
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
                p50_ms: median(&cells.iter().filter_map(|c| c.p50).collect::<Vec<_>>()),
                p99_ms: p99,
                p99_ratio: median(&ratios),
                mean_ratio: median(&means),
                train_fraction: median(&fracs),
                p99_ratio_min: rmin,
                p99_ratio_max: rmax,
                train_fraction_min: fmin,
                train_fraction_max: fmax,
                requests: reqs[reqs.len() / 2],
                alone_p99_ms: alone_p99,
                alone_steps_per_s: alone_sps,
                train_steps_per_s: sps_med,
                inference_gpu_share: share(|c| c.inference_gpu_share),
                training_gpu_share: share(|c| c.training_gpu_share),
                kept_at_most,
                rate_rps: pairs[p].inf.rate_per_s,
                unfinished_requests: cells.iter().map(|c| c.unfinished).sum(),
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

/// The tests' one-pair matrix: `modes` for `inference` beside `training`
/// on `device`'s reduced matrix (one seed, short windows, synthetic
/// traces), after `tweak`; each mode's (p99 ratio, training fraction).
#[cfg(test)]
pub(crate) fn one_pair(
    device: Device,
    (inference, training): (&str, &str),
    modes: &[&str],
    tweak: impl FnOnce(&mut MatrixCfg),
) -> impl Fn(&str) -> (f64, f64) {
    let mut m = MatrixCfg {
        pairs: vec![(inference.into(), training.into())],
        modes: modes.iter().map(|m| (*m).to_string()).collect(),
        ..crate::calibration::reduced_matrix(device, device.params())
    };
    tweak(&mut m);
    let rows = run_matrix(&m, None).unwrap();
    move |mode| {
        let r = rows
            .iter()
            .find(|r| r.mode == mode)
            .unwrap_or_else(|| panic!("no {mode} row"));
        (r.p99_ratio.unwrap(), r.train_fraction.unwrap())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measured trace stands in for a set's synthetic one only on the GPU
    /// it was captured on: an H200's kernels are not an H100's, and a fake
    /// driver's or the CPU's are no GPU's.
    #[test]
    fn a_measured_trace_is_used_only_by_the_set_of_the_gpu_it_was_captured_on() {
        let dir = std::env::temp_dir().join(format!("gpusim-captured-on-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let h100 = Device::H100.params();
        let job = "resnet50_b4";
        let mut measured = Device::H100.synthetic(&h100, job).unwrap();
        measured.source = "measured".into();
        let load = |d: Device| load_trace(d, &d.params(), Some(&dir), job).unwrap();
        for (gpu, on) in [
            ("NVIDIA H200", Some(Device::H200)),
            ("NVIDIA H100 80GB HBM3", Some(Device::H100)),
            ("NVIDIA GH200 480GB", None),
            ("fake (TANDEM_GPU_FAKE=1)", None),
            ("cpu", None),
        ] {
            measured.device = gpu.into();
            std::fs::write(dir.join(format!("{job}.json")), measured.to_json()).unwrap();
            for d in [Device::H100, Device::H200] {
                let t = load(d);
                if on == Some(d) {
                    assert_eq!((t.source.as_str(), t.device.as_str()), ("measured", gpu));
                } else {
                    assert_eq!(t.source, "synthetic", "{gpu} on {}", d.name());
                    let why = t.notes.lines().last().unwrap();
                    assert!(why.starts_with(NOT_THIS_GPU) && why.contains(gpu), "{why}");
                }
            }
        }
        assert!(Device::A100.captured_on("NVIDIA A100-SXM4-40GB"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The H200 is the H100's die with faster DRAM: only its DRAM bandwidth
    /// differs, so its synthetic jobs' memory-bound kernels are shorter and
    /// no kernel is longer; it runs the H100 set's jobs, under its own name.
    #[test]
    fn the_h200_is_the_h100_with_faster_dram() {
        let (h100, h200) = (Device::H100.params(), Device::H200.params());
        assert!(h200.gpu.dram_bytes_per_ns > h100.gpu.dram_bytes_per_ns);
        let mut same = h200.clone();
        same.gpu.dram_bytes_per_ns = h100.gpu.dram_bytes_per_ns;
        assert_eq!(same, h100);
        assert_eq!(Device::H200.pairs(), Device::H100.pairs());
        assert_eq!(Device::H200.compute_major(), 9);
        for d in [Device::H100, Device::A100, Device::H200] {
            assert_eq!(Device::named(d.name()), Some(d));
        }
        assert_eq!(Device::named("b200"), None);
        assert!(
            !Device::ALL.contains(&Device::H200),
            "scripts/sim runs the measured sets"
        );
        for (job, _) in INFERENCE.iter().take(1) {
            let a = Device::H100.synthetic(&h100, job).unwrap();
            let b = Device::H200.synthetic(&h200, job).unwrap();
            let pairs: Vec<_> = a.kernels().zip(b.kernels()).collect();
            assert_eq!(pairs.len(), a.kernels().count());
            assert!(pairs.iter().all(|(x, y)| y.duration_ns <= x.duration_ns));
            assert!(pairs.iter().any(|(x, y)| y.duration_ns < x.duration_ns));
        }
    }

    /// No mode keeps more training than the SM capacity inference leaves:
    /// beside CUDA-graph BERT on the H100 (inference's kernels back to back,
    /// so it takes more of the GPU than the eager jobs) the bound is below
    /// one. In every mode the two jobs together take at most the GPU, and
    /// every mode in which inference did its load's work within the window
    /// (its share within 1% of its share alone; time-slicing and MPS
    /// without priority starve it into the drain) keeps training under the
    /// bound (to the window's edges: a block's SM-time is counted at
    /// dispatch).
    #[test]
    fn no_mode_keeps_more_training_than_inference_leaves_capacity_for() {
        let m = MatrixCfg {
            pairs: vec![("bert_b8_graph".into(), "resnet50_train".into())],
            modes: [
                "plain",
                "mps",
                "mps_lowprio",
                "tandem_mps",
                "tandem_spatial",
            ]
            .iter()
            .map(|m| (*m).to_string())
            .collect(),
            window_ns: 4_000_000_000,
            min_requests: 0,
            max_window_ns: 4_000_000_000,
            ..crate::calibration::reduced_matrix(Device::H100, Device::H100.params())
        };
        let rows = run_matrix(&m, None).unwrap();
        let alone = &rows[0];
        assert_eq!(alone.mode, "alone");
        let bound = alone.kept_at_most.expect("a bound");
        assert!(bound < 1.0, "{bound}");
        let mut checked = Vec::new();
        for r in &rows[1..] {
            let (i, t) = (r.inference_gpu_share, r.training_gpu_share);
            assert!(
                i > 0.0 && t > 0.0 && i + t <= 1.0 + 1e-3,
                "{}: {i} + {t}",
                r.mode
            );
            if i >= alone.inference_gpu_share * 0.99 {
                let kept = r.train_fraction.unwrap();
                assert!(kept <= bound + 0.01, "{}: {kept} > {bound}", r.mode);
                checked.push(r.mode.as_str());
            }
        }
        assert!(checked.len() >= 3, "inference kept up only in {checked:?}");
    }
}
