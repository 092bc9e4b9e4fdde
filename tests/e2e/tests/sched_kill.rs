//! Issue 6, acceptance 3: with no coordinator, or with the coordinator killed
//! mid-run, an inference job and a training job sharing one (fake) GPU both
//! finish, and their outputs are unchanged.
//!
//! Every run uses the same two jobs on one `FAKECUDA_SHARED_DEVICE`: `infer`
//! (a fixed, seeded set of requests) and `train` (a fixed number of long
//! kernels). Their `RESULT` lines are a checksum of the device buffer every
//! launch added to (tests/hosts/sched_host.h), so they say whether every launch
//! ran exactly once with its arguments. Runs:
//!
//! * reference: the fake driver alone, no shim;
//! * shim, no coordinator at all (nothing listens on the socket);
//! * shim with tandemd and its scheduler on, `kill -9` of tandemd while the
//!   training job's gate is closed (seen in /stats) and both jobs are running.
//!
//! Before the kill, the same /stats also shows what `[[scheduler.slo]]` did:
//! the inference job's p99 target (an entry matching its executable), none
//! for the training job, and the GPU's training share.

use std::path::Path;

use serde_json::Value;
use tandem_e2e::coord::{
    client_by_pid, client_env, default_config, host_command, kv, poll, spawn_host, Proc, Tandemd,
    TestDir, EXIT, SETTLE,
};
use tandem_e2e::Env;

/// About 2 s of requests (80 at 40/s, seeded: the same ones every run).
const INFER_ARGS: &[&str] = &[
    "--rate",
    "40",
    "--seconds",
    "2",
    "--kernels",
    "5",
    "--kernel-us",
    "200",
];
/// 150 kernels of 20 ms (3 s of device time), a sync every 10, launched back
/// to back: beside inference its gate is closed most of the time (20 ms of
/// work against a 4 ms budget).
const TRAIN_ARGS: &[&str] = &[
    "--seconds",
    "600",
    "--count",
    "150",
    "--kernel-us",
    "20000",
    "--sync-every",
    "10",
];

/// What one job printed: its RESULT line and (train) its run time.
#[derive(Debug)]
struct Done {
    result: String,
    seconds: Option<f64>,
}

#[track_caller]
fn finish(p: &mut Proc) -> Done {
    let done = p.wait_line("DONE ", EXIT);
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "{} failed ({st}):\n{p}", p.pid());
    let result = p
        .lines("RESULT ")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no RESULT line:\n{p}"));
    Done {
        result,
        seconds: kv(&done).get("seconds").and_then(|s| s.parse().ok()),
    }
}

/// The two jobs on the shared device `dev` under `env`, both started at once;
/// `mid_run` is called once both are running.
fn pair(env: &Env, dev: &Path, mid_run: impl FnOnce(&Proc, &Proc)) -> (Done, Done) {
    let dev = dev.to_str().expect("UTF-8 path");
    let env = |class: &str| {
        env.clone()
            .var("FAKECUDA_SHARED_DEVICE", dev)
            .var("TANDEM_CLASS", class)
    };
    let mut train = spawn_host("train", TRAIN_ARGS, &env("training"));
    train.wait_line("READY ", SETTLE);
    let mut infer = spawn_host("infer", INFER_ARGS, &env("inference"));
    infer.wait_line("READY ", SETTLE);
    mid_run(&infer, &train);
    let i = finish(&mut infer);
    let t = finish(&mut train);
    (i, t)
}

/// The p99 target `[[scheduler.slo]]` gives the infer host (ms).
const INFER_SLO_MS: f64 = 250.0;

/// The default configuration plus an SLO entry for the infer host's
/// executable (and, after it, one that matches nothing).
fn config_with_slo() -> String {
    let infer = host_command("infer", &[], &Env::fake_only());
    let exe = Path::new(infer.get_program())
        .canonicalize()
        .expect("the infer host exists");
    format!(
        "{}\n[[scheduler.slo]]\np99_ms = {INFER_SLO_MS:.1}\nexecutables = [{:?}]\n\n\
         [[scheduler.slo]]\np99_ms = 1.0\nuids = [4294967294]\n",
        default_config(),
        exe.to_str().expect("UTF-8 path"),
    )
}

