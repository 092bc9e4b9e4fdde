//! The shim's client side against odd coordinators: a newer one that
//! rejects it, a stalled one that never answers, TANDEM_CLASS=off and bad
//! values, and class claims checked against the coordinator's policy.

use std::os::unix::process::CommandExt;

use tandem_e2e::coord::{
    client_by_id, client_by_pid, client_env, clients, host_command, kv, poll, ready_client_id,
    spawn_host, total, FakeBehaviour, FakeCoordinator, Proc, Tandemd, TestDir, EXIT, SETTLE,
};
use tandem_proto::PROTOCOL_VERSION;

/// Runs a launcher to completion and returns it (exit 0 checked).
#[track_caller]
fn run_launcher(env: &tandem_e2e::Env, args: &[&str]) -> Proc {
    let mut p = spawn_host("launcher", args, env);
    p.close_stdin();
    let st = p.wait_exit(EXIT);
    assert!(st.success(), "launcher failed: {p}");
    p
}

#[track_caller]
fn ready_id(p: &Proc) -> String {
    let l = p
        .lines("READY ")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no READY: {p}"));
    kv(&l)
        .get("client_id")
        .cloned()
        .unwrap_or_else(|| panic!("no client_id: {p}"))
}

/// A coordinator speaking a newer protocol rejects the shim: the job runs
/// unscheduled to the end (client id 0), the shim says so in exactly one
/// stderr line naming the coordinator's version, and it does not retry
/// (one connection over the whole run, during which a 200 ms retry loop
/// would have connected several times).
#[test]
fn version_mismatch_reject_one_message_no_retry_storm() {
    let dir = TestDir::new("vmismatch");
    let fake = FakeCoordinator::start(&dir.socket(), FakeBehaviour::RejectVersion);
    let p = run_launcher(
        &client_env(&dir.socket()),
        &["--rate", "2000", "--count", "3000"],
    );
    assert_eq!(ready_id(&p), "0", "a rejected client has no id: {p}");
    let done = p
        .lines("DONE ")
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no DONE: {p}"));
    assert_eq!(kv(&done)["launched"], "3000", "{p}");
    let newer = (PROTOCOL_VERSION + 1).to_string();
    let lines: Vec<String> = p
        .stderr()
        .lines()
        .filter(|l| l.to_ascii_lowercase().contains("version"))
        .map(String::from)
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "want exactly one line about the version mismatch: {p}"
    );
    assert!(
        lines[0].contains(&newer),
        "the message must name the coordinator's version {newer}: {p}"
    );
    assert_eq!(
        fake.accepted(),
        1,
        "the shim reconnected after a Reject (retry storm): {p}"
    );
}

/// A coordinator that accepts and never answers: the shim's handshake is
/// bounded, the job runs to the end unregistered.
#[test]
fn stalled_coordinator_never_hangs_the_job() {
    let dir = TestDir::new("stalled");
    let fake = FakeCoordinator::start(&dir.socket(), FakeBehaviour::Silent);
    let p = run_launcher(&client_env(&dir.socket()), &["--count", "2000"]);
    assert_eq!(ready_id(&p), "0", "{p}");
    assert!(fake.accepted() >= 1, "the shim never tried to connect: {p}");
}

/// A FuncName the coordinator's socket could not take reaches tandemd on a
/// later launch of its function. tandemd is stopped while the job launches
/// 2,000 kernels for the first time, so their names fill its socket; the
/// last kernel, launched first after that and on every launch after, must
/// be named in `/stats` once tandemd reads again. Before the retry its name
/// was lost for the session: tandemd could not size the SM reservation
/// from its launches, nor detect a training job by it.
#[test]
fn a_kernel_first_launched_while_the_socket_was_full_is_named_later() {
    let dir = TestDir::new("fullsock");
    let mut d = Tandemd::start(&dir);
    let env = client_env(d.socket()).log("debug");
    let mut p = spawn_host(
        "launcher",
        &["--kernels", "2000", "--rate", "4000", "--until-stdin"],
        &env,
    );
    let id = ready_client_id(&mut p);
    d.signal(libc::SIGSTOP);
    p.wait_line("DISTINCT ", SETTLE);
    d.signal(libc::SIGCONT);
    poll(SETTLE, "tandemd to learn the last kernel's name", || {
        let st = d.try_stats()?;
        let c = client_by_id(&st, id).ok_or("the launcher is not listed")?;
        let top = &c["top_kernels"][0];
        if top["name"].as_str() == Some("k1999") {
            Ok(())
        } else {
            Err(format!("most launched: {top}"))
        }
    });
    p.close_stdin();
    assert!(p.wait_exit(EXIT).success(), "{p}");
    assert!(
        p.stderr()
            .contains("not sent (socket closed or full); tried again later"),
        "the socket never filled, so the retry went untested: {p}"
    );
}

