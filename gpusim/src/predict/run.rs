//! Running the model for a prediction: each job alone, then all of them
//! together in each mode, paired by seed (each job alone draws its
//! arrivals and CPU speed from the streams it draws from in the modes).

use std::time::Instant;

use tandem_sched::Class;

use super::why;
use super::{
    verdict, Capacity, JobInput, JobMode, JobOut, ModeOut, PredictError, Prediction, Settings,
    MODES, NOT_COUNTED, STEEPNESS_SCALE,
};
use crate::gpu::{Attribution, Sharing};
use crate::job::{percentile, JobSpec, Outcome};
use crate::matrix::{alone_service_ms, MatrixCfg};
use crate::params::MODEL_VERSION;
use crate::spatial::Spatial;
use crate::tandem::{Off, TandemSide, TandemV1};
use crate::trace::{JobClass, Op, Trace};
use crate::world::{run_observed, Placement, RunCfg, START_NS};

/// The matrix's configuration carrying these settings (its alone runs and
/// tandem's settings are the matrix's).
fn matrix_cfg(s: &Settings) -> MatrixCfg {
    let mut m = MatrixCfg::full(s.device, s.params.clone());
    m.pairs.clear();
    m.seeds.clone_from(&s.seeds);
    m.warmup_ns = s.warmup_ns;
    m.window_ns = s.window_ns;
    m.min_requests = s.min_requests;
    m.max_window_ns = s.max_window_ns;
    m.threads = s.threads;
    m
}

/// One mode, one seed: every job's outcome and, when asked, the waits.
fn run_mode(
    m: &MatrixCfg,
    specs: &[JobSpec],
    mode: &str,
    seed: u64,
    window_ns: u64,
    why: bool,
) -> (Vec<Outcome>, Option<Attribution>) {
    let plain = matches!(mode, "plain" | "tandem");
    let cfg = RunCfg {
        gpu: m.params.gpu.clone(),
        sharing: if plain {
            m.params.plain()
        } else {
            Sharing::Mps
        },
        seed,
        warmup_ns: m.warmup_ns,
        window_ns,
        drain_max_ns: m.drain_max_ns,
        explicit_requests: false,
    };
    let class = |s: &JobSpec| match s.class() {
        JobClass::Inference => Class::Inference,
        JobClass::Training => Class::Training,
    };
    let attribution =
        why.then(|| Attribution::new(START_NS + m.warmup_ns, START_NS + m.warmup_ns + window_ns));
    let same = |p: u8| vec![Placement { priority: p }; specs.len()];
    let by_class = |t: &dyn Fn(Class) -> u8| -> Vec<Placement> {
        specs
            .iter()
            .map(|s| Placement {
                priority: t(class(s)),
            })
            .collect()
    };
    let v2 = |training_priority: u8| {
        let mut t = TandemV1::v2(m.tandem.sched.clone(), training_priority);
        if training_priority > 0 {
            t.mps_inflight_ns = Some(m.tandem.mps_inflight_ns);
            t.v1_gates = m.tandem.mps_v1_gates;
        } else {
            t.v1_gates = m.tandem.v1_gates;
        }
        t
    };
    let go = |place: &[Placement], t: &mut dyn TandemSide| {
        let (o, _, a) = run_observed(&cfg, specs, place, t, attribution.clone());
        (o, a)
    };
    match mode {
        "plain" | "mps" => go(&same(0), &mut Off),
        "mps_lowprio" => go(&by_class(&|c| u8::from(c == Class::Training)), &mut Off),
        "tandem" => go(&same(0), &mut v2(0)),
        "tandem_mps" => {
            let mut t = v2(1);
            let place = by_class(&|c| t.mps_priority(c));
            go(&place, &mut t)
        }
        "tandem_spatial" => {
            let mut t = Spatial::new(m.params.gpu.sms, m.tandem.spatial.clone());
            let place = by_class(&|c| t.mps_priority(c));
            go(&place, &mut t)
        }
        other => unreachable!("mode {other} was checked"),
    }
}

