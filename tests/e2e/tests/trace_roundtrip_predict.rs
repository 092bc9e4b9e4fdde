//! Issue 25's last acceptance, measured: for every pair of the model's
//! calibration matrix (both devices: `calibration::reduced_matrix`, the
//! pairs of `calibration::targets()`), each job's synthetic trace is
//! replayed through the shim on the fake driver (`replay` host), captured
//! by tandemd (`tandemctl trace`), and the model's prediction (p99 ratio
//! and training kept, per mode) from the captured traces is compared with
//! the one from the sources.
//!
//! Every prediction is the median over seeds 1-N (N = 36 by default), the same seeds for the
//! source and each variant (common random numbers: the arrivals and host
//! jitter are drawn alike, so a difference is the trace's).
//!
//! To say which missing datum causes which error, with
//! `TANDEM_ROUNDTRIP_VARIANTS=all` it also predicts from the captured
//! traces with one of the source's fields copied in, kernel by kernel (the
//! captured kernels are the source's, in order): `regs_per_thread` +
//! `smem_per_block`, `duration_ns`, the kernels' `host_gap_ns`, and
//! occupancy, registers, shared memory, DRAM bytes and durations together.
//! `noise` is the source itself under seeds N+1 to 2N against 1-N: how far other
//! draws move a prediction at these windows.
//!
//! Slow (about 45 minutes on 2 shared cores: eight minutes of replays,
//! then three matrices of 36 seeds at the calibration matrix's windows;
//! each variant adds a matrix), so ignored; run it with
//!
//! ```text
//! cargo test --release -p tandem-e2e --test trace_roundtrip_predict -- --ignored --nocapture
//! ```
//!
//! `TANDEM_ROUNDTRIP_SEEDS=N` (default 36) sets the seeds,
//! `TANDEM_ROUNDTRIP_PAIRS=inference:training,..` keeps only those pairs,
//! and `TANDEM_ROUNDTRIP_REUSE=1` predicts from the captures an earlier run
//! left in the output folder, with no replay.
//!
//! It writes the table (markdown) and the captured traces to
//! `$TANDEM_ROUNDTRIP_OUT` (default `target/roundtrip-predict/`), and
//! fails while a prediction from a captured trace is more than 5% from the
//! source's. Why 36 seeds: with three, the source under other seeds moved
//! some cells by 9-45%, as much as the captures' differences; at 36 the
//! captures' differences fell to 3% where the capture was right (BERT
//! beside Whisper, 2026-11-27), but one cell, BERT beside Whisper under
//! `tandem_hold`, still moves 12% under other seeds. Run 14 (2026-11-28,
//! 36 seeds, 60 units) passed: 14 of 14 pairs within 5% in every mode,
//! the worst 3.1%. The runs and what causes what are in docs/traces.md,
//! "What was shown".

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tandem_e2e::coord::{Tandemd, TestDir};
use tandem_gpusim::calibration::reduced_matrix;
use tandem_gpusim::matrix::{run_matrix, Device, MatrixCfg, Row, MODES};
use tandem_gpusim::trace::{JobClass, Kernel, Op, Trace};

mod replay_trace;
use replay_trace::{try_round_trip, with_inference_marks};

/// What each variant copies from the source kernel into the captured one.
type Field = fn(&mut Kernel, &Kernel);

const VARIANTS: [(&str, Field); 5] = [
    ("captured", |_, _| {}),
    ("+regs+smem", |c, s| {
        c.regs_per_thread = s.regs_per_thread;
        c.smem_per_block = s.smem_per_block;
    }),
    ("+duration_ns", |c, s| c.duration_ns = s.duration_ns),
    ("+host_gap_ns", |c, s| c.host_gap_ns = s.host_gap_ns),
    ("+all four", |c, s| {
        c.blocks_per_sm = s.blocks_per_sm;
        c.regs_per_thread = s.regs_per_thread;
        c.smem_per_block = s.smem_per_block;
        c.dram_bytes = s.dram_bytes;
        c.duration_ns = s.duration_ns;
        c.sm_share = s.sm_share;
    }),
];

fn out_dir() -> PathBuf {
    std::env::var_os("TANDEM_ROUNDTRIP_OUT").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/roundtrip-predict"),
        PathBuf::from,
    )
}

