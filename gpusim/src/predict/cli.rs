//! `tandem-sim predict`'s command line.
//!
//! ```text
//! tandem-sim predict [--device h100|a100|h200] [--p99-target X] [--kept-target X]
//!     --job FILE [JOB FLAGS]...     # each job on the GPU (at least one)
//!     --add FILE [JOB FLAGS]        # the candidate
//!     [--json] [--why] [--steepness] [--seeds N] [--window-s S] [--threads N] [--modes M,..]
//!     [--measured DIR]              # GPU measurements to apply (else $TANDEM_SIM_MEASURED)
//! JOB FLAGS (apply to the --job or --add before them):
//!     --class inference|training    # must agree with the trace's class
//!     --rate R                      # inference: requests/s (default: half load)
//!     --slo-p99 X                   # inference: p99 at most X times alone
//!     --slo-p99-ms MS               # inference: p99 at most MS ms
//!     --slo-kept X                  # training: keep at least X of alone
//!     --label NAME                  # how the job is named in the answer
//! ```

use std::path::Path;

use super::{human, load, predict, JobInput, Settings, Slo, DEFAULT_SLO, MODES};
use crate::matrix::Device;
use crate::measured;
use crate::params::Params;

/// The usage line.
pub const USAGE: &str = "tandem-sim predict [--device h100|a100|h200] [--p99-target X] [--kept-target X] --job FILE [--class C] [--rate R] [--slo-p99 X] [--slo-p99-ms MS] [--slo-kept X] [--label NAME]... --add FILE [same job flags] [--json] [--why] [--steepness] [--seeds N] [--window-s S] [--threads N] [--modes M,..] [--measured DIR]";

struct Pending {
    path: String,
    class: Option<String>,
    rate: Option<f64>,
    p99: Option<f64>,
    p99_ms: Option<f64>,
    kept: Option<f64>,
    label: Option<String>,
}

fn number(flag: &str, v: Option<&String>) -> Result<f64, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| format!("{flag} {v}: not a number"))
}

/// The job the per-job flags apply to: the last `--job` or `--add`.
fn current<'a>(
    last_is_add: bool,
    candidate: &'a mut Option<Pending>,
    jobs: &'a mut [Pending],
    flag: &str,
) -> Result<&'a mut Pending, String> {
    let p = if last_is_add {
        candidate.as_mut()
    } else {
        jobs.last_mut()
    };
    p.ok_or_else(|| format!("{flag} applies to the --job or --add before it: give that first"))
}

/// The parameters of `device`'s set with the GPU measurements in `dir`
/// applied as the matrix applies them ([`measured::sets`]), and what was
/// applied: an A100 takes only what its set carries from the H100's (the
/// time slice, the switch and the launch floor; no A100 was measured).
pub(super) fn measured_params(device: Device, dir: &Path) -> Result<(Params, Vec<String>), String> {
    if !dir.is_dir() {
        return Err(format!("--measured {}: not a directory", dir.display()));
    }
    let sets = measured::sets(Some(dir)).map_err(|e| format!("--measured: {e}"))?;
    Ok(match device {
        Device::H100 => (sets.h100, sets.applied_h100),
        Device::H200 => (sets.h200, sets.applied_h200),
        Device::A100 => {
            let carried = ["timeslice ", "context switch ", "launch floor "];
            let applied = sets
                .applied_h100
                .into_iter()
                .filter(|p| carried.iter().any(|c| p.starts_with(c)))
                .map(|p| format!("{p} (the H100 set's, which the A100 set carries)"))
                .collect();
            (sets.a100, applied)
        }
    })
}

