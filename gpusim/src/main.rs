//! `tandem-sim`: the GPU-sharing model's command line.
//!
//! ```text
//! tandem-sim matrix [--reduced] [--device h100|a100|h200|all] [--out DIR] [--traces DIR] [--seeds N] [--window-s S] [--threads N]
//! tandem-sim traces [--traces DIR]          # each job's kernels, GPU and CPU time
//! tandem-sim check-trace FILE               # parse and check one trace file
//! tandem-sim synthetic-trace JOB [--device h100|a100|h200]  # a job's synthetic trace, as JSON
//! tandem-sim predict --job FILE... --add FILE [--json] [--why]  # see predict::cli
//! ```
//!
//! Every argument must be one the command takes: a misspelt option, a
//! missing or malformed value, or a pair or mode no device set has is an
//! error (exit 2) before any work; `--help` prints the usage.
//!
//! `matrix` writes `matrix.json`, `matrix.md` and `holdout.md` into `--out`
//! and exits 1 when a calibration rule is broken (`--reduced`: only the
//! measured pairs in the baseline modes, one seed; what `cargo test` runs).
//! Both device sets by default (the H100's and the A100's); `--pairs` and
//! `--device` narrow it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tandem_gpusim::calibration::{check, holdout, reduced_matrix};
use tandem_gpusim::matrix::{load_trace, run_matrix, Device, MatrixCfg, MODES, NOT_THIS_GPU};
use tandem_gpusim::measured;
use tandem_gpusim::params::MODEL_VERSION;
use tandem_gpusim::report::{markdown, Doc};
use tandem_gpusim::trace::Trace;

/// Writes `text` to stdout. `Err(code)`: stop and exit with it, 0 when the
/// reader has gone (`tandem-sim traces | head`), 1 on any other failure.
fn out(text: &str) -> Result<(), ExitCode> {
    match tandem_coordinator::ctl::stdout::print(text) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_gone)) => Err(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("tandem-sim: {e}");
            Err(ExitCode::from(1))
        }
    }
}

/// [`out`] as the command's last word: its exit code.
fn out_last(text: &str) -> ExitCode {
    out(text).err().unwrap_or(ExitCode::SUCCESS)
}

fn usage_text() -> String {
    format!("usage: tandem-sim matrix [--reduced] [--device h100|a100|h200|all] [--min-requests N] [--out DIR] [--traces DIR] [--seeds N] [--window-s S] [--threads N] [--pairs I:T,..] [--modes M,..] [--set KEY=VALUE]... [--sched KEY=VALUE]... [--spatial KEY=VALUE]... [--mps-inflight-ns N] [--mps-v1-gates on|off] [--v1-gates on|off]\n       tandem-sim traces [--traces DIR] [--device D] [--set KEY=VALUE]...\n       tandem-sim check-trace FILE\n       tandem-sim synthetic-trace JOB [--device h100|a100|h200] [--traces DIR] [--set KEY=VALUE]...\n       {}", tandem_gpusim::predict::cli::USAGE)
}

fn usage() -> ExitCode {
    eprintln!("{}", usage_text());
    ExitCode::from(2)
}

/// A usage error: its line, then the usage.
fn misuse(e: &str) -> ExitCode {
    eprintln!("tandem-sim: {e}");
    usage()
}

/// The options a command takes: those followed by a value, those alone,
/// and whether a positional argument (a FILE or JOB) comes first.
fn options(cmd: &str) -> Option<(&'static [&'static str], &'static [&'static str], bool)> {
    const MATRIX: &[&str] = &[
        "--device",
        "--out",
        "--traces",
        "--seeds",
        "--window-s",
        "--min-requests",
        "--threads",
        "--pairs",
        "--modes",
        "--set",
        "--sched",
        "--mps-inflight-ns",
        "--mps-v1-gates",
        "--v1-gates",
        "--spatial",
    ];
    const JOBS: &[&str] = &["--traces", "--device", "--set"];
    match cmd {
        "matrix" => Some((MATRIX, &["--reduced"], false)),
        "traces" => Some((JOBS, &[], false)),
        "synthetic-trace" => Some((JOBS, &[], true)),
        "check-trace" => Some((&[], &[], true)),
        _ => None,
    }
}

