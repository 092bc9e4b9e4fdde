//! Scheduler v3's SM reservation (issue 23), end to end: tandemd with
//! `[scheduler] spatial = "auto"` over MPS (the stand-in control program),
//! an inference job and a training job under the shim, on the fake driver's
//! shared device placing kernels on its 132 SMs (`FAKECUDA_SHARED_SMS=1`, one
//! SM per block) and honouring the TPC mask the shim writes from the launch
//! callback.
//!
//! `infer` serves back-to-back requests of 5 kernels of 8 blocks and 200 us
//! for 3 s; `train`, started once inference has, launches 20 ms kernels of
//! 1000 blocks (every SM it may use) for 4 s and syncs after each. So a training kernel holds the SMs it was given for
//! 20 ms, one block each, and an inference kernel needs 8 free SMs:
//!
//! * with the reservation, training's launches made while inference is
//!   active leave TPCs free, as many as inference's kernels are wide
//!   (tandemd learns it from their launches: 8 one-thread blocks fill one
//!   SM by the occupancy rules, so the least, 8 SMs, TPCs 0-3; kernels of
//!   2000 blocks, 63 SMs, get the most, a quarter of 66 TPCs, 0-16), and
//!   inference's kernels start on them at once;
//! * without it, each inference kernel waits for the training kernel on its
//!   SMs to end.
//!
//! And it fails open: with no callback table, or a descriptor of a version
//! the shim does not know, the training job runs unmasked and says so in
//! one log line.

use tandem_e2e::coord::{
    client_by_pid, client_env, kv, kv_u64, poll, spawn_host, tandemctl, Proc, Tandemd, TestDir,
    EXIT, SETTLE,
};
use tandem_e2e::mps::{config, path_with_stand_in, DaemonGuard, ENABLE};
use tandem_e2e::Env;

/// The hold after an inference launch, far longer than a request's sync
/// wait, so back-to-back requests keep the GPU active on a loaded CI
/// machine too (as in `sched_local_bound.rs`).
const HOLD: (&str, &str) = ("request_hold_ns = 1000000", "request_hold_ns = 50000000");
const AUTO: (&str, &str) = ("spatial = \"off\"", "spatial = \"auto\"");
const TRAIN_KERNEL_US: f64 = 20_000.0;
/// SMs 0-33: `tandem_proto::spatial::reserve_tpcs(132, 250)` TPCs, the
/// most (`spatial_reserve`'s quarter).
const MOST_SMS: u64 = 2 * tandem_proto::spatial::reserve_tpcs(132, 250) as u64;
/// The least tandemd reserves (`tandem_sched::reserve::ReserveRule`'s).
const LEAST_SMS: u64 = 8;

struct Run {
    /// train's `SMS` line.
    sms: String,
    /// infer's `DONE` line.
    infer: String,
    /// train's stderr.
    train_stderr: String,
    /// The training client's `spatial` in `/stats`, read while it ran.
    spatial: serde_json::Value,
    /// `tandemctl status`, right after.
    status: String,
    /// `GET /metrics`, right after.
    metrics: String,
}

#[track_caller]
fn done(p: &mut Proc, what: &str) -> String {
    let l = p.wait_line("DONE ", EXIT);
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "{what} failed ({st}):\n{p}");
    l
}

/// Inference, then training beside it; `edits` of the default config
/// (MPS is always on), `train_vars` for the training job's environment.
fn run(tag: &str, edits: &[(&str, &str)], train_vars: &[(&str, &str)]) -> Run {
    run_with(tag, edits, train_vars, &[], 8, &[])
}

