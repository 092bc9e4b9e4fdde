//! Harness for the coordinator system tests and benchmarks: builds and finds
//! `tandemd` / `tandemctl`, runs a `tandemd` on a private socket directory,
//! talks HTTP to its stats socket, runs host processes concurrently, checks
//! Prometheus text, and speaks the raw wire protocol as a (possibly hostile)
//! peer.
//!
//! Everything spawned here is killed (`SIGKILL`) and reaped when its guard is
//! dropped, so a failing test leaves no process behind. Waits are bounded
//! polls ([`poll`]) with generous deadlines; nothing here measures time.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod bins;
mod fake;
mod http;
mod peer;
mod process;
mod prometheus;
mod tandemd;

pub use bins::*;
pub use fake::*;
pub use http::*;
pub use peer::*;
pub use process::*;
pub use prometheus::*;
pub use tandemd::*;

/// Deadline for anything a healthy system does "at once" (a coordinator
/// starting, a client registering, counts settling). Generous: the tests run
/// on loaded 2-core CI machines. Not a performance bound.
pub const SETTLE: Duration = Duration::from_secs(20);

/// Deadline for a host process that was told to finish.
pub const EXIT: Duration = Duration::from_secs(60);

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