/// Every argument after `cmd` is one of its options (with its value where
/// it takes one) or its positional argument, first: a misspelt option or
/// a missing value is an error, never silently ignored.
fn check_args(cmd: &str, rest: &[String]) -> Result<(), String> {
    let Some((valued, bare, positional)) = options(cmd) else {
        return Err(format!("unknown command {cmd:?}"));
    };
    let mut i = 0;
    if positional {
        match rest.first() {
            Some(p) if !p.starts_with('-') => i = 1,
            _ => {
                let what = if cmd == "check-trace" { "FILE" } else { "JOB" };
                return Err(format!("{cmd} needs its {what} first"));
            }
        }
    }
    while i < rest.len() {
        let a = rest[i].as_str();
        if valued.contains(&a) {
            match rest.get(i + 1) {
                Some(v) if !v.starts_with("--") => i += 2,
                _ => return Err(format!("{a} needs a value")),
            }
        } else if bare.contains(&a) {
            i += 1;
        } else if a.starts_with('-') {
            return Err(format!("unknown option {a} for {cmd}"));
        } else {
            return Err(format!("unexpected argument {a:?}"));
        }
    }
    Ok(())
}

/// Option `name`'s value `v` as a number, if given; an error naming it if
/// it is not one.
fn number<T: std::str::FromStr>(name: &str, v: Option<String>) -> Result<Option<T>, String>
where
    T::Err: std::fmt::Display,
{
    v.map(|v| v.parse().map_err(|e| format!("{name} {v}: {e}")))
        .transpose()
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        return usage();
    };
    if args.iter().any(|a| a == "--help" || a == "-h") && cmd != "predict" {
        return out_last(&format!("{}\n", usage_text()));
    }
    if cmd == "predict" {
        return match tandem_gpusim::predict::cli::run(&args[1..]) {
            Ok(text) => out_last(&text),
            Err(e) => {
                eprintln!("tandem-sim predict: {e}");
                ExitCode::from(2)
            }
        };
    }
    if let Err(e) = check_args(cmd, &args[1..]) {
        return misuse(&e);
    }
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let traces = value("--traces").map(PathBuf::from);
    let devices: Vec<Device> = match value("--device").as_deref() {
        None | Some("all") => Device::ALL.to_vec(),
        Some(name) => match Device::named(name) {
            Some(d) => vec![d],
            None => {
                eprintln!("tandem-sim: --device {name}: h100, a100, h200 or all (h100 and a100)");
                return ExitCode::from(2);
            }
        },
    };
    // GPU measurements first, so that `--set` still overrides them: each
    // set takes what was measured on its GPU, and the die's figures from
    // the other model of its die (an H200's time slice is an H100's too;
    // its DRAM share is not).
    let measured::Sets {
        h100: mut params,
        mut h200,
        mut a100,
        applied_h100,
        applied_h200,
    } = match measured::sets(traces.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tandem-sim: {e}");
            return ExitCode::from(1);
        }
    };
    for (model, m) in [("h100", &applied_h100), ("h200", &applied_h200)] {
        if !m.is_empty() {
            eprintln!(
                "tandem-sim: measured on a GPU, for the {model} set ({}, {}): {}",
                measured::FILE,
                measured::ENGINE_FILE,
                m.join(", ")
            );
        }
    }
    // One list for the reports: the H100's, then what only the H200 took.
    let measured: Vec<String> = applied_h100
        .iter()
        .cloned()
        .chain(
            applied_h200
                .iter()
                .filter(|p| !applied_h100.contains(p))
                .map(|p| format!("{p} (H200 set)")),
        )
        .collect();
    for (i, a) in args.iter().enumerate() {
        if a == "--set" {
            let Some((k, v)) = args.get(i + 1).and_then(|kv| kv.split_once('=')) else {
                return usage();
            };
            if let Err(e) = params
                .set(k, v)
                .and_then(|()| a100.set(k, v))
                .and_then(|()| h200.set(k, v))
            {
                eprintln!("tandem-sim: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let params_of = |d: Device| match d {
        Device::H100 => params.clone(),
        Device::A100 => a100.clone(),
        Device::H200 => h200.clone(),
    };
    match cmd.as_str() {
        "check-trace" => {
            let Some(file) = args.get(1) else {
                return usage();
            };
            match std::fs::read_to_string(file)
                .map_err(|e| e.to_string())
                .and_then(|t| Trace::from_json(&t).map_err(|e| e.to_string()))
            {
                Ok(t) => out_last(&format!(
                    "{}: {} ops, {} kernels, GPU {:.3} ms, CPU {:.3} ms ({})\n",
                    t.job,
                    t.ops.len(),
                    t.kernels().count(),
                    t.kernel_ns() as f64 / 1e6,
                    t.host_ns() as f64 / 1e6,
                    t.source
                )),
                Err(e) => {
                    eprintln!("{file}: {e}");
                    ExitCode::from(1)
                }
            }
        }
        "synthetic-trace" => {
            // One job's synthetic trace as a file: what `predict` reads.
            let Some(job) = args.get(1) else {
                return usage();
            };
            let d = devices[0];
            match load_trace(d, &params_of(d), traces.as_deref(), job) {
                Ok(t) => out_last(&format!("{}\n", t.to_json())),
                Err(e) => {
                    eprintln!("tandem-sim: {e}");
                    ExitCode::from(1)
                }
            }
        }
        "traces" => {
            let jobs = devices.iter().flat_map(|&d| {
                d.inference()
                    .iter()
                    .map(|(n, _)| *n)
                    .chain(d.training().iter().copied())
                    .map(move |j| (d, j))
            });
            for (d, job) in jobs {
                match load_trace(d, &params_of(d), traces.as_deref(), job) {
                    Ok(t) => {
                        let mut line = format!(
                            "{} {job:22} {:9} {:6} kernels  GPU alone {:9.3} ms  CPU {:9.3} ms per {}\n",
                            d.name(),
                            t.source,
                            t.kernels().count(),
                            t.kernel_ns() as f64 / 1e6,
                            t.host_ns() as f64 / 1e6,
                            if t.class == tandem_gpusim::trace::JobClass::Inference {
                                "request"
                            } else {
                                "step"
                            }
                        );
                        if let Some(why) = t
                            .notes
                            .lines()
                            .last()
                            .filter(|l| l.starts_with(NOT_THIS_GPU))
                        {
                            line += &format!("    {why}\n");
                        }
                        if let Err(code) = out(&line) {
                            return code;
                        }
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(1);
                    }
                }
            }
            ExitCode::SUCCESS
        }
        "matrix" => {
            let reduced = args.iter().any(|a| a == "--reduced");
            let (seeds, window_s, min_requests, threads) = match (
                number::<u64>("--seeds", value("--seeds")),
                number::<f64>("--window-s", value("--window-s")),
                number::<u64>("--min-requests", value("--min-requests")),
                number::<usize>("--threads", value("--threads")),
            ) {
                (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
                (Err(e), ..) | (_, Err(e), ..) | (_, _, Err(e), _) | (.., Err(e)) => {
                    return misuse(&e)
                }
            };
            let pairs = match value("--pairs")
                .map(|p| pairs_arg(&p, &devices))
                .transpose()
            {
                Ok(p) => p,
                Err(e) => return misuse(&e),
            };
            if let Some(md) = value("--modes") {
                if let Some(bad) = md.split(',').find(|m| !known_mode(m)) {
                    return misuse(&format!(
                        "--modes: unknown mode {bad:?}: one of {}, tandem_v1, tandem_v1_mps",
                        MODES.join(", ")
                    ));
                }
            }
            let start = Instant::now();
            let mut rows = Vec::new();
            for &d in &devices {
                let mut m = if reduced {
                    reduced_matrix(d, params_of(d))
                } else {
                    MatrixCfg::full(d, params_of(d))
                };
                if let Some(n) = seeds {
                    m.seeds = (1..=n.max(1)).collect();
                }
                if let Some(s) = window_s {
                    m.window_ns = (s * 1e9) as u64;
                }
                if let Some(n) = min_requests {
                    m.min_requests = n;
                }
                if let Some(n) = threads {
                    m.threads = n;
                }
                if let Some(p) = &pairs {
                    // Each device runs the pairs that are its own.
                    m.pairs = p.iter().filter(|x| is_pair_of(d, x)).cloned().collect();
                }
                if let Some(md) = value("--modes") {
                    m.modes = md.split(',').map(String::from).collect();
                }
                if let Err(e) = tandem_args(&args, &mut m.tandem) {
                    eprintln!("tandem-sim: {e}");
                    return ExitCode::from(2);
                }
                if m.pairs.is_empty() {
                    continue;
                }
                match run_matrix(&m, traces.as_deref()) {
                    Ok(r) => rows.extend(r),
                    Err(e) => {
                        eprintln!("tandem-sim: {e}");
                        return ExitCode::from(1);
                    }
                }
            }
            let wall = start.elapsed().as_secs_f64();
            let (fits, bad) = check(&rows);
            let kind = if reduced { "reduced" } else { "full" };
            let md = markdown(&rows, &fits, &bad, kind, wall, &measured);
            // A reader gone from stdout still gets the files and the check.
            let printed = out(&md);
            if let Some(out) = value("--out").map(PathBuf::from) {
                let doc = Doc {
                    model_version: MODEL_VERSION,
                    matrix: kind,
                    rows: &rows,
                    calibration: &fits,
                    calibration_failures: &bad,
                    measured_params: &measured,
                };
                let json = serde_json::to_string_pretty(&doc).expect("rows serialise");
                if let Err(e) = std::fs::create_dir_all(&out)
                    .and_then(|()| std::fs::write(out.join("matrix.json"), json + "\n"))
                    .and_then(|()| std::fs::write(out.join("matrix.md"), &md))
                    .and_then(|()| std::fs::write(out.join("holdout.md"), holdout(&fits)))
                {
                    eprintln!("tandem-sim: writing {}: {e}", out.display());
                    return ExitCode::from(1);
                }
            }
            eprintln!("tandem-sim: {} rows in {wall:.1} s", rows.len());
            if bad.is_empty() {
                printed.err().unwrap_or(ExitCode::SUCCESS)
            } else {
                eprintln!("tandem-sim: calibration broken:\n  {}", bad.join("\n  "));
                ExitCode::from(1)
            }
        }
        _ => usage(),
    }
}

/// Whether device `d` runs `inference` beside `training`.
fn is_pair_of(d: Device, (inference, training): &(String, String)) -> bool {
    d.inference().iter().any(|(n, _)| n == inference) && d.training().contains(&training.as_str())
}

/// `--pairs I:T,..`: each a pair of one of `devices`' sets, or an error
/// naming it and what those sets hold.
fn pairs_arg(list: &str, devices: &[Device]) -> Result<Vec<(String, String)>, String> {
    list.split(',')
        .map(|x| {
            let (i, t) = x
                .split_once(':')
                .ok_or_else(|| format!("--pairs {x}: INFERENCE:TRAINING"))?;
            let pair = (i.to_string(), t.to_string());
            if devices.iter().any(|&d| is_pair_of(d, &pair)) {
                return Ok(pair);
            }
            let sets: Vec<String> = devices
                .iter()
                .map(|d| {
                    let inf: Vec<&str> = d.inference().iter().map(|(n, _)| *n).collect();
                    format!(
                        "{}: inference {}; training {}",
                        d.name(),
                        inf.join(", "),
                        d.training().join(", ")
                    )
                })
                .collect();
            Err(format!("--pairs {x}: not a pair of {}", sets.join(" / ")))
        })
        .collect()
}

/// A mode the matrix runs: [`MODES`], or tandem v1's two.
fn known_mode(m: &str) -> bool {
    MODES.contains(&m) || m == "tandem_v1" || m == "tandem_v1_mps"
}

/// `--sched KEY=VALUE` (a `[scheduler]` key, a number or a boolean; may
/// repeat), `--mps-inflight-ns N`, `--mps-v1-gates on|off`,
/// `--v1-gates on|off` and `--spatial KEY=VALUE` (a [`SpatialCfg`] field;
/// may repeat).
///
/// [`SpatialCfg`]: tandem_gpusim::spatial::SpatialCfg
fn tandem_args(args: &[String], t: &mut tandem_gpusim::matrix::TandemCfg) -> Result<(), String> {
    let mut sched = serde_json::to_value(&t.sched).map_err(|e| e.to_string())?;
    for (i, a) in args.iter().enumerate() {
        let v = args.get(i + 1).map(String::as_str);
        match (a.as_str(), v) {
            ("--sched", Some(kv)) => {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("--sched {kv}: KEY=VALUE"))?;
                let v: serde_json::Value =
                    serde_json::from_str(v).map_err(|e| format!("--sched {kv}: {e}"))?;
                sched[k] = v;
            }
            ("--mps-inflight-ns", Some(n)) => {
                t.mps_inflight_ns = n
                    .parse()
                    .map_err(|e| format!("--mps-inflight-ns {n}: {e}"))?;
            }
            ("--mps-v1-gates", Some(v)) => t.mps_v1_gates = v == "on",
            ("--v1-gates", Some(v)) => t.v1_gates = v == "on",
            ("--spatial", Some(kv)) => t.spatial.set(kv)?,
            _ => {}
        }
    }
    t.sched = serde_json::from_value(sched).map_err(|e| format!("--sched: {e}"))?;
    t.sched.validate().map_err(|e| e.to_string())?;
    Ok(())
}
