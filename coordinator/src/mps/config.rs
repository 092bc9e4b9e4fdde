//! `[mps]` in tandemd.toml: whether tandemd runs an NVIDIA MPS control daemon
//! for its GPUs (tandem over MPS), where, and how training clients join it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Default `[mps] control_binary` (looked up on tandemd's `PATH`).
pub const DEFAULT_CONTROL_BINARY: &str = "nvidia-cuda-mps-control";
/// The pipe directory beside tandemd's socket when `[mps] pipe_dir` is empty.
pub const PIPE_DIR_NAME: &str = "mps";
/// The log directory beside tandemd's socket when `[mps] log_dir` is empty.
pub const LOG_DIR_NAME: &str = "mps-log";
/// Longest pipe directory: the MPS daemons create unix sockets inside it,
/// and a unix socket path holds at most 107 bytes.
pub const MAX_PIPE_DIR_LEN: usize = 64;
/// Largest `[mps] training_inflight_ns` (10 s, as `[scheduler]`'s times).
pub const MAX_INFLIGHT_NS: u64 = 10_000_000_000;
/// Default `[mps] training_inflight_ns`. Not measured: the GPU matrix
/// chooses it, as it chooses whether the mode is on at all.
pub const DEFAULT_INFLIGHT_NS: u64 = 2_000_000;