/// The matrix the comparison runs: the calibration pairs, every mode,
/// [`seeds`] (a cell is the median over them), and the calibration
/// matrix's windows (`tandem-sim matrix --reduced`: at least 1,000 requests
/// a cell, 10-60 s after 3 s of warm-up).
/// With 3-10 s windows (before 2026-11-27) a cell's p99 was the few
/// slowest of a few hundred requests: the source under other seeds moved
/// by up to 66%, and the captured traces' differences were that noise.
/// `TANDEM_ROUNDTRIP_SHORT=1` takes the short windows again (minutes
/// faster).
fn matrix(device: Device) -> MatrixCfg {
    let mut m = reduced_matrix(device, device.params());
    m.modes = MODES[1..].iter().map(|s| (*s).to_string()).collect();
    if std::env::var_os("TANDEM_ROUNDTRIP_SHORT").is_some_and(|v| v == "1") {
        m.window_ns = 3_000_000_000;
        m.min_requests = 200;
        m.max_window_ns = 10_000_000_000;
        m.warmup_ns = 500_000_000;
    }
    m.seeds = seeds();
    keep_pairs(&mut m);
    m
}

/// Whether to run the variants that copy source fields in (each one more
/// matrix): `TANDEM_ROUNDTRIP_VARIANTS=all`.
fn all_variants() -> bool {
    std::env::var_os("TANDEM_ROUNDTRIP_VARIANTS").is_some_and(|v| v == "all")
}

/// How many seeds a cell's median is taken over: 36, or
/// `TANDEM_ROUNDTRIP_SEEDS` (3 for a quick look).
fn seed_count() -> u64 {
    std::env::var("TANDEM_ROUNDTRIP_SEEDS")
        .ok()
        .map_or(36, |v| v.parse().expect("TANDEM_ROUNDTRIP_SEEDS: a number"))
        .max(1)
}

/// The seeds every variant runs, 1 to N (the same ones: common random
/// numbers, so a difference is the trace's, not the draws').
fn seeds() -> Vec<u64> {
    (1..=seed_count()).collect()
}

/// The noise floor's seeds, N+1 to 2N: the source under other draws.
fn other_seeds() -> Vec<u64> {
    let n = seed_count();
    (n + 1..=2 * n).collect()
}

/// With `TANDEM_ROUNDTRIP_REUSE=1`, the captured traces an earlier run left
/// in the output folder are predicted from again, with no replay: to tell
/// the model's noise from the capture's, run to run.
fn reuse() -> bool {
    std::env::var_os("TANDEM_ROUNDTRIP_REUSE").is_some_and(|v| v == "1")
}

/// `TANDEM_ROUNDTRIP_PAIRS=inference:training,..` keeps only those pairs
/// (their device's pairs; a device with none left is skipped).
fn keep_pairs(m: &mut MatrixCfg) {
    if let Ok(v) = std::env::var("TANDEM_ROUNDTRIP_PAIRS") {
        let want: Vec<(String, String)> = v
            .split(',')
            .map(|p| {
                let (i, t) = p
                    .split_once(':')
                    .expect("TANDEM_ROUNDTRIP_PAIRS: inference:training,..");
                (i.to_string(), t.to_string())
            })
            .collect();
        m.pairs.retain(|p| want.contains(p));
    }
}

/// Units replayed per job: the capture times about one launch in nine of
/// a GPU-bound step's burst, so a kernel that is the only one of its key
/// in a step is timed in a given step with about that chance. Over 20
/// steps GPT-2 large's 9.3 ms `lm_head_dgrad` went untimed, came back 6.4
/// ms, and moved BERT's predicted p99 beside it under MPS by 9%; over 60,
/// every BERT + GPT-2 large cell was within 0.5%.
const REPLAY_UNITS: f64 = 60.0;
/// The longest replay, s: Whisper's 22 steps (5.8 s each).
const REPLAY_MAX_S: f64 = 130.0;

