//! Harness for the coordinator system tests and benchmarks: builds and finds
//! `tandemd` / `tandemctl`, runs a `tandemd` on a private socket directory,
//! talks HTTP to its stats socket, runs host processes concurrently, checks
//! Prometheus text, and speaks the raw wire protocol as a (possibly hostile)
//! peer.
//!
//! Everything spawned here is killed (`SIGKILL`) and reaped when its guard is
//! dropped, so a failing test leaves no process behind. Waits are bounded
//! polls ([`poll`]) with generous deadlines; nothing here measures time.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::{artifacts, host, Env};

/// Deadline for anything a healthy system does "at once" (a coordinator
/// starting, a client registering, counts settling). Generous: the tests run
/// on loaded 2-core CI machines. Not a performance bound.
pub const SETTLE: Duration = Duration::from_secs(20);

/// Deadline for a host process that was told to finish.
pub const EXIT: Duration = Duration::from_secs(60);

// ------------------------------------------------------------------ binaries

/// The coordinator's binaries, built by [`coordinator_bins`].
#[derive(Debug)]
pub struct CoordBins {
    /// `target/<profile>/tandemd`
    pub tandemd: PathBuf,
    /// `target/<profile>/tandemctl`
    pub tandemctl: PathBuf,
}

/// `cargo build ARGS` with the same cargo, target dir and profile as the
/// shim and fake driver of [`artifacts`]; returns those artifacts.
fn build_beside_the_shim(args: &[&str]) -> &'static crate::Artifacts {
    let a = artifacts();
    let profile = a
        .profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile dir name");
    crate::cargo_build(&a.target_dir, profile, args);
    a
}

/// Builds (once per process) `tandemd` and `tandemctl` with the same cargo,
/// target dir and profile as the running test, next to `libtandem.so` (which
/// `tandemctl run` looks for beside itself). Also builds the shim and the
/// fake driver ([`artifacts`]).
pub fn coordinator_bins() -> &'static CoordBins {
    static BINS: OnceLock<CoordBins> = OnceLock::new();
    BINS.get_or_init(|| {
        let a = build_beside_the_shim(&["-p", "tandem-coordinator", "--bins"]);
        let bins = CoordBins {
            tandemd: a.profile_dir.join("tandemd"),
            tandemctl: a.profile_dir.join("tandemctl"),
        };
        for p in [&bins.tandemd, &bins.tandemctl] {
            assert!(
                p.is_file(),
                "`cargo build -p tandem-coordinator --bins` succeeded but {} does not exist \
                 (coordinator/src/bin/ must define tandemd and tandemctl)",
                p.display()
            );
        }
        bins
    })
}

/// Builds (once per process) the model's `tandem-sim`, which tandemd runs
/// for `/predict` (found through `$TANDEM_SIM`).
pub fn tandem_sim() -> &'static Path {
    static SIM: OnceLock<PathBuf> = OnceLock::new();
    SIM.get_or_init(|| {
        let a = build_beside_the_shim(&["-p", "tandem-gpusim", "--bin", "tandem-sim"]);
        let p = a.profile_dir.join("tandem-sim");
        assert!(p.is_file(), "{} was not built", p.display());
        p
    })
}

/// `tandemd --print-default-config` (cached): the documented defaults, used as
/// every test's config file so no test depends on /etc/tandem/tandemd.toml.
pub fn default_config() -> &'static str {
    static CFG: OnceLock<String> = OnceLock::new();
    CFG.get_or_init(|| {
        let bins = coordinator_bins();
        let out = Command::new(&bins.tandemd)
            .arg("--print-default-config")
            .env_remove("TANDEM_SOCKET")
            .env_remove("TANDEM_LOG")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", bins.tandemd.display()));
        assert!(
            out.status.success(),
            "tandemd --print-default-config failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("default config is UTF-8")
    })
}

