//! `tandemctl run [--class C] -- CMD...`: run a job under libtandem.so with a
//! coordinator, starting a private tandemd when none answers (and stopping
//! only that one afterwards).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client;
use crate::sock::{self, Probe};
use crate::state::ClientSnapshot;

/// How long a started tandemd may take to listen.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);

/// The directory of the running executable (where cargo also puts tandemd and libtandem.so).
fn exe_dir() -> Result<PathBuf, String> {
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find tandemctl's own path: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| "tandemctl's path has no directory".into())
}

/// Where the shim is: `$TANDEM_SHIM`, else `libtandem.so` beside tandemctl.
pub fn find_shim(dir: &Path, env: Option<OsString>) -> Result<PathBuf, String> {
    let (p, from_env) = match env.filter(|v| !v.is_empty()) {
        Some(v) => (PathBuf::from(v), true),
        None => (dir.join("libtandem.so"), false),
    };
    if p.is_file() {
        Ok(p)
    } else if from_env {
        Err(format!(
            "TANDEM_SHIM={} does not name a file; point it at libtandem.so",
            p.display()
        ))
    } else {
        Err(format!(
            "libtandem.so not found next to tandemctl ({}); build it (cargo build -p tandem-shim) or set TANDEM_SHIM=/path/to/libtandem.so",
            p.display()
        ))
    }
}

/// `tandemctl run`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The job runs with LD_PRELOAD=libtandem.so (beside tandemctl, or $TANDEM_SHIM), \
TANDEM_CLASS and TANDEM_SOCKET set. When it exits, tandemctl prints the line of every process of \
the job that registered with tandemd, and exits with the job's status \
(127: CMD not found, 126: CMD found but not executable, 128+N: killed by signal N)."
)]
pub struct Args {
    /// The class the job claims (TANDEM_CLASS); tandemd's policy decides what it gets
    #[arg(long, value_name = "CLASS", default_value = "auto",
          value_parser = ["inference", "training", "auto", "off"])]
    pub class: String,
    /// The command and its arguments (put -- before it when it has options of its own)
    #[arg(value_name = "CMD", required = true, trailing_var_arg = true)]
    pub cmd: Vec<OsString>,
}

/// Start tandemd on `socket` with the built-in defaults; wait until it listens.
fn start_tandemd(dir: &Path, socket: &Path) -> Result<Child, String> {
    let bin = dir.join("tandemd");
    if !bin.is_file() {
        return Err(format!(
            "no coordinator answers on {} and tandemd is not next to tandemctl ({}); start tandemd yourself or build it (cargo build -p tandem-coordinator)",
            socket.display(),
            bin.display()
        ));
    }
    let mut cmd = Command::new(&bin);
    cmd.arg("--no-config").arg("--socket").arg(socket);
    if std::env::var_os("TANDEM_LOG").is_none() {
        cmd.env("TANDEM_LOG", "warn");
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!(
                "tandemd exited before it listened ({st}); see its message above"
            ));
        }
        if matches!(sock::probe(socket), Ok(Probe::Live))
            && tandem_proto::paths::stats_socket(socket).exists()
        {
            return Ok(child);
        }
        if Instant::now() >= deadline {
            stop(&mut child);
            return Err(format!(
                "tandemd did not listen on {} within {} s",
                socket.display(),
                START_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(child: &mut Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

fn preload(shim: &Path) -> OsString {
    let mut v = shim.as_os_str().to_owned();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        v.push(OsStr::new(" "));
        v.push(old);
    }
    v
}

/// The exit code and message a shell gives for a command it cannot run:
/// 127 when it is not found, 126 when it is found but cannot be executed.
#[must_use]
pub fn spawn_failure(cmd: &OsStr, e: &std::io::Error) -> (u8, String) {
    let name = Path::new(cmd).display();
    let has_slash = cmd.as_encoded_bytes().contains(&b'/');
    match e.kind() {
        std::io::ErrorKind::NotFound if has_slash => {
            (127, format!("{name}: No such file or directory"))
        }
        std::io::ErrorKind::NotFound => (127, format!("{name}: command not found")),
        std::io::ErrorKind::PermissionDenied => (126, format!("{name}: Permission denied")),
        _ => (126, format!("{name}: cannot execute: {e}")),
    }
}

/// The clients that belong to the job `pid`: it or a process it started
/// (its pid among their ancestors when they registered), registered after
/// the client id `before`; in id order.
pub fn of_job<'a>(
    clients: impl Iterator<Item = &'a ClientSnapshot>,
    pid: u32,
    before: u64,
) -> Vec<&'a ClientSnapshot> {
    let mut v: Vec<&ClientSnapshot> = clients
        .filter(|c| c.id > before && (c.pid == pid || c.ancestors.contains(&pid)))
        .collect();
    v.sort_by_key(|c| c.id);
    v.dedup_by_key(|c| c.id);
    v
}

/// Whether any of the job's clients is still listed live although its
/// process is gone: the coordinator has not yet noticed the hang-up, and its
/// counts miss what the ring still holds (its last drain comes at reclaim).
fn departing<'a>(
    live_of_job: impl IntoIterator<Item = &'a ClientSnapshot>,
    alive: impl Fn(u32) -> bool,
) -> bool {
    live_of_job.into_iter().any(|c| !alive(c.pid))
}

