//! tandemd's socket paths: where its sockets live and what is already there.
//! The system calls are `tandem_os`'s ([`tandem_os::socket`],
//! [`tandem_os::epoll`]); this module checks paths with messages an operator
//! can act on, binds, connects, probes, and hands out the epoll set and its
//! wake-up pipes.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tandem_os::socket::{self, UnixAddr};

pub use tandem_os::epoll::{drain_pipe, pipe, poke, Epoll, Event};
pub use tandem_os::socket::{accept, peer_cred, PeerCred};

/// Longest socket path `sockaddr_un` holds (without the NUL).
pub const MAX_SOCKET_PATH: usize = tandem_os::socket::SUN_PATH_LEN - 1;

/// The socket address of `path`, or a clear error if it cannot hold it.
pub fn sockaddr(path: &Path) -> io::Result<UnixAddr> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path is empty",
        ));
    }
    if bytes.len() > MAX_SOCKET_PATH {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "socket path {} is {} bytes; unix sockets allow at most {MAX_SOCKET_PATH}: choose a shorter path (TANDEM_SOCKET or --socket)",
                path.display(),
                bytes.len()
            ),
        ));
    }
    if bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path contains a NUL byte",
        ));
    }
    Ok(UnixAddr::new(bytes)?)
}

/// Bind and listen on a non-blocking `SOCK_SEQPACKET` socket at `path`, mode 0666.
pub fn listen_seqpacket(path: &Path) -> io::Result<OwnedFd> {
    let addr = sockaddr(path)?;
    let fd = socket::seqpacket(true)?;
    socket::bind(fd.as_fd(), &addr)?;
    chmod_0666(path)?;
    socket::listen(fd.as_fd(), 256)?;
    Ok(fd)
}

/// `chmod 0666` (any user's job may connect; control is checked by SO_PEERCRED).
pub fn chmod_0666(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
}

/// Connect a blocking `SOCK_SEQPACKET` socket to `path`, with send and receive
/// timeouts of `timeout` (which also bound the connect).
pub fn connect_seqpacket(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let addr = sockaddr(path)?;
    let fd = socket::seqpacket(false)?;
    socket::set_timeouts(fd.as_fd(), timeout)?;
    socket::connect(fd.as_fd(), &addr, Instant::now() + timeout)?;
    Ok(fd)
}

/// What is at a socket path.
#[derive(Debug, PartialEq, Eq)]
pub enum Probe {
    /// Nothing there.
    Absent,
    /// A socket file that nobody listens on (stale).
    Stale,
    /// Something accepted a connection: a live daemon.
    Live,
}

/// Whether a socket file is at `path` (false: nothing is); anything else
/// there is an error naming it, so that it is never removed.
fn socket_file_at(path: &Path) -> io::Result<bool> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
        Ok(m) if !m.file_type().is_socket() => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; remove it or choose another path",
                path.display()
            ),
        )),
        Ok(_) => Ok(true),
    }
}

/// Look at `path` without disturbing a live daemon much (a connection that is
/// closed at once; tandemd treats it as a peer that hung up before its Hello).
pub fn probe(path: &Path) -> io::Result<Probe> {
    if !socket_file_at(path)? {
        return Ok(Probe::Absent);
    }
    match connect_seqpacket(path, Duration::from_millis(500)) {
        Ok(_) => Ok(Probe::Live),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Probe::Stale),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Probe::Absent),
        // A socket of another type (e.g. stream) at the path: something else
        // lives there; treat it as live so we never delete it.
        Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => Ok(Probe::Live),
        Err(e) => Err(e),
    }
}

/// [`probe`] for a stream socket (the stats socket): what is at `path`.
pub fn probe_stream(path: &Path) -> io::Result<Probe> {
    if !socket_file_at(path)? {
        return Ok(Probe::Absent);
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Ok(Probe::Live),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => Ok(Probe::Stale),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Probe::Absent),
        // Another type of socket (a main socket of that name): in use.
        Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => Ok(Probe::Live),
        Err(e) => Err(e),
    }
}

/// A descriptor held in reserve (`/dev/null`), closed to make room for one
/// more when the process runs out.
#[must_use]
pub fn spare_fd() -> Option<OwnedFd> {
    std::fs::File::open("/dev/null").ok().map(OwnedFd::from)
}

/// `fd`, a connected socket, shut down both ways (its peer reads the end of
/// the stream) and kept open: a descriptor to hold in reserve as
/// [`spare_fd`]'s is, with no moment between closing one and opening
/// another.
#[must_use]
pub fn shut_down(fd: OwnedFd) -> OwnedFd {
    let s = std::os::unix::net::UnixStream::from(fd);
    let _ = s.shutdown(std::net::Shutdown::Both);
    OwnedFd::from(s)
}

/// Whether `errno` says this process (or the system) is out of descriptors.
#[must_use]
pub fn out_of_fds(errno: Option<i32>) -> bool {
    matches!(errno, Some(libc::EMFILE | libc::ENFILE))
}

/// What a client refused for want of descriptors is told (and the log).
#[must_use]
pub fn client_limit_message() -> String {
    let limit =
        tandem_os::rlimit::nofile().map_or_else(|_| "?".to_string(), |l| l.soft.to_string());
    format!(
        "tandemd is at its client limit ({limit} open files): this job runs unscheduled; raise tandemd's open-file limit (LimitNOFILE= in its systemd unit)"
    )
}

/// Checks that `dir` is `euid`'s own and that nobody else may write in it:
/// the test ssh-agent and tmux make of their directories in /tmp, where
/// anyone could have made it first to catch the sockets.
pub fn check_private_dir(dir: &Path, euid: u32) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let problem = if !m.is_dir() {
        Some("it is not a directory (a symlink?)".to_string())
    } else if m.uid() != euid {
        Some(format!(
            "it is owned by uid {}, not by you (uid {euid})",
            m.uid()
        ))
    } else if m.mode() & 0o022 != 0 {
        Some(format!(
            "others may write in it (mode {:04o})",
            m.mode() & 0o7777
        ))
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(format!(
            "{} is not safe for tandemd's sockets: {p}; remove it (tandemd then creates it, mode 0700), or set XDG_RUNTIME_DIR or TANDEM_SOCKET (--socket) to a directory of your own",
            dir.display()
        )),
    }
}

/// Make a directory (and parents) for a socket, mode 0755 for new ones.
pub fn ensure_parent(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() && !p.exists() => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(p),
        _ => Ok(()),
    }
}

/// `CString` of a path, for `libc` calls.
pub fn cpath(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains NUL"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_dir_must_be_ours_and_closed_to_others() {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        let dir = std::env::temp_dir().join(format!("tandem-sock-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let mode = |m: u32| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(m));
        mode(0o700).unwrap();
        assert_eq!(check_private_dir(&dir, me), Ok(()));
        mode(0o755).unwrap();
        assert_eq!(
            check_private_dir(&dir, me),
            Ok(()),
            "others may read, not write"
        );
        mode(0o777).unwrap();
        let e = check_private_dir(&dir, me).unwrap_err();
        assert!(e.contains("mode 0777") && e.contains("remove it"), "{e}");
        mode(0o700).unwrap();
        let e = check_private_dir(&dir, me.wrapping_add(1)).unwrap_err();
        assert!(e.contains(&format!("owned by uid {me}")), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