/// `config` (the default, or one derived from it) with completion marks
/// turned off: `[scheduler] mark_every_ns = 0` and `[trace] mark_every_ns
/// = 0` in place of the default's values; panics if those lines are not
/// there.
#[track_caller]
pub fn without_marks(config: &str) -> String {
    let off = config.replacen("\nmark_every_ns = 500000\n", "\nmark_every_ns = 0\n", 1);
    assert_ne!(
        off, config,
        "the config sets the default [scheduler] mark_every_ns"
    );
    let off2 = off.replacen("\nmark_every_ns = 1000000\n", "\nmark_every_ns = 0\n", 1);
    assert_ne!(
        off2, off,
        "the config sets the default [trace] mark_every_ns"
    );
    off2
}

// ------------------------------------------------------------------- polling

/// Calls `f` until it returns `Ok`, at most `timeout`; panics with `what` and
/// the last error otherwise. A bounded wait for something that must happen,
/// never a timing assertion.
#[track_caller]
pub fn poll<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    let mut sleep = Duration::from_millis(5);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if start.elapsed() >= timeout => {
                panic!("gave up after {timeout:?} waiting for {what}: {e}")
            }
            Err(_) => {}
        }
        std::thread::sleep(sleep);
        sleep = (sleep * 2).min(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------- temp dirs

/// A unique directory under the system temp dir (mode 0755 so that an
/// unprivileged peer can reach the sockets in it), removed on drop unless
/// the test is failing (then its path is printed, with the logs in it).
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// `/tmp/tandem-e2e-<tag>-<pid>-<n>`.
    pub fn new(tag: &str) -> TestDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("tandem-e2e-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        TestDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `<dir>/tandemd.sock`, the main socket of this test's coordinator.
    pub fn socket(&self) -> PathBuf {
        self.path.join("tandemd.sock")
    }

    /// `<dir>/stats.sock`, the stats socket of [`socket`](Self::socket).
    pub fn stats_socket(&self) -> PathBuf {
        tandem_proto::paths::stats_socket(&self.socket())
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("test failed; its files are kept in {}", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

// -------------------------------------------------------------------- HTTP

/// One HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header (name, value) pairs as received.
    pub headers: Vec<(String, String)>,
    /// Body (chunked transfer encoding decoded).
    pub body: String,
}

impl HttpResponse {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn decode_chunked(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let nl = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without CRLF")?;
        let size_txt = std::str::from_utf8(&b[..nl]).map_err(|e| e.to_string())?;
        let size_txt = size_txt.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_txt, 16)
            .map_err(|e| format!("bad chunk size {size_txt:?}: {e}"))?;
        b = &b[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// `GET <path>` over the unix socket `sock` (HTTP/1.1, `Connection: close`),
/// bounded by a 10 s socket timeout.
pub fn http_get(sock: &Path, path: &str) -> Result<HttpResponse, String> {
    let mut s =
        UnixStream::connect(sock).map_err(|e| format!("connect {}: {e}", sock.display()))?;
    let t = Some(Duration::from_secs(10));
    s.set_read_timeout(t).map_err(|e| e.to_string())?;
    s.set_write_timeout(t).map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: tandem-e2e\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    )
    .map_err(|e| format!("write request: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read response: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "no end of headers in response: {:?}",
                String::from_utf8_lossy(&raw)
            )
        })?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header line {l:?}"))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let resp = HttpResponse {
        status,
        headers,
        body: String::new(),
    };
    if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        body = decode_chunked(&body)?;
    } else if let Some(len) = resp.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|e| format!("bad Content-Length {len:?}: {e}"))?;
        if body.len() != len {
            return Err(format!(
                "Content-Length {len} but {} body bytes",
                body.len()
            ));
        }
    }
    let body = String::from_utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    Ok(HttpResponse { body, ..resp })
}

/// `GET /stats` parsed as JSON.
pub fn fetch_stats(stats_sock: &Path) -> Result<Value, String> {
    let r = http_get(stats_sock, "/stats")?;
    if r.status != 200 {
        return Err(format!("/stats answered {}: {}", r.status, r.body));
    }
    serde_json::from_str(&r.body).map_err(|e| format!("/stats is not JSON ({e}): {}", r.body))
}

