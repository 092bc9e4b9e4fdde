//! Inference beside training on ONE simulated GPU (the fake driver's
//! `FAKECUDA_SHARED_DEVICE`), with tandemd's scheduler off and on.
//!
//! Hosts: `infer` (open-loop Poisson requests of short kernels + a sync; it
//! prints each request's latency from arrival to the sync's return, and
//! p50/p99) and `train` (long kernels launched back to back, with no host
//! work between them, a sync every few launches; it prints the kernels it
//! completed). Runs:
//!
//! * alone: `infer` alone on one device, `train` alone on another (at once);
//! * disabled: both on one device, tandemd with `[scheduler] enabled = false`
//!   (gates stay open: plain sharing);
//! * enabled: both on one device, tandemd with the default scheduler.
//!
//! The assertions order runs of this one test against each other (plain
//! sharing inflates inference's p99 well beyond alone; the scheduler cuts it to
//! under half of plain sharing's while training keeps a stated fraction of its
//! alone count). Sizes are generous (5 ms training kernels against 0.2 ms
//! inference kernels), so the orderings hold far beyond CI noise; no absolute
//! time is asserted.

use serde_json::Value;
use std::path::{Path, PathBuf};
use tandem_e2e::coord::{
    client_by_pid, client_env, kv, kv_u64, poll, spawn_host, without_marks, Proc, Tandemd, TestDir,
    EXIT, SETTLE,
};
use tandem_e2e::Env;

/// How long each job runs (s): `train` for TRAIN_S, `infer` starting once
/// `train` is READY, for INFER_S.
const TRAIN_S: &str = "3.0";
const INFER_S: &str = "2.5";
/// `train` with no syncs runs this long, inside `infer`'s run.
const NEVER_SYNC_TRAIN_S: &str = "2.0";
/// Inference: Poisson arrivals at this rate (req/s), K kernels of U us each.
const INFER_ARGS: &[&str] = &["--rate", "40", "--kernels", "5", "--kernel-us", "200"];
/// Training: 5 ms kernels, a sync every 20 launches, launched back to back.
const TRAIN_KERNEL_US: &str = "5000";
const TRAIN_SYNC_EVERY: &str = "20";
/// Requests left out of the steady-state p99 printed in the summary: the
/// first ones queue behind the training work launched before the inference
/// job registered (up to a sync interval, 100 ms, queued while training was
/// alone and nothing held it back), which no gate can take back.
const WARMUP_REQUESTS: u64 = 5;
/// Training must keep at least this fraction of its alone count with the
/// scheduler on.
const TRAIN_KEEPS: f64 = 0.5;

/// What `train` is asked for: `train_args()`, syncing every
/// [`TRAIN_SYNC_EVERY`] launches, or never.
#[derive(Clone, Copy)]
enum Syncs {
    Every,
    Never,
}

fn train_args_with(syncs: Syncs) -> Vec<&'static str> {
    let mut a = train_args();
    if let Syncs::Never = syncs {
        // It starts after inference and must end before it: the moment the
        // GPU has no inference job its gate is open, and a job that never
        // syncs then floods the fake device without bound.
        a[1] = NEVER_SYNC_TRAIN_S;
        *a.last_mut().expect("--sync-every's value") = "0";
    }
    a
}

fn train_args() -> Vec<&'static str> {
    // No host work between launches: a burst issued faster than tandemd's
    // reader reacts (0.25-1 ms) is held back by the launch limit, which the
    // shim enforces itself, not by a gate the reader closes after the fact.
    vec![
        "--seconds",
        TRAIN_S,
        "--kernel-us",
        TRAIN_KERNEL_US,
        "--sync-every",
        TRAIN_SYNC_EVERY,
    ]
}

fn infer_args() -> Vec<&'static str> {
    let mut a = vec!["--seconds", INFER_S];
    a.extend_from_slice(INFER_ARGS);
    a
}

/// The default configuration with `[scheduler] enabled = <enabled>`.
fn config(enabled: bool) -> String {
    let d = tandem_e2e::coord::default_config();
    let (head, tail) = d
        .split_once("\n[scheduler]\n")
        .expect("the default config has a [scheduler] table");
    let c = format!(
        "{head}\n[scheduler]\n{}",
        tail.replacen("enabled = true", &format!("enabled = {enabled}"), 1)
    );
    assert!(c.contains(&format!("\nenabled = {enabled}\n")), "{c}");
    c
}