/// [`run`], with `train_args` added to the training job's and inference's
/// kernels `infer_blocks` wide. One run at a time
/// within this test binary: each is a tandemd, an MPS stand-in and two busy
/// jobs. With four at once on a 2-core machine, the next binaries'
/// timing-sensitive check (`trace_capture`'s 5% on a training step's kernel
/// time) failed in three full runs of the suite in a row; one at a time, it
/// passed.
fn run_with(
    tag: &str,
    edits: &[(&str, &str)],
    train_vars: &[(&str, &str)],
    train_args: &[&str],
    infer_blocks: u32,
    infer_args: &[&str],
) -> Run {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = TestDir::new(tag);
    let _guard = DaemonGuard(dir.path().join("mps"));
    let mut all = vec![ENABLE, HOLD];
    all.extend_from_slice(edits);
    let path = path_with_stand_in();
    let mut d = Tandemd::spawn_with_env(&dir, &config(&all), &[("PATH", &path)]);
    d.wait_ready();
    let dev = dir.path().join("dev");
    let env = |class: &str| -> Env {
        client_env(d.socket())
            .var("FAKECUDA_SHARED_DEVICE", dev.to_str().expect("UTF-8 path"))
            .var("FAKECUDA_SHARED_SMS", "1")
            .var("TANDEM_CLASS", class)
    };
    let blocks = infer_blocks.to_string();
    // Later flags win: `infer_args` may change the kernels; with `--rate`
    // its requests arrive open-loop at that rate instead of back to back.
    let mut iargs = if infer_args.contains(&"--rate") {
        vec![]
    } else {
        vec!["--closed"]
    };
    iargs.extend_from_slice(&[
        "--seconds",
        "3",
        "--kernels",
        "5",
        "--kernel-us",
        "200",
        "--blocks",
        &blocks,
    ]);
    iargs.extend_from_slice(infer_args);
    let mut infer = spawn_host("infer", &iargs, &env("inference"));
    infer.wait_line("READY ", SETTLE);
    let mut train_env = env("training");
    for (k, v) in train_vars {
        train_env = train_env.var(k, v);
    }
    let kernel_us = TRAIN_KERNEL_US.to_string();
    let mut args = vec![
        "--seconds",
        "4",
        "--kernel-us",
        &kernel_us,
        "--blocks",
        "1000",
        "--sync-every",
        "1",
    ];
    args.extend_from_slice(train_args);
    let mut train = spawn_host("train", &args, &train_env);
    train.wait_line("READY ", SETTLE);
    // What the shim reports, once its first masked (or refused) launch is
    // in and tandemd has learnt inference's widths; not asked: once its
    // first launches are.
    let asked = edits.contains(&AUTO);
    let spatial = poll(SETTLE, "the training client's spatial report", || {
        let st = d.try_stats()?;
        if asked && st["gpus"][0]["spatial_reserve_sms"].is_null() {
            return Err(format!("no width learnt yet: {}", st["gpus"]));
        }
        let c = client_by_pid(&st, train.pid()).ok_or("train not registered yet")?;
        // Armed: once a launch was masked, or 20 launches went unmasked.
        let some = c["launches"].as_u64() > Some(20);
        match c["spatial"]["state"].as_str() {
            _ if !asked && some => Ok(c["spatial"].clone()),
            _ if !asked => Err(format!("{c}")),
            Some("idle") | None => Err(format!("{c}")),
            Some("armed") if c["spatial"]["masked_launches"].as_u64() == Some(0) && !some => {
                Err(format!("{c}"))
            }
            Some(_) => Ok(c["spatial"].clone()),
        }
    });
    let status = tandemctl(d.socket(), &["status"])
        .output()
        .expect("tandemctl");
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    let metrics = d.get("/metrics").expect("GET /metrics").body;
    let _ = done(&mut train, "train");
    let infer_line = done(&mut infer, "infer");
    let sms = train
        .lines("SMS ")
        .pop()
        .unwrap_or_else(|| panic!("no SMS line: {train}"));
    Run {
        sms,
        infer: infer_line,
        train_stderr: train.stderr(),
        spatial,
        status,
        metrics,
    }
}

fn p50_us(done: &str) -> f64 {
    kv(done)["p50_us"].parse().expect("p50_us= is a number")
}

/// The lines of the shim's spatial mechanism in `stderr`.
fn spatial_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.contains("spatial:")).collect()
}