// ------------------------------------------------------------ stats helpers

/// `stats["clients"]`; panics naming the document if it is not an array.
#[track_caller]
pub fn clients(stats: &Value) -> &[Value] {
    stats["clients"]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no \"clients\" array: {stats}"))
}

/// The client whose `pid` is `pid`, if listed.
pub fn client_by_pid(stats: &Value, pid: u32) -> Option<&Value> {
    stats["clients"]
        .as_array()?
        .iter()
        .find(|c| c["pid"].as_u64() == Some(u64::from(pid)))
}

/// The client whose `id` is `id`, if listed.
pub fn client_by_id(stats: &Value, id: u64) -> Option<&Value> {
    stats["clients"]
        .as_array()?
        .iter()
        .find(|c| c["id"].as_u64() == Some(id))
}

/// `v[key]` as an unsigned integer; panics naming the key and the object.
#[track_caller]
pub fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("\"{key}\" is not an unsigned integer in {v}"))
}

/// `stats["totals"][key]`.
#[track_caller]
pub fn total(stats: &Value, key: &str) -> u64 {
    num(&stats["totals"], key)
}

// ------------------------------------------------------------------ tandemd

/// A running `tandemd` on a test directory's socket; killed on drop.
pub struct Tandemd {
    child: Option<Child>,
    pid: u32,
    socket: PathBuf,
    stats: PathBuf,
    log: PathBuf,
}

fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("TANDEM_")
            || k.starts_with("FAKECUDA_")
            || k == "LD_PRELOAD"
            || k == "NOTIFY_SOCKET"
        {
            cmd.env_remove(&*k);
        }
    }
}

impl Tandemd {
    /// Starts `tandemd --config <dir>/tandemd.toml --socket <dir>/tandemd.sock
    /// --foreground` with the default config and waits until its stats
    /// socket answers.
    pub fn start(dir: &TestDir) -> Tandemd {
        Self::start_with_config(dir, default_config())
    }

    /// [`start`](Self::start) with the given config file text.
    pub fn start_with_config(dir: &TestDir, config: &str) -> Tandemd {
        let mut d = Self::spawn(dir, config);
        d.wait_ready();
        d
    }

    /// Spawns without waiting (see [`wait_ready`](Self::wait_ready)). Output
    /// goes to `<dir>/tandemd-<n>.log` (read it with [`log`](Self::log)).
    pub fn spawn(dir: &TestDir, config: &str) -> Tandemd {
        Self::spawn_with_env(dir, config, &[])
    }

    /// [`spawn`](Self::spawn) with extra environment variables (e.g. NOTIFY_SOCKET).
    pub fn spawn_with_env(dir: &TestDir, config: &str, env: &[(&str, &Path)]) -> Tandemd {
        Self::spawn_on(dir, config, &dir.socket(), env)
    }

    /// [`spawn_with_env`](Self::spawn_with_env) on main socket `socket`
    /// (its stats socket is the one its name gives).
    pub fn spawn_on(dir: &TestDir, config: &str, socket: &Path, env: &[(&str, &Path)]) -> Tandemd {
        Self::spawn_inner(dir, config, socket, env, None)
    }

    /// [`spawn`](Self::spawn) with soft and hard `RLIMIT_NOFILE` of `nofile`
    /// (a daemon that runs out of descriptors soon).
    pub fn spawn_with_nofile(dir: &TestDir, config: &str, nofile: u64) -> Tandemd {
        Self::spawn_inner(dir, config, &dir.socket(), &[], Some(nofile))
    }

