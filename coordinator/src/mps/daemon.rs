//! The MPS control daemon tandemd owns: started with `-d` and the pipe and
//! log directories in its environment, checked by its control pipe
//! appearing, stopped with `quit` at tandemd's exit. One that already runs in
//! the pipe directory is used, not started again, and never stopped by
//! tandemd. Every wait is bounded, and every failure leaves tandemd in plain
//! time slicing with one clear log line (fail-open).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tandem_proto::mps::{LOG_DIR_ENV, PIPE_DIR_ENV};
use tracing::{info, warn};

use super::config::{MpsConfig, MAX_PIPE_DIR_LEN};
use super::mode::detect;

/// The control daemon's pid file in the pipe directory (NVIDIA's name).
pub const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// The bounds on every wait for the control program and its daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// `control_binary -d` returning (it forks the daemon and exits).
    pub start: Duration,
    /// The control pipe appearing after `-d` returned.
    pub pipe: Duration,
    /// `echo quit | control_binary` returning.
    pub quit: Duration,
    /// The daemon going away after `quit`, before tandemd kills it.
    pub exit: Duration,
}

impl Default for Bounds {
    fn default() -> Self {
        let s = Duration::from_secs(5);
        Bounds {
            start: s,
            pipe: s,
            quit: s,
            exit: s,
        }
    }
}

/// Where the daemon lives and how to talk to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The control program (resolved on `PATH`).
    pub binary: PathBuf,
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    pub pipe_dir: PathBuf,
    /// `CUDA_MPS_LOG_DIRECTORY`.
    pub log_dir: PathBuf,
}

/// A control daemon in use.
#[derive(Debug)]
pub struct Running {
    /// Where.
    pub place: Place,
    /// Its pid, from its pid file, when known.
    pub pid: Option<u32>,
    /// Started by this tandemd (and so stopped by it), or found running.
    pub owned: bool,
    bounds: Bounds,
    stopped: AtomicBool,
}

/// Why tandem over MPS is not in force although `[mps] enabled`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure(pub String);

/// Starts the daemon `cfg` describes (directories defaulting beside
/// `socket_dir`), or finds the one already running there, waiting at most
/// as long as `bounds` say.
pub fn start(cfg: &MpsConfig, socket_dir: &Path, bounds: Bounds) -> Result<Running, Failure> {
    let pipe_dir = cfg.pipe_dir_in(socket_dir);
    let log_dir = cfg.log_dir_in(socket_dir);
    let len = pipe_dir.as_os_str().len();
    if len > MAX_PIPE_DIR_LEN {
        return Err(Failure(format!(
            "the MPS pipe directory {} is {len} bytes, longer than {MAX_PIPE_DIR_LEN}; set \
             [mps] pipe_dir to a shorter path",
            pipe_dir.display()
        )));
    }
    let binary = find_binary(&cfg.control_binary, std::env::var_os("PATH"))?;
    let place = Place {
        binary,
        pipe_dir,
        log_dir,
    };
    if detect(&place.pipe_dir).is_some() {
        match read_pid(&place.pipe_dir) {
            Some(pid) if !alive(pid) => {
                warn!(
                    "{}/control is left over from an MPS control daemon that is gone (pid \
                     {pid}); removing it and starting a new one",
                    place.pipe_dir.display()
                );
                let _ = std::fs::remove_file(place.pipe_dir.join("control"));
            }
            pid => {
                info!(
                    pipe_dir = %place.pipe_dir.display(),
                    pid = ?pid,
                    "an MPS control daemon already runs in {}; tandemd uses it and will not \
                     stop it",
                    place.pipe_dir.display()
                );
                return Ok(Running {
                    place,
                    pid,
                    owned: false,
                    bounds,
                    stopped: AtomicBool::new(false),
                });
            }
        }
    }
    for dir in [&place.pipe_dir, &place.log_dir] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| Failure(format!("cannot create {}: {e}", dir.display())))?;
    }
    launch(&place, bounds.start)?;
    let deadline = Instant::now() + bounds.pipe;
    while detect(&place.pipe_dir).is_none() {
        if Instant::now() >= deadline {
            let r = Running {
                pid: read_pid(&place.pipe_dir),
                place,
                owned: true,
                bounds,
                stopped: AtomicBool::new(false),
            };
            let msg = format!(
                "{} -d returned but its control pipe {}/control did not appear within {} s \
                 (see {})",
                r.place.binary.display(),
                r.place.pipe_dir.display(),
                bounds.pipe.as_secs_f64(),
                r.place.log_dir.display()
            );
            r.stop();
            return Err(Failure(msg));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = read_pid(&place.pipe_dir);
    info!(
        pipe_dir = %place.pipe_dir.display(),
        log_dir = %place.log_dir.display(),
        pid = ?pid,
        "started the MPS control daemon ({} -d)",
        place.binary.display()
    );
    Ok(Running {
        place,
        pid,
        owned: true,
        bounds,
        stopped: AtomicBool::new(false),
    })
}

/// `name` as a path: itself when it names one, else the first executable
/// file of that name in `path` (tandemd's `PATH`).
pub fn find_binary(name: &str, path: Option<OsString>) -> Result<PathBuf, Failure> {
    if name.contains('/') {
        return if is_executable(Path::new(name)) {
            Ok(PathBuf::from(name))
        } else {
            Err(Failure(format!(
                "the MPS control program {name} ([mps] control_binary) is not an executable file"
            )))
        };
    }
    let path = path.unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            Failure(format!(
                "the MPS control program {name} was not found on PATH ({}); install the NVIDIA \
                 driver's utilities, or set [mps] control_binary to its absolute path",
                path.to_string_lossy()
            ))
        })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The control program with the daemon's environment.
