//! Where the coordinator listens, computed the same way by the shim, tandemd
//! and tandemctl.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The main socket's default file name.
pub const MAIN_SOCKET_NAME: &str = "tandemd.sock";
/// File name of the read-only stats socket beside a main socket of the
/// default name ([`MAIN_SOCKET_NAME`]); see [`stats_socket`] for others.
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
        None => tmp_socket_dir(euid).join(MAIN_SOCKET_NAME),
    }
}

/// `/tmp/tandem-<uid>`: user `euid`'s socket directory when
/// `XDG_RUNTIME_DIR` is unset. Anyone can create it first in /tmp, so
/// tandemd uses it only if it is that user's own and nobody else may write
/// in it (as ssh-agent and tmux do).
pub fn tmp_socket_dir(euid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/tandem-{euid}"))
}

/// The stats socket that belongs to the main socket `main`, in the same
/// directory, its name following the main socket's so that two daemons in
/// one directory never share one: `stats.sock` beside the default
/// `tandemd.sock`, else the main socket's name with `.sock` (if it has it)
/// replaced by `.stats.sock` (`b.sock` -> `b.stats.sock`, `b` ->
/// `b.stats.sock`). tandemd binds it and tandemctl finds it with this one
/// function.
pub fn stats_socket(main: &Path) -> PathBuf {
    let dir = main.parent().unwrap_or_else(|| Path::new("."));
    let name = main.file_name().unwrap_or_default();
    if name == MAIN_SOCKET_NAME {
        return dir.join(STATS_SOCKET_NAME);
    }
    // (A name that is not UTF-8 keeps its `.sock`: still its own name.)
    let mut stats = match name.to_str().and_then(|n| n.strip_suffix(".sock")) {
        Some(stem) => OsString::from(stem),
        None => name.to_os_string(),
    };
    stats.push(".stats.sock");
    dir.join(stats)
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

    #[test]
    fn the_stats_socket_follows_the_main_sockets_name() {
        for (main, stats) in [
            ("/d/b.sock", "/d/b.stats.sock"),
            ("/d/b", "/d/b.stats.sock"),
            ("/d/stats.sock", "/d/stats.stats.sock"),
            ("/d/x.tandemd.sock", "/d/x.tandemd.stats.sock"),
            ("rel.sock", "rel.stats.sock"),
        ] {
            assert_eq!(
                stats_socket(Path::new(main)),
                PathBuf::from(stats),
                "{main}"
            );
        }
        assert_ne!(
            stats_socket(Path::new("/d/a.sock")),
            stats_socket(Path::new("/d/b.sock"))
        );
    }
}
