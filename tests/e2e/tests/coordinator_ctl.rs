//! tandemctl: `status` names the running clients; `run -- CMD` starts a
//! coordinator when none runs, runs the job under the shim, and stops the
//! coordinator it started; with one running it uses it and leaves it up.

use std::process::Stdio;

use serde_json::Value;
use tandem_e2e::coord::{
    client_by_pid, clients, fetch_stats, host_command, kv, num, pids_mentioning, poll,
    ready_client_id, spawn_launchers, tandemctl, total, Proc, Tandemd, TestDir, EXIT, SETTLE,
};
use tandem_e2e::{artifacts, exit, host, Env};

/// `tandemctl status` prints the table header, then one row per client
/// starting with its id and pid and naming its executable; `--json` is the
/// stats document.
#[test]
fn tandemctl_status_prints_a_table_naming_the_running_clients() {
    let dir = TestDir::new("status");
    let d = Tandemd::start(&dir);
    let mut ls = spawn_launchers(d.socket(), 2, &["--rate", "500", "--until-stdin", "--hold"]);
    let ids: Vec<u64> = ls.iter_mut().map(ready_client_id).collect();
    poll(SETTLE, "both clients listed", || {
        let st = d.try_stats()?;
        if ls.iter().all(|l| client_by_pid(&st, l.pid()).is_some()) {
            Ok(())
        } else {
            Err(st.to_string())
        }
    });

    let out = tandemctl(d.socket(), &["status"])
        .stdin(Stdio::null())
        .output()
        .expect("run tandemctl status");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let all = format!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "tandemctl status failed: {all}");
    let header = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some("ID"))
        .unwrap_or_else(|| panic!("no table header starting with ID: {all}"));
    let cols: Vec<&str> = header.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "ID", "PID", "CLASS", "GPU", "KERNELS", "LAUNCH/s", "DROPPED", "MEM", "SHARED", "WAIT",
            "EXE"
        ],
        "table header: {all}"
    );
    for (l, id) in ls.iter().zip(&ids) {
        let row = text
            .lines()
            .find(|r| {
                let t: Vec<&str> = r.split_whitespace().collect();
                t.first() == Some(&id.to_string().as_str())
                    && t.get(1) == Some(&l.pid().to_string().as_str())
            })
            .unwrap_or_else(|| panic!("no row `{id} {} ...`: {all}", l.pid()));
        assert!(
            row.contains("launcher"),
            "row does not name the executable: {row:?}"
        );
    }

    let out = tandemctl(d.socket(), &["status", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("run tandemctl status --json");
    assert!(out.status.success(), "{out:?}");
    let st: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "status --json is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    for l in &ls {
        assert!(client_by_pid(&st, l.pid()).is_some(), "{st}");
    }

    for l in &mut ls {
        l.send_line("stop");
        l.wait_line("DONE ", EXIT);
        l.close_stdin();
        assert!(l.wait_exit(EXIT).success(), "{l}");
    }
}

/// `tandemctl run -- <launcher>` with the socket's environment only (no
/// LD_PRELOAD, no coordinator): the launcher runs under the shim, registered
/// with a coordinator tandemctl started; tandemctl exits with the job's
/// status, prints the job's stats line, and its coordinator is gone after.
#[test]
fn tandemctl_run_starts_a_coordinator_runs_the_job_and_stops_it() {
    let dir = TestDir::new("run");
    let sock = dir.socket();
    let sock_s = sock.to_str().expect("utf-8").to_string();
    let launcher = host("launcher");
    let launcher_s = launcher.to_str().expect("utf-8");

    for (args, want) in [
        (vec!["--count", "500"], exit::OK),
        (vec!["--no-such-option"], exit::USAGE),
    ] {
        let mut cmd = tandemctl(&sock, &["run", "--"]);
        cmd.arg(launcher_s).args(&args);
        cmd.env("LD_LIBRARY_PATH", &artifacts().lib_dir)
            .env_remove("LD_PRELOAD");
        let mut p = Proc::spawn("tandemctl run", cmd);
        p.close_stdin();
        let st = p.wait_exit(EXIT);
        assert_eq!(
            st.code(),
            Some(want),
            "tandemctl run must exit with the job's status: {p}"
        );
        if want == exit::OK {
            let job_pid = job_ran_registered(&p);
            let out = format!("{}{}", p.stdout(), p.stderr());
            assert!(
                out.lines().any(|l| !l.starts_with("READY ")
                    && !l.starts_with("DONE ")
                    && !l.starts_with("IDCHANGE ")
                    && l.split_whitespace().any(|t| t == job_pid.to_string())),
                "tandemctl printed no stats line for the job (pid {job_pid}): {p}"
            );
        }
        poll(
            SETTLE,
            "the coordinator tandemctl started to be gone",
            || {
                let left = pids_mentioning(&sock_s);
                if !left.is_empty() {
                    return Err(format!("processes still using {sock_s}: {left:?}"));
                }
                if sock.exists() || dir.stats_socket().exists() {
                    return Err("socket files left behind".into());
                }
                Ok(())
            },
        );
        assert!(fetch_stats(&dir.stats_socket()).is_err());
    }
}

/// The launcher's READY line (inherited stdout) shows it ran under the shim
/// and was registered; returns its pid.
#[track_caller]
fn job_ran_registered(p: &Proc) -> u32 {
    let ready = p
        .lines("READY ")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("the job printed no READY line: {p}"));
    let f = kv(&ready);
    assert_eq!(f["shim"], "1", "the job ran without the shim: {p}");
    assert!(
        f["client_id"].parse::<u64>().is_ok_and(|id| id != 0),
        "the job was not registered with a coordinator: {p}"
    );
    let done = p
        .lines("DONE ")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no DONE line: {p}"));
    assert_eq!(kv(&done)["launched"], "500", "{p}");
    f["pid"].parse().expect("pid")
}

/// With a coordinator already running, `tandemctl run` uses it (the job is
/// registered there and reclaimed when it exits) and leaves it running.
#[test]
fn tandemctl_run_uses_a_running_coordinator_and_leaves_it_up() {
    let dir = TestDir::new("runexisting");
    let d = Tandemd::start(&dir);
    let st0 = d.stats();
    let reclaimed0 = total(&st0, "clients_reclaimed");
    let mut cmd = tandemctl(d.socket(), &["run", "--"]);
    cmd.arg(host("launcher")).args(["--count", "500"]);
    cmd.env("LD_LIBRARY_PATH", &artifacts().lib_dir);
    let mut p = Proc::spawn("tandemctl run", cmd);
    p.close_stdin();
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "{p}");
    job_ran_registered(&p);
    poll(
        SETTLE,
        "the job reclaimed by the running coordinator",
        || {
            let st = d.try_stats()?;
            if total(&st, "clients_reclaimed") == reclaimed0 + 1 && clients(&st).is_empty() {
                Ok(())
            } else {
                Err(st.to_string())
            }
        },
    );
    let st = d.stats();
    assert_eq!(
        num(&st, "pid"),
        u64::from(d.pid()),
        "a different daemon answers: {st}"
    );
    assert!(total(&st, "launches") >= 500, "{st}");
}

/// The launcher host itself rejects bad usage (guards the USAGE case above).
#[test]
fn launcher_rejects_bad_usage() {
    let out = host_command("launcher", &["--no-such-option"], &Env::fake_only())
        .output()
        .expect("run launcher");
    assert_eq!(out.status.code(), Some(exit::USAGE));
}
