//! Which GPU sharing mode is in force, and tandem over MPS.
//!
//! Three modes, shown by `GET /stats` (`sharing`), `GET /metrics`
//! (`tandem_sharing_mode`) and `tandemctl status`:
//!
//! * **time slicing**: no MPS. Processes take turns on a GPU; tandem's gates
//!   hold training launches back while inference needs the GPU.
//! * **time slicing over MPS**: an MPS control daemon that tandem does not
//!   manage runs on the node (found by one `stat()` of `<pipe dir>/control`
//!   at every stats snapshot, the pipe directory being
//!   `CUDA_MPS_PIPE_DIRECTORY` in tandemd's environment, else NVIDIA's
//!   `/tmp/nvidia-mps`). Kernels of different processes may run at once; the
//!   gates still hold training back, and tandem sets no MPS priority.
//! * **tandem over MPS** (`[mps] enabled`, off by default until GPU
//!   measurements say otherwise): tandemd starts and owns an MPS control
//!   daemon for the node's GPUs ([`daemon`]), or uses the one already running
//!   in its pipe directory. Every shim that registers is told, in its Welcome
//!   ([`tandem_proto::mps`]), to join it before CUDA initialises: training
//!   jobs at `[mps] training_priority` (below normal by default) and
//!   optionally capped in SMs, inference jobs at normal priority. A training
//!   job that joined at low priority is held by no gate or launch limit:
//!   its priority keeps inference first, and `[mps] training_inflight_ns`
//!   is its shim's shallow in-flight bound (`crate::grant::mps_adjust`).
//!
//! The trade-off of MPS: the clients on one GPU share one MPS server
//! context, so a fatal fault in one of them (an illegal memory access, say)
//! reaches every MPS client on that GPU, and the server takes new clients on
//! that GPU only after all of them have exited; jobs lose the isolation of
//! separate contexts. So jobs that join are not offered weight sharing or
//! follow mode, whose read-only mappings turn a stray write into such a
//! fault. MPS runs one user's server at a time (a client of another uid waits
//! until the current server's clients are done), so tandemd has the jobs of
//! one uid join at a time and runs the others outside MPS. If the daemon
//! cannot be started, tandemd stays in time slicing and says why
//! (fail-open).

pub mod config;
pub mod daemon;
mod runtime;

pub use runtime::{Mps, MpsSnapshot, Offer};

use std::ffi::OsStr;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// NVIDIA's default MPS pipe directory.
pub const DEFAULT_PIPE_DIR: &str = "/tmp/nvidia-mps";

pub use tandem_proto::mps::PIPE_DIR_ENV;

/// A running MPS control daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpsInfo {
    /// The pipe directory holding its `control` pipe.
    pub pipe_dir: PathBuf,
}

/// The MPS pipe directory: `env` (the value of `CUDA_MPS_PIPE_DIRECTORY`)
/// if set and non-empty, else [`DEFAULT_PIPE_DIR`].
#[must_use]
pub fn pipe_dir(env: Option<&OsStr>) -> PathBuf {
    match env {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => PathBuf::from(DEFAULT_PIPE_DIR),
    }
}

/// Whether an MPS control daemon runs: `<pipe_dir>/control` exists and is a
/// FIFO or a socket (a regular file or a directory does not count).
#[must_use]
pub fn detect(pipe_dir: &Path) -> Option<MpsInfo> {
    let ft = std::fs::metadata(pipe_dir.join("control"))
        .ok()?
        .file_type();
    (ft.is_fifo() || ft.is_socket()).then(|| MpsInfo {
        pipe_dir: pipe_dir.to_path_buf(),
    })
}

/// The sharing mode in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharingMode {
    /// No MPS: processes time-slice the GPU; tandem's gates order them.
    TimeSlicing,
    /// An MPS control daemon runs: the gates still hold training back, but
    /// kernels of different processes may run concurrently.
    TimeSlicingOverMps,
    /// tandem over MPS (`[mps] enabled`): tandemd's MPS control daemon runs
    /// and registering jobs join it at their class's priority.
    TandemOverMps,
}

impl SharingMode {
    /// The mode for a detection result.
    #[must_use]
    pub fn of(mps: Option<&MpsInfo>) -> Self {
        if mps.is_some() {
            Self::TimeSlicingOverMps
        } else {
            Self::TimeSlicing
        }
    }

