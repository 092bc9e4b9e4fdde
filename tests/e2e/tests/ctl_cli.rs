//! tandemctl's command line as operators type it (issue 24): `--version`,
//! `--help` per subcommand, `--opt=value`, shell exit codes for a command
//! that cannot run, registration through a wrapper, `top` in a pipe.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use tandem_e2e::coord::{
    client_env, coordinator_bins, poll, ready_client_id, spawn_host, tandemctl, tandemctl_ok,
    Tandemd, TestDir, EXIT, SETTLE,
};
use tandem_e2e::{artifacts, host};

fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run the command")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every client tandemd has seen, live and departed.
fn every_client(st: &Value) -> Vec<&Value> {
    ["clients", "departed"]
        .iter()
        .filter_map(|k| st[*k].as_array())
        .flatten()
        .collect()
}

#[test]
fn version_and_help_answer_with_exit_0() {
    let bins = coordinator_bins();
    let nowhere = Path::new("/nonexistent/tandemd.sock");
    let v = env!("CARGO_PKG_VERSION");
    for (cmd, want) in [
        (tandemctl(nowhere, &["--version"]), format!("tandemctl {v}")),
        (tandemctl(nowhere, &["-V"]), format!("tandemctl {v}")),
        (
            {
                let mut c = Command::new(&bins.tandemd);
                c.arg("--version");
                c
            },
            format!("tandemd {v}"),
        ),
    ] {
        let mut cmd = cmd;
        let o = output(&mut cmd);
        assert!(o.status.success(), "{cmd:?}: {}", text(&o));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), want, "{cmd:?}");
    }
    for sub in ["run", "status", "top", "set-class", "reload"] {
        let o = output(&mut tandemctl(nowhere, &[sub, "--help"]));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{sub} --help: {}", text(&o));
        assert!(
            out.contains(&format!("Usage: tandemctl {sub}")),
            "{sub} --help: {out}"
        );
    }
    let o = output(&mut tandemctl(nowhere, &["top", "--help"]));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("-b, --batch") && out.contains("-n, --iterations"),
        "{out}"
    );
    // A usage error says what was wrong and exits 2, as before.
    let o = output(&mut tandemctl(nowhere, &["no-such-command"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("no-such-command"), "{}", text(&o));
    let o = output(&mut tandemctl(nowhere, &["set-class", "1", "fast"]));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// `scripts/run --help` prints its usage and builds nothing.
#[test]
fn scripts_run_help() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/run");
    let o = output(Command::new(&script).arg("--help"));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.starts_with("usage: scripts/run"), "{out}");
    assert!(!text(&o).contains("building"), "--help built: {}", text(&o));
}

/// `--class=inference` and `--class inference` both reach the job as its claim.
#[test]
fn run_takes_class_in_both_option_forms() {
    let dir = TestDir::new("ctlclass");
    let d = Tandemd::start(&dir);
    for (form, class) in [
        (vec!["--class=inference"], "inference"),
        (vec!["--class", "training"], "training"),
    ] {
        let mut args = vec!["run"];
        args.extend(&form);
        args.push("--");
        let mut cmd = tandemctl(d.socket(), &args);
        cmd.arg(host("launcher")).args(["--count", "10"]);
        cmd.env("LD_LIBRARY_PATH", &artifacts().lib_dir);
        let o = output(&mut cmd);
        assert!(o.status.success(), "{form:?}: {}", text(&o));
        let pid: u32 = String::from_utf8_lossy(&o.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("READY pid="))
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no READY line: {}", text(&o)));
        poll(SETTLE, "the job listed with its claim", || {
            let st = d.try_stats()?;
            let c = every_client(&st)
                .into_iter()
                .find(|c| c["pid"] == pid)
                .ok_or_else(|| st.to_string())?
                .clone();
            assert_eq!(c["class_claimed"], class, "{form:?}: {c}");
            Ok(())
        });
    }
}

/// A command that cannot run exits as a shell's would: 127 not found, 126
/// not executable, with the shell's words; the coordinator tandemctl
/// started for it is stopped.
#[test]
fn run_exits_127_for_a_missing_command_and_126_for_one_not_executable() {
    let dir = TestDir::new("ctlnoexec");
    let not_exec = dir.path().join("not-executable");
    std::fs::write(&not_exec, "#!/bin/sh\nexit 0\n").expect("write");
    let not_exec = not_exec.to_str().expect("utf-8").to_string();
    for (cmd, code, words) in [
        (
            "/nonexistent",
            127,
            "/nonexistent: No such file or directory",
        ),
        (
            "tandem-no-such-command",
            127,
            "tandem-no-such-command: command not found",
        ),
        (not_exec.as_str(), 126, "not-executable: Permission denied"),
    ] {
        let o = output(&mut tandemctl(&dir.socket(), &["run", "--", cmd]));
        assert_eq!(o.status.code(), Some(code), "{cmd}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(words), "{cmd}: {err}");
        assert!(
            !dir.socket().exists(),
            "the started tandemd was left: {err}"
        );
    }
}

/// `tandemctl run -- sh -c '...'`: the shell never registers, the launcher
/// it starts does; tandemctl counts it as the job's and names its pid.
#[test]
fn run_finds_the_process_a_wrapper_started() {
    let dir = TestDir::new("ctlwrap");
    let d = Tandemd::start(&dir);
    let launcher = host("launcher");
    // `; true` keeps sh from exec'ing the launcher in its own place.
    let script = format!("{} --count 10; true", launcher.display());
    let mut cmd = tandemctl(d.socket(), &["run", "--", "sh", "-c", &script]);
    cmd.env("LD_LIBRARY_PATH", &artifacts().lib_dir);
    let o = output(&mut cmd);
    let all = text(&o);
    assert!(o.status.success(), "{all}");
    let pid: u32 = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("READY pid="))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no READY line: {all}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("registered with tandemd ("), "{all}");
    let said = err
        .lines()
        .find(|l| l.starts_with(&format!("tandemctl run: pid {pid} (")))
        .unwrap_or_else(|| panic!("no line naming pid {pid}: {all}"));
    assert!(
        said.contains("launcher") && said.contains("started by the job, pid "),
        "{said}"
    );
    assert!(
        err.lines().any(|l| l
            .split_whitespace()
            .nth(1)
            .is_some_and(|p| p == pid.to_string())),
        "no table row for pid {pid}: {all}"
    );
}

