//! The round trip of `tandemctl trace` (issue 25): a job replays a known
//! synthetic trace through the shim (the `replay` host; the fake driver's
//! kernel durations are the trace's), tandemd captures it, and the trace
//! `tandemctl trace` writes has the source's kernels per request or step
//! exactly and its kernel time within 5%. Also its errors: an unknown id
//! (404) and a client with no whole request yet (409).

use std::collections::BTreeMap;
use std::time::Duration;

use tandem_e2e::coord::{client_env, output_of_failing, spawn_host, tandemctl, Tandemd, TestDir};
use tandem_gpusim::params::Params;
use tandem_gpusim::synthetic;
use tandem_gpusim::trace::{Op, Trace};

/// The trace in the replay host's line form (tests/hosts/replay.c).
/// Device-to-host copies are left out: the shim does not report them, so
/// no capture can hold them.
fn script(t: &Trace) -> String {
    let mut kernels: BTreeMap<(String, u64), usize> = BTreeMap::new();
    let mut defs = String::new();
    let mut ops = String::new();
    for op in &t.ops {
        match op {
            Op::Kernel(k) => {
                let n = kernels.len();
                let i = *kernels
                    .entry((k.name.clone(), k.duration_ns))
                    .or_insert_with(|| {
                        defs.push_str(&format!("kernel {} {}\n", k.name, k.duration_ns));
                        n
                    });
                ops.push_str(&format!(
                    "K {i} {} {} {} {} {} {} {} {} {}\n",
                    k.grid[0],
                    k.grid[1],
                    k.grid[2],
                    k.block[0],
                    k.block[1],
                    k.block[2],
                    // The trace's is static and dynamic; the launch passes
                    // only dynamic shared memory, which the fake bounds.
                    k.smem_per_block.min(48 << 10),
                    k.stream,
                    k.host_gap_ns
                ));
            }
            Op::CopyH2d {
                bytes,
                stream,
                host_gap_ns,
            } => ops.push_str(&format!("H {bytes} {stream} {host_gap_ns}\n")),
            Op::CopyD2h { .. } => {}
            Op::Sync { host_gap_ns } => ops.push_str(&format!("S {host_gap_ns}\n")),
        }
    }
    defs + &ops
}

