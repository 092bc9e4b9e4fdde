//! Scheduler v2's acceptance on the fake driver: the shims alone hold
//! training's queued work under the active bound while inference runs, with
//! tandemd stopped (`SIGSTOP`), so no reader, no gate and no launch limit
//! moves.
//!
//! One shared fake device (`FAKECUDA_SHARED_DEVICE`: one timeline, every
//! process's kernels in launch order). `infer` serves back-to-back requests
//! (5 kernels of 200 us and a sync each) and, at each arrival, prints the
//! work queued on the device (`QUEUED`): its own earlier requests have all
//! returned, so that is training's. `train` launches 1 ms kernels as fast as
//! it can and never syncs. Once tandemd has measured the trainer and set its
//! local budgets, tandemd is stopped. From then on:
//!
//! * the inference shim bumps its GPU's slot on the board at its launches;
//! * the training shim sees the bumps on its launch path, holds its
//!   estimated in-flight work to the active budget (500 us; a 1 ms kernel
//!   then runs alone), and learns what completed from its own completion
//!   marks.
//!
//! Before these mechanisms, the trainer's heartbeat wait gave up on the
//! stopped tandemd after 4 heartbeats (fail-open) and nothing bounded it:
//! the device queue grew by the trainer's launch rate (hundreds of ms within
//! a second). The assertion is on the fake driver's own queue, not on what
//! tandem believes.

use tandem_e2e::coord::{
    client_by_pid, client_env, kv, kv_u64, poll, spawn_host, tandemctl_ok, Proc, Tandemd, TestDir,
    EXIT, SETTLE,
};
use tandem_e2e::Env;

/// The hold after an inference launch: far longer than one request's sync
/// wait, so back-to-back requests keep the GPU active even on a loaded CI
/// machine that deschedules the inference job for a few ms (the default is
/// tuned in the GPU-sharing model; this test is about the mechanism).
const HOLD_NS: u64 = 50_000_000;
const TRAIN_KERNEL_US: u64 = 1000;
/// The default active budget (one trainer: all of it).
const ACTIVE_BUDGET_NS: u64 = 500_000;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC is the clock of the
    // infer host's QUEUED timestamps.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn config() -> String {
    let d = tandem_e2e::coord::default_config();
    let c = d.replacen(
        "\nrequest_hold_ns = 1000000\n",
        &format!("\nrequest_hold_ns = {HOLD_NS}\n"),
        1,
    );
    assert_ne!(c, d, "the default config sets request_hold_ns = 1000000");
    c
}

fn env(d: &Tandemd, dev: &std::path::Path, class: &str) -> Env {
    client_env(d.socket())
        .var("FAKECUDA_SHARED_DEVICE", dev.to_str().expect("UTF-8 path"))
        .var("TANDEM_CLASS", class)
}

#[track_caller]
fn done(p: &mut Proc, what: &str) -> String {
    let l = p.wait_line("DONE ", EXIT);
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "{what} failed ({st}):\n{p}");
    l
}

#[test]
fn shims_alone_hold_training_under_the_active_bound_with_tandemd_stopped() {
    hold_training_with_tandemd_stopped(false);
}

/// The inference job registers as training (so its shim is handed a
/// read-only board) and an operator makes it inference with `tandemctl
/// set-class`: tandemd sends it a writable board, and its shim announces
/// itself without reconnecting. Without that second Board message the
/// trainer never sees inference on the board and floods the device.
#[test]
fn a_job_made_inference_by_the_operator_announces_itself_on_the_board() {
    hold_training_with_tandemd_stopped(true);
}