    fn spawn_inner(
        dir: &TestDir,
        config: &str,
        socket: &Path,
        env: &[(&str, &Path)],
        nofile: Option<u64>,
    ) -> Tandemd {
        static N: AtomicU64 = AtomicU64::new(0);
        let bins = coordinator_bins();
        let n = N.fetch_add(1, Ordering::Relaxed);
        let cfg_path = dir.path().join("tandemd.toml");
        std::fs::write(&cfg_path, config)
            .unwrap_or_else(|e| panic!("writing {}: {e}", cfg_path.display()));
        let log = dir.path().join(format!("tandemd-{n}.log"));
        let f = File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let f2 = f.try_clone().expect("dup log fd");
        let mut cmd = Command::new(&bins.tandemd);
        clean_env(&mut cmd);
        cmd.arg("--config")
            .arg(&cfg_path)
            .arg("--socket")
            .arg(socket)
            .arg("--foreground")
            .env("TANDEM_LOG", "info")
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .stdin(Stdio::null())
            .stdout(f)
            .stderr(f2);
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            let l = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // SAFETY: between fork and exec the closure makes one
            // async-signal-safe call (setrlimit) on a value it owns.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &l) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bins.tandemd.display()));
        Tandemd {
            pid: child.id(),
            child: Some(child),
            socket: socket.to_path_buf(),
            stats: tandem_proto::paths::stats_socket(socket),
            log,
        }
    }

    /// Waits until `GET /stats` answers with JSON; panics (with the log) if
    /// the daemon exits first or does not answer within [`SETTLE`].
    #[track_caller]
    pub fn wait_ready(&mut self) {
        let start = Instant::now();
        loop {
            if let Some(st) = self.try_wait() {
                panic!(
                    "tandemd exited with {st} before its stats socket answered:\n{}",
                    self.log()
                );
            }
            match fetch_stats(&self.stats) {
                Ok(_) if self.socket.exists() => return,
                Ok(_) => {}
                Err(e) if start.elapsed() > SETTLE => panic!(
                    "tandemd (pid {}) did not answer on {} within {SETTLE:?}: {e}\n{}",
                    self.pid,
                    self.stats.display(),
                    self.log()
                ),
                Err(_) => {}
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The config file path.
    pub fn config_path(&self) -> PathBuf {
        self.socket
            .parent()
            .expect("socket dir")
            .join("tandemd.toml")
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Main socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stats socket path.
    pub fn stats_socket(&self) -> &Path {
        &self.stats
    }

    /// Everything the daemon wrote to stdout/stderr so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET /stats`; panics (with the log) on failure.
    #[track_caller]
    pub fn stats(&self) -> Value {
        fetch_stats(&self.stats).unwrap_or_else(|e| panic!("{e}\ntandemd log:\n{}", self.log()))
    }

    /// `GET /stats`.
    pub fn try_stats(&self) -> Result<Value, String> {
        fetch_stats(&self.stats)
    }

    /// `GET <path>` on the stats socket.
    pub fn get(&self, path: &str) -> Result<HttpResponse, String> {
        http_get(&self.stats, path)
    }

    /// The exit status, if it has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().expect("try_wait tandemd"))
    }

    /// Waits (bounded by `timeout`) for the daemon to exit on its own.
    #[track_caller]
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        poll(timeout, "tandemd to exit", || {
            self.try_wait().ok_or_else(|| "still running".to_string())
        })
    }

    /// Sends `sig` to the daemon (if it has not been reaped).
    pub fn signal(&mut self, sig: libc::c_int) {
        if self.child.is_some() && self.try_wait().is_none() {
            // SAFETY: kill(2) on our own unreaped child; the pid cannot have
            // been reused while the child is unreaped.
            unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        }
    }

    /// `kill -9` and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Tandemd {
    fn drop(&mut self) {
        let failing = std::thread::panicking();
        self.kill9();
        if failing {
            eprintln!("--- tandemd pid {} log ---\n{}", self.pid, self.log());
        }
    }
}

// ----------------------------------------------------------------- processes

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
    clean_env(&mut cmd);
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

// ------------------------------------------------------------ /proc helpers

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

/// The top-level fields of the `/stats` JSON snapshot (the contract).
pub const STATS_KEYS: &[&str] = &[
    "version",
    "protocol",
    "pid",
    "uptime_s",
    "socket",
    "config_path",
    "gpus",
    "clients",
    "totals",
    "dedup",
];

/// The weight-deduplication fields of each GPU in `/stats` (`gpus[i]`).
pub const GPU_DEDUP_KEYS: &[&str] = &[
    "dedup_saved_bytes",
    "dedup_shared_bytes",
    "dedup_shared_copies",
    "dedup_merges",
    "dedup_cow_breaks",
    "dedup_mismatches",
    "dedup_publish_failures",
    "dedup_protocol_errors",
    "dedup_merge_latency_ms",
];

/// The fields of each client's `dedup` object in `/stats`.
pub const CLIENT_DEDUP_KEYS: &[&str] = &[
    "share_weights",
    "trust_group",
    "shared_bytes",
    "candidate_granules",
    "private_bytes",
];

// -------------------------------------------------------------- Prometheus

/// One sample line of Prometheus text.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// A Prometheus text exposition (format 0.0.4), checked line by line.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
    /// `# TYPE` per metric family.
    pub types: BTreeMap<String, String>,
    /// `# HELP` per metric family.
    pub help: BTreeMap<String, String>,
}

impl Exposition {
    /// Samples of metric `name`.
    pub fn get(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// The family a sample belongs to (histogram/summary suffixes stripped when
/// the base name has such a TYPE).
fn family<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    for suf in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suf) {
            if matches!(
                types.get(base).map(String::as_str),
                Some("histogram" | "summary")
            ) {
                return base;
            }
        }
    }
    name
}

