//! Where the coordinator listens, computed the same way by the shim, tandemd
//! and tandemctl.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// File name of the read-only stats socket, beside the main socket.
pub const STATS_SOCKET_NAME: &str = "stats.sock";

/// The main socket path from the environment: `$TANDEM_SOCKET`, else
/// `/run/tandem/tandemd.sock` for root, else
/// `$XDG_RUNTIME_DIR/tandem/tandemd.sock`, else `/tmp/tandem-<uid>/tandemd.sock`.
pub fn default_socket() -> PathBuf {
    socket_from(
        std::env::var_os("TANDEM_SOCKET"),
        std::env::var_os("XDG_RUNTIME_DIR"),
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() },
    )
}

/// [`default_socket`] with its inputs given (pure, for tests).
pub fn socket_from(
    tandem_socket: Option<OsString>,
    xdg_runtime_dir: Option<OsString>,
    euid: u32,
) -> PathBuf {
    if let Some(p) = tandem_socket.filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    if euid == 0 {
        return PathBuf::from("/run/tandem/tandemd.sock");
    }
    match xdg_runtime_dir.filter(|p| !p.is_empty()) {
        Some(dir) => Path::new(&dir).join("tandem").join("tandemd.sock"),
        None => PathBuf::from(format!("/tmp/tandem-{euid}/tandemd.sock")),
    }
}

/// The stats socket that belongs to the main socket `main`.
pub fn stats_socket(main: &Path) -> PathBuf {
    main.parent()
        .unwrap_or_else(|| Path::new("."))
        .join(STATS_SOCKET_NAME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_socket_wins() {
        let p = socket_from(Some("/x/y.sock".into()), Some("/run/user/5".into()), 0);
        assert_eq!(p, PathBuf::from("/x/y.sock"));
    }

    #[test]
    fn root_uses_run_tandem_and_users_their_runtime_dir() {
        assert_eq!(
            socket_from(None, Some("/run/user/5".into()), 0),
            PathBuf::from("/run/tandem/tandemd.sock")
        );
        assert_eq!(
            socket_from(None, Some("/run/user/5".into()), 5),
            PathBuf::from("/run/user/5/tandem/tandemd.sock")
        );
        assert_eq!(
            socket_from(Some("".into()), None, 5),
            PathBuf::from("/tmp/tandem-5/tandemd.sock")
        );
    }

    #[test]
    fn stats_socket_sits_beside_the_main_one() {
        assert_eq!(
            stats_socket(Path::new("/run/tandem/tandemd.sock")),
            PathBuf::from("/run/tandem/stats.sock")
        );
    }
}