/// A job on the shared device `dev`, registered with the tandemd on `socket`.
fn env(socket: &Path, dev: &Path, class: &str) -> Env {
    client_env(socket)
        .var("FAKECUDA_SHARED_DEVICE", dev.to_str().expect("UTF-8 path"))
        .var("TANDEM_CLASS", class)
}

#[derive(Debug, Clone, Copy)]
struct InferResult {
    requests: u64,
    p50_us: f64,
    p99_us: f64,
    /// p99 of the requests after the first [`WARMUP_REQUESTS`] (nearest rank).
    steady_p99_us: f64,
}

fn f64_of(line: &str, key: &str) -> f64 {
    kv(line)
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key}= in {line:?}"))
}

#[track_caller]
fn infer_done(p: &mut Proc) -> InferResult {
    let l = p.wait_line("DONE ", EXIT);
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "infer failed ({st}):\n{p}");
    let mut steady: Vec<f64> = p
        .lines("REQ ")
        .iter()
        .filter(|l| kv_u64(l, "i") >= WARMUP_REQUESTS)
        .map(|l| f64_of(l, "latency_us"))
        .collect();
    steady.sort_by(f64::total_cmp);
    let rank = ((0.99 * steady.len() as f64).ceil() as usize).clamp(1, steady.len().max(1));
    let r = InferResult {
        requests: kv_u64(&l, "requests"),
        p50_us: f64_of(&l, "p50_us"),
        p99_us: f64_of(&l, "p99_us"),
        steady_p99_us: steady.get(rank - 1).copied().unwrap_or(f64::NAN),
    };
    assert!(r.requests >= 40, "too few requests: {l}");
    r
}

#[track_caller]
fn train_done(p: &mut Proc) -> u64 {
    let l = p.wait_line("DONE ", EXIT);
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "train failed ({st}):\n{p}");
    kv_u64(&l, "kernels")
}