/// A job that never runs: an inference server whose first request would
/// arrive after some 30 years.
fn idle_job() -> JobSpec {
    let k = crate::trace::Kernel::new("idle", 1, 32, 1, 1);
    JobSpec {
        trace: Trace {
            format: crate::trace::FORMAT.into(),
            job: "idle".into(),
            class: JobClass::Inference,
            source: "synthetic".into(),
            device: String::new(),
            notes: String::new(),
            ops: vec![Op::Kernel(k), Op::Sync { host_gap_ns: 0 }],
        },
        rate_per_s: 1e-9,
        cpu_cv: 0.0,
        sm_pct: 100,
    }
}

/// Job `j` alone, for one seed: as the matrix runs a job alone (time-slicing,
/// nothing else running), but at its own index `j` behind `j` jobs that
/// never run, so that its arrivals and CPU speed draw from the same seeded
/// streams as in the modes it is paired with (the world seeds each job's
/// generators by its index). Returns (p99 ms, steps/s, its share of the
/// GPU's SM capacity).
fn alone_at(
    m: &MatrixCfg,
    specs: &[JobSpec],
    j: usize,
    seed: u64,
    window_ns: u64,
    service: bool,
) -> (Option<f64>, Option<f64>, f64) {
    let cfg = RunCfg {
        gpu: m.params.gpu.clone(),
        sharing: m.params.plain(),
        seed,
        warmup_ns: m.warmup_ns,
        window_ns,
        drain_max_ns: m.drain_max_ns,
        explicit_requests: false,
    };
    let mut jobs: Vec<JobSpec> = (0..j).map(|_| idle_job()).collect();
    jobs.push(specs[j].clone());
    let place = vec![Placement { priority: 0 }; jobs.len()];
    let (o, _, _) = run_observed(&cfg, &jobs, &place, &mut Off, None);
    let o = &o[j];
    let p99 = if service {
        percentile(&o.service_ms, 99.0)
    } else {
        o.percentile(99.0)
    };
    (p99, o.steps_per_s, o.gpu_share)
}

/// The SM capacity the jobs take alone, per seed (each job's class and
/// share), and what it leaves training: the model makes no capacity, so in
/// every mode that serves the inference jobs' loads the training jobs
/// together keep at most `(1 - inference's shares) / training's shares` of
/// their throughput (weighted by their shares; the worst seed's).
fn capacity(per_seed: &[Vec<(JobClass, f64)>]) -> Capacity {
    let sum = |c: JobClass| -> Vec<f64> {
        per_seed
            .iter()
            .map(|jobs| jobs.iter().filter(|j| j.0 == c).map(|j| j.1).sum())
            .collect()
    };
    let (inf, train) = (sum(JobClass::Inference), sum(JobClass::Training));
    Capacity {
        inference_share: median(&inf).unwrap_or(0.0),
        training_share: median(&train).unwrap_or(0.0),
        training_kept_at_most: inf
            .iter()
            .zip(&train)
            .filter_map(|(&i, &t)| crate::job::training_kept_at_most(i, t))
            .reduce(f64::min),
    }
}

fn median(xs: &[f64]) -> Option<f64> {
    percentile(xs, 50.0)
}

fn min_max(xs: &[f64]) -> (Option<f64>, Option<f64>) {
    (
        xs.iter().copied().reduce(f64::min),
        xs.iter().copied().reduce(f64::max),
    )
}