/// `tandemctl top` in a pipe: plain tables (no escape codes), `-n` of them,
/// exit 0; with no tandemd it fails instead of printing the error forever.
#[test]
fn top_in_a_pipe_writes_plain_tables_and_fails_without_tandemd() {
    let dir = TestDir::new("ctltop");
    let o = output(&mut tandemctl(&dir.socket(), &["top", "-b", "-n", "2"]));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot reach"),
        "{}",
        text(&o)
    );
    let d = Tandemd::start(&dir);
    for (args, n) in [
        (&["top", "-b", "-n", "2", "-d", "0.1"][..], 2),
        (&["top", "-n", "1"], 1),
    ] {
        let o = output(&mut tandemctl(d.socket(), args));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{args:?}: {}", text(&o));
        assert!(
            !out.contains('\x1b'),
            "{args:?} wrote escape codes: {out:?}"
        );
        let tables = out
            .lines()
            .filter(|l| l.split_whitespace().next() == Some("ID"))
            .count();
        assert_eq!(tables, n, "{args:?}: {out}");
    }
}

/// A reader that has gone (`tandemctl top -b | head`) ends `top` with exit
/// 0 instead of refreshing forever into a closed pipe, and `status` exits 0
/// instead of panicking on its write.
#[test]
fn top_and_status_stop_quietly_when_the_reader_has_gone() {
    let dir = TestDir::new("ctlgone");
    let d = Tandemd::start(&dir);
    for args in [&["top", "-b", "-d", "0.05"][..], &["status"]] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let mut child = tandemctl(d.socket(), args)
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tandemctl");
        let start = std::time::Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if start.elapsed() > EXIT {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} still ran {EXIT:?} after its reader had gone");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
            .expect("read stderr");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(status.code(), Some(0), "{args:?}: {err}");
    }
}

/// The shim names the driver it loaded, and says when it is tandem's fake
/// driver instead of calling it the real one.
#[test]
fn the_shim_says_it_loaded_the_fake_driver() {
    let dir = TestDir::new("ctlwords");
    let d = Tandemd::start(&dir);
    let mut cmd = tandemctl(d.socket(), &["run", "--"]);
    cmd.arg(host("launcher")).args(["--count", "1"]);
    cmd.env("LD_LIBRARY_PATH", &artifacts().lib_dir)
        .env("TANDEM_LOG", "debug");
    let o = output(&mut cmd);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}", text(&o));
    let line = err
        .lines()
        .find(|l| l.contains("CUDA driver \"libcuda.so.1\" loaded from \""))
        .unwrap_or_else(|| panic!("no driver line: {err}"));
    assert!(line.contains("(tandem's fake driver"), "{line}");
    assert!(!err.contains("real driver"), "{err}");
}

/// After `set-class ID inference` on an idle training job, the GPU line
/// says one inference job, no training, and training's share of the last
/// 2 s of GPU work falls to 0% (it read "training 100% of recent work"
/// forever: the share windows only rolled on new work).
#[test]
fn the_gpu_line_after_set_class_tells_the_truth() {
    let dir = TestDir::new("ctlsetclass");
    let d = Tandemd::start(&dir);
    let env = client_env(d.socket()).var("TANDEM_CLASS", "training");
    let mut l = spawn_host("launcher", &["--count", "200", "--hold"], &env);
    let id = ready_client_id(&mut l);
    l.wait_line("DONE ", EXIT);
    let gpu_line = |out: &str| {
        out.lines()
            .find(|x| x.contains(" inference, ") && x.contains(" training"))
            .map(str::to_string)
    };
    poll(SETTLE, "the training job on the GPU line", || {
        let out = tandemctl_ok(d.socket(), &["status"]);
        match gpu_line(&out) {
            Some(g) if g.contains("0 inference, 1 training") => Ok(()),
            _ => Err(out),
        }
    });
    tandemctl_ok(d.socket(), &["set-class", &id.to_string(), "inference"]);
    let line = poll(SETTLE, "no training in the GPU line", || {
        let out = tandemctl_ok(d.socket(), &["status"]);
        match gpu_line(&out) {
            Some(g)
                if g.contains("1 inference, 0 training")
                    && g.contains("training 0% of GPU work in the last 2 s") =>
            {
                Ok(g)
            }
            _ => Err(out),
        }
    });
    assert!(!line.contains("100%"), "{line}");
    l.close_stdin();
    assert!(l.wait_exit(EXIT).success(), "{l}");
}