/// Waits until tandemd lists `p` (registered with the class it claimed).
#[track_caller]
fn wait_registered(d: &Tandemd, p: &Proc, class: &str) {
    poll(SETTLE, "the job to register", || {
        let st = d.try_stats()?;
        match client_by_pid(&st, p.pid()) {
            Some(c) if c["class"] == class => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
}

/// tandemd's final snapshot of the departed client `pid` (once reclaimed).
#[track_caller]
fn departed(d: &Tandemd, pid: u32) -> Value {
    poll(SETTLE, "the client's departure", || {
        let st = d.try_stats()?;
        st["departed"]
            .as_array()
            .and_then(|v| v.iter().find(|c| c["pid"] == pid).cloned())
            .ok_or_else(|| format!("pid {pid} not departed yet"))
    })
}

/// One co-located run: train starts, then infer; returns (infer, train
/// kernels, tandemd's final snapshots of the infer and train clients).
fn colocated(d: &Tandemd, dev: &Path) -> (InferResult, u64, Value, Value) {
    colocated_with(d, dev, Syncs::Every)
}

fn colocated_with(d: &Tandemd, dev: &Path, syncs: Syncs) -> (InferResult, u64, Value, Value) {
    let (mut train, mut infer) = match syncs {
        Syncs::Every => {
            let mut train = spawn_host("train", &train_args(), &env(d.socket(), dev, "training"));
            train.wait_line("READY ", SETTLE);
            wait_registered(d, &train, "training");
            let infer = spawn_host("infer", &infer_args(), &env(d.socket(), dev, "inference"));
            (train, infer)
        }
        Syncs::Never => {
            // Inference first, with its device known to tandemd (it launched):
            // on a GPU with no inference job a trainer's gate is open, and one
            // that never syncs would queue without end on the fake driver
            // (which, unlike CUDA, never blocks a launch on a full queue).
            let infer = spawn_host("infer", &infer_args(), &env(d.socket(), dev, "inference"));
            poll(SETTLE, "the inference job's first launch", || {
                let st = d.try_stats()?;
                match client_by_pid(&st, infer.pid()) {
                    Some(c) if c["launches"].as_u64().unwrap_or(0) > 0 => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            });
            let train = spawn_host(
                "train",
                &train_args_with(syncs),
                &env(d.socket(), dev, "training"),
            );
            (train, infer)
        }
    };
    let i = infer_done(&mut infer);
    let t = train_done(&mut train);
    (i, t, departed(d, infer.pid()), departed(d, train.pid()))
}

fn device(dir: &TestDir, name: &str) -> PathBuf {
    dir.path().join(name)
}

#[test]
fn scheduler_keeps_inference_latency_under_training() {
    let dir_off = TestDir::new("sched-off");
    let dir_on = TestDir::new("sched-on");
    let off = Tandemd::start_with_config(&dir_off, &config(false));
    let on = Tandemd::start_with_config(&dir_on, &config(true));

    // Alone: each job on its own device, both at once (they share nothing).
    let mut train = spawn_host(
        "train",
        &train_args(),
        &env(
            off.socket(),
            &device(&dir_off, "dev-train-alone"),
            "training",
        ),
    );
    train.wait_line("READY ", SETTLE);
    let mut infer = spawn_host(
        "infer",
        &infer_args(),
        &env(
            off.socket(),
            &device(&dir_off, "dev-infer-alone"),
            "inference",
        ),
    );
    let alone = infer_done(&mut infer);
    let train_alone = train_done(&mut train);

    let (disabled, train_disabled, infer_off, train_off) =
        colocated(&off, &device(&dir_off, "dev-shared"));
    let (enabled, train_enabled, infer_on, train_on) =
        colocated(&on, &device(&dir_on, "dev-shared"));

    let summary = format!(
        "alone: infer p50 {:.0} us p99 {:.0} us (after {WARMUP_REQUESTS}: {:.0} us), train {train_alone} kernels\n\
         disabled: infer p50 {:.0} us p99 {:.0} us (after {WARMUP_REQUESTS}: {:.0} us), train {train_disabled} kernels\n\
         enabled: infer p50 {:.0} us p99 {:.0} us (after {WARMUP_REQUESTS}: {:.0} us), train {train_enabled} kernels\n\
         tandemd (disabled): infer {} train {}\n\
         tandemd (enabled): infer {} train {}",
        alone.p50_us,
        alone.p99_us,
        alone.steady_p99_us,
        disabled.p50_us,
        disabled.p99_us,
        disabled.steady_p99_us,
        enabled.p50_us,
        enabled.p99_us,
        enabled.steady_p99_us,
        infer_off["sched"],
        json_gate(&train_off),
        infer_on["sched"],
        json_gate(&train_on),
    );
    eprintln!("{summary}");

    // The premise: plain sharing of one device inflates inference's tail.
    assert!(
        disabled.p99_us > 4.0 * alone.p99_us,
        "training beside inference did not inflate its p99:\n{summary}"
    );
    // The scheduler: under half of plain sharing's p99 ...
    assert!(
        enabled.p99_us < 0.5 * disabled.p99_us,
        "the scheduler did not cut inference's p99 below half of plain sharing's:\n{summary}"
    );
    // ... while training keeps a stated fraction of its alone throughput.
    assert!(
        train_enabled as f64 >= TRAIN_KEEPS * train_alone as f64,
        "training kept less than {TRAIN_KEEPS} of its alone count:\n{summary}"
    );
    // The gate is what did it: with the scheduler on, the training client
    // waited at its closed gate; off, never.
    assert!(
        train_on["gate_waits"].as_u64().unwrap_or(0) > 0,
        "the training client never waited at its gate:\n{summary}"
    );
    assert_eq!(
        train_off["gate_waits"].as_u64(),
        Some(0),
        "a gate closed with the scheduler disabled:\n{summary}"
    );
    // With the scheduler on, tandemd detected and measured the inference
    // requests (implicit boundaries: a launch after an idle gap up to the sync).
    // Not asserted for the disabled run: there inference is overloaded, its
    // requests queue back to back with no idle gap, and detection may rightly
    // find none (seen: 0 in one CI run, 1-2 in others, of ~100 sent).
    let s = &infer_on["sched"];
    assert!(
        s["requests"].as_u64().unwrap_or(0) > 0 && s["p99_ms"].as_f64().is_some(),
        "enabled: tandemd counted no inference requests:\n{summary}"
    );
    drop((off, on));
}

/// A training job that never syncs: before completion marks tandemd never
/// learned how long its kernels took (only a sync told it), kept the default
/// 50 us estimate for 5 ms kernels, and so let a hundred times its budget
/// queue ahead of inference. With marks (the default `mark_every_ns`) the
/// shim reports when the GPU reached each mark, the estimates are measured,
/// and the budget means GPU time again. Same jobs, same device, marks off
/// (`mark_every_ns = 0`) versus on.
#[test]
fn completion_marks_bound_a_trainer_that_never_syncs() {
    let dir_off = TestDir::new("marks-off");
    let dir_on = TestDir::new("marks-on");
    let with_marks = config(true);
    let without = without_marks(&with_marks);
    let off = Tandemd::start_with_config(&dir_off, &without);
    let on = Tandemd::start_with_config(&dir_on, &with_marks);

    let (i_off, t_off, _, train_off) = colocated_with(&off, &device(&dir_off, "dev"), Syncs::Never);
    let (i_on, t_on, _, train_on) = colocated_with(&on, &device(&dir_on, "dev"), Syncs::Never);
    let summary = format!(
        "marks off: infer p50 {:.0} us p99 {:.0} us (after {WARMUP_REQUESTS}: {:.0} us), train launched {t_off}\n\
         marks on:  infer p50 {:.0} us p99 {:.0} us (after {WARMUP_REQUESTS}: {:.0} us), train launched {t_on}\n\
         tandemd (off): train {}\n\
         tandemd (on): train {}",
        i_off.p50_us,
        i_off.p99_us,
        i_off.steady_p99_us,
        i_on.p50_us,
        i_on.p99_us,
        i_on.steady_p99_us,
        json_gate(&train_off),
        json_gate(&train_on),
    );
    eprintln!("{summary}");

    // Off: no marks, nothing ever measured the trainer's kernels.
    assert_eq!(train_off["marks_placed"].as_u64(), Some(0), "{summary}");
    assert_eq!(
        train_off["sched"]["marks_measured"].as_u64(),
        Some(0),
        "{summary}"
    );
    // On: the shim placed marks, saw them complete, and they measured.
    assert!(
        train_on["marks_done"].as_u64().unwrap_or(0) > 0,
        "no completed marks:\n{summary}"
    );
    assert!(
        train_on["sched"]["marks_measured"].as_u64().unwrap_or(0) > 0,
        "no mark measured anything:\n{summary}"
    );
    // And that is what bounds what inference queues behind.
    assert!(
        i_on.steady_p99_us < 0.5 * i_off.steady_p99_us,
        "marks did not cut inference's p99 below half:\n{summary}"
    );
    drop((off, on));
}

/// The gate-related fields of a client snapshot, for the summary.
fn json_gate(c: &Value) -> String {
    format!(
        "gate_waits={} gate_wait_ns={} gate_timeouts={} stale_opens={} marks_placed={} \
         marks_done={} sched={}",
        c["gate_waits"],
        c["gate_wait_ns"],
        c["gate_timeouts"],
        c["stale_opens"],
        c["marks_placed"],
        c["marks_done"],
        c["sched"]
    )
}

/// Two processes on one `FAKECUDA_SHARED_DEVICE` queue their kernels on one
/// timeline: the second process's kernel starts only when the first's (a 10 s
/// kernel nobody waits for) ends. Without the variable each has its own device.
#[test]
fn shared_device_serializes_processes() {
    let dir = TestDir::new("shared-dev");
    let dev = device(&dir, "dev");
    let window = |env: &Env, us: &str| {
        let mut p = spawn_host(
            "train",
            &["--count", "1", "--kernel-us", us, "--sync-every", "0"],
            env,
        );
        let l = p.wait_line("DONE ", EXIT);
        assert!(p.wait_exit(EXIT).success(), "{p}");
        (kv_u64(&l, "last_start_ns"), kv_u64(&l, "last_end_ns"))
    };
    let shared = Env::fake_only().var("FAKECUDA_SHARED_DEVICE", dev.to_str().expect("UTF-8"));
    let (a0, a1) = window(&shared, "10000000");
    assert_eq!(a1 - a0, 10_000_000_000);
    let (b0, b1) = window(&shared, "1000");
    assert_eq!(
        b0, a1,
        "the second process's kernel must start when the first's ends"
    );
    assert_eq!(b1 - b0, 1_000_000);
    assert_eq!(
        std::fs::metadata(&dev).expect("device file").len(),
        4096,
        "the device file"
    );
    // Private devices: the same second job starts at once.
    let (c0, _) = window(&Env::fake_only(), "1000");
    assert!(c0 < a1, "without the variable the device is private");
}