/// TANDEM_CLASS=off: fully passive, never connects (the coordinator lists
/// nobody and rejected nothing).
#[test]
fn tandem_class_off_never_connects() {
    let dir = TestDir::new("classoff");
    let d = Tandemd::start(&dir);
    let p = run_launcher(
        &client_env(d.socket()).var("TANDEM_CLASS", "off"),
        &["--count", "2000"],
    );
    assert_eq!(ready_id(&p), "0", "{p}");
    let st = d.stats();
    assert!(clients(&st).is_empty(), "{st}");
    assert_eq!(
        total(&st, "clients_reclaimed"),
        0,
        "it connected once: {st}"
    );
    assert_eq!(total(&st, "rejected"), 0, "{st}");
}

/// A bad TANDEM_CLASS: one warning naming the accepted values, and the
/// default (auto) is used: the job registers.
#[test]
fn bad_tandem_class_warns_once_and_uses_the_default() {
    let dir = TestDir::new("classbad");
    let d = Tandemd::start(&dir);
    let mut l = spawn_host(
        "launcher",
        &["--count", "100", "--hold"],
        &client_env(d.socket()).var("TANDEM_CLASS", "fastest"),
    );
    ready_client_id(&mut l);
    l.wait_line("DONE ", EXIT);
    let st = poll(SETTLE, "the client listed", || {
        let st = d.try_stats()?;
        client_by_pid(&st, l.pid()).cloned().ok_or(st.to_string())
    });
    assert_eq!(st["class_claimed"].as_str(), Some("auto"), "{st}");
    l.close_stdin();
    assert!(l.wait_exit(EXIT).success(), "{l}");
    let err = l.stderr();
    let warns: Vec<&str> = err.lines().filter(|l| l.contains("fastest")).collect();
    assert_eq!(
        warns.len(),
        1,
        "want one warning naming the bad value: {err}"
    );
    for v in ["inference", "training", "auto", "off"] {
        assert!(
            warns[0].contains(v),
            "the warning must name the accepted values: {}",
            warns[0]
        );
    }
}

/// Class claims against the default policy: root may claim inference and
/// gets it; uid 65534 claiming inference is granted training with a reason.
#[test]
fn inference_claims_follow_the_policy() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED inference_claims_follow_the_policy: needs root to setuid");
        return;
    }
    let dir = TestDir::new("claims");
    let d = Tandemd::start(&dir);
    let env = client_env(d.socket()).var("TANDEM_CLASS", "inference");
    let root = spawn_host("launcher", &["--count", "100", "--hold"], &env);
    let mut cmd = host_command("launcher", &["--count", "100", "--hold"], &env);
    cmd.uid(65534).gid(65534);
    let nobody = Proc::spawn("launcher as nobody", cmd);
    let mut ls = [root, nobody];
    for l in &mut ls {
        ready_client_id(l);
    }
    let st = poll(SETTLE, "both clients listed", || {
        let st = d.try_stats()?;
        if ls.iter().all(|l| client_by_pid(&st, l.pid()).is_some()) {
            Ok(st)
        } else {
            Err(st.to_string())
        }
    });
    let r = client_by_pid(&st, ls[0].pid()).expect("root client");
    assert_eq!(r["class_claimed"].as_str(), Some("inference"), "{r}");
    assert_eq!(r["class"].as_str(), Some("inference"), "{r}");
    let n = client_by_pid(&st, ls[1].pid()).expect("nobody's client");
    assert_eq!(n["uid"].as_u64(), Some(65534), "{n}");
    assert_eq!(n["class_claimed"].as_str(), Some("inference"), "{n}");
    assert_eq!(
        n["class"].as_str(),
        Some("training"),
        "uid 65534 raised its own class: {n}"
    );
    assert!(
        n["class_reason"].as_str().is_some_and(|s| !s.is_empty()),
        "a refused claim must carry a reason: {n}"
    );
    for l in &mut ls {
        l.close_stdin();
        assert!(l.wait_exit(EXIT).success(), "{l}");
    }
}

/// The demo job (`scripts/run`'s `linked` host) granted training: the shim
/// places completion marks for it, with its own cuCtxSetCurrent,
/// cuEventCreate and cuEventRecord, which the program also calls. The
/// job's check (program's calls + the shim's = the driver's) holds: no
/// MISMATCH lines, because `tandem_driver_calls` counts the shim's calls of
/// the driver functions it does not hook too.
#[test]
fn the_demo_job_as_training_counts_the_shims_own_mark_calls() {
    let dir = TestDir::new("demo-training");
    let d = Tandemd::start(&dir);
    let env = client_env(d.socket()).var("TANDEM_CLASS", "training");
    let out = tandem_e2e::run_host("linked", &[], &env);
    out.assert_ok();
    assert!(out.mismatches().is_empty(), "{out}");
    let own = out.counts("SHIMOWN", "main");
    assert!(
        own.get("cuEventRecord").copied().unwrap_or(0) >= 1
            && own.get("cuEventCreate").copied().unwrap_or(0) >= 1,
        "a training job gets completion marks, so the shim records events of its own: {out}"
    );
}
