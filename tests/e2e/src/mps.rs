//! tandem over MPS in end-to-end tests: the stand-in control program
//! (`tests/fake-mps-control`: it creates the control pipe as
//! `nvidia-cuda-mps-control -d` would and removes it on `quit`; it starts no
//! MPS server and touches no GPU), and config edits.

use std::path::{Path, PathBuf};

/// `[mps] enabled = true`, as an edit of the default config ([`config`]).
pub const ENABLE: (&str, &str) = ("[mps]\nenabled = false", "[mps]\nenabled = true");

/// The directory holding the stand-in `nvidia-cuda-mps-control`.
#[must_use]
pub fn stand_in_dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../fake-mps-control")).to_path_buf()
}

/// tandemd's PATH: the stand-in first (found by the default
/// `control_binary`), then what its shell needs.
#[must_use]
pub fn path_with_stand_in() -> PathBuf {
    PathBuf::from(format!(
        "{}:/usr/local/bin:/usr/bin:/bin",
        stand_in_dir().display()
    ))
}

/// The default config with `edits` made, each a run of whole lines of it
/// and its replacement.
///
/// # Panics
/// When the default config has no such lines (the test would test nothing).
#[track_caller]
#[must_use]
pub fn config(edits: &[(&str, &str)]) -> String {
    let mut c = crate::coord::default_config().to_string();
    for (from, to) in edits {
        let next = c.replacen(&format!("\n{from}\n"), &format!("\n{to}\n"), 1);
        assert_ne!(next, c, "the default config has no line {from:?}");
        c = next;
    }
    c
}

/// Kills a stand-in daemon left in its pipe directory if the test fails
/// before tandemd stopped it (tandemd is then killed with SIGKILL).
pub struct DaemonGuard(pub PathBuf);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        let pid = std::fs::read_to_string(self.0.join("nvidia-cuda-mps-control.pid"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(pid) = pid.filter(|&p| p > 1) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains("nvidia-cuda-mps-control") {
                // SAFETY: kill(2) on the stand-in daemon this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