fn command(place: &Place) -> Command {
    let mut c = Command::new(&place.binary);
    c.env(PIPE_DIR_ENV, &place.pipe_dir)
        .env(LOG_DIR_ENV, &place.log_dir);
    c
}

/// Runs `binary -d` and waits (at most `bound`) for it to return.
fn launch(place: &Place, bound: Duration) -> Result<(), Failure> {
    let child = command(place)
        .arg("-d")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Failure(format!("cannot run {} -d: {e}", place.binary.display())))?;
    let (status, stderr) = finish(child, bound);
    match status {
        Some(st) if st.success() => Ok(()),
        Some(st) => Err(Failure(format!(
            "{} -d failed ({st}){}",
            place.binary.display(),
            said(&stderr)
        ))),
        None => Err(Failure(format!(
            "{} -d did not return within {} s; killed it{}",
            place.binary.display(),
            bound.as_secs_f64(),
            said(&stderr)
        ))),
    }
}

fn said(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(": {}", s.lines().take(3).collect::<Vec<_>>().join(" / "))
    }
}

/// Waits up to `timeout` for `child`; kills it if it is still running. Its
/// exit status (None: killed) and what it wrote to stderr so far, read
/// without waiting for end-of-file (a daemon it forked may hold the pipe).
fn finish(mut child: Child, timeout: Duration) -> (Option<std::process::ExitStatus>, String) {
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Some(st),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let mut text = String::new();
    if let Some(mut err) = child.stderr.take() {
        let fd = err.as_raw_fd();
        // SAFETY: fcntl on a pipe we own; O_NONBLOCK only changes how reads wait.
        unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let mut buf = [0u8; 4096];
        if let Ok(n) = err.read(&mut buf) {
            text = String::from_utf8_lossy(&buf[..n]).into_owned();
        }
    }
    (status, text)
}

/// The pid in `<pipe_dir>/nvidia-cuda-mps-control.pid`, if readable.
fn read_pid(pipe_dir: &Path) -> Option<u32> {
    std::fs::read_to_string(pipe_dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|&p| p > 1)
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists (and may be signalled).
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
        return false;
    }
    // The state follows the command name's closing parenthesis.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
        s.rfind(')')
            .is_none_or(|i| !s[i + 1..].trim_start().starts_with('Z'))
    })
}

/// Whether `pid` still runs the control program (its command line names
/// it), so that a stale pid file never makes tandemd signal another process.
fn runs(pid: u32, binary: &Path) -> bool {
    let Some(name) = binary.file_name() else {
        return false;
    };
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    use std::os::unix::ffi::OsStrExt;
    cmdline
        .split(|&b| b == 0)
        .any(|arg| Path::new(std::ffi::OsStr::from_bytes(arg)).file_name() == Some(name))
}