    /// The machine name (JSON `mode`, the Prometheus `mode` label).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::TimeSlicing => "time_slicing",
            Self::TimeSlicingOverMps => "time_slicing_over_mps",
            Self::TandemOverMps => "tandem_over_mps",
        }
    }

    /// One line for humans; `mps` names the pipe directory when MPS runs
    /// (tandem over MPS is described by [`Mps::sharing`], which knows more).
    #[must_use]
    pub fn describe(self, mps: Option<&MpsInfo>) -> String {
        match self {
            Self::TandemOverMps => format!(
                "tandem over MPS ({})",
                mps.map_or_else(
                    || "pipe directory unknown".to_string(),
                    |m| m.pipe_dir.display().to_string()
                )
            ),
            Self::TimeSlicing => "time slicing: tandem's gates hold training launches back".into(),
            Self::TimeSlicingOverMps => format!(
                "time slicing over MPS: an MPS control daemon runs ({}); tandem's gates still \
                 hold training launches back, kernels of different jobs may run concurrently, \
                 and the policy does not use MPS spatial sharing (not measured)",
                mps.map_or_else(
                    || "pipe directory unknown".to_string(),
                    |m| m.pipe_dir.display().to_string()
                )
            ),
        }
    }
}

/// `sharing` in `GET /stats`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SharingSnapshot {
    /// [`SharingMode::name`].
    pub mode: String,
    /// The MPS pipe directory when an MPS control daemon runs, else null.
    pub mps_pipe_dir: Option<String>,
    /// [`SharingMode::describe`].
    pub describe: String,
    /// `[mps]` as configured and as it stands; null when `[mps] enabled =
    /// false` (and from daemons that predate it).
    #[serde(default)]
    pub mps: Option<MpsSnapshot>,
}

impl SharingSnapshot {
    /// The snapshot for a detection result.
    #[must_use]
    pub fn of(mps: Option<&MpsInfo>) -> Self {
        let mode = SharingMode::of(mps);
        Self {
            mode: mode.name().into(),
            mps_pipe_dir: mps.map(|m| m.pipe_dir.display().to_string()),
            describe: mode.describe(mps),
            mps: None,
        }
    }

    /// Detect now, with the pipe directory from this process's environment.
    #[must_use]
    pub fn current() -> Self {
        let dir = pipe_dir(std::env::var_os(PIPE_DIR_ENV).as_deref());
        Self::of(detect(&dir).as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A fresh empty directory, removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(tag: &str) -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "tandem-mps-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn fifo_named_control_is_mps() {
        let d = Dir::new("fifo");
        let path = CString::new(d.0.join("control").as_os_str().as_bytes()).unwrap();
        // SAFETY: `path` is a valid NUL-terminated C string that outlives the call.
        let rc = unsafe { libc::mkfifo(path.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
        let info = detect(&d.0).expect("a FIFO named control is an MPS daemon");
        assert_eq!(info.pipe_dir, d.0);
        let s = SharingSnapshot::of(Some(&info));
        assert_eq!(s.mode, "time_slicing_over_mps");
        assert_eq!(s.mps_pipe_dir.as_deref(), d.0.to_str());
        assert!(s.describe.contains(d.0.to_str().unwrap()), "{}", s.describe);
        assert!(s.describe.contains("not use MPS spatial sharing"));
    }

    #[test]
    fn socket_named_control_is_mps() {
        let d = Dir::new("sock");
        let _l = UnixListener::bind(d.0.join("control")).unwrap();
        assert_eq!(
            detect(&d.0),
            Some(MpsInfo {
                pipe_dir: d.0.clone()
            })
        );
    }

    #[test]
    fn regular_file_or_directory_is_not_mps() {
        let d = Dir::new("file");
        std::fs::write(d.0.join("control"), b"").unwrap();
        assert_eq!(detect(&d.0), None);
        let d = Dir::new("subdir");
        std::fs::create_dir(d.0.join("control")).unwrap();
        assert_eq!(detect(&d.0), None);
    }

    #[test]
    fn missing_dir_or_pipe_is_not_mps() {
        let d = Dir::new("empty");
        assert_eq!(detect(&d.0), None);
        assert_eq!(detect(&d.0.join("no-such-dir")), None);
        let s = SharingSnapshot::of(None);
        assert_eq!(s.mode, "time_slicing");
        assert_eq!(s.mps_pipe_dir, None);
        assert_eq!(
            s.describe,
            "time slicing: tandem's gates hold training launches back"
        );
    }

    #[test]
    fn pipe_dir_env_rules() {
        assert_eq!(pipe_dir(None), Path::new("/tmp/nvidia-mps"));
        assert_eq!(pipe_dir(Some(OsStr::new(""))), Path::new("/tmp/nvidia-mps"));
        assert_eq!(
            pipe_dir(Some(OsStr::new("/run/mps"))),
            Path::new("/run/mps")
        );
    }

    #[test]
    fn mode_names() {
        assert_eq!(SharingMode::of(None), SharingMode::TimeSlicing);
        assert_eq!(SharingMode::TimeSlicing.name(), "time_slicing");
        assert_eq!(
            SharingMode::TimeSlicingOverMps.name(),
            "time_slicing_over_mps"
        );
    }
}
