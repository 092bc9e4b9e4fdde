//! Host processes run beside the test, `tandemctl`, launchers and `/proc`.

use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{artifacts, host, Env};

use super::bins::coordinator_bins;
use super::wait::SETTLE;

/// A spawned process whose stdout/stderr are collected by reader threads
/// while it runs, with its stdin held open (piped) until
/// [`close_stdin`](Self::close_stdin). Killed and reaped on drop.
pub struct Proc {
    name: String,
    child: Option<Child>,
    pid: u32,
    stdin: Option<ChildStdin>,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<(JoinHandle<()>, mpsc::Receiver<()>)>,
    status: Option<ExitStatus>,
}

fn collect(
    src: impl Read + Send + 'static,
    sink: Arc<Mutex<String>>,
) -> (JoinHandle<()>, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => sink
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&String::from_utf8_lossy(&line)),
            }
        }
        let _ = tx.send(());
    });
    (h, rx)
}

impl Proc {
    /// Spawns `cmd` (stdin, stdout, stderr piped).
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({cmd:?}): {e}"));
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            collect(child.stdout.take().expect("piped stdout"), out.clone()),
            collect(child.stderr.take().expect("piped stderr"), err.clone()),
        ];
        Proc {
            name: name.to_string(),
            pid: child.id(),
            stdin: child.stdin.take(),
            child: Some(child),
            out,
            err,
            readers,
            status: None,
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Stdout so far.
    pub fn stdout(&self) -> String {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stderr so far.
    pub fn stderr(&self) -> String {
        self.err.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stdout lines starting with `prefix`, so far.
    pub fn lines(&self, prefix: &str) -> Vec<String> {
        self.stdout()
            .lines()
            .filter(|l| l.starts_with(prefix))
            .map(String::from)
            .collect()
    }

    /// The exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Some(c) = self.child.as_mut() {
                self.status = c.try_wait().expect("try_wait");
            }
        }
        self.status
    }

    /// Waits (bounded by `timeout`) for a stdout line starting with `prefix`
    /// and returns it; panics with the output if the process exits first or
    /// the line does not come.
    #[track_caller]
    pub fn wait_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(l) = self.lines(prefix).into_iter().next() {
                return l;
            }
            if let Some(st) = self.try_wait() {
                self.join_readers();
                if let Some(l) = self.lines(prefix).into_iter().next() {
                    return l;
                }
                panic!(
                    "{} exited ({st}) without printing `{prefix}`:\n{self}",
                    self.name
                );
            }
            if start.elapsed() > timeout {
                panic!(
                    "{} printed no `{prefix}` line within {timeout:?}:\n{self}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes one line to the process's stdin.
    pub fn send_line(&mut self, line: &str) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = writeln!(s, "{line}");
            let _ = s.flush();
        }
    }

    /// Sends `cmd` and returns the answer: the next new stdout line starting
    /// with `prefix`; panics with the output if the process exits first or
    /// no answer comes within `timeout`.
    #[track_caller]
    pub fn ask(&mut self, cmd: &str, prefix: &str, timeout: Duration) -> String {
        let before = self.lines(prefix).len();
        self.send_line(cmd);
        let start = Instant::now();
        loop {
            if let Some(l) = self.lines(prefix).get(before) {
                return l.clone();
            }
            assert!(
                self.try_wait().is_none() && start.elapsed() < timeout,
                "no answer to {cmd:?}:\n{self}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Closes the process's stdin (end-of-file).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    fn join_readers(&mut self) {
        // A grandchild that inherited the pipes could keep them open forever:
        // wait a bounded time for end-of-file, then leave the reader behind.
        for (h, rx) in self.readers.drain(..) {
            if rx.recv_timeout(Duration::from_secs(5)).is_ok() {
                let _ = h.join();
            }
        }
    }

    /// Waits (bounded by `timeout`) for the process to exit; panics with its
    /// output if it does not (it is killed by the drop guard).
    #[track_caller]
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                self.join_readers();
                return st;
            }
            if start.elapsed() > timeout {
                panic!(
                    "{} (pid {}) did not exit within {timeout:?} (hung?):\n{self}",
                    self.name, self.pid
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.status.is_none() {
                let _ = c.kill();
                self.status = c.wait().ok();
            }
        }
    }
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{} pid {} status {:?}]\n--- stdout ---\n{}--- stderr ---\n{}",
            self.name,
            self.pid,
            self.status,
            self.stdout(),
            self.stderr()
        )
    }
}

impl fmt::Debug for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stdin = None;
        self.kill9();
    }
}

/// The command that runs host `name` with `args` in `env` (building it on
/// first use), as [`run_host`](crate::run_host) would run it.
pub fn host_command(name: &str, args: &[&str], env: &Env) -> Command {
    let bin = host(name);
    let mut cmd = Command::new(&bin);
    cmd.args(args);
    env.apply(&mut cmd, artifacts());
    cmd
}

/// The command that runs the program at `bin` (e.g. a copy of a host under
/// another path) with `args` in `env`.
pub fn command_at(bin: &Path, args: &[&str], env: &Env) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(args);
    env.apply(&mut cmd, artifacts());
    cmd
}

/// Starts host `name` with `args` in `env`, running concurrently with the test.
pub fn spawn_host(name: &str, args: &[&str], env: &Env) -> Proc {
    Proc::spawn(name, host_command(name, args, env))
}

