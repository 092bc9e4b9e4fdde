use super::*;
use crate::trace::{JobClass, Kernel, Op, FORMAT};

fn kernel(name: &str, blocks: u32, duration_ns: u64, host_gap_ns: u64) -> Op {
    Op::Kernel(Kernel {
        host_gap_ns,
        ..Kernel::new(name, blocks, 256, 1, duration_ns)
    })
}

fn trace(job: &str, class: JobClass, ops: Vec<Op>) -> Trace {
    Trace {
        format: FORMAT.into(),
        job: job.into(),
        class,
        source: "synthetic".into(),
        device: String::new(),
        notes: String::new(),
        ops,
    }
}

fn job(label: &str, t: Trace, rate: Option<f64>) -> JobInput {
    JobInput {
        label: label.into(),
        trace: t,
        rate_per_s: rate,
        slo: DEFAULT_SLO,
    }
}

/// An inference request of ten small kernels (8 SMs each, 50 us).
fn small_inference() -> Trace {
    let mut ops: Vec<Op> = (0..10)
        .map(|i| kernel(&format!("infer_{i}"), 8, 50_000, 20_000))
        .collect();
    ops.push(Op::Sync { host_gap_ns: 5_000 });
    trace("infer", JobClass::Inference, ops)
}

fn quick(modes: &[&str]) -> Settings {
    let mut s = Settings::interactive(crate::matrix::Device::H100);
    s.seeds = vec![1];
    s.warmup_ns = 50_000_000;
    s.window_ns = 1_000_000_000;
    s.min_requests = 0;
    s.threads = 2;
    s.modes = modes.iter().map(|m| (*m).to_string()).collect();
    s
}

/// A training step of many short narrow kernels and one long kernel that
/// holds every SM for 3 ms: under MPS the inference job's kernels wait
/// for it, and `--why` puts it first.
#[test]
fn why_puts_the_one_long_colliding_kernel_first() {
    let mut ops: Vec<Op> = (0..40)
        .map(|i| kernel(&format!("small_{i}"), 4, 20_000, 10_000))
        .collect();
    ops.insert(20, kernel("long_gemm", 132, 3_000_000, 10_000));
    ops.push(Op::Sync {
        host_gap_ns: 10_000,
    });
    let train = trace("train", JobClass::Training, ops);
    let mut s = quick(&["mps"]);
    s.why = true;
    let p = predict(
        &[job("trainer", train, None)],
        &job("server", small_inference(), Some(50.0)),
        &s,
    )
    .unwrap();
    let why = p.modes[0].why.as_ref().expect("--why asked");
    assert!(!why.is_empty(), "the inference job waits for something");
    assert_eq!(
        (
            why[0].kernel.as_str(),
            why[0].by_job.as_str(),
            why[0].delayed.as_str()
        ),
        ("long_gemm", "trainer", "server"),
        "{why:#?}"
    );
    assert!(why[0].share > 0.5, "{why:#?}");
    assert_eq!(why[0].launches_per_unit, 1);
    // The table says it too, marked a prediction.
    let text = human(&p);
    assert!(text.contains("why #1: server waits"), "{text}");
    assert!(text.contains("for long_gemm of trainer"), "{text}");
    assert!(
        text.starts_with("PREDICTION by the GPU-sharing model gpusim"),
        "{text}"
    );
}

/// The SM capacity: inference alone takes about a fifth of the GPU (a 2 ms
/// kernel on every SM, 100 Poisson arrivals a second: one seed's second of
/// them) and training nearly all of it (8 ms kernels on every SM, back to
/// back), so training keeps at most what inference leaves, below its SLO;
/// the prediction says so, and MPS + priority (inference served first)
/// stays under it.
#[test]
fn the_capacity_inference_takes_bounds_what_training_keeps_and_is_shown() {
    let train = trace(
        "train",
        JobClass::Training,
        vec![
            kernel("gemm", 132, 8_000_000, 10_000),
            Op::Sync {
                host_gap_ns: 10_000,
            },
        ],
    );
    let infer = trace(
        "infer",
        JobClass::Inference,
        vec![
            kernel("wide", 132, 2_000_000, 10_000),
            Op::Sync { host_gap_ns: 5_000 },
        ],
    );
    let p = predict(
        &[job("server", infer, Some(100.0))],
        &job("trainer", train, None),
        &quick(&["mps_lowprio"]),
    )
    .unwrap();
    let c = &p.capacity;
    assert!((0.1..0.3).contains(&c.inference_share), "{c:?}");
    assert!((0.97..=1.0).contains(&c.training_share), "{c:?}");
    let most = c.training_kept_at_most.unwrap();
    let leaves = (1.0 - c.inference_share) / c.training_share;
    assert!((most - leaves).abs() < 1e-9 && most < 0.9, "{c:?}");
    let kept = p.modes[0].jobs[1].predicted_kept_worst.unwrap();
    assert!(kept <= most + 0.01, "{kept} above {most}");
    let text = human(&p);
    assert!(
        text.contains(&format!("training keeps at most {most:.2} in any mode (below its SLO 0.90: no scheduler meets it)")),
        "{text}"
    );
    let json = serde_json::to_value(&p).unwrap();
    assert!(json["capacity"]["training_kept_at_most"].is_number());
    assert!(json["jobs"][0]["predicted_alone_gpu_share"].is_number());
}