/// Replay length for one trace: sixty of its units, 4 to 130 s. A unit is
/// taken as its kernel time plus its host time (a step that waits on its
/// syncs runs them one after the other: Whisper's 2.9 s of host time, then
/// 2.9 s of kernels). With five units of the larger of the two, capped at
/// 20 s (before 2026-11-27), Whisper's capture held one whole step and
/// Pegasus-X's three, too few for the per-position timings of kernels that
/// share a key, and their kernel-time sums came back -6% and -7%. With
/// eight units, capped at 48 s (before the evening of 2026-11-27), Whisper's window held
/// six whole steps: 1,688 of its 1,948 kernels came back within 1% of the
/// source, the sum +2.1% (its weight gradients share keys across layers at
/// 4 to 12 ms, and a step is timed at about 120 positions), and BERT's
/// predictions beside it moved 7 to 15% under MPS and the priority modes;
/// with twenty (18 whole steps), 1,894 within 1%, the sum +0.02%, and
/// BERT's predictions beside it within 3% but under `tandem_hold`.
fn replay_seconds(t: &Trace) -> f64 {
    let unit = (t.kernel_ns() + t.host_ns()) as f64 / 1e9;
    (REPLAY_UNITS * unit + 1.0).clamp(4.0, REPLAY_MAX_S)
}

/// `captured` with `copy` applied from `source`, kernel by kernel; `None`
/// when the kernels are not the source's in order.
fn hybrid(source: &Trace, captured: &Trace, copy: Field) -> Option<Trace> {
    let src: Vec<&Kernel> = source.kernels().collect();
    if src.len() != captured.kernels().count() {
        return None;
    }
    let mut out = captured.clone();
    let mut i = 0;
    for op in &mut out.ops {
        if let Op::Kernel(k) = op {
            if k.name != src[i].name {
                return None;
            }
            copy(k, src[i]);
            i += 1;
        }
    }
    Some(out)
}

fn rel(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => Some((b / a - 1.0) * 100.0),
        _ => None,
    }
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:+.1}%"))
}