/// The stats after the job exited: wait (at most `FINAL_WAIT`) until the
/// coordinator has reclaimed every client of the job whose process is gone,
/// so that their rows count everything they reported.
fn final_snapshot(stats: &Path, pid: u32, before: u64) -> Result<crate::state::Snapshot, String> {
    const FINAL_WAIT: Duration = Duration::from_secs(3);
    let alive = |p: u32| Path::new(&format!("/proc/{p}")).exists();
    let until = Instant::now() + FINAL_WAIT;
    loop {
        let s = client::snapshot(stats, client::TIMEOUT)?;
        let live_of_job = of_job(s.clients.iter(), pid, before);
        if !departing(live_of_job, alive) || Instant::now() >= until {
            return Ok(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `tandemctl run`; returns the exit code (the job's, or 1/2 for our errors).
pub fn run(socket: &Path, args: &Args) -> u8 {
    match run_inner(socket, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tandemctl run: {e}");
            1
        }
    }
}

fn run_inner(socket: &Path, args: &Args) -> Result<u8, String> {
    let (class, cmd) = (&args.class, &args.cmd);
    let dir = exe_dir()?;
    let shim = find_shim(&dir, std::env::var_os("TANDEM_SHIM"))?;
    sock::sockaddr(socket).map_err(|e| e.to_string())?;
    let mut started = match sock::probe(socket) {
        Ok(Probe::Live) => None,
        Ok(_) => Some(start_tandemd(&dir, socket)?),
        Err(e) => return Err(format!("bad socket path {}: {e}", socket.display())),
    };
    // The job gets Ctrl-C; we stay to clean up.
    let interrupted = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&interrupted));
    let stats = tandem_proto::paths::stats_socket(socket);
    // Clients registered before the job are not the job's, whatever their pids.
    let before = client::snapshot(&stats, client::TIMEOUT)
        .ok()
        .and_then(|s| s.clients.iter().chain(&s.departed).map(|c| c.id).max())
        .unwrap_or(0);
    let spawned = Command::new(&cmd[0])
        .args(&cmd[1..])
        .env("LD_PRELOAD", preload(&shim))
        .env("TANDEM_CLASS", class)
        .env("TANDEM_SOCKET", socket)
        .spawn();
    let mut job = match spawned {
        Ok(j) => j,
        Err(e) => {
            if let Some(d) = started.as_mut() {
                stop(d);
            }
            let (code, msg) = spawn_failure(&cmd[0], &e);
            eprintln!("tandemctl run: {msg}");
            return Ok(code);
        }
    };
    let pid = job.id();
    let status = job.wait().map_err(|e| format!("waiting for the job: {e}"));
    // The job's final lines: it has left, so look among departed clients too.
    match final_snapshot(&stats, pid, before) {
        Ok(s) => {
            let mine = of_job(s.clients.iter().chain(&s.departed), pid, before);
            if mine.is_empty() {
                eprintln!("tandemctl run: the job (pid {pid}) and the processes it started never registered with tandemd (no CUDA calls, TANDEM_CLASS=off, or the shim could not connect)");
            } else {
                for c in &mine {
                    let how = if c.pid == pid {
                        "the job itself".to_string()
                    } else {
                        format!("started by the job, pid {pid}")
                    };
                    eprintln!(
                        "tandemctl run: pid {} ({}, {how}) registered as client {}",
                        c.pid, c.exe, c.id
                    );
                }
                eprintln!("{}", super::status_table::HEADER);
                for c in mine {
                    eprintln!("{}", super::status_table::row(c));
                }
            }
        }
        Err(e) => eprintln!("tandemctl run: could not read the job's stats: {e}"),
    }
    if let Some(d) = started.as_mut() {
        stop(d);
    }
    let status = status?;
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn parse(args: &[&str]) -> Result<Args, String> {
        let cli = super::super::Cli::try_parse_from(
            ["tandemctl", "run"].iter().chain(args).map(OsString::from),
        )
        .map_err(|e| e.to_string())?;
        match cli.command {
            super::super::Command::Run(a) => Ok(a),
            other => panic!("not run: {other:?}"),
        }
    }

    #[test]
    fn parses_class_and_command() {
        let a = parse(&["--class", "inference", "--", "python", "-c", "x"]).unwrap();
        assert_eq!(a.class, "inference");
        assert_eq!(a.cmd, os(&["python", "-c", "x"]));
        let a = parse(&["--class=training", "--", "sh", "-c", "x"]).unwrap();
        assert_eq!(a.class, "training");
        assert_eq!(a.cmd, os(&["sh", "-c", "x"]));
        // Without --: the first word starts the command, whose options stay its own.
        let a = parse(&["python", "-c", "x", "--class", "y"]).unwrap();
        assert_eq!(a.class, "auto");
        assert_eq!(a.cmd, os(&["python", "-c", "x", "--class", "y"]));
        let a = parse(&["--", "--odd-name"]).unwrap();
        assert_eq!(a.cmd, os(&["--odd-name"]));
        assert!(parse(&["--class", "fast", "--", "x"]).is_err());
        assert!(parse(&["--"]).is_err());
        assert!(parse(&[]).is_err());
    }

    #[test]
    fn the_final_rows_wait_for_clients_whose_process_is_gone() {
        use crate::state::test_client;
        let job = test_client(5, serde_json::json!({"pid": 100}));
        let child = test_client(6, serde_json::json!({"pid": 101, "ancestors": [100]}));
        let both = [job.clone(), child.clone()];
        // Everyone still running: nothing to wait for.
        assert!(!departing(&both, |_| true));
        // The job exited but tandemd still lists it live: wait.
        assert!(departing(&both, |p| p != 100));
        // A child that outlives the job is not waited for.
        assert!(!departing([&child], |p| p != 100));
        // The job itself is found among the live rows by pid or ancestry.
        let live = of_job(both.iter(), 100, 4);
        assert_eq!(live.len(), 2);
        assert!(
            of_job(both.iter(), 100, 6).is_empty(),
            "registered before the job"
        );
    }

    #[test]
    fn shim_lookup_names_what_to_do() {
        let e = find_shim(Path::new("/nonexistent-dir"), None).unwrap_err();
        assert!(
            e.contains("TANDEM_SHIM") && e.contains("libtandem.so"),
            "{e}"
        );
        let e = find_shim(Path::new("/"), Some("/nonexistent.so".into())).unwrap_err();
        assert!(e.contains("TANDEM_SHIM=/nonexistent.so"), "{e}");
        assert_eq!(
            find_shim(Path::new("/"), Some("/bin/sh".into())).unwrap(),
            PathBuf::from("/bin/sh")
        );
    }
}