/// tandemd's stats, once the inference job is registered beside the training
/// job and the training gate is seen closed.
fn training_gated(d: &Tandemd, infer: &Proc, train: &Proc) -> Value {
    poll(SETTLE, "the training gate closed beside inference", || {
        let st = d.try_stats()?;
        let i = client_by_pid(&st, infer.pid()).ok_or("infer not registered")?;
        if i["class"] != "inference" || i["gpu"].is_null() {
            return Err(format!("infer: {i}"));
        }
        let t = client_by_pid(&st, train.pid()).ok_or("train not registered")?;
        if t["sched"]["gate_open"] == false {
            Ok(st)
        } else {
            Err(format!("train: {t}"))
        }
    })
}

#[test]
fn jobs_finish_unchanged_with_no_coordinator_or_a_killed_one() {
    let dir = TestDir::new("sched-kill");

    // Reference: no shim.
    let (ref_i, ref_t) = pair(&Env::fake_only(), &dir.path().join("dev-ref"), |_, _| {});

    // The shim with no coordinator: nothing listens on this socket.
    let absent = dir.path().join("nobody.sock");
    let (none_i, none_t) = pair(
        &client_env(&absent),
        &dir.path().join("dev-none"),
        |_, _| {},
    );

    // The shim with tandemd, killed while the training job is held back.
    let mut d = Tandemd::start_with_config(&dir, &config_with_slo());
    let (mut st, mut pids) = (Value::Null, (0, 0));
    let (kill_i, kill_t) = pair(
        &client_env(d.socket()),
        &dir.path().join("dev-kill"),
        |infer, train| {
            st = training_gated(&d, infer, train);
            pids = (infer.pid(), train.pid());
            d.kill9();
        },
    );
    let seen = client_by_pid(&st, pids.1).cloned().unwrap_or_default();
    let seen_infer = client_by_pid(&st, pids.0).cloned().unwrap_or_default();

    let summary = format!(
        "reference: infer {} | train {} ({:?} s)\n\
         no coordinator: infer {} | train {} ({:?} s)\n\
         killed: infer {} | train {} ({:?} s)\n\
         training client just before the kill: {seen}\n\
         inference client then: {seen_infer}\n\
         GPUs then: {}",
        ref_i.result,
        ref_t.result,
        ref_t.seconds,
        none_i.result,
        none_t.result,
        none_t.seconds,
        kill_i.result,
        kill_t.result,
        kill_t.seconds,
        st["gpus"],
    );
    eprintln!("{summary}");
    // Every launch ran once: 150 training launches, 5 per request.
    assert!(
        ref_t.result.contains("launches=150 "),
        "reference: {summary}"
    );
    assert_eq!(none_i.result, ref_i.result, "no coordinator:\n{summary}");
    assert_eq!(none_t.result, ref_t.result, "no coordinator:\n{summary}");
    assert_eq!(kill_i.result, ref_i.result, "killed:\n{summary}");
    assert_eq!(kill_t.result, ref_t.result, "killed:\n{summary}");
    // Bounded: the killed run's training took at most a few seconds more than
    // with no coordinator (a closed gate holds a launch at most 50 ms, and a
    // coordinator whose heartbeat stopped is given up after 4 intervals).
    let (none_s, kill_s) = (
        none_t.seconds.expect("seconds"),
        kill_t.seconds.expect("seconds"),
    );
    assert!(
        kill_s < none_s + 10.0,
        "training took {kill_s} s after the kill vs {none_s} s with no coordinator:\n{summary}"
    );
    // Part of what /stats showed: the SLO target where configured (the first
    // entry matched; the second would say 1.0), none elsewhere, and the
    // training share of the GPU both jobs were on.
    assert_eq!(
        seen_infer["sched"]["slo_p99_target_ms"].as_f64(),
        Some(INFER_SLO_MS),
        "{summary}"
    );
    assert!(seen["sched"]["slo_p99_target_ms"].is_null(), "{summary}");
    let gpu = st["gpus"]
        .as_array()
        .and_then(|g| g.iter().find(|g| g["uuid"] == seen["gpu"]))
        .unwrap_or_else(|| panic!("the jobs' GPU in /stats:\n{summary}"));
    let share = gpu["training_share"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=1.0).contains(&share), "{summary}");
}