/// Checks that no training launch of `r` was masked, by the shim's count and
/// by where the fake placed the kernels; returns the shim's spatial lines.
#[track_caller]
fn unmasked(r: &Run) -> Vec<&str> {
    assert_eq!(r.spatial["masked_launches"], 0, "{}", r.spatial);
    assert_eq!(kv_u64(&r.sms, "part"), 0, "{}", r.sms);
    spatial_lines(&r.train_stderr)
}

#[test]
fn a_reservation_keeps_training_off_inference_sms_and_inference_starts_at_once() {
    let on = run("spatial-on", &[AUTO], &[]);
    assert_eq!(on.spatial["state"], "armed", "{}", on.spatial);
    assert_eq!(on.spatial["reserve_max"], 0.25, "{}", on.spatial);
    // 4 of 66 TPCs, in the control block's thousandths.
    assert_eq!(on.spatial["reserve"], 0.061, "{}", on.spatial);
    assert!(
        on.spatial["masked_launches"].as_u64() > Some(0),
        "{}",
        on.spatial
    );
    let part = kv_u64(&on.sms, "part");
    assert!(part > 0, "no training launch was masked: {}", on.sms);
    assert_eq!(
        kv_u64(&on.sms, "part_lowest"),
        LEAST_SMS,
        "a masked training kernel ran on a reserved SM, or none left only \
         what inference's widths need: {}",
        on.sms
    );
    assert!(
        spatial_lines(&on.train_stderr).is_empty(),
        "{}",
        on.train_stderr
    );

    let off = run("spatial-off", &[], &[]);
    assert!(off.spatial.is_null(), "not asked: {}", off.spatial);
    assert!(!off.status.contains("spatial:"), "{}", off.status);
    assert!(
        !off.metrics.contains("\ntandem_spatial_armed{"),
        "not asked: no series"
    );
    assert_eq!(kv_u64(&off.sms, "part"), 0, "{}", off.sms);

    // Requests of 5 x 200 us: with the reservation most start at once; without
    // it each kernel waits for the 20 ms training kernel on its SMs.
    let (p_on, p_off) = (p50_us(&on.infer), p50_us(&off.infer));
    eprintln!(
        "with the reservation: {} | {} | {}\nwithout: {} | {}",
        on.infer, on.sms, on.spatial, off.infer, off.sms
    );
    assert!(
        p_on < TRAIN_KERNEL_US / 4.0,
        "with the reservation, inference still waits for training: {}",
        on.infer
    );
    // At most one training block's wait (the fake's blocks last the whole
    // 20 ms kernel): the first request, launched beside a training kernel
    // given every SM before inference was seen; 3x for a loaded machine.
    let max_on: f64 = kv(&on.infer)["max_us"].parse().expect("max_us=");
    assert!(max_on < 3.0 * TRAIN_KERNEL_US, "{}", on.infer);
    assert!(
        p_off > TRAIN_KERNEL_US / 2.0,
        "without it, inference should wait for training's SMs: {}",
        off.infer
    );
}

#[test]
fn without_the_callback_table_training_runs_unmasked_and_says_so_once() {
    let r = run(
        "spatial-notable",
        &[AUTO],
        &[("FAKECUDA_LAUNCH_CALLBACKS", "0")],
    );
    assert_eq!(r.spatial["state"], "no_callback_table", "{}", r.spatial);
    assert!(
        r.status.contains("runs unmasked: no_callback_table"),
        "{}",
        r.status
    );
    let lines = unmasked(&r);
    assert_eq!(lines.len(), 1, "{}", r.train_stderr);
    assert!(
        lines[0].contains("no launch-callback table") && lines[0].contains("unmasked"),
        "{}",
        lines[0]
    );
}

