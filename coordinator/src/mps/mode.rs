//! Which sharing mode is in force: an MPS control daemon found by its
//! control pipe, and the `sharing` part of the stats.

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
    /// (tandem over MPS is described by [`Mps::sharing`](super::Mps::sharing), which knows more).
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

/// `sharing.mps` in `GET /stats`: `[mps]` and where it stands.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MpsSnapshot {
    /// Whether jobs that register now are told to join MPS.
    pub in_force: bool,
    /// The daemon was started by this tandemd (which stops it at exit);
    /// false: found running, or none.
    pub owned: bool,
    /// The control daemon's pid, when known.
    pub pid: Option<u32>,
    /// The control program.
    pub control_binary: String,
    /// `CUDA_MPS_PIPE_DIRECTORY`.
    pub pipe_dir: String,
    /// `CUDA_MPS_LOG_DIRECTORY`.
    pub log_dir: String,
    /// `CUDA_MPS_CLIENT_PRIORITY` of training jobs.
    pub training_priority: u32,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` of training jobs, if capped.
    pub training_thread_percentage: Option<u32>,
    /// The in-flight bound of training jobs that joined below normal (ns, 0: none).
    pub training_inflight_ns: u64,
    /// Why it is not in force, when it is not.
    pub error: Option<String>,
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