fn hold_training_with_tandemd_stopped(reclassified: bool) {
    let dir = TestDir::new("local-bound");
    let mut d = Tandemd::start_with_config(&dir, &config());
    let dev = dir.path().join("dev");
    let infer_class = if reclassified {
        "training"
    } else {
        "inference"
    };

    // Inference first, its device known to tandemd: a trainer on a GPU with
    // no inference job is not bounded, and one that never syncs would flood
    // the fake device (which never blocks a launch) before inference came.
    let mut infer = spawn_host(
        "infer",
        &[
            "--closed",
            "--probe",
            "--seconds",
            "6",
            "--kernels",
            "5",
            "--kernel-us",
            "200",
        ],
        &env(&d, &dev, infer_class),
    );
    let id = poll(SETTLE, "the inference job's first launch", || {
        let st = d.try_stats()?;
        match client_by_pid(&st, infer.pid()) {
            Some(c) if c["launches"].as_u64().unwrap_or(0) > 0 => Ok(c["id"].as_u64()),
            other => Err(format!("{other:?}")),
        }
    })
    .expect("a client id");
    if reclassified {
        let id_s = id.to_string();
        tandemctl_ok(d.socket(), &["set-class", &id_s, "inference"]);
        poll(SETTLE, "tandemd to send the writable board", || {
            let log = d.log();
            let sent = log
                .lines()
                .any(|l| l.contains("GPU board it was owed") && l.contains("writable=true"));
            if sent {
                Ok(())
            } else {
                Err(log)
            }
        });
    }
    let mut train = spawn_host(
        "train",
        &[
            "--seconds",
            "4",
            "--kernel-us",
            &TRAIN_KERNEL_US.to_string(),
            "--sync-every",
            "0",
        ],
        &env(&d, &dev, "training"),
    );
    // tandemd has measured the trainer (completion marks) and set its
    // budgets: the shims now have everything they need.
    let before = poll(SETTLE, "the trainer's measured local budgets", || {
        let st = d.try_stats()?;
        let c = client_by_pid(&st, train.pid()).ok_or("train not registered yet")?;
        let s = &c["sched"];
        if s["local_active_ns"].as_u64() == Some(ACTIVE_BUDGET_NS)
            && s["marks_measured"].as_u64().unwrap_or(0) >= 10
        {
            Ok(c.clone())
        } else {
            Err(format!("{c}"))
        }
    });
    // Let the grant of that pass (estimates, budgets) land.
    std::thread::sleep(std::time::Duration::from_millis(100));
    let stopped_at = monotonic_ns();
    d.signal(libc::SIGSTOP);
    let train_line = done(&mut train, "train");
    let train_done_at = monotonic_ns();
    let infer_line = done(&mut infer, "infer");
    d.signal(libc::SIGCONT);

    // From 600 ms after the stop (the trainer's wait for tandemd's frozen
    // gate and launch limit gave up after 4 heartbeats of 100 ms) until the
    // trainer ended.
    let from = stopped_at + 600_000_000;
    let probes: Vec<(u64, f64)> = infer
        .lines("QUEUED ")
        .iter()
        .map(|l| {
            let m = kv(l);
            (
                kv_u64(l, "t_ns"),
                m["us"].parse::<f64>().expect("us= is a number"),
            )
        })
        .filter(|&(t, _)| t >= from && t + 100_000_000 <= train_done_at)
        .collect();
    let max_us = probes.iter().map(|p| p.1).fold(0.0, f64::max);
    let mean_us = probes.iter().map(|p| p.1).sum::<f64>() / probes.len().max(1) as f64;
    let kernels = kv_u64(&train_line, "kernels");
    let over: Vec<String> = probes
        .iter()
        .filter(|p| p.1 > (TRAIN_KERNEL_US as f64) * 1.05)
        .take(10)
        .map(|p| format!("{:.0}us@+{}ms", p.1, (p.0 - stopped_at) / 1_000_000))
        .collect();
    let summary = format!(
        "{} arrivals after the stop: training queued max {max_us:.0} us, mean {mean_us:.0} us, \
         over one kernel: {over:?} \
         (bound: max(active budget {} us, one {TRAIN_KERNEL_US} us kernel)); train: {train_line}; \
         infer: {infer_line}; trainer before the stop: {before}",
        probes.len(),
        ACTIVE_BUDGET_NS / 1000,
    );
    eprintln!("{summary}");
    assert!(
        probes.len() >= 50,
        "too few arrivals while tandemd was stopped:\n{summary}"
    );
    // A launch that does not fit the budget waits until nothing of its job
    // is in flight, so one kernel longer than the budget may be queued, never
    // more. 250 us for the probe's own clock read and scheduling.
    let bound_us = (ACTIVE_BUDGET_NS / 1000).max(TRAIN_KERNEL_US) as f64 + 250.0;
    assert!(
        max_us <= bound_us,
        "training's queued work exceeded the active bound at an inference arrival:\n{summary}"
    );
    // Bounded, not starved: the trainer kept launching.
    assert!(kernels >= 100, "the trainer was starved:\n{summary}");
    drop(d);
}