#[test]
fn an_unknown_descriptor_version_leaves_training_unmasked_with_one_line() {
    let r = run(
        "spatial-oldqmd",
        &[AUTO],
        &[("FAKECUDA_QMD_VERSION", "0x06")],
    );
    assert_eq!(r.spatial["state"], "unknown_descriptor", "{}", r.spatial);
    assert_eq!(r.spatial["descriptor_version"], 6, "{}", r.spatial);
    let lines = unmasked(&r);
    assert_eq!(lines.len(), 1, "{}", r.train_stderr);
    assert!(lines[0].contains("version 0x06"), "{}", lines[0]);
}

/// A kernel compiled for thread-block clusters (the fake's `cluster=2`,
/// which its `cuFuncGetAttribute` reports as the required cluster width) is
/// never masked: a cluster needs its blocks in one GPC, and what a TPC mask
/// does to that is not known.
#[test]
fn a_kernel_compiled_for_clusters_is_never_masked() {
    let r = run_with("spatial-cluster", &[AUTO], &[], &["--cluster", "2"], 8, &[]);
    assert_eq!(r.spatial["state"], "armed", "{}", r.spatial);
    assert!(unmasked(&r).is_empty(), "{}", r.train_stderr);
}

/// Inference kernels of 2000 one-thread blocks fill 63 SMs by the
/// occupancy rules: tandemd asks the training job for the most it may
/// reserve, a quarter of the GPU, and no masked kernel runs there.
#[test]
fn wide_inference_kernels_get_the_most_the_reservation_may_leave() {
    let r = run_with("spatial-wide", &[AUTO], &[], &[], 2000, &[]);
    assert_eq!(r.spatial["state"], "armed", "{}", r.spatial);
    assert_eq!(r.spatial["reserve"], 0.25, "{}", r.spatial);
    assert!(
        kv_u64(&r.sms, "part") > 0,
        "no launch was masked: {}",
        r.sms
    );
    assert_eq!(kv_u64(&r.sms, "part_lowest"), MOST_SMS, "{}", r.sms);
}

/// The mask is for kernels whose blocks hold their SMs long: a 2 ms kernel
/// of 1,000,000 one-thread blocks runs in 237 waves of 32 blocks on each of
/// the 132 SMs (the occupancy rules, the fake's limits), so each block holds
/// its SM about 8 us, far under `spatial_min_kernel_ns` (100 us; the
/// estimate would have to pass 23 ms, which waits for SMs on a loaded
/// machine must not reach): never masked. The same 2 ms in one wave of 1000
/// blocks is, and never below the reserve.
#[test]
fn a_kernel_of_many_short_waves_is_left_unmasked() {
    let waves = run_with(
        "spatial-waves",
        &[AUTO],
        &[],
        &["--kernel-us", "2000", "--blocks", "1000000"],
        8,
        &[],
    );
    assert_eq!(waves.spatial["state"], "armed", "{}", waves.spatial);
    assert!(unmasked(&waves).is_empty(), "{}", waves.train_stderr);
    // Over the whole run (the `/stats` view is read early, after about 20
    // of these 2 ms launches, maybe before tandemd has learnt their time).
    let one = run_with(
        "spatial-one-wave",
        &[AUTO],
        &[],
        &["--kernel-us", "2000"],
        8,
        &[],
    );
    assert!(kv_u64(&one.sms, "part") > 0, "none masked: {}", one.sms);
    assert!(kv_u64(&one.sms, "part_lowest") >= LEAST_SMS, "{}", one.sms);
}

/// Back to tandemd's default hold after an inference launch (1 ms; the
/// other tests here stretch it to 50 ms: [`HOLD`]).
const DEFAULT_HOLD: (&str, &str) = ("request_hold_ns = 50000000", "request_hold_ns = 1000000");