/// Parses and checks Prometheus text format 0.0.4: every line is a comment,
/// a `# HELP`/`# TYPE` line, or `name{label="value",...} value [timestamp]`
/// with valid names, properly escaped label values and a float value; at most
/// one HELP and one TYPE per family, TYPE before the family's first sample,
/// a family's samples contiguous, no duplicate series, and the text ends with
/// a newline.
pub fn parse_prometheus(text: &str) -> Result<Exposition, String> {
    let mut ex = Exposition::default();
    let mut seen_series = std::collections::BTreeSet::new();
    let mut finished_families = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    if !text.is_empty() && !text.ends_with('\n') {
        return Err("text does not end with a newline".into());
    }
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        let err = |m: &str| format!("line {ln}: {m}: {line:?}");
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix('#') {
            let rest = rest.trim_start();
            let mut it = rest.splitn(3, ' ');
            let kw = it.next().unwrap_or("");
            if kw != "HELP" && kw != "TYPE" {
                continue; // plain comment
            }
            let name = it.next().ok_or_else(|| err("no metric name"))?;
            if !is_metric_name(name) {
                return Err(err("bad metric name"));
            }
            let arg = it.next().unwrap_or("");
            if kw == "HELP" {
                if ex.help.insert(name.into(), arg.into()).is_some() {
                    return Err(err("second HELP for this metric"));
                }
            } else {
                if !matches!(
                    arg,
                    "counter" | "gauge" | "histogram" | "summary" | "untyped"
                ) {
                    return Err(err("bad TYPE"));
                }
                if ex
                    .samples
                    .iter()
                    .any(|s| family(&s.name, &ex.types) == name)
                {
                    return Err(err("TYPE after the family's samples"));
                }
                if ex.types.insert(name.into(), arg.into()).is_some() {
                    return Err(err("second TYPE for this metric"));
                }
            }
            continue;
        }
        // name{labels} value [timestamp]
        let name_end = line.find(['{', ' ', '\t']).ok_or_else(|| err("no value"))?;
        let name = &line[..name_end];
        if !is_metric_name(name) {
            return Err(err("bad metric name"));
        }
        let mut rest = &line[name_end..];
        let mut labels = BTreeMap::new();
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let mut consumed = None;
            loop {
                while chars.peek().is_some_and(|(_, c)| *c == ' ' || *c == ',') {
                    chars.next();
                }
                match chars.peek() {
                    Some((j, '}')) => {
                        consumed = Some(j + 1);
                        break;
                    }
                    None => break,
                    _ => {}
                }
                let mut lname = String::new();
                while let Some(&(_, c)) = chars.peek() {
                    if c == '=' {
                        break;
                    }
                    lname.push(c);
                    chars.next();
                }
                let lname = lname.trim().to_string();
                if !is_label_name(&lname) {
                    return Err(err(&format!("bad label name {lname:?}")));
                }
                if chars.next().map(|(_, c)| c) != Some('=') {
                    return Err(err("label without '='"));
                }
                if chars.next().map(|(_, c)| c) != Some('"') {
                    return Err(err("label value not quoted"));
                }
                let mut val = String::new();
                let mut closed = false;
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.next().map(|(_, c)| c) {
                            Some('\\') => val.push('\\'),
                            Some('"') => val.push('"'),
                            Some('n') => val.push('\n'),
                            _ => return Err(err("bad escape in label value")),
                        },
                        '\n' => return Err(err("newline in label value")),
                        c => val.push(c),
                    }
                }
                if !closed {
                    return Err(err("unterminated label value"));
                }
                if labels.insert(lname.clone(), val).is_some() {
                    return Err(err(&format!("duplicate label {lname}")));
                }
                match chars.peek() {
                    Some((_, ',')) | Some((_, '}')) => {}
                    _ => return Err(err("expected ',' or '}' after a label")),
                }
            }
            let end = consumed.ok_or_else(|| err("unterminated label set"))?;
            rest = &r[end..];
        }
        let mut toks = rest.split_whitespace();
        let v = toks.next().ok_or_else(|| err("no value"))?;
        let value = parse_value(v).ok_or_else(|| err("bad value"))?;
        if let Some(ts) = toks.next() {
            ts.parse::<i64>().map_err(|_| err("bad timestamp"))?;
        }
        if toks.next().is_some() {
            return Err(err("trailing tokens"));
        }
        let fam = family(name, &ex.types).to_string();
        if current.as_deref() != Some(fam.as_str()) {
            if let Some(prev) = current.take() {
                finished_families.insert(prev);
            }
            if finished_families.contains(&fam) {
                return Err(err("samples of one family are not contiguous"));
            }
            current = Some(fam);
        }
        let series = format!("{name}{labels:?}");
        if !seen_series.insert(series) {
            return Err(err("duplicate series"));
        }
        ex.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(ex)
}