impl Running {
    /// Whether its control pipe is there now.
    #[must_use]
    pub fn is_live(&self) -> bool {
        detect(&self.place.pipe_dir).is_some()
    }

    /// Stops the daemon if this tandemd started it (once): `quit` on its
    /// control program (bounded), a bounded wait for it to go, then SIGTERM
    /// and SIGKILL to its pid if it is still there. A daemon found running
    /// is left alone.
    pub fn stop(&self) {
        if !self.owned || self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let bin = self.place.binary.display().to_string();
        match command(&self.place)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(mut child) => {
                if let Some(mut stdin) = child.stdin.take() {
                    let _ = stdin.write_all(b"quit\n");
                }
                let (status, stderr) = finish(child, self.bounds.quit);
                if status.is_none_or(|s| !s.success()) {
                    warn!(
                        "`echo quit | {bin}` did not succeed ({}){}",
                        status.map_or_else(
                            || format!("no answer within {} s", self.bounds.quit.as_secs_f64()),
                            |s| s.to_string()
                        ),
                        said(&stderr)
                    );
                }
            }
            Err(e) => warn!("cannot run {bin} to stop the MPS control daemon: {e}"),
        }
        let pid = self.pid.or_else(|| read_pid(&self.place.pipe_dir));
        let gone = |pid: Option<u32>| !self.is_live() && pid.is_none_or(|p| !alive(p));
        let deadline = Instant::now() + self.bounds.exit;
        while !gone(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if gone(pid) {
            info!(pid = ?pid, "stopped the MPS control daemon");
            return;
        }
        match pid.filter(|&p| runs(p, &self.place.binary)) {
            Some(p) => {
                warn!(
                    pid = p,
                    "the MPS control daemon did not exit within {} s of quit; killing it",
                    self.bounds.exit.as_secs_f64()
                );
                for (sig, wait) in [(libc::SIGTERM, 1000), (libc::SIGKILL, 1000)] {
                    // SAFETY: kill(2) on a pid whose command line was just
                    // checked to be the control program's.
                    unsafe { libc::kill(p as libc::pid_t, sig) };
                    let until = Instant::now() + Duration::from_millis(wait);
                    while alive(p) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    if !alive(p) {
                        break;
                    }
                }
            }
            None => warn!(
                "the MPS control daemon in {} did not exit after quit, and its pid is unknown; \
                 left running",
                self.place.pipe_dir.display()
            ),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// The stand-in control program (`tests/fake-mps-control`).
    fn stand_in() -> String {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fake-mps-control/nvidia-cuda-mps-control"
        )
        .into()
    }

    /// A fresh directory standing in for tandemd's socket directory,
    /// removed on drop (with any stand-in daemon left in it stopped).
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Dir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "tandem-mpsd-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }

        fn pipe(&self) -> PathBuf {
            self.0.join("mps")
        }

        fn log(&self) -> String {
            std::fs::read_to_string(self.0.join("mps-log/control.log")).unwrap_or_default()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            if let Some(pid) = read_pid(&self.pipe()) {
                if runs(pid, Path::new(&stand_in())) {
                    // SAFETY: kill(2) on the stand-in daemon this test started.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                }
            }
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn cfg(binary: &str) -> MpsConfig {
        MpsConfig {
            enabled: true,
            control_binary: binary.into(),
            ..MpsConfig::default()
        }
    }

    fn quick() -> Bounds {
        let b = Duration::from_secs(10);
        Bounds {
            exit: Duration::from_millis(300),
            start: b,
            pipe: b,
            quit: b,
        }
    }

    #[test]
    fn starts_with_the_directories_in_its_environment_and_stops_with_quit() {
        let d = Dir::new("start");
        let r = start(&cfg(&stand_in()), &d.0, quick()).unwrap();
        assert!(r.owned && r.is_live());
        assert_eq!(r.place.pipe_dir, d.pipe());
        assert_eq!(r.place.log_dir, d.0.join("mps-log"));
        let pid = r.pid.expect("the pid file is read");
        assert!(alive(pid) && runs(pid, &r.place.binary));
        let log = d.log();
        assert!(
            log.contains(&format!("CUDA_MPS_PIPE_DIRECTORY={}", d.pipe().display()))
                && log.contains(&format!(
                    "CUDA_MPS_LOG_DIRECTORY={}",
                    d.0.join("mps-log").display()
                )),
            "{log}"
        );
        r.stop();
        assert!(!r.is_live(), "the control pipe is gone");
        assert!(!alive(pid), "the daemon exited");
        let log = d.log();
        assert!(
            log.contains("command quit") && log.contains("stopped"),
            "{log}"
        );
        r.stop(); // once only: nothing more is sent
        assert_eq!(d.log().matches("command quit").count(), 1);
    }

    #[test]
    fn a_daemon_already_running_is_used_and_never_stopped() {
        let d = Dir::new("adopt");
        let first = start(&cfg(&stand_in()), &d.0, quick()).unwrap();
        let second = start(&cfg(&stand_in()), &d.0, quick()).unwrap();
        assert!(!second.owned);
        assert_eq!(second.pid, first.pid);
        drop(second);
        assert!(first.is_live(), "the one found running was stopped");
        assert!(!d.log().contains("command"), "{}", d.log());
        assert_eq!(d.log().matches("started").count(), 1, "{}", d.log());
        drop(first);
        assert!(!d.pipe().join("control").exists());
    }

    #[test]
    fn a_left_over_control_pipe_of_a_dead_daemon_is_replaced() {
        let d = Dir::new("stale");
        let first = start(&cfg(&stand_in()), &d.0, quick()).unwrap();
        let pid = first.pid.unwrap();
        // The daemon dies without cleaning up.
        // SAFETY: kill(2) on the stand-in daemon this test started.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(first.is_live(), "its pipe is left over");
        let second = start(&cfg(&stand_in()), &d.0, quick()).unwrap();
        assert!(second.owned);
        assert_ne!(second.pid, Some(pid));
        assert!(second.pid.is_some_and(alive));
        std::mem::forget(first); // its daemon is gone already
    }

    #[test]
    fn a_daemon_that_ignores_quit_is_killed_after_the_bound() {
        let d = Dir::new("stubborn");
        let r = start(&cfg(&stand_in()), &d.0, quick()).unwrap();
        std::fs::write(d.pipe().join("ignore-quit"), b"").unwrap();
        let pid = r.pid.unwrap();
        r.stop();
        assert!(d.log().contains("command quit"), "{}", d.log());
        assert!(!alive(pid), "still running after quit and the bound");
    }

    #[test]
    fn missing_or_failing_programs_say_what_to_do() {
        let Failure(e) =
            find_binary("no-such-mps-control", Some("/nonexistent:/also-not".into())).unwrap_err();
        assert!(
            e.contains("not found on PATH (/nonexistent:/also-not)")
                && e.contains("[mps] control_binary"),
            "{e}"
        );
        let Failure(e) = find_binary("/nonexistent/nvidia-cuda-mps-control", None).unwrap_err();
        assert!(e.contains("not an executable file"), "{e}");
        let found = find_binary("nvidia-cuda-mps-control", {
            let dir = Path::new(&stand_in()).parent().unwrap().to_path_buf();
            Some(std::env::join_paths(["/nonexistent".into(), dir]).unwrap())
        })
        .unwrap();
        assert_eq!(found, Path::new(&stand_in()));
        let d = Dir::new("fails");
        let Failure(e) = start(&cfg("/bin/false"), &d.0, quick()).unwrap_err();
        assert!(e.contains("/bin/false -d failed"), "{e}");
        let Failure(e) = start(&cfg("/nonexistent/mps"), &d.0, quick()).unwrap_err();
        assert!(e.contains("not an executable file"), "{e}");
    }

    #[test]
    fn a_program_that_starts_nothing_fails_after_the_pipe_bound() {
        let d = Dir::new("nopipe");
        let b = Bounds {
            pipe: Duration::from_millis(200),
            ..quick()
        };
        let Failure(e) = start(&cfg("/bin/true"), &d.0, b).unwrap_err();
        assert!(
            e.contains("control pipe") && e.contains("did not appear"),
            "{e}"
        );
    }

    #[test]
    fn a_stale_pid_file_never_makes_tandemd_signal_another_process() {
        // Our own pid runs the test binary, not the control program.
        assert!(!runs(std::process::id(), Path::new(&stand_in())));
        assert!(!runs(u32::MAX - 1, Path::new(&stand_in())));
        assert!(alive(std::process::id()));
    }
}