/// One 30 ms inference kernel a request, waited for as `wait` says (infer's
/// flags; none: its sync), at the default hold: training's launches beside
/// it must be masked throughout the request, not only in the millisecond
/// after each inference launch, so inference's kernel starts at once, where
/// unmasked it waits for a 20 ms training kernel on its SMs (about 50 ms).
#[track_caller]
fn masked_through_a_gpu_bound_request(tag: &str, wait: &[&str]) {
    let mut infer_args = vec!["--kernels", "1", "--kernel-us", "30000"];
    infer_args.extend_from_slice(wait);
    let r = run_with(
        tag,
        &[AUTO, DEFAULT_HOLD],
        &[],
        // Training's 2 s within inference's 3.
        &["--seconds", "2"],
        8,
        &infer_args,
    );
    let (all, part) = (kv_u64(&r.sms, "all"), kv_u64(&r.sms, "part"));
    eprintln!("{} | {}", r.sms, r.infer);
    assert!(
        part > 4 * all,
        "training ran unmasked beside inference's waits: {}",
        r.sms
    );
    assert!(kv_u64(&r.sms, "part_lowest") >= LEAST_SMS, "{}", r.sms);
    assert!(p50_us(&r.infer) < 40_000.0, "{}", r.infer);
}

/// A GPU-bound request (one 30 ms kernel, then its sync) runs far past the
/// board's hold after its launch: its sync holds the board open, so
/// training's launches beside it are masked throughout (before the shim
/// counted syncs open, 39 of 79 training launches were masked and
/// inference's p50 was 50 ms; with it, 95 of 97 and 30.1 ms).
#[test]
fn training_is_masked_through_a_gpu_bound_requests_sync() {
    masked_through_a_gpu_bound_request("spatial-gpu-bound", &[]);
}

/// The same GPU-bound request waited for by polling an event
/// (`cuEventQuery` until done, as a `torch.cuda.Event.query()` loop does)
/// instead of a sync: each query that finds the kernel still running
/// announces inference on the board, so training stays masked through the
/// request, as beside a sync (before queries counted: 39 of 79 masked,
/// p50 49.9 ms; with them, 96 of 98 and 30.0 ms).
#[test]
fn training_is_masked_through_a_gpu_bound_request_that_polls() {
    masked_through_a_gpu_bound_request("spatial-gpu-bound-poll", &["--poll", "event"]);
}

/// With a standing threshold, training's long-block launches keep the mask
/// while inference idles between sparse requests (here 5 a second of one
/// 200 us kernel, the default 1 ms hold: inference is active about 1% of
/// the time), so a request never finds every SM held by a training kernel
/// launched in the gap. Without it, most run unmasked: only those launched
/// while a request waits for SMs are masked (one run: 20 of 100).
#[test]
fn a_standing_reservation_masks_long_blocks_while_inference_idles() {
    // Inference from before training starts until after it ends.
    let sparse = ["--rate", "5", "--seconds", "6", "--kernels", "1"];
    let standing = (
        "spatial_standing_kernel_ns = 0",
        "spatial_standing_kernel_ns = 1000000",
    );
    let on = run_with(
        "spatial-standing",
        &[AUTO, DEFAULT_HOLD, standing],
        &[],
        &["--seconds", "2"],
        8,
        &sparse,
    );
    let (all, part) = (kv_u64(&on.sms, "all"), kv_u64(&on.sms, "part"));
    assert!(part > 4 * all, "standing: {} | {}", on.sms, on.spatial);
    assert_eq!(
        on.spatial["standing_kernel_ns"], 1_000_000,
        "{}",
        on.spatial
    );
    assert!(kv_u64(&on.sms, "part_lowest") >= LEAST_SMS, "{}", on.sms);
    let off = run_with(
        "spatial-not-standing",
        &[AUTO, DEFAULT_HOLD],
        &[],
        &["--seconds", "2"],
        8,
        &sparse,
    );
    let (all, part) = (kv_u64(&off.sms, "all"), kv_u64(&off.sms, "part"));
    eprintln!("standing: {} | not: {}", on.sms, off.sms);
    assert!(
        all > 2 * part,
        "only while active: {} | {}",
        off.sms,
        off.spatial
    );
    assert_eq!(off.spatial["standing_kernel_ns"], 0, "{}", off.spatial);
}