/// Runs `tandem-sim predict ARGS` (without `predict`); returns what to print.
///
/// # Errors
/// One line naming what is wrong: a flag, a file, a field, a class.
pub fn run(args: &[String]) -> Result<String, String> {
    let mut device = Device::H100;
    let (mut p99_default, mut kept_default) = (DEFAULT_SLO.p99_ratio, DEFAULT_SLO.kept);
    let mut jobs: Vec<Pending> = Vec::new();
    let mut candidate: Option<Pending> = None;
    let (mut json, mut why, mut steepness) = (false, false, false);
    let (mut seeds, mut window_s, mut threads, mut modes) = (None, None, None, None);
    let mut measured_dir = std::env::var("TANDEM_SIM_MEASURED")
        .ok()
        .filter(|d| !d.is_empty());
    // Which job the per-job flags apply to: the last --job or --add.
    let mut last_is_add = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let v = args.get(i + 1);
        let mut took = 1;
        match a {
            "--json" => json = true,
            "--why" => why = true,
            "--steepness" => steepness = true,
            "--device" => {
                device = match v.map(String::as_str).and_then(Device::named) {
                    Some(d) => d,
                    None => {
                        return Err(format!(
                            "--device {}: h100, a100 or h200",
                            v.map_or("(missing)", String::as_str)
                        ))
                    }
                };
                took = 2;
            }
            "--p99-target" => (p99_default, took) = (number(a, v)?, 2),
            "--kept-target" => (kept_default, took) = (number(a, v)?, 2),
            "--seeds" => (seeds, took) = (Some(number(a, v)?), 2),
            "--window-s" => (window_s, took) = (Some(number(a, v)?), 2),
            "--threads" => (threads, took) = (Some(number(a, v)?), 2),
            "--modes" => {
                modes = Some(v.ok_or("--modes needs a list")?.clone());
                took = 2;
            }
            "--measured" => {
                measured_dir = Some(v.ok_or("--measured needs a directory")?.clone());
                took = 2;
            }
            "--job" | "--add" => {
                let path = v.ok_or_else(|| format!("{a} needs a trace file"))?.clone();
                let p = Pending {
                    path,
                    class: None,
                    rate: None,
                    p99: None,
                    p99_ms: None,
                    kept: None,
                    label: None,
                };
                if a == "--add" {
                    if candidate.is_some() {
                        return Err("--add given twice: one candidate at a time".into());
                    }
                    candidate = Some(p);
                    last_is_add = true;
                } else {
                    jobs.push(p);
                    last_is_add = false;
                }
                took = 2;
            }
            "--class" => {
                let c = v.ok_or("--class needs inference or training")?.clone();
                current(last_is_add, &mut candidate, &mut jobs, a)?.class = Some(c);
                took = 2;
            }
            "--label" => {
                let l = v.ok_or("--label needs a name")?.clone();
                current(last_is_add, &mut candidate, &mut jobs, a)?.label = Some(l);
                took = 2;
            }
            "--rate" => {
                (
                    current(last_is_add, &mut candidate, &mut jobs, a)?.rate,
                    took,
                ) = (Some(number(a, v)?), 2)
            }
            "--slo-p99" => {
                (
                    current(last_is_add, &mut candidate, &mut jobs, a)?.p99,
                    took,
                ) = (Some(number(a, v)?), 2)
            }
            "--slo-p99-ms" => {
                (
                    current(last_is_add, &mut candidate, &mut jobs, a)?.p99_ms,
                    took,
                ) = (Some(number(a, v)?), 2)
            }
            "--slo-kept" => {
                (
                    current(last_is_add, &mut candidate, &mut jobs, a)?.kept,
                    took,
                ) = (Some(number(a, v)?), 2)
            }
            other => return Err(format!("unknown argument {other:?}; usage: {USAGE}")),
        }
        i += took;
    }
    let candidate =
        candidate.ok_or("no candidate: give --add FILE (the trace of the job to place)")?;
    let load = |p: &Pending| -> Result<JobInput, String> {
        let trace = load::file(Path::new(&p.path))?;
        if let Some(c) = &p.class {
            let want = load::class(c).map_err(|e| format!("{}: {e}", p.path))?;
            if want != trace.class {
                return Err(format!(
                    "{}: --class {c}, but the trace is of {} job (\"class\": \"{}\"): the class must match the trace",
                    p.path,
                    match trace.class {
                        crate::trace::JobClass::Inference => "an inference",
                        crate::trace::JobClass::Training => "a training",
                    },
                    load::class_name(trace.class)
                ));
            }
        }
        let inference = trace.class == crate::trace::JobClass::Inference;
        let label = p.label.clone().unwrap_or_else(|| p.path.clone());
        let wrong = |flag: &str, class: &str| {
            Err(format!(
                "{label}: {flag} applies to {class} jobs, and this one is not"
            ))
        };
        if !inference && (p.rate.is_some() || p.p99.is_some() || p.p99_ms.is_some()) {
            return wrong("--rate/--slo-p99/--slo-p99-ms", "inference");
        }
        if inference && p.kept.is_some() {
            return wrong("--slo-kept", "training");
        }
        Ok(JobInput {
            label,
            trace,
            rate_per_s: p.rate,
            slo: Slo {
                p99_ratio: p.p99.unwrap_or(p99_default),
                p99_ms: p.p99_ms,
                kept: p.kept.unwrap_or(kept_default),
            },
        })
    };
    let existing = jobs.iter().map(load).collect::<Result<Vec<_>, _>>()?;
    let cand = load(&candidate)?;
    let mut s = Settings::interactive(device);
    if let Some(dir) = measured_dir {
        (s.params, s.measured) = measured_params(device, Path::new(&dir))?;
    }
    if let Some(n) = seeds {
        if !(1.0..=100.0).contains(&n) {
            return Err(format!("--seeds {n}: from 1 to 100"));
        }
        s.seeds = (1..=n as u64).collect();
    }
    if let Some(w) = window_s {
        if !(w > 0.0 && w <= 600.0) {
            return Err(format!("--window-s {w}: above 0 and at most 600"));
        }
        s.window_ns = (w * 1e9) as u64;
        s.max_window_ns = s.max_window_ns.max(s.window_ns);
    }
    if let Some(t) = threads {
        s.threads = (t.max(1.0) as usize).min(64);
    }
    if let Some(m) = modes {
        s.modes = m.split(',').map(str::to_string).collect();
        if let Some(bad) = s.modes.iter().find(|m| !MODES.iter().any(|(n, _)| n == m)) {
            return Err(format!(
                "--modes: unknown mode {bad:?}: one of {}",
                MODES.map(|(n, _)| n).join(", ")
            ));
        }
    }
    s.why = why;
    s.steepness = steepness;
    let p = predict(&existing, &cand, &s).map_err(|e| e.0)?;
    Ok(if json {
        serde_json::to_string_pretty(&p).expect("a prediction serialises") + "\n"
    } else {
        human(&p)
    })
}