// ---------------------------------------------------------------- raw peer

/// A raw `SOCK_SEQPACKET` connection to the coordinator's main socket, for
/// sending well-formed or deliberately broken messages.
pub struct Peer {
    fd: OwnedFd,
}

impl Peer {
    /// Connects to `sock`.
    pub fn connect(sock: &Path) -> Result<Peer, String> {
        // SAFETY: plain socket(2) call; the result is checked.
        let raw =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an all-zero sockaddr_un is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = sock.as_os_str().as_bytes();
        if bytes.len() >= addr.sun_path.len() {
            return Err(format!("socket path too long: {}", sock.display()));
        }
        for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
            *d = *s as libc::c_char;
        }
        // SAFETY: addr is a valid, NUL-terminated sockaddr_un of the size given.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(format!(
                "connect {}: {}",
                sock.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Peer { fd })
    }

    /// Sends one datagram.
    pub fn send(&self, bytes: &[u8]) -> Result<(), String> {
        tandem_proto::wire::send(self.fd.as_fd(), bytes, None).map_err(|e| e.to_string())
    }

    /// Whether a datagram is waiting to be read, waiting at most `timeout`;
    /// reads nothing.
    pub fn readable(&self, timeout: Duration) -> bool {
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        poll_in(self.fd.as_fd(), ms) & libc::POLLIN != 0
    }

    /// Sends one datagram without blocking; `Ok(false)` when the socket is full.
    pub fn send_nonblocking(&self, bytes: &[u8]) -> Result<bool, String> {
        // SAFETY: send(2) from a live buffer on our own fd.
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(false),
            _ => Err(e.to_string()),
        }
    }

    /// Receives one datagram (and the fd riding along), waiting at most
    /// `timeout`. `Ok((empty, None))` means the coordinator closed the
    /// connection.
    pub fn recv(&self, timeout: Duration) -> Result<(Vec<u8>, Option<OwnedFd>), String> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: setsockopt with a valid timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(format!("SO_RCVTIMEO: {}", std::io::Error::last_os_error()));
        }
        let mut buf = vec![0u8; tandem_proto::wire::MAX_MESSAGE_LEN + 64];
        let got = tandem_proto::wire::recv(self.fd.as_fd(), &mut buf).map_err(|e| e.to_string())?;
        buf.truncate(got.len);
        Ok((buf, got.fd))
    }

    /// The socket.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// An encoded Hello from this process (class auto, exe = the test executable).