/// A long kernel colliding with inference makes MPS miss the p99 target;
/// the verdict follows the modes that fit.
#[test]
fn a_collision_misses_the_p99_slo_and_the_verdict_says_so() {
    let mut ops: Vec<Op> = vec![kernel("long_gemm", 132, 8_000_000, 10_000)];
    ops.push(Op::Sync {
        host_gap_ns: 10_000,
    });
    let train = trace("train", JobClass::Training, ops);
    let p = predict(
        &[job("trainer", train, None)],
        &job("server", small_inference(), Some(50.0)),
        &quick(&["mps"]),
    )
    .unwrap();
    let m = &p.modes[0];
    let server = &m.jobs[1];
    assert!(
        server.predicted_p99_ratio_worst.unwrap() > 1.5,
        "a request behind an 8 ms kernel: {server:?}"
    );
    assert!(!server.meets_slo && !m.fits);
    assert_eq!(p.verdict, "does not fit");
    assert!(p.fitting_modes.is_empty());
    assert_eq!(p.kind, "prediction");
    let json = serde_json::to_value(&p).unwrap();
    assert!(json["modes"][0]["jobs"][1]["predicted_p99_ratio"].is_number());
    assert_eq!(json["model_version"], crate::params::MODEL_VERSION);
}

#[test]
fn the_verdict_over_the_modes_that_fit() {
    let v = |m: &[&str]| verdict(&m.iter().map(|x| (*x).to_string()).collect::<Vec<_>>());
    assert_eq!(v(&["tandem_mps", "tandem"]), "fits");
    assert_eq!(v(&["plain"]), "fits");
    assert_eq!(v(&["mps_lowprio", "tandem_mps"]), "fits only over MPS");
    assert_eq!(v(&[]), "does not fit");
}

#[test]
fn a_gpu_with_no_jobs_is_an_error_that_says_so() {
    let e = predict(
        &[],
        &job("server", small_inference(), None),
        &quick(&["mps"]),
    )
    .unwrap_err();
    assert!(e.0.contains("the GPU has no jobs"), "{e}");
}

const DOC: &str = r#"{
  "format": "tandem-trace/1", "job": "t", "class": "inference", "source": "measured",
  "ops": [
    {"op": "kernel", "name": "k", "grid": [4, 1, 1], "block": [128, 1, 1],
     "blocks_per_sm": 1, "duration_ns": 1000, "host_gap_ns": 7},
    {"op": "sync", "host_gap_ns": 3}
  ]
}"#;

#[test]
fn a_malformed_trace_is_refused_naming_the_field() {
    assert!(parse_trace("f.json", DOC).is_ok());
    let cases = [
        (
            DOC.replace("\"duration_ns\": 1000", "\"duration_ns\": \"slow\""),
            "f.json: ops[0].duration_ns: expected a non-negative integer, found \"slow\"",
        ),
        (
            DOC.replace("[4, 1, 1]", "[4, 1]"),
            "f.json: ops[0].grid: expected three integers",
        ),
        (
            DOC.replace(", \"duration_ns\": 1000", ""),
            "f.json: ops[0]: missing field `duration_ns`",
        ),
        (
            DOC.replace("\"op\": \"sync\"", "\"op\": \"wait\""),
            "f.json: ops[1].op: \"wait\": expected kernel",
        ),
        (
            DOC.replace("\"class\": \"inference\"", "\"class\": \"batch\""),
            "f.json: class: \"batch\": expected \"inference\" or \"training\"",
        ),
        (
            DOC.replace("\"ops\"", "\"steps\""),
            "f.json: missing field \"ops\"",
        ),
        ("{\"format\": ".to_string(), "f.json: not JSON"),
        (
            DOC.replace("\"duration_ns\": 1000", "\"duration_ns\": 0"),
            "duration_ns must be >= 1",
        ),
    ];
    for (doc, want) in cases {
        let e = parse_trace("f.json", &doc).expect_err(want);
        assert!(
            e.starts_with(want) || e.contains(want),
            "want {want:?}, got {e:?}"
        );
        assert!(!e.contains('\n'), "one line: {e}");
    }
}