/// Replays `source` as `class` for `seconds`, captures it with `tandemctl
/// trace` after `capture_after`, and returns the captured trace.
fn round_trip(
    dir: &TestDir,
    d: &Tandemd,
    source: &Trace,
    class: &str,
    quiet_us: &str,
    seconds: &str,
    capture_after: Duration,
) -> Trace {
    let file = dir.path().join(format!("{}.replay", source.job));
    std::fs::write(&file, script(source)).expect("write the replay script");
    let env = client_env(d.socket()).var("TANDEM_CLASS", class);
    let mut host = spawn_host(
        "replay",
        &[
            file.to_str().expect("UTF-8 path"),
            "--seconds",
            seconds,
            "--quiet-us",
            quiet_us,
        ],
        &env,
    );
    let ready = host.wait_line("READY", Duration::from_secs(30));
    let id = tandem_e2e::coord::kv_u64(&ready, "client_id");
    assert!(id > 0, "the replay registered: {ready}");
    std::thread::sleep(capture_after);
    let out = dir.path().join(format!("{}.captured.json", source.job));
    let status = tandemctl(
        d.socket(),
        &[
            "trace",
            &id.to_string(),
            "--seconds",
            "30",
            "--out",
            out.to_str().expect("UTF-8 path"),
        ],
    )
    .status()
    .expect("run tandemctl trace");
    assert!(status.success(), "tandemctl trace failed\n{}", d.log());
    host.wait_exit(Duration::from_secs(60));
    let text = std::fs::read_to_string(&out).expect("the captured trace");
    Trace::from_json(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn check(source: &Trace, captured: &Trace) {
    let (src_n, cap_n) = (source.kernels().count(), captured.kernels().count());
    let (src_ns, cap_ns) = (source.kernel_ns() as f64, captured.kernel_ns() as f64);
    eprintln!(
        "{}: source {src_n} kernels {:.3} ms, captured {cap_n} kernels {:.3} ms ({:+.1}%); notes: {}",
        source.job,
        src_ns / 1e6,
        cap_ns / 1e6,
        (cap_ns / src_ns - 1.0) * 100.0,
        captured.notes
    );
    assert_eq!(cap_n, src_n, "kernels per {:?}", source.class);
    assert_eq!(captured.class, source.class);
    assert!(
        (cap_ns / src_ns - 1.0).abs() <= 0.05,
        "{}: kernel time {:.3} ms captured, {:.3} ms in the source",
        source.job,
        cap_ns / 1e6,
        src_ns / 1e6
    );
    let names = |t: &Trace| t.kernels().map(|k| k.name.clone()).collect::<Vec<_>>();
    let mut a = names(source);
    let mut b = names(captured);
    a.sort();
    b.sort();
    assert_eq!(a, b, "the captured kernels are the source's, by name");
}

/// The default configuration, which asks inference jobs for a mark every
/// millisecond (`[trace] mark_every_ns = 1000000`): the inference job's
/// kernels measured by marks, not only their sum by syncs.
fn with_inference_marks() -> String {
    let d = tandem_e2e::coord::default_config();
    assert!(
        d.contains("\n[trace]\nwindow = 32768\nmark_every_ns = 1000000\n"),
        "the default config's [trace] table"
    );
    d.to_string()
}

#[test]
fn a_replayed_training_step_is_captured_with_its_kernels_and_kernel_time() {
    let dir = TestDir::new("trace-train");
    let d = Tandemd::start(&dir);
    let source = synthetic::resnet50_training(&Params::calibrated());
    let captured = round_trip(
        &dir,
        &d,
        &source,
        "training",
        "0",
        "4",
        Duration::from_secs(3),
    );
    check(&source, &captured);
}

#[test]
fn a_replayed_inference_request_is_captured_with_its_kernels_and_kernel_time() {
    let dir = TestDir::new("trace-infer");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks());
    // BERT on ONNX Runtime on the A100: GPU-bound (its kernels queue back to
    // back), as the marks can measure (the module docs of tandemd's capture
    // say why a launch-bound job's short kernels are not).
    let source = tandem_gpusim::synthetic_a100::bert_ort(&Params::a100());
    let captured = round_trip(
        &dir,
        &d,
        &source,
        "inference",
        "5000",
        "4",
        Duration::from_secs(3),
    );
    check(&source, &captured);
}

/// A launch-bound request: BERT's first kernels, each given its own
/// duration (200 to 500 us) and 1.1 ms of host time before it, then a sync.
/// The GPU idles between the kernels, so completion marks alone would make
/// each marked kernel look a poll interval long. (Host time longer than the
/// 1 ms mark interval makes the timed launches go round the request's
/// kernels, so that each is timed: a kernel never timed in a job that
/// syncs takes its share of the syncs' scale, which here, with few such
/// kernels, moved the request's sum by up to 5%.)
fn launch_bound_request() -> Trace {
    let mut t = tandem_gpusim::synthetic_a100::bert_ort(&Params::a100());
    let mut kernels: Vec<Op> = t
        .ops
        .iter()
        .filter_map(|op| match op {
            Op::Kernel(k) => Some(k.clone()),
            _ => None,
        })
        .take(5)
        .enumerate()
        .map(|(i, mut k)| {
            k.name = format!("short{i}");
            k.duration_ns = 200_000 + 75_000 * i as u64;
            k.host_gap_ns = 1_100_000;
            k.stream = 0;
            k.graph = 0;
            Op::Kernel(k)
        })
        .collect();
    kernels.push(Op::Sync { host_gap_ns: 0 });
    t.ops = kernels;
    t.job = "launch_bound".into();
    t
}

/// The short kernels of a launch-bound job are measured one by one: the
/// shim times one launch per mark interval on the GPU (timed marks), and
/// the capture takes each kernel's timings over the fit. Each captured
/// kernel's duration is its source's within 5% (the timings include the
/// launch call's host time, about a microsecond on the fake driver).
#[test]
fn a_launch_bound_requests_kernels_are_each_measured_on_the_gpu() {
    let dir = TestDir::new("trace-launch-bound");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks());
    let source = launch_bound_request();
    let captured = round_trip(
        &dir,
        &d,
        &source,
        "inference",
        "5000",
        "4",
        Duration::from_secs(3),
    );
    check(&source, &captured);
    let durations = |t: &Trace| -> BTreeMap<String, u64> {
        t.kernels()
            .map(|k| (k.name.clone(), k.duration_ns))
            .collect()
    };
    let (want, got) = (durations(&source), durations(&captured));
    eprintln!("launch-bound: source {want:?}, captured {got:?}");
    for (name, &ns) in &want {
        let c = got[name];
        let err = c as f64 / ns as f64 - 1.0;
        assert!(
            err.abs() <= 0.05,
            "{name}: captured {c} ns, the source's {ns} ns ({:+.1}%)",
            err * 100.0
        );
    }
}