/// `[mps]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MpsConfig {
    /// Start (or use) an MPS control daemon and have clients join it.
    pub enabled: bool,
    /// `nvidia-cuda-mps-control`: a name looked up on `PATH`, or an
    /// absolute path.
    pub control_binary: String,
    /// `CUDA_MPS_PIPE_DIRECTORY` of the daemon and its clients; empty:
    /// `mps` beside tandemd's socket.
    pub pipe_dir: String,
    /// `CUDA_MPS_LOG_DIRECTORY` of the daemon; empty: `mps-log` beside
    /// tandemd's socket.
    pub log_dir: String,
    /// `CUDA_MPS_CLIENT_PRIORITY` of training clients: 0 normal, 1 below
    /// normal. Inference clients always get 0.
    pub training_priority: u32,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` of training clients (1..=100);
    /// none: no cap.
    pub training_thread_percentage: Option<u32>,
    /// The shallow bound on the work in flight of a training job that joined
    /// below normal priority, in estimated ns (0: none); such a job is held
    /// by no gate or launch limit (`crate::grant::mps_adjust`).
    pub training_inflight_ns: u64,
}

impl Default for MpsConfig {
    fn default() -> Self {
        MpsConfig {
            enabled: false,
            control_binary: DEFAULT_CONTROL_BINARY.into(),
            pipe_dir: String::new(),
            log_dir: String::new(),
            training_priority: u32::from(tandem_proto::mps::PRIORITY_BELOW_NORMAL),
            training_thread_percentage: None,
            training_inflight_ns: DEFAULT_INFLIGHT_NS,
        }
    }
}

impl MpsConfig {
    /// Checks serde cannot express. Returns (key, problem).
    pub fn validate(&self) -> Result<(), (String, String)> {
        let bad = |k: &str, p: String| Err((format!("mps.{k}"), p));
        let b = &self.control_binary;
        if b.is_empty() || b.contains('\0') || (b.contains('/') && !b.starts_with('/')) {
            return bad(
                "control_binary",
                format!(
                    "{b:?} is neither a program name (looked up on PATH) nor an absolute path; \
                     the default is {DEFAULT_CONTROL_BINARY:?}"
                ),
            );
        }
        for (key, dir) in [("pipe_dir", &self.pipe_dir), ("log_dir", &self.log_dir)] {
            if !dir.is_empty() && (!dir.starts_with('/') || dir.contains('\0')) {
                return bad(
                    key,
                    format!("{dir:?} is not an absolute path (or \"\" for the default)"),
                );
            }
        }
        if self.pipe_dir.len() > MAX_PIPE_DIR_LEN {
            return bad(
                "pipe_dir",
                format!(
                    "{:?} is {} bytes; use at most {MAX_PIPE_DIR_LEN} (the MPS daemons create \
                     unix sockets inside it, whose paths hold at most 107 bytes)",
                    self.pipe_dir,
                    self.pipe_dir.len()
                ),
            );
        }
        if self.training_priority > u32::from(tandem_proto::mps::PRIORITY_BELOW_NORMAL) {
            return bad(
                "training_priority",
                format!(
                    "{} is not an MPS client priority: use 0 (normal) or 1 (below normal)",
                    self.training_priority
                ),
            );
        }
        if let Some(p) = self.training_thread_percentage {
            if p == 0 || p > 100 {
                return bad(
                    "training_thread_percentage",
                    format!("{p} is out of range: use 1 to 100, or leave it out for no cap"),
                );
            }
        }
        if self.training_inflight_ns > MAX_INFLIGHT_NS {
            return bad(
                "training_inflight_ns",
                format!(
                    "{} is out of range: use 0 (no bound) to {MAX_INFLIGHT_NS}",
                    self.training_inflight_ns
                ),
            );
        }
        Ok(())
    }

    /// The pipe directory: `pipe_dir`, else `mps` in `socket_dir`.
    #[must_use]
    pub fn pipe_dir_in(&self, socket_dir: &Path) -> PathBuf {
        or_beside(&self.pipe_dir, socket_dir, PIPE_DIR_NAME)
    }

    /// The log directory: `log_dir`, else `mps-log` in `socket_dir`.
    #[must_use]
    pub fn log_dir_in(&self, socket_dir: &Path) -> PathBuf {
        or_beside(&self.log_dir, socket_dir, LOG_DIR_NAME)
    }

    /// Whether a reload from `self` to `new` changes what only a restart
    /// applies (the daemon itself: on/off, binary, directories).
    #[must_use]
    pub fn needs_restart(&self, new: &MpsConfig) -> bool {
        self.enabled != new.enabled
            || self.control_binary != new.control_binary
            || self.pipe_dir != new.pipe_dir
            || self.log_dir != new.log_dir
    }
}

fn or_beside(configured: &str, socket_dir: &Path, name: &str) -> PathBuf {
    if configured.is_empty() {
        socket_dir.join(name)
    } else {
        PathBuf::from(configured)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<crate::config::Config, crate::config::ConfigError> {
        crate::config::Config::parse(text, Path::new("/etc/tandem/tandemd.toml"))
    }

    #[test]
    fn off_by_default_with_documented_values() {
        let m = crate::config::Config::default().mps;
        assert!(!m.enabled);
        assert_eq!(m.control_binary, "nvidia-cuda-mps-control");
        assert_eq!(m.training_priority, 1);
        assert_eq!(m.training_thread_percentage, None);
        assert_eq!(m.training_inflight_ns, DEFAULT_INFLIGHT_NS);
        assert_eq!(parse("[mps]\n").unwrap().mps, m);
        let run = Path::new("/run/tandem");
        assert_eq!(m.pipe_dir_in(run), Path::new("/run/tandem/mps"));
        assert_eq!(m.log_dir_in(run), Path::new("/run/tandem/mps-log"));
    }

    #[test]
    fn full_section_parses() {
        let m = parse(
            "[mps]\nenabled = true\ncontrol_binary = \"/opt/cuda/bin/nvidia-cuda-mps-control\"\n\
             pipe_dir = \"/run/mps\"\nlog_dir = \"/var/log/mps\"\ntraining_priority = 0\n\
             training_thread_percentage = 40\ntraining_inflight_ns = 0\n",
        )
        .unwrap()
        .mps;
        assert!(m.enabled);
        assert_eq!(m.training_priority, 0);
        assert_eq!(m.training_thread_percentage, Some(40));
        assert_eq!(m.training_inflight_ns, 0, "0 (no bound) is valid");
        assert_eq!(m.pipe_dir_in(Path::new("/x")), Path::new("/run/mps"));
        assert_eq!(m.log_dir_in(Path::new("/x")), Path::new("/var/log/mps"));
    }

    #[test]
    fn bad_values_name_the_key_and_the_remedy() {
        for (text, key, hint) in [
            ("training_priority = 2", "mps.training_priority", "0 (normal)"),
            (
                "training_thread_percentage = 0",
                "mps.training_thread_percentage",
                "1 to 100",
            ),
            (
                "training_thread_percentage = 101",
                "mps.training_thread_percentage",
                "1 to 100",
            ),
            (
                "training_inflight_ns = 20000000000",
                "mps.training_inflight_ns",
                "0 (no bound)",
            ),
            ("control_binary = \"\"", "mps.control_binary", "PATH"),
            ("control_binary = \"bin/mps\"", "mps.control_binary", "absolute"),
            ("pipe_dir = \"mps\"", "mps.pipe_dir", "absolute"),
            ("log_dir = \"log\"", "mps.log_dir", "absolute"),
            (
                "pipe_dir = \"/run/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
                "mps.pipe_dir",
                "107 bytes",
            ),
        ] {
            let e = parse(&format!("[mps]\n{text}\n")).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
            assert!(e.to_string().contains(hint), "{text}: {e}");
        }
        let e = parse("[mps]\nenable = true\n").unwrap_err();
        assert!(e.to_string().contains("enable"), "{e}");
    }

    #[test]
    fn restart_only_for_the_daemon_itself() {
        let a = MpsConfig::default();
        let mut b = a.clone();
        b.training_priority = 0;
        b.training_thread_percentage = Some(50);
        b.training_inflight_ns = 1;
        assert!(!a.needs_restart(&b), "client values apply to later clients");
        for f in [
            |m: &mut MpsConfig| m.enabled = true,
            |m: &mut MpsConfig| m.control_binary = "/x".into(),
            |m: &mut MpsConfig| m.pipe_dir = "/p".into(),
            |m: &mut MpsConfig| m.log_dir = "/l".into(),
        ] {
            let mut c = a.clone();
            f(&mut c);
            assert!(a.needs_restart(&c));
        }
    }
}
