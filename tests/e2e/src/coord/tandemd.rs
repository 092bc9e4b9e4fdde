//! A `tandemd` on a test directory's socket.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::bins::{coordinator_bins, default_config};
use super::dir::TestDir;
use super::http::{fetch_stats, http_get, HttpResponse};
use super::wait::{poll, SETTLE};

/// A running `tandemd` on a test directory's socket; killed on drop.
pub struct Tandemd {
    child: Option<Child>,
    pid: u32,
    socket: PathBuf,
    stats: PathBuf,
    log: PathBuf,
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
        crate::strip_inherited(&mut cmd);
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
