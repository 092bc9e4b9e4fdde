//! The round trip of `tandemctl trace` (issue 25): a job replays a known
//! synthetic trace through the shim (the `replay` host; the fake driver's
//! kernel durations are the trace's), tandemd captures it, and the trace
//! `tandemctl trace` writes has the source's kernels per request or step
//! exactly and its kernel time within 5%. Also its errors: an unknown id
//! (404) and a client with no whole request yet (409). The predictions made
//! from captured traces are compared with the sources' in
//! `trace_roundtrip_predict.rs`.

use std::collections::BTreeMap;
use std::time::Duration;

use tandem_e2e::coord::{output_of_failing, tandemctl, Tandemd, TestDir};
use tandem_gpusim::params::Params;
use tandem_gpusim::synthetic;
use tandem_gpusim::trace::{Op, Trace};

mod replay_trace;
use replay_trace::{round_trip, start_replay, with_inference_marks};

/// Prints `captured`'s kernel count and time against `source`'s.
fn report(source: &Trace, captured: &Trace) {
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
}

fn check(source: &Trace, captured: &Trace) {
    report(source, captured);
    let (src_n, cap_n) = (source.kernels().count(), captured.kernels().count());
    let (src_ns, cap_ns) = (source.kernel_ns() as f64, captured.kernel_ns() as f64);
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
    kernel_report("resnet50_train", &source, &captured);
    check(&source, &captured);
}

/// [`round_trip`] of an inference job: 5 ms of quiet between its requests,
/// replayed for 4 s, captured after 3 s.
fn inference_round_trip(dir: &TestDir, d: &Tandemd, source: &Trace) -> Trace {
    round_trip(
        dir,
        d,
        source,
        "inference",
        "5000",
        "4",
        Duration::from_secs(3),
    )
}

#[test]
fn a_replayed_inference_request_is_captured_with_its_kernels_and_kernel_time() {
    let dir = TestDir::new("trace-infer");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks(32_768));
    // BERT on ONNX Runtime on the A100: GPU-bound (its kernels queue back to
    // back), as the marks can measure (the module docs of tandemd's capture
    // say why a launch-bound job's short kernels are not).
    let source = tandem_gpusim::synthetic_a100::bert_ort(&Params::a100());
    let captured = inference_round_trip(&dir, &d, &source);
    check(&source, &captured);
}

/// ResNet50 inference on the H100 at batch 4 and 32 (gpusim's synthetic
/// requests: 175 kernels, 1.66 and 4.34 ms of them, an H2D copy first):
/// launch-bound requests whose kernels the capture measures by timed
/// launches one at a time. A measurement, not a check (issue 25's 5% on
/// the request's kernel time is met by these in some runs only,
/// docs/traces.md): it prints each
/// request's kernel sum against its source, how many kernels came back
/// within 5% of theirs, and the kernels that carry most of the difference.
#[test]
#[ignore = "measurement: prints the captured kernel sums of ResNet50 b4 and b32 (about 20 s)"]
fn launch_bound_resnet50_requests_kernel_time_as_captured() {
    let dir = TestDir::new("trace-resnet");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks(32_768));
    let device = tandem_gpusim::matrix::Device::H100;
    for job in ["resnet50_b4", "resnet50_b32"] {
        let source = device
            .synthetic(&device.params(), job)
            .expect("a synthetic job");
        let captured = inference_round_trip(&dir, &d, &source);
        kernel_report(job, &source, &captured);
    }
}

/// Prints `captured`'s kernel sum against `source`'s, how many of its
/// kernels came back within 5% of their source's, and the five that differ
/// most (the kernels must be the source's, in order).
fn kernel_report(job: &str, source: &Trace, captured: &Trace) {
    report(source, captured);
    let src: Vec<_> = source.kernels().collect();
    let cap: Vec<_> = captured.kernels().collect();
    assert_eq!(cap.len(), src.len(), "kernels per unit");
    let within = src
        .iter()
        .zip(&cap)
        .filter(|(s, c)| (c.duration_ns as f64 / s.duration_ns as f64 - 1.0).abs() <= 0.05)
        .count();
    let mut excess: Vec<(i64, usize, &str, u64, &str, u64)> = src
        .iter()
        .zip(&cap)
        .enumerate()
        .map(|(i, (s, c))| {
            let d = c.duration_ns as i64 - s.duration_ns as i64;
            (
                d,
                i,
                s.name.as_str(),
                s.duration_ns,
                c.name.as_str(),
                c.duration_ns,
            )
        })
        .collect();
    excess.sort_unstable_by_key(|e| std::cmp::Reverse(e.0.abs()));
    eprintln!(
        "{job}: {within} of {} kernels within 5% of the source's; largest differences \
         (ns, kernel, source name, source ns, captured name, captured ns): {:?}",
        src.len(),
        &excess[..5.min(excess.len())]
    );
}