#[test]
#[ignore = "slow (minutes): run it by hand, see the module docs"]
fn predictions_from_captured_traces_match_those_from_their_sources() {
    let out = out_dir();
    std::fs::create_dir_all(&out).expect("mkdir the output folder");
    let dir = TestDir::new("trace-roundtrip-predict");
    // The largest window: a Llama-2 request is 30,000 launches.
    let d = (!reuse()).then(|| Tandemd::start_with_config(&dir, &with_inference_marks(1 << 20)));
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    for device in Device::ALL {
        let m = matrix(device);
        if m.pairs.is_empty() {
            continue;
        }
        let base = out.join(device.name());
        let params = device.params();
        let mut jobs: Vec<String> = Vec::new();
        for (i, t) in &m.pairs {
            for j in [i, t] {
                if !jobs.contains(j) {
                    jobs.push(j.clone());
                }
            }
        }
        // Replay and capture each job once.
        let mut sources: BTreeMap<String, Trace> = BTreeMap::new();
        let mut captured: BTreeMap<String, Result<Trace, String>> = BTreeMap::new();
        let _ = writeln!(report, "\n## {}\n", device.name());
        let _ = writeln!(
            report,
            "| job | kernels source / captured | kernel ms source / captured | capture |\n| --- | --- | --- | --- |"
        );
        for job in &jobs {
            let source = device.synthetic(&params, job).expect("a synthetic job");
            let class = match source.class {
                JobClass::Inference => "inference",
                JobClass::Training => "training",
            };
            let secs = replay_seconds(&source);
            // Every inference request is bracketed by the explicit API: a
            // request that syncs more than once (Llama-2's tokens) is one
            // request only by it (the detected one ends at its first
            // sync), and a detected request begins at its first GPU op, so
            // the host time before it (BERT's 400 us of input handling)
            // is not in the trace: its alone p99 comes out that much
            // shorter and its ratios higher (+8 to +12% on BERT's pairs
            // under time-slicing, 2026-11-27; docs/traces.md).
            let explicit = source.class == JobClass::Inference;
            // Quiet between units only where requests need it: a training
            // step runs back to back, and 5 ms of quiet after each (as
            // every job had before 2026-11-27) is GPU idle time the source
            // does not have, which the capture rightly kept (ResNet50
            // training's step is 27 ms of kernels).
            let quiet = if explicit { "5000" } else { "0" };
            let got = match &d {
                Some(d) => try_round_trip(
                    &dir,
                    d,
                    &source,
                    class,
                    quiet,
                    &format!("{secs:.1}"),
                    Duration::from_secs_f64(secs - 0.7),
                    explicit,
                ),
                None => {
                    let path = base.join("captured").join(format!("{job}.json"));
                    std::fs::read_to_string(&path)
                        .map_err(|e| format!("{}: {e}", path.display()))
                        .and_then(|text| Trace::from_json(&text).map_err(|e| e.to_string()))
                }
            }
            .map(|mut c| {
                c.job = source.job.clone();
                c
            });
            let row = match &got {
                Ok(c) => format!(
                    "| {job} | {} / {} | {:.3} / {:.3} | ok |",
                    source.kernels().count(),
                    c.kernels().count(),
                    source.kernel_ns() as f64 / 1e6,
                    c.kernel_ns() as f64 / 1e6
                ),
                Err(e) => format!(
                    "| {job} | {} / - | {:.3} / - | not captured: {} |",
                    source.kernels().count(),
                    source.kernel_ns() as f64 / 1e6,
                    e.lines().next().unwrap_or("")
                ),
            };
            eprintln!("{row}");
            let _ = writeln!(report, "{row}");
            sources.insert(job.clone(), source);
            captured.insert(job.clone(), got);
        }
        // One traces folder per variant; a job not captured (or whose
        // kernels do not line up) keeps its source trace there.
        let (seeds, other) = (seeds(), other_seeds());
        let mut variants: Vec<(String, Option<PathBuf>, &[u64])> = vec![(
            format!("noise (seeds {}-{})", other[0], other[other.len() - 1]),
            None,
            &other,
        )];
        let take = if all_variants() { VARIANTS.len() } else { 1 };
        for (name, copy) in VARIANTS.into_iter().take(take) {
            let vdir = base.join(name.trim_start_matches('+').replace(' ', "_"));
            std::fs::create_dir_all(&vdir).expect("mkdir");
            for (job, c) in &captured {
                let path = vdir.join(format!("{job}.json"));
                let _ = std::fs::remove_file(&path);
                if let Ok(c) = c {
                    if let Some(t) = hybrid(&sources[job], c, copy) {
                        std::fs::write(&path, t.to_json()).expect("write a trace");
                    }
                }
            }
            variants.push((name.to_string(), Some(vdir), &seeds));
        }
        let from_source = run_matrix(&m, None).expect("the matrix from the sources");
        let _ = writeln!(
            report,
            "\nPrediction from each variant against the source's (p99 ratio / training kept; relative difference):\n"
        );
        let mut header = "| pair | mode | source |".to_string();
        let mut rule = "| --- | --- | --- |".to_string();
        let mut cols: Vec<Vec<Row>> = Vec::new();
        for (name, vdir, seeds) in &variants {
            let mut mv = m.clone();
            mv.seeds = seeds.to_vec();
            let rows = run_matrix(&mv, vdir.as_deref()).expect("the matrix from a variant");
            let _ = write!(header, " {name} |");
            rule.push_str(" --- |");
            cols.push(rows);
        }
        let _ = writeln!(report, "{header}\n{rule}");
        for (r, a) in from_source.iter().enumerate() {
            if a.mode == "alone" {
                continue;
            }
            let mut line = format!(
                "| {} + {} | {} | {} / {} |",
                a.inference,
                a.training,
                a.mode,
                a.p99_ratio.map_or("-".into(), |x| format!("{x:.3}")),
                a.train_fraction.map_or("-".into(), |x| format!("{x:.3}")),
            );
            for (v, rows) in cols.iter().enumerate() {
                let b = &rows[r];
                assert_eq!(
                    (&a.inference, &a.training, &a.mode),
                    (&b.inference, &b.training, &b.mode)
                );
                let (dp, dt) = (
                    rel(a.p99_ratio, b.p99_ratio),
                    rel(a.train_fraction, b.train_fraction),
                );
                let _ = write!(line, " {} / {} |", pct(dp), pct(dt));
                if variants[v].0 == "captured" {
                    worst = worst
                        .max(dp.unwrap_or(0.0).abs())
                        .max(dt.unwrap_or(0.0).abs());
                }
            }
            let _ = writeln!(report, "{line}");
        }
    }
    eprintln!("{report}");
    std::fs::write(out.join("report.md"), &report).expect("write the report");
    assert!(
        worst <= 5.0,
        "a prediction from a captured trace is {worst:.1}% from the source's (table: {})",
        out.join("report.md").display()
    );
}
