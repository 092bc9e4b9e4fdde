//! `tandem-sim`: the GPU-sharing model's command line.
//!
//! ```text
//! tandem-sim matrix [--reduced] [--out DIR] [--traces DIR] [--seeds N] [--window-s S] [--threads N]
//! tandem-sim traces [--traces DIR]          # each job's kernels, GPU and CPU time (H100 jobs, then the A100 set)
//! tandem-sim check-trace FILE               # parse and check one trace file
//! ```
//!
//! `matrix` writes `matrix.json` and `matrix.md` into `--out` and exits 1
//! when a calibration rule is broken (`--reduced`: only the two calibrated
//! pairs and the baseline modes; what `scripts/test` runs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use tandem_gpusim::calibration::check;
use tandem_gpusim::matrix::{load_trace, run_matrix, MatrixCfg, INFERENCE, TRAINING};
use tandem_gpusim::measured;
use tandem_gpusim::params::{Params, MODEL_VERSION};
use tandem_gpusim::report::{markdown, Doc};
use tandem_gpusim::synthetic_a100::{
    INFERENCE_JOBS as A100_INFERENCE, TRAINING_JOBS as A100_TRAINING,
};
use tandem_gpusim::trace::Trace;

fn usage() -> ExitCode {
    eprintln!("usage: tandem-sim matrix [--reduced] [--out DIR] [--traces DIR] [--seeds N] [--window-s S] [--threads N] [--pairs I:T,..] [--modes M,..] [--set KEY=VALUE]...\n       tandem-sim traces [--traces DIR]\n       tandem-sim check-trace FILE");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        return usage();
    };
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let traces = value("--traces").map(PathBuf::from);
    let mut params = Params::calibrated();
    // GPU measurements first, so that `--set` still overrides them.
    let measured = match traces.as_deref().map(|d| measured::apply(&mut params, d)) {
        Some(Ok(m)) => m,
        Some(Err(e)) => {
            eprintln!("tandem-sim: {e}");
            return ExitCode::from(1);
        }
        None => Vec::new(),
    };
    if !measured.is_empty() {
        eprintln!(
            "tandem-sim: measured on a GPU ({}): {}",
            measured::FILE,
            measured.join(", ")
        );
    }
    for (i, a) in args.iter().enumerate() {
        if a == "--set" {
            let Some((k, v)) = args.get(i + 1).and_then(|kv| kv.split_once('=')) else {
                return usage();
            };
            if let Err(e) = params.set(k, v) {
                eprintln!("tandem-sim: {e}");
                return ExitCode::from(2);
            }
        }
    }
    match cmd.as_str() {
        "check-trace" => {
            let Some(file) = args.get(1) else {
                return usage();
            };
            match std::fs::read_to_string(file)
                .map_err(|e| e.to_string())
                .and_then(|t| Trace::from_json(&t).map_err(|e| e.to_string()))
            {
                Ok(t) => {
                    println!(
                        "{}: {} ops, {} kernels, GPU {:.3} ms, CPU {:.3} ms ({})",
                        t.job,
                        t.ops.len(),
                        t.kernels().count(),
                        t.kernel_ns() as f64 / 1e6,
                        t.host_ns() as f64 / 1e6,
                        t.source
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{file}: {e}");
                    ExitCode::from(1)
                }
            }
        }
        "traces" => {
            for job in INFERENCE.iter().map(|(n, _)| *n).chain(TRAINING) {
                match load_trace(&params, traces.as_deref(), job) {
                    Ok(t) => println!(
                        "{job:16} {:9} {:5} kernels  GPU alone {:8.3} ms  CPU {:8.3} ms per {}",
                        t.source,
                        t.kernels().count(),
                        t.kernel_ns() as f64 / 1e6,
                        t.host_ns() as f64 / 1e6,
                        if t.class == tandem_gpusim::trace::JobClass::Inference {
                            "request"
                        } else {
                            "step"
                        }
                    ),
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::from(1);
                    }
                }
            }
            // The A100 set (issue 22): the Tally artifact's jobs, on its A100.
            let a100 = Params::a100();
            println!(
                "A100 set (tandem-gpusim synthetic_a100, {} SMs):",
                a100.gpu.sms
            );
            for job in A100_INFERENCE.iter().chain(&A100_TRAINING) {
                let t =
                    tandem_gpusim::synthetic_a100::job(&a100, job).expect("a job of the A100 set");
                println!(
                    "{job:22} {:9} {:6} kernels  GPU alone {:9.3} ms  CPU {:8.3} ms  alone {:9.3} ms per {}",
                    t.source,
                    t.kernels().count(),
                    t.kernel_ns() as f64 / 1e6,
                    t.host_ns() as f64 / 1e6,
                    tandem_gpusim::synthetic_a100::alone_step_ns(&t.ops, &a100) as f64 / 1e6,
                    if t.class == tandem_gpusim::trace::JobClass::Inference {
                        "request"
                    } else {
                        "step"
                    }
                );
            }
            ExitCode::SUCCESS
        }
        "matrix" => {
            let reduced = args.iter().any(|a| a == "--reduced");
            let mut m = if reduced {
                MatrixCfg::reduced(params)
            } else {
                MatrixCfg::full(params)
            };
            if let Some(n) = value("--seeds").and_then(|s| s.parse::<u64>().ok()) {
                m.seeds = (1..=n.max(1)).collect();
            }
            if let Some(s) = value("--window-s").and_then(|s| s.parse::<f64>().ok()) {
                m.window_ns = (s * 1e9) as u64;
            }
            if let Some(n) = value("--threads").and_then(|s| s.parse::<usize>().ok()) {
                m.threads = n;
            }
            if let Some(p) = value("--pairs") {
                m.pairs = p
                    .split(',')
                    .filter_map(|x| x.split_once(':'))
                    .map(|(a, b)| (a.to_string(), b.to_string()))
                    .collect();
            }
            if let Some(md) = value("--modes") {
                m.modes = md.split(',').map(String::from).collect();
            }
            if let Err(e) = tandem_args(&args, &mut m.tandem) {
                eprintln!("tandem-sim: {e}");
                return ExitCode::from(2);
            }
            let start = Instant::now();
            let rows = match run_matrix(&m, traces.as_deref()) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("tandem-sim: {e}");
                    return ExitCode::from(1);
                }
            };
            let wall = start.elapsed().as_secs_f64();
            let (fits, bad) = check(&rows);
            let kind = if reduced { "reduced" } else { "full" };
            let md = markdown(&rows, &fits, &bad, kind, wall, &measured);
            print!("{md}");
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
                {
                    eprintln!("tandem-sim: writing {}: {e}", out.display());
                    return ExitCode::from(1);
                }
            }
            eprintln!("tandem-sim: {} rows in {wall:.1} s", rows.len());
            if bad.is_empty() {
                ExitCode::SUCCESS
            } else {
                eprintln!("tandem-sim: calibration broken:\n  {}", bad.join("\n  "));
                ExitCode::from(1)
            }
        }
        _ => usage(),
    }
}

/// `--sched KEY=VALUE` (a `[scheduler]` key, a number or a boolean; may
/// repeat), `--mps-inflight-ns N`, `--mps-v1-gates on|off` and
/// `--v1-gates on|off`.
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
            _ => {}
        }
    }
    t.sched = serde_json::from_value(sched).map_err(|e| format!("--sched: {e}"))?;
    t.sched.validate().map_err(|e| e.to_string())?;
    Ok(())
}