/// Predicts what `existing` (the jobs on the GPU) and `candidate` see
/// together, in each mode of `s`; with `s.steepness`, once more with every
/// inference job's kernels [`STEEPNESS_SCALE`] times as long (the same
/// seeds, so the same arrivals), each inference job's p99 ratio from that
/// run set beside its own.
///
/// # Errors
/// No job on the GPU, an unknown mode, a bad rate or SLO: one line.
pub fn predict(
    existing: &[JobInput],
    candidate: &JobInput,
    s: &Settings,
) -> Result<Prediction, PredictError> {
    let mut p = predict_once(existing, candidate, s)?;
    if !s.steepness {
        return Ok(p);
    }
    let longer = |j: &JobInput| {
        let mut j = j.clone();
        if j.trace.class == JobClass::Inference {
            for op in &mut j.trace.ops {
                if let Op::Kernel(k) = op {
                    k.duration_ns = (k.duration_ns as f64 * STEEPNESS_SCALE).round() as u64;
                }
            }
        }
        j
    };
    let existing_longer: Vec<JobInput> = existing.iter().map(longer).collect();
    let mut s_longer = s.clone();
    s_longer.why = false;
    let q = predict_once(&existing_longer, &longer(candidate), &s_longer)?;
    for (pm, qm) in p.modes.iter_mut().zip(&q.modes) {
        for (pj, qj) in pm.jobs.iter_mut().zip(&qm.jobs) {
            pj.predicted_p99_ratio_if_kernels_2pct_longer = qj.predicted_p99_ratio;
        }
    }
    p.wall_s += q.wall_s;
    Ok(p)
}