pub fn hello_bytes() -> Vec<u8> {
    let exe = std::env::current_exe().expect("current_exe");
    let msg = tandem_proto::Message::Hello(tandem_proto::Hello {
        pid: std::process::id(),
        class: tandem_proto::ClientClass::Auto,
        flags: 0,
        exe: exe.as_os_str().as_bytes(),
        cgroup: b"/",
    });
    let mut buf = vec![0u8; msg.encoded_len()];
    let n = msg.encode(&mut buf).expect("encode Hello");
    buf.truncate(n);
    buf
}

/// Log lines of `log` that mention `needle` (case-insensitive) at warn level
/// or above (`WARN`/`ERROR` in the line, as tracing prints the level).
pub fn warn_lines<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    let needle = needle.to_ascii_lowercase();
    log.lines()
        .filter(|l| {
            (l.contains("WARN") || l.contains("ERROR")) && l.to_ascii_lowercase().contains(&needle)
        })
        .collect()
}

// ------------------------------------------------------------ launchers

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

// ------------------------------------------------------- unprivileged peer

/// Connects to `sock` as `uid`/`gid`: a forked child drops to those ids,
/// connects (the kernel records its credentials for `SO_PEERCRED` at
/// connect time), hands the connected socket back over a socketpair and
/// exits. The returned [`Peer`] is used from this process, but the
/// coordinator sees the child's uid/gid/pid. Needs root.
pub fn connect_as(sock: &Path, uid: u32, gid: u32) -> Result<Peer, String> {
    // Everything the child needs is prepared before fork: between fork and
    // _exit it only makes system calls (no allocation, no locks).
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = sock.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(format!("socket path too long: {}", sock.display()));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let mut pair = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two fds into `pair`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } < 0
    {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds are fresh and owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let one = [1u8];
    // SAFETY: fork; the child below only calls async-signal-safe functions
    // (setgroups, setgid, setuid, socket, connect, sendmsg, _exit) on
    // memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the child; see above. Every failure ends in _exit with
        // a code saying which step failed.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                libc::_exit(10);
            }
            if libc::setgid(gid) != 0 {
                libc::_exit(11);
            }
            if libc::setuid(uid) != 0 {
                libc::_exit(12);
            }
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
            if s < 0 {
                libc::_exit(13);
            }
            if libc::connect(
                s,
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            ) != 0
            {
                libc::_exit(14);
            }
            let code = match tandem_proto::wire::send(
                theirs.as_fd(),
                &one,
                Some(std::os::fd::BorrowedFd::borrow_raw(s)),
            ) {
                Ok(()) => 0,
                Err(_) => 15,
            };
            libc::_exit(code);
        }
    }
    drop(theirs);
    let mut status = 0;
    // SAFETY: waitpid on the child we just forked.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!(
            "child connecting as uid {uid} failed (wait status {status:#x}; exit codes: \
             10 setgroups, 11 setgid, 12 setuid, 13 socket, 14 connect, 15 send)"
        ));
    }
    let mut buf = [0u8; 8];
    let got = tandem_proto::wire::recv(ours.as_fd(), &mut buf).map_err(|e| e.to_string())?;
    let fd = got.fd.ok_or("the child sent no socket")?;
    Ok(Peer { fd })
}