/// An A100 training job's step (`TANDEM_CAPTURE_JOB`, default
/// Whisper-large-v3 at batch 16, whose synthetic step is 2.9 s of host
/// time, then its 1,948 launches in a burst of about 15 ms, then 2.9 s of
/// GPU time behind a sync), replayed for `TANDEM_CAPTURE_REPLAY_S` seconds
/// (default 30: five of Whisper's steps) and captured with the whole replay
/// in the look-back. A measurement, not a check: the step's kernel sum and
/// its kernels against the source, position by position (docs/traces.md,
/// "Whisper's step, measured").
#[test]
#[ignore = "measurement: prints the captured kernel sum of a training step (30 s or more)"]
fn training_step_kernel_time_as_captured() {
    let job = std::env::var("TANDEM_CAPTURE_JOB").unwrap_or_else(|_| "whisper_large_v3_b16".into());
    let secs: f64 = std::env::var("TANDEM_CAPTURE_REPLAY_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30.0);
    let dir = TestDir::new("trace-step");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks(1 << 20));
    let device = tandem_gpusim::matrix::Device::A100;
    let source = device
        .synthetic(&device.params(), &job)
        .expect("a synthetic job");
    let captured = round_trip(
        &dir,
        &d,
        &source,
        "training",
        "0",
        &format!("{secs:.1}"),
        Duration::from_secs_f64(secs - 0.7),
    );
    kernel_report(&job, &source, &captured);
    // How many completion marks (each a timing, where the GPU was behind)
    // the replay placed.
    for c in d.stats()["departed"].as_array().into_iter().flatten() {
        eprintln!(
            "{job}: {} marks placed, {} seen complete",
            c["marks_placed"], c["marks_done"]
        );
    }
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
/// kernel's duration is its source's within 5% (the shim takes the launch
/// call's host time, about a microsecond on the fake driver, off each
/// timing: they came back within 0.2%).
#[test]
fn a_launch_bound_requests_kernels_are_each_measured_on_the_gpu() {
    let dir = TestDir::new("trace-launch-bound");
    let d = Tandemd::start_with_config(&dir, &with_inference_marks(32_768));
    let source = launch_bound_request();
    let captured = inference_round_trip(&dir, &d, &source);
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
    let (mut host, id) = start_replay(
        &dir,
        &d,
        "idle",
        "kernel k 1000\nS 0\n",
        "inference",
        &["--seconds", "3", "--quiet-us", "1000"],
    );
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

/// A function's registers and static shared memory (the fake driver's
/// `cuFuncGetAttribute`, from the module's `regs=` and `smem=`) reach the
/// captured trace: the shim sends them with the function's name, tandemd
/// keeps them, and the capture writes them (shared memory static plus the
/// launch's dynamic) with `blocks_per_sm` 0, left to the model.
#[test]
fn a_functions_registers_and_shared_memory_reach_the_captured_trace() {
    let dir = TestDir::new("trace-attrs");
    let d = Tandemd::start(&dir);
    // A step of four 300 us GEMMs (2 KB of dynamic shared memory each) and
    // a 50 us kernel with no attributes given (the fake reports 0).
    let (mut host, id) = start_replay(
        &dir,
        &d,
        "attrs",
        "kernel gemm_attrs 300000 regs=96 smem=16384\nkernel plain_attrs 50000\n\
         K 0 132 1 1 256 1 1 2048 0 20000\nK 0 132 1 1 256 1 1 2048 0 20000\n\
         K 0 132 1 1 256 1 1 2048 0 20000\nK 0 132 1 1 256 1 1 2048 0 20000\n\
         K 1 64 1 1 128 1 1 0 0 10000\nS 1000\n",
        "training",
        &["--seconds", "3", "--quiet-us", "0"],
    );
    std::thread::sleep(Duration::from_secs(2));
    let r = d
        .get(&format!("/trace?id={id}&seconds=10"))
        .expect("GET /trace");
    host.wait_exit(Duration::from_secs(30));
    assert_eq!(r.status, 200, "{}", r.body);
    let t = Trace::from_json(&r.body).unwrap_or_else(|e| panic!("{e}\n{}", r.body));
    let seen = |name: &str| {
        let mut v: Vec<(u32, u32, u32)> = t
            .kernels()
            .filter(|k| k.name == name)
            .map(|k| (k.regs_per_thread, k.smem_per_block, k.blocks_per_sm))
            .collect();
        v.dedup();
        v
    };
    assert_eq!(seen("gemm_attrs"), [(96, 16_384 + 2048, 0)], "{}", r.body);
    assert_eq!(seen("plain_attrs"), [(0, 0, 0)], "{}", r.body);
}