fn predict_once(
    existing: &[JobInput],
    candidate: &JobInput,
    s: &Settings,
) -> Result<Prediction, PredictError> {
    let err = |m: String| Err(PredictError(m));
    if existing.is_empty() {
        return err(
            "the GPU has no jobs: there is nothing to predict the candidate against (it would run alone)"
                .into(),
        );
    }
    for md in &s.modes {
        if !MODES.iter().any(|(n, _)| n == md) {
            return err(format!(
                "unknown mode {md:?}: one of {}",
                MODES.map(|(n, _)| n).join(", ")
            ));
        }
    }
    if s.seeds.is_empty() {
        return err("no seeds: give at least one".into());
    }
    let started = Instant::now();
    let m = matrix_cfg(s);
    // A live capture's kernels give blocks_per_sm 0: this device's occupancy.
    let resolved: Vec<JobInput> = existing
        .iter()
        .chain(std::iter::once(candidate))
        .map(|j| JobInput {
            trace: crate::footprint::resolve_occupancy(j.trace.clone(), &m.params.gpu.sm),
            ..j.clone()
        })
        .collect();
    let inputs: Vec<&JobInput> = resolved.iter().collect();
    let mut specs = Vec::new();
    let mut half_load = Vec::new();
    for j in &inputs {
        let inference = j.trace.class == JobClass::Inference;
        if let Some(r) = j.rate_per_s {
            if !inference {
                return err(format!(
                    "{}: a request rate was given for a training job",
                    j.label
                ));
            }
            if !(r.is_finite() && r > 0.0) {
                return err(format!(
                    "{}: rate {r}: give requests per second above 0",
                    j.label
                ));
            }
        }
        let (p99, kept) = (j.slo.p99_ratio, j.slo.kept);
        if !(p99.is_finite() && p99 >= 1.0) {
            return err(format!(
                "{}: p99 ratio target {p99}: give 1 or more",
                j.label
            ));
        }
        if !(kept > 0.0 && kept <= 1.0) {
            return err(format!(
                "{}: kept target {kept}: give a share in (0, 1]",
                j.label
            ));
        }
        let rate = match (inference, j.rate_per_s) {
            (false, _) => 0.0,
            (true, Some(r)) => r,
            (true, None) => 0.5 / (alone_service_ms(&m, &j.trace) / 1e3),
        };
        half_load.push(inference && j.rate_per_s.is_none());
        specs.push(JobSpec {
            trace: j.trace.clone(),
            rate_per_s: rate,
            cpu_cv: if inference {
                m.params.cpu_cv
            } else {
                m.params.train_cv
            },
            sm_pct: 100,
        });
    }
    // The window of the slowest inference job (the matrix's rule).
    let window_ns = specs
        .iter()
        .filter(|j| j.class() == JobClass::Inference)
        .map(|j| m.window_for(j.rate_per_s))
        .max()
        .unwrap_or(m.window_ns);
    let modes: Vec<&str> = MODES
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| s.modes.iter().any(|x| x == n))
        .collect();
    // Work items: each job alone per seed, then each mode per seed.
    let n = specs.len();
    let seeds = &s.seeds;
    let items: Vec<(Option<usize>, usize, usize)> = (0..n)
        .flat_map(|j| (0..seeds.len()).map(move |k| (None, j, k)))
        .chain((0..modes.len()).flat_map(|md| (0..seeds.len()).map(move |k| (Some(md), 0, k))))
        .collect();
    // (each mode's outcomes, its waits; alone: p99, steps/s, GPU share)
    type Res = (
        Vec<Outcome>,
        Option<Attribution>,
        Option<f64>,
        Option<f64>,
        f64,
    );
    let results: std::sync::Mutex<Vec<Option<Res>>> =
        std::sync::Mutex::new(vec![None; items.len()]);
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|sc| {
        for _ in 0..s.threads.max(1) {
            sc.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&(md, j, seed)) = items.get(k) else {
                    break;
                };
                let r = match md {
                    None => {
                        let service = s.device.service_latency();
                        let (p99, sps, share) =
                            alone_at(&m, &specs, j, seeds[seed], window_ns, service);
                        (Vec::new(), None, p99, sps, share)
                    }
                    Some(md) => {
                        let (o, a) = run_mode(&m, &specs, modes[md], seeds[seed], window_ns, s.why);
                        (o, a, None, None, 0.0)
                    }
                };
                results.lock().expect("results")[k] = Some(r);
            });
        }
    });
    let results: Vec<Res> = results
        .into_inner()
        .expect("results")
        .into_iter()
        .map(|r| r.expect("every run ran"))
        .collect();
    let alone_of = |j: usize, k: usize| &results[j * seeds.len() + k];
    let mode_of = |md: usize, k: usize| &results[n * seeds.len() + md * seeds.len() + k];
    let pct = |o: &Outcome| {
        if s.device.service_latency() {
            percentile(&o.service_ms, 99.0)
        } else {
            o.percentile(99.0)
        }
    };
    let jobs: Vec<JobOut> = inputs
        .iter()
        .enumerate()
        .map(|(j, input)| {
            let inference = specs[j].class() == JobClass::Inference;
            let p99: Vec<f64> = (0..seeds.len()).filter_map(|k| alone_of(j, k).2).collect();
            let sps: Vec<f64> = (0..seeds.len()).filter_map(|k| alone_of(j, k).3).collect();
            let shares: Vec<f64> = (0..seeds.len()).map(|k| alone_of(j, k).4).collect();
            JobOut {
                label: input.label.clone(),
                job: input.trace.job.clone(),
                class: super::class_name(specs[j].class()),
                candidate: j == n - 1,
                rate_rps: inference.then_some(specs[j].rate_per_s),
                rate_is_half_load: half_load[j],
                predicted_alone_p99_ms: if inference { median(&p99) } else { None },
                predicted_alone_steps_per_s: if inference { None } else { median(&sps) },
                predicted_alone_gpu_share: median(&shares).unwrap_or(0.0),
                slo: input.slo,
            }
        })
        .collect();
    let capacity = capacity(
        &(0..seeds.len())
            .map(|k| {
                (0..n)
                    .map(|j| (specs[j].class(), alone_of(j, k).4))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>(),
    );
    let mut out_modes = Vec::new();
    for (md, mode) in modes.iter().enumerate() {
        let mut jm = Vec::new();
        for (j, input) in inputs.iter().enumerate() {
            let inference = specs[j].class() == JobClass::Inference;
            let paired = |f: &dyn Fn(&Res, Option<&Outcome>) -> Option<f64>| -> Vec<f64> {
                (0..seeds.len())
                    .filter_map(|k| {
                        let a = f(alone_of(j, k), None)?;
                        let r = mode_of(md, k);
                        let x = f(r, r.0.get(j))?;
                        Some(x / a)
                    })
                    .collect()
            };
            let mut jmode = JobMode {
                label: input.label.clone(),
                predicted_p99_ratio: None,
                predicted_p99_ratio_worst: None,
                predicted_p99_ratio_if_kernels_2pct_longer: None,
                predicted_p99_ms: None,
                predicted_p99_ms_worst: None,
                unfinished_requests: 0,
                predicted_kept: None,
                predicted_kept_worst: None,
                meets_slo: true,
                miss: None,
            };
            if inference {
                let ratios = paired(&|r, o| match o {
                    None => r.2,
                    Some(o) => pct(o),
                });
                let ms: Vec<f64> = (0..seeds.len())
                    .filter_map(|k| mode_of(md, k).0.get(j).and_then(pct))
                    .collect();
                jmode.predicted_p99_ratio = median(&ratios);
                jmode.predicted_p99_ratio_worst = min_max(&ratios).1;
                jmode.predicted_p99_ms = median(&ms);
                jmode.predicted_p99_ms_worst = min_max(&ms).1;
                jmode.unfinished_requests = (0..seeds.len())
                    .map(|k| mode_of(md, k).0[j].unfinished)
                    .sum();
                let worst = jmode.predicted_p99_ratio_worst;
                let target = input.slo.p99_ratio;
                jmode.miss = match worst {
                    None => Some("no request was served".to_string()),
                    Some(w) if w > target => Some(format!("p99 {w:.3}x alone > {target:.3}x")),
                    _ => None,
                };
                if let (None, Some(limit), Some(w)) =
                    (&jmode.miss, input.slo.p99_ms, jmode.predicted_p99_ms_worst)
                {
                    if w > limit {
                        jmode.miss = Some(format!("p99 {w:.1} ms > {limit} ms"));
                    }
                }
            } else {
                let kept = paired(&|r, o| match o {
                    None => r.3,
                    Some(o) => o.steps_per_s,
                });
                jmode.predicted_kept = median(&kept);
                jmode.predicted_kept_worst = min_max(&kept).0;
                let target = input.slo.kept;
                jmode.miss = match jmode.predicted_kept_worst {
                    None => Some("no step completed".to_string()),
                    Some(w) if w < target => Some(format!("kept {w:.3} < {target:.3}")),
                    _ => None,
                };
            }
            jmode.meets_slo = jmode.miss.is_none();
            jm.push(jmode);
        }
        let why = s.why.then(|| {
            let waits: Vec<(&Attribution, Vec<&Outcome>)> = (0..seeds.len())
                .filter_map(|k| {
                    let r = mode_of(md, k);
                    r.1.as_ref().map(|a| (a, r.0.iter().collect()))
                })
                .collect();
            let labels: Vec<&str> = inputs.iter().map(|i| i.label.as_str()).collect();
            why::top(&specs, &labels, &waits, window_ns as f64 / 1e9, 5)
        });
        let is_mps = MODES.iter().find(|(x, _)| x == mode).is_some_and(|x| x.1);
        out_modes.push(ModeOut {
            mode: (*mode).to_string(),
            note: super::note(mode),
            mps: is_mps,
            counted: !NOT_COUNTED.contains(mode),
            fits: jm.iter().all(|j| j.meets_slo),
            jobs: jm,
            why,
        });
    }
    let fitting: Vec<String> = out_modes
        .iter()
        .filter(|x| x.fits && x.counted)
        .map(|x| x.mode.clone())
        .collect();
    Ok(Prediction {
        kind: "prediction",
        model_version: MODEL_VERSION,
        device: s.device.name(),
        verdict: verdict(&fitting),
        fitting_modes: fitting,
        jobs,
        capacity,
        modes: out_modes,
        seeds: seeds.len(),
        warmup_s: s.warmup_ns as f64 / 1e9,
        window_s: window_ns as f64 / 1e9,
        wall_s: started.elapsed().as_secs_f64(),
        threads: s.threads.max(1),
        measured_params: s.measured.clone(),
    })
}