#[test]
fn trace_errors_name_the_unknown_id_and_what_is_missing() {
    let dir = TestDir::new("trace-errors");
    let d = Tandemd::start(&dir);
    let out = output_of_failing(&mut tandemctl(d.socket(), &["trace", "77"]), "trace 77");
    assert!(out.contains("no live client with id 77"), "{out}");
    // A client that launched nothing yet: 409 with what is missing.
    let file = dir.path().join("idle.replay");
    std::fs::write(&file, "kernel k 1000\nS 0\n").expect("write");
    let env = client_env(d.socket()).var("TANDEM_CLASS", "inference");
    let mut host = spawn_host(
        "replay",
        &[
            file.to_str().expect("UTF-8"),
            "--seconds",
            "3",
            "--quiet-us",
            "1000",
        ],
        &env,
    );
    let ready = host.wait_line("READY", Duration::from_secs(30));
    let id = tandem_e2e::coord::kv_u64(&ready, "client_id");
    let r = d
        .get(&format!("/trace?id={id}&seconds=5"))
        .expect("GET /trace");
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        r.body.trim(),
        format!("client {id} has reported no kernel launch in the last 5 s")
    );
    let r = d.get("/trace?seconds=5").expect("GET /trace");
    assert_eq!(r.status, 400, "{}", r.body);
    host.wait_exit(Duration::from_secs(30));
}

/// The model's rows for every pair of `device`'s matrix that holds `job`,
/// with `job`'s trace from `dir` (`<job>.json`) or the synthetic one.
fn rows(
    device: tandem_gpusim::matrix::Device,
    params: &Params,
    job: &str,
    dir: Option<&std::path::Path>,
) -> Vec<tandem_gpusim::matrix::Row> {
    let mut m = tandem_gpusim::matrix::MatrixCfg::full(device, params.clone());
    m.pairs.retain(|(i, t)| i == job || t == job);
    m.seeds = vec![1];
    m.warmup_ns = 500_000_000;
    m.window_ns = 5_000_000_000;
    m.min_requests = 300;
    m.max_window_ns = 10_000_000_000;
    tandem_gpusim::matrix::run_matrix(&m, dir).expect("the matrix runs")
}

/// The stretch of issue 25's acceptance: the prediction from the captured
/// trace within 5% of the one from the source, on every pair of the model's
/// matrix that holds the captured job (each job's set: the H100's for the
/// ResNet50 step, the A100's for the BERT request). Slow (the model's cells:
/// about 2.5 minutes), and NOT met yet: on 2026-11-26 the p99 ratios
/// differed by up to 97% (MPS modes) and the training kept by up to 20%.
/// The ring carries no occupancy (`blocks_per_sm`), registers, static
/// shared memory or DRAM traffic, which the model's co-residence and
/// bandwidth sharing use, and the capture averages each kernel's duration
/// over its launches. Run it with `cargo test -p tandem-e2e --test
/// trace_capture -- --ignored --nocapture`.
#[test]
#[ignore = "slow, and fails today: captured traces lack the footprint the model uses (see the doc comment)"]
fn predictions_from_captured_traces_match_those_from_their_sources() {
    use tandem_gpusim::matrix::Device;
    let dir = TestDir::new("trace-predict");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks());
    let cases = [
        (
            Device::H100,
            Params::calibrated(),
            synthetic::resnet50_training(&Params::calibrated()),
            "training",
            "0",
        ),
        (
            Device::A100,
            Params::a100(),
            tandem_gpusim::synthetic_a100::bert_ort(&Params::a100()),
            "inference",
            "5000",
        ),
    ];
    let mut worst: f64 = 0.0;
    for (device, params, source, class, quiet) in cases {
        let mut captured = round_trip(&dir, &d, &source, class, quiet, "4", Duration::from_secs(3));
        captured.job = source.job.clone();
        let traces = dir.path().join(format!("traces-{}", source.job));
        std::fs::create_dir_all(&traces).expect("mkdir");
        std::fs::write(
            traces.join(format!("{}.json", source.job)),
            captured.to_json(),
        )
        .expect("write");
        let from_source = rows(device, &params, &source.job, None);
        let from_capture = rows(device, &params, &source.job, Some(&traces));
        for (a, b) in from_source.iter().zip(&from_capture) {
            let rel = |x: Option<f64>, y: Option<f64>| match (x, y) {
                (Some(x), Some(y)) if x > 0.0 => (y / x - 1.0).abs(),
                _ => 0.0,
            };
            let (dp, dt) = (
                rel(a.p99_ratio, b.p99_ratio),
                rel(a.train_fraction, b.train_fraction),
            );
            eprintln!(
                "{} + {} {:<15} p99 ratio {:?} vs {:?} ({:+.1}%), training kept {:?} vs {:?} ({:+.1}%)",
                a.inference,
                a.training,
                a.mode,
                a.p99_ratio,
                b.p99_ratio,
                dp * 100.0,
                a.train_fraction,
                b.train_fraction,
                dt * 100.0
            );
            worst = worst.max(dp).max(dt);
        }
    }
    assert!(
        worst <= 0.05,
        "a prediction from a captured trace is {:.1}% from the source's",
        worst * 100.0
    );
}
