//! tandem over MPS (`[mps]`), end to end with a stand-in control program
//! (`tests/fake-mps-control`: it creates the control pipe as
//! `nvidia-cuda-mps-control -d` would and removes it on `quit`; it starts no
//! MPS server and touches no GPU). What the fake driver saw in its
//! environment at `cuInit` (`FAKECUDA_INIT_ENV_FILE`) is what a real driver
//! would have read to join MPS.
//!
//! - enabled: tandemd starts the daemon with the pipe and log directories in
//!   its environment; a training client's driver sees the pipe directory,
//!   priority 1 and the cap, an inference client's priority 0; a job with
//!   its own pipe directory and a job under `TANDEM_CLASS=off` are left as
//!   they are; `/stats`, `/metrics` and `tandemctl status` say the mode; at
//!   exit tandemd stops the daemon (`quit`).
//! - the control program missing: plain time slicing, one clear log line,
//!   the stats say why, clients are told nothing.
//! - disabled (the default): nothing started, nothing set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tandem_e2e::coord::{
    client_by_pid, client_env, default_config, poll, spawn_host, tandemctl, Proc, Tandemd, TestDir,
    EXIT, SETTLE,
};
use tandem_e2e::mps::{config, path_with_stand_in, DaemonGuard, ENABLE};

const CAP: (&str, &str) = (
    "# training_thread_percentage = 50",
    "training_thread_percentage = 40",
);

/// What the driver read at `cuInit`: variable -> value (None: unset).
type InitEnv = BTreeMap<String, Option<String>>;

fn read_init_env(path: &Path) -> Result<InitEnv, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    Ok(text
        .lines()
        .map(|l| match l.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (l.to_string(), None),
        })
        .collect())
}

/// A launcher that initialises the driver, launches a little and holds
/// (registered) until its stdin closes, with `vars` set and every MPS
/// variable of the test's own environment removed.
fn client(d: &Tandemd, dir: &TestDir, tag: &str, vars: &[(&str, &str)]) -> (Proc, PathBuf) {
    let file = dir.path().join(format!("{tag}.initenv"));
    let mut env = client_env(d.socket())
        .var("FAKECUDA_INIT_ENV_FILE", file.to_str().unwrap())
        .unset("CUDA_MPS_PIPE_DIRECTORY")
        .unset("CUDA_MPS_CLIENT_PRIORITY")
        .unset("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    for (k, v) in vars {
        env = env.var(k, v);
    }
    let mut p = spawn_host("launcher", &["--count", "20", "--hold"], &env);
    p.wait_line("READY ", SETTLE);
    (p, file)
}

#[track_caller]
fn init_env(p: &Proc, file: &Path) -> InitEnv {
    poll(SETTLE, "the fake driver's cuInit record", || {
        read_init_env(file)
    });
    let env = read_init_env(file).unwrap();
    assert_eq!(env.len(), 3, "{env:?}: {p}");
    env
}

fn v(s: &str) -> Option<String> {
    Some(s.to_string())
}

#[track_caller]
fn finish(mut p: Proc) {
    p.close_stdin();
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "{p}");
}