/// An encoded Control message.
pub fn control_bytes(
    op: tandem_proto::wire::ControlOp,
    client_id: u64,
    class: tandem_proto::ClientClass,
) -> Vec<u8> {
    let msg = tandem_proto::Message::Control(tandem_proto::wire::Control {
        op,
        client_id,
        class,
    });
    let mut buf = vec![0u8; msg.encoded_len()];
    let n = msg.encode(&mut buf).expect("encode Control");
    buf.truncate(n);
    buf
}

/// Sends `msg` on `p` and returns the ControlReply's (status, message).
pub fn control_reply(p: &Peer, msg: &[u8]) -> Result<(u16, String), String> {
    p.send(msg)?;
    let (buf, _) = p.recv(SETTLE)?;
    if buf.is_empty() {
        return Err("connection closed without a ControlReply".into());
    }
    match tandem_proto::Message::decode(&buf) {
        Ok(tandem_proto::Message::ControlReply(r)) => Ok((r.status, r.message.to_string())),
        other => Err(format!("want a ControlReply, got {other:?}")),
    }
}

// ------------------------------------------------------- fake coordinator

/// What a [`FakeCoordinator`] does with each connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeBehaviour {
    /// Reads the first message, answers a Reject VERSION_MISMATCH sent as
    /// protocol version `PROTOCOL_VERSION + 1`, and closes the connection (what
    /// a newer tandemd does).
    RejectVersion,
    /// Accepts and holds the connection without ever reading or answering (a
    /// stalled coordinator).
    Silent,
}

/// A listener on a main-socket path that counts connections and misbehaves
/// as told; stops (closing everything) on drop.
pub struct FakeCoordinator {
    accepted: Arc<AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn listen_seqpacket(path: &Path) -> Result<OwnedFd, String> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if raw < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fd owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err("path too long".into());
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let _ = std::fs::remove_file(path);
    // SAFETY: addr is a valid sockaddr_un of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(format!("bind: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: listen on our bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } != 0 {
        return Err(format!("listen: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

/// poll(2) for input on `fd`, at most `ms` ms: the events that came
/// (`revents`), 0 on a timeout or an error.
fn poll_in(fd: BorrowedFd<'_>, ms: libc::c_int) -> libc::c_short {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd, for the length given; `fd` is open
    // for the call (borrowed).
    if unsafe { libc::poll(&mut pfd, 1, ms) } > 0 {
        pfd.revents
    } else {
        0
    }
}

impl FakeCoordinator {
    /// Listens on `path` (a `SOCK_SEQPACKET` socket, like tandemd's).
    pub fn start(path: &Path, behaviour: FakeBehaviour) -> FakeCoordinator {
        let lfd = listen_seqpacket(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (acc, st) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !st.load(Ordering::Relaxed) {
                if poll_in(lfd.as_fd(), 50) == 0 {
                    continue;
                }
                // SAFETY: accept4 on our listening socket; no address wanted.
                let c = unsafe {
                    libc::accept4(
                        lfd.as_raw_fd(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC,
                    )
                };
                if c < 0 {
                    continue;
                }
                // SAFETY: fresh fd from accept4, owned by nothing else.
                let conn = unsafe { OwnedFd::from_raw_fd(c) };
                acc.fetch_add(1, Ordering::Relaxed);
                match behaviour {
                    FakeBehaviour::Silent => held.push(conn),
                    FakeBehaviour::RejectVersion => {
                        let peer = Peer { fd: conn };
                        let _ = peer.recv(Duration::from_secs(5));
                        let msg = tandem_proto::Message::Reject(tandem_proto::Reject {
                            reason: tandem_proto::RejectReason::VERSION_MISMATCH,
                            peer_version: 0,
                            message: "this tandemd speaks a newer protocol; upgrade libtandem.so",
                        });
                        let mut buf = vec![0u8; msg.encoded_len()];
                        if let Ok(n) = msg.encode(&mut buf) {
                            buf.truncate(n);
                            let v = tandem_proto::PROTOCOL_VERSION + 1;
                            buf[4..6].copy_from_slice(&v.to_le_bytes());
                            let _ = peer.send(&buf);
                        }
                    }
                }
            }
        });
        FakeCoordinator {
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FakeCoordinator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