/// The shim over the fake driver, registering with the coordinator on `socket`.
pub fn client_env(socket: &Path) -> Env {
    Env::with_shim().var(
        "TANDEM_SOCKET",
        socket.to_str().expect("socket path is UTF-8"),
    )
}

/// `tandemctl <args>` with TANDEM_SOCKET = `socket` and a clean environment.
pub fn tandemctl(socket: &Path, args: &[&str]) -> Command {
    let bins = coordinator_bins();
    let mut cmd = Command::new(&bins.tandemctl);
    crate::strip_inherited(&mut cmd);
    cmd.args(args).env("TANDEM_SOCKET", socket);
    cmd
}

/// Runs `tandemctl <args>` (no stdin) and returns its stdout; panics, with
/// both of its outputs, when it fails.
#[track_caller]
pub fn tandemctl_ok(socket: &Path, args: &[&str]) -> String {
    let out = tandemctl(socket, args)
        .stdin(Stdio::null())
        .output()
        .expect("run tandemctl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "tandemctl {args:?} failed ({}): {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs `cmd` (no stdin), which must fail, and returns its stdout and
/// stderr joined; panics, with them, when it succeeds. `what` names it.
#[track_caller]
pub fn output_of_failing(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{what} succeeded: {text}");
    text
}

/// Parses `key=value` tokens of a host output line.
pub fn kv(line: &str) -> BTreeMap<String, String> {
    line.split_whitespace()
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// `key=<u64>` of a host output line; panics naming the line.
#[track_caller]
pub fn kv_u64(line: &str, key: &str) -> u64 {
    kv(line)
        .get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no numeric {key}= in {line:?}"))
}

/// utime + stime of `pid` in clock ticks (`/proc/<pid>/stat` fields 14, 15).
pub fn cpu_ticks(pid: u32) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // The command name (field 2) may contain spaces: fields after the last ')'.
    let rest = &s[s.rfind(')').ok_or("no ')' in stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let get = |i: usize| -> Result<u64, String> {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("bad /proc/{pid}/stat: {s}"))
    };
    Ok(get(11)? + get(12)?)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`).
pub fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// Pids of live (not zombie) processes whose command line or environment
/// contains `needle` (the environment is readable for root's and our own
/// processes).
pub fn pids_mentioning(needle: &str) -> Vec<u32> {
    let mut v = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return v;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let mut hay = Vec::new();
        for f in ["cmdline", "environ"] {
            if let Ok(b) = std::fs::read(format!("/proc/{pid}/{f}")) {
                hay.extend_from_slice(&b);
                hay.push(0);
            }
        }
        let hay = String::from_utf8_lossy(&hay).replace('\0', " ");
        if !hay.contains(needle) {
            continue;
        }
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rfind(')')
                    .map(|i| s[i + 1..].trim_start().starts_with('Z'))
            })
            .unwrap_or(false);
        if !zombie {
            v.push(pid);
        }
    }
    v
}

/// Resolution paths the launcher host takes, cycled over by [`spawn_launchers`].
pub const LAUNCHER_PATHS: &[&str] = &["linked", "dlopen", "gpa", "linked-ptds"];

/// Starts `n` launcher hosts registering with the coordinator on `socket`,
/// launcher `i` resolving the driver through `LAUNCHER_PATHS[i % 4]`, each
/// with `args` after `--path`.
pub fn spawn_launchers(socket: &Path, n: usize, args: &[&str]) -> Vec<Proc> {
    let env = client_env(socket);
    (0..n)
        .map(|i| {
            let mut a = vec!["--path", LAUNCHER_PATHS[i % LAUNCHER_PATHS.len()]];
            a.extend_from_slice(args);
            spawn_host("launcher", &a, &env)
        })
        .collect()
}

/// Waits for the launcher's `READY` line and returns the client id it was
/// registered under; panics if the shim was not loaded or did not register.
#[track_caller]
pub fn ready_client_id(p: &mut Proc) -> u64 {
    let l = p.wait_line("READY ", SETTLE);
    assert!(
        kv(&l).get("shim").map(String::as_str) == Some("1"),
        "launcher ran without the shim: {l}\n{p}"
    );
    let id = kv(&l).get("client_id").cloned().unwrap_or_default();
    let id: u64 = id.parse().unwrap_or_else(|_| {
        panic!("the shim exports no tandem_client_id (READY line {l:?}):\n{p}")
    });
    assert_ne!(
        id, 0,
        "launcher not registered with the coordinator after cuInit (tandem_client_id() == 0):\n{p}"
    );
    id
}

impl Proc {
    /// Waits (bounded by `timeout`) until `pred(stdout)` holds; panics with
    /// the output (naming `what`) otherwise.
    #[track_caller]
    pub fn wait_stdout(&mut self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) {
        let start = Instant::now();
        loop {
            if pred(&self.stdout()) {
                return;
            }
            if let Some(st) = self.try_wait() {
                self.join_readers();
                if pred(&self.stdout()) {
                    return;
                }
                panic!("{} exited ({st}) before {what}:\n{self}", self.name);
            }
            if start.elapsed() > timeout {
                panic!("{}: no {what} within {timeout:?}:\n{self}", self.name);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