#[test]
fn tandemd_owns_the_mps_daemon_and_clients_join_it_by_class() {
    let dir = TestDir::new("mps");
    let pipe = dir.path().join("mps");
    let log_dir = dir.path().join("mps-log");
    let _guard = DaemonGuard(pipe.clone());
    let path = path_with_stand_in();
    let mut d = Tandemd::spawn_with_env(&dir, &config(&[ENABLE, CAP]), &[("PATH", &path)]);
    d.wait_ready();

    // The daemon runs in the default directories beside the socket, started
    // with them in its environment.
    assert!(pipe.join("control").exists(), "{}", d.log());
    let control_log = std::fs::read_to_string(log_dir.join("control.log")).unwrap();
    assert!(
        control_log.contains(&format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe.display()))
            && control_log.contains(&format!("CUDA_MPS_LOG_DIRECTORY={}", log_dir.display())),
        "{control_log}"
    );
    let pid: i32 = std::fs::read_to_string(pipe.join("nvidia-cuda-mps-control.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();

    // The stats, the metrics and tandemctl say the mode.
    let st = d.stats();
    let sharing = &st["sharing"];
    assert_eq!(sharing["mode"], "tandem_over_mps", "{sharing}");
    assert_eq!(sharing["mps_pipe_dir"], pipe.to_str().unwrap(), "{sharing}");
    assert_eq!(sharing["mps"]["in_force"], true, "{sharing}");
    assert_eq!(sharing["mps"]["owned"], true, "{sharing}");
    assert_eq!(sharing["mps"]["pid"], pid, "{sharing}");
    assert_eq!(
        sharing["mps"]["training_thread_percentage"], 40,
        "{sharing}"
    );
    let metrics = d.get("/metrics").unwrap().body;
    assert!(
        metrics
            .lines()
            .any(|l| l == "tandem_sharing_mode{mode=\"tandem_over_mps\"} 1"),
        "{metrics}"
    );
    let out = tandemctl(d.socket(), &["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains("sharing: tandem over MPS: the MPS control daemon in"),
        "{text}"
    );

    // A training client's driver sees the pipe directory, priority 1 and
    // the cap; an inference client's priority 0 and no cap.
    let (train, f) = client(&d, &dir, "train", &[("TANDEM_CLASS", "training")]);
    let env = init_env(&train, &f);
    assert_eq!(
        env["CUDA_MPS_PIPE_DIRECTORY"],
        v(pipe.to_str().unwrap()),
        "{train}"
    );
    assert_eq!(env["CUDA_MPS_CLIENT_PRIORITY"], v("1"), "{train}");
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], v("40"), "{train}");
    let (infer, f) = client(&d, &dir, "infer", &[("TANDEM_CLASS", "inference")]);
    let env = init_env(&infer, &f);
    assert_eq!(
        env["CUDA_MPS_PIPE_DIRECTORY"],
        v(pipe.to_str().unwrap()),
        "{infer}"
    );
    assert_eq!(env["CUDA_MPS_CLIENT_PRIORITY"], v("0"), "{infer}");
    assert_eq!(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], None, "{infer}");
    let st = d.stats();
    for (p, prio) in [(&train, 1), (&infer, 0)] {
        let c = client_by_pid(&st, p.pid()).unwrap_or_else(|| panic!("not listed: {st}"));
        assert_eq!(c["mps_priority"], prio, "{c}");
    }

    // Eight threads whose first CUDA call is cuInit, all at once: the ones
    // not registering wait for the registration, so the driver initialises
    // with the variables set (without that wait, a cuInit reaches the driver
    // while the registration is still in flight).
    let file = dir.path().join("race.initenv");
    let env = client_env(d.socket())
        .var("TANDEM_CLASS", "training")
        .var("FAKECUDA_INIT_ENV_FILE", file.to_str().unwrap())
        .unset("CUDA_MPS_PIPE_DIRECTORY")
        .unset("CUDA_MPS_CLIENT_PRIORITY")
        .unset("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    let mut race = spawn_host("init_race", &["8"], &env);
    race.close_stdin();
    assert!(race.wait_exit(EXIT).success(), "{race}");
    let env = init_env(&race, &file);
    assert_eq!(
        env["CUDA_MPS_PIPE_DIRECTORY"],
        v(pipe.to_str().unwrap()),
        "{race}"
    );
    assert_eq!(env["CUDA_MPS_CLIENT_PRIORITY"], v("1"), "{race}");

    // A job with its own pipe directory keeps it (and sets no priority); a
    // job under TANDEM_CLASS=off is left untouched.
    let (own, f) = client(
        &d,
        &dir,
        "own",
        &[
            ("TANDEM_CLASS", "training"),
            ("CUDA_MPS_PIPE_DIRECTORY", "/tmp/the-jobs-own-mps"),
        ],
    );
    let env = init_env(&own, &f);
    assert_eq!(
        env["CUDA_MPS_PIPE_DIRECTORY"],
        v("/tmp/the-jobs-own-mps"),
        "{own}"
    );
    assert_eq!(env["CUDA_MPS_CLIENT_PRIORITY"], None, "{own}");
    let (off, f) = client(&d, &dir, "off", &[("TANDEM_CLASS", "off")]);
    let env = init_env(&off, &f);
    assert!(env.values().all(Option::is_none), "{env:?}: {off}");
    for p in [train, infer, own, off] {
        finish(p);
    }

    // At exit tandemd stops the daemon it started.
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(EXIT);
    assert!(st.success(), "{}", d.log());
    assert!(!pipe.join("control").exists(), "{}", d.log());
    let control_log = std::fs::read_to_string(log_dir.join("control.log")).unwrap();
    assert!(
        control_log.contains("command quit") && control_log.contains("stopped"),
        "{control_log}"
    );
    // SAFETY: signal 0 only asks whether the process exists.
    let gone = unsafe { libc::kill(pid, 0) } != 0
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        });
    assert!(gone, "the stand-in daemon (pid {pid}) still runs");
    assert!(
        d.log().contains("stopped the MPS control daemon"),
        "{}",
        d.log()
    );
}