#[test]
fn a_trace_from_a_newer_format_is_refused_with_its_version_named() {
    // A newer version may change any field: the format is checked first.
    let doc = DOC
        .replace("tandem-trace/1", "tandem-trace/2")
        .replace("\"duration_ns\": 1000", "\"duration\": {\"ns\": 1000}");
    let e = parse_trace("new.json", &doc).unwrap_err();
    assert_eq!(
        e,
        "new.json: trace format tandem-trace/2 is newer than this tandem-sim reads (tandem-trace/1): update tandem-sim"
    );
    let e = parse_trace("x.json", &DOC.replace("tandem-trace/1", "chrome-trace")).unwrap_err();
    assert!(e.contains("not a tandem-trace/1 trace"), "{e}");
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|x| (*x).to_string()).collect()
}

#[test]
fn the_command_line_refuses_a_wrong_class_and_misplaced_flags() {
    let dir = std::env::temp_dir().join(format!("tandem-predict-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let inf = write(&dir, "inf.json", DOC);
    let train = write(
        &dir,
        "train.json",
        &DOC.replace("\"inference\"", "\"training\""),
    );
    let run = |a: &[&str]| cli::run(&args(a)).unwrap_err();
    let e = run(&["--job", &train, "--add", &inf, "--class", "training"]);
    assert!(
        e.contains("--class training, but the trace is of an inference job"),
        "{e}"
    );
    let e = run(&["--job", &train, "--add", &inf, "--class", "auto"]);
    assert!(
        e.contains("class \"auto\": a prediction needs inference or training"),
        "{e}"
    );
    let e = run(&["--job", &train, "--rate", "10", "--add", &inf]);
    assert!(e.contains("applies to inference jobs"), "{e}");
    let e = run(&["--class", "training", "--job", &train, "--add", &inf]);
    assert!(
        e.contains("--class applies to the --job or --add before it"),
        "{e}"
    );
    let e = run(&["--job", &train]);
    assert!(e.contains("no candidate"), "{e}");
    let e = run(&["--add", &inf]);
    assert!(e.contains("the GPU has no jobs"), "{e}");
    let e = run(&[
        "--job",
        &train,
        "--add",
        &dir.join("none.json").display().to_string(),
    ]);
    assert!(e.contains("none.json: cannot read the trace"), "{e}");
    let e = run(&["--job", &train, "--add", &inf, "--modes", "mps,fast"]);
    assert!(e.contains("unknown mode \"fast\""), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each job is paired with its own alone run: beside a training job that
/// barely touches the GPU (one 1 us kernel a second), the candidate's p99
/// is its alone p99 on every seed, although the candidate is job 1 in the
/// shared runs (its arrivals and CPU speed must come from the same seeded
/// streams in both).
#[test]
fn a_job_is_paired_with_its_own_alone_run() {
    let train = trace(
        "idle_trainer",
        JobClass::Training,
        vec![
            kernel("tick", 1, 1_000, 1_000_000_000),
            Op::Sync { host_gap_ns: 0 },
        ],
    );
    let mut s = quick(&["mps", "plain"]);
    s.seeds = vec![1, 2, 3];
    let p = predict(
        &[job("trainer", train, None)],
        &job("server", small_inference(), Some(50.0)),
        &s,
    )
    .unwrap();
    for m in &p.modes {
        let server = &m.jobs[1];
        let (lo, hi) = (
            server.predicted_p99_ratio.unwrap(),
            server.predicted_p99_ratio_worst.unwrap(),
        );
        assert!(
            (lo - 1.0).abs() < 0.01 && (hi - 1.0).abs() < 0.01,
            "{}: {server:?}",
            m.mode
        );
    }
}

/// `--steepness`: each inference job's p99 ratio is predicted again with
/// its kernels 2% longer and set beside its own; it equals a prediction made
/// from kernels scaled by hand, and the training job gets none. Without
/// the flag, no such figure (and the JSON has no such key).
#[test]
fn steepness_predicts_again_with_the_inference_kernels_two_percent_longer() {
    let mut ops: Vec<Op> = (0..20)
        .map(|i| kernel(&format!("train_{i}"), 132, 400_000, 10_000))
        .collect();
    ops.push(Op::Sync {
        host_gap_ns: 10_000,
    });
    let train = trace("train", JobClass::Training, ops);
    let mut s = quick(&["mps", "plain"]);
    let plain = predict(
        &[job("trainer", train.clone(), None)],
        &job("server", small_inference(), Some(100.0)),
        &s,
    )
    .unwrap();
    let json = serde_json::to_string(&plain).unwrap();
    assert!(!json.contains("if_kernels_2pct_longer"), "{json}");
    s.steepness = true;
    let p = predict(
        &[job("trainer", train.clone(), None)],
        &job("server", small_inference(), Some(100.0)),
        &s,
    )
    .unwrap();
    // By hand: the same prediction from the inference trace scaled by 1.02.
    let mut longer = small_inference();
    for op in &mut longer.ops {
        if let Op::Kernel(k) = op {
            k.duration_ns = (k.duration_ns as f64 * STEEPNESS_SCALE).round() as u64;
        }
    }
    s.steepness = false;
    let by_hand = predict(
        &[job("trainer", train, None)],
        &job("server", longer, Some(100.0)),
        &s,
    )
    .unwrap();
    for ((m, h), base) in p.modes.iter().zip(&by_hand.modes).zip(&plain.modes) {
        let find = |m: &ModeOut, l: &str| m.jobs.iter().find(|j| j.label == l).cloned().unwrap();
        let server = find(m, "server");
        assert_eq!(
            server.predicted_p99_ratio_if_kernels_2pct_longer,
            find(h, "server").predicted_p99_ratio,
            "{}",
            m.mode
        );
        // The prediction itself is the one without the flag.
        assert_eq!(
            server.predicted_p99_ratio,
            find(base, "server").predicted_p99_ratio
        );
        assert_eq!(
            find(m, "trainer").predicted_p99_ratio_if_kernels_2pct_longer,
            None
        );
    }
    let text = human(&p);
    assert!(text.contains("if its kernels ran 2% longer"), "{text}");
}

/// `--measured DIR` predicts with what a GPU run measured and says so: an
/// H200's time slice stands for the H100 set too (one die), and the A100
/// set takes it as the figure it carries from the H100's; without it the
/// answer says every parameter is fitted; a folder that is not there is an
/// error, not a silent fitted answer.
#[test]
fn measured_figures_are_applied_and_named_in_the_answer() {
    let dir = std::env::temp_dir().join(format!("tandem-predict-measured-{}", std::process::id()));
    let gpu = dir.join("gpu");
    std::fs::create_dir_all(&gpu).unwrap();
    std::fs::write(
        gpu.join(crate::measured::FILE),
        r#"{"skipped": null, "gpu": "NVIDIA H200", "timeslice": {"median_ns": 7000000, "n": 9}, "switch": null}"#,
    )
    .unwrap();
    let inf = write(&dir, "inf.json", DOC);
    let train = write(
        &dir,
        "train.json",
        &DOC.replace("\"inference\"", "\"training\""),
    );
    let gpu_arg = gpu.display().to_string();
    let answer = |extra: &[&str]| {
        let mut a = vec!["--job", &train, "--add", &inf, "--seeds", "1"];
        a.extend(["--window-s", "0.2", "--modes", "plain", "--threads", "1"]);
        a.extend(extra);
        cli::run(&args(&a)).expect("a prediction")
    };
    let fitted = answer(&[]);
    assert!(
        fitted.contains("parameters: fitted, none measured on a GPU"),
        "{fitted}"
    );
    for device in ["h200", "h100", "a100"] {
        let text = answer(&["--device", device, "--measured", &gpu_arg]);
        assert!(
            text.contains("parameters measured on a GPU: timeslice 7.00 ms"),
            "{device}: {text}"
        );
        assert_eq!(
            text.contains("which the A100 set carries"),
            device == "a100",
            "{device}: {text}"
        );
    }
    use crate::matrix::Device;
    for device in [Device::H100, Device::H200, Device::A100] {
        let (p, _) = cli::measured_params(device, &gpu).expect("applied");
        assert_eq!(p.timeslice_ns, 7_000_000, "{device:?}");
        assert_ne!(device.params().timeslice_ns, 7_000_000, "{device:?}");
    }
    let e = cli::run(&args(&[
        "--job",
        &train,
        "--add",
        &inf,
        "--measured",
        &dir.join("none").display().to_string(),
    ]))
    .unwrap_err();
    assert!(e.contains("not a directory"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
