//! A test's own directory: its sockets, logs and files.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