#[test]
fn a_missing_control_program_leaves_plain_time_slicing_and_says_so_once() {
    let dir = TestDir::new("mpsmissing");
    let path = PathBuf::from("/usr/local/bin:/usr/bin:/bin");
    let cfg = config(&[
        ENABLE,
        (
            "control_binary = \"nvidia-cuda-mps-control\"",
            "control_binary = \"tandem-test-no-such-mps-control\"",
        ),
    ]);
    let mut d = Tandemd::spawn_with_env(&dir, &cfg, &[("PATH", &path)]);
    d.wait_ready();
    let said: Vec<String> = d
        .log()
        .lines()
        .filter(|l| l.contains("tandem over MPS is not in force"))
        .map(String::from)
        .collect();
    assert_eq!(said.len(), 1, "{}", d.log());
    assert!(
        said[0].contains("tandem-test-no-such-mps-control was not found on PATH")
            && said[0].contains("plain time slicing"),
        "{}",
        said[0]
    );
    let st = d.stats();
    let sharing = &st["sharing"];
    assert_ne!(sharing["mode"], "tandem_over_mps", "{sharing}");
    assert_eq!(sharing["mps"]["in_force"], false, "{sharing}");
    assert!(
        sharing["describe"]
            .as_str()
            .unwrap()
            .starts_with("[mps] is enabled but tandem over MPS is not in force"),
        "{sharing}"
    );
    let (p, f) = client(&d, &dir, "train", &[("TANDEM_CLASS", "training")]);
    let env = init_env(&p, &f);
    assert!(env.values().all(Option::is_none), "{env:?}: {p}");
    assert!(client_by_pid(&d.stats(), p.pid()).is_some(), "registered");
    finish(p);
    assert!(!dir.path().join("mps").exists());
}

#[test]
fn disabled_starts_nothing_and_sets_nothing() {
    let dir = TestDir::new("mpsoff");
    let path = path_with_stand_in();
    // The stand-in on PATH changes nothing while [mps] is off.
    let mut d = Tandemd::spawn_with_env(&dir, default_config(), &[("PATH", &path)]);
    d.wait_ready();
    assert!(!dir.path().join("mps").exists(), "{}", d.log());
    let st = d.stats();
    assert!(st["sharing"]["mps"].is_null(), "{}", st["sharing"]);
    assert_ne!(st["sharing"]["mode"], "tandem_over_mps");
    let (p, f) = client(&d, &dir, "train", &[("TANDEM_CLASS", "training")]);
    let env = init_env(&p, &f);
    assert!(env.values().all(Option::is_none), "{env:?}: {p}");
    let st = d.stats();
    let c = client_by_pid(&st, p.pid()).unwrap_or_else(|| panic!("not listed: {st}"));
    assert!(c["mps_priority"].is_null(), "{c}");
    finish(p);
}
