//! Unix `SOCK_SEQPACKET` sockets: the one transport between a shim and
//! tandemd (std has no `SOCK_SEQPACKET`).
//!
//! Every socket is close-on-exec. Addresses are built on the stack
//! ([`UnixAddr`]); nothing here allocates.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::net::{self, sockopt, AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use crate::error::{Error, Result, EINTR};

/// Bytes in `sockaddr_un::sun_path`, the terminating NUL included.
pub const SUN_PATH_LEN: usize = 108;

/// A unix socket address for a filesystem path, on the stack.
#[derive(Clone, Debug)]
pub struct UnixAddr(SocketAddrUnix);

impl UnixAddr {
    /// The address of `path`: `ENAMETOOLONG` when it does not fit
    /// `sun_path` with its NUL ([`SUN_PATH_LEN`]), `EINVAL` when it holds a
    /// NUL byte, `ENOENT` when it is empty.
    pub fn new(path: &[u8]) -> Result<UnixAddr> {
        const OP: &str = "sockaddr_un";
        if path.is_empty() {
            return Err(Error::new(OP, Errno::NOENT.raw_os_error()));
        }
        if path.len() >= SUN_PATH_LEN {
            return Err(Error::new(OP, Errno::NAMETOOLONG.raw_os_error()));
        }
        SocketAddrUnix::new(path)
            .map(UnixAddr)
            .map_err(Error::at(OP))
    }
}

/// A new unix `SOCK_SEQPACKET` socket, close-on-exec, non-blocking if asked.
pub fn seqpacket(nonblocking: bool) -> Result<OwnedFd> {
    let mut flags = SocketFlags::CLOEXEC;
    if nonblocking {
        flags |= SocketFlags::NONBLOCK;
    }
    net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, flags, None)
        .map_err(Error::at("socket"))
}

/// A connected pair of unix `SOCK_SEQPACKET` sockets, close-on-exec and
/// non-blocking: both ends of a shim's connection to tandemd in one process
/// (the tests of what each side does with a full or closed peer).
pub fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd)> {
    net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )
    .map_err(Error::at("socketpair"))
}

/// Bind `sock` to `addr`.
pub fn bind(sock: BorrowedFd<'_>, addr: &UnixAddr) -> Result<()> {
    net::bind(sock, &addr.0).map_err(Error::at("bind"))
}

/// Listen on `sock` with a backlog of `backlog`.
pub fn listen(sock: BorrowedFd<'_>, backlog: i32) -> Result<()> {
    net::listen(sock, backlog).map_err(Error::at("listen"))
}

/// Connect `sock` to `addr`, bounded by `deadline`: the one connect of
/// tandem. On a non-blocking socket an `EINPROGRESS` connect is awaited
/// (`poll` for writability, then `SO_ERROR`); a full backlog (`EAGAIN`) is
/// retried every 10 ms. Past the deadline: `ETIMEDOUT`. A blocking socket
/// is bounded by its own send timeout ([`set_timeouts`]) instead.
pub fn connect(sock: BorrowedFd<'_>, addr: &UnixAddr, deadline: Instant) -> Result<()> {
    let timed_out = Error::new("connect", Errno::TIMEDOUT.raw_os_error());
    loop {
        match net::connect(sock, &addr.0) {
            Ok(()) => return Ok(()),
            Err(Errno::INTR) => continue,
            // A full backlog on a unix socket: retry briefly, within the bound.
            Err(Errno::AGAIN) => {
                if Instant::now() >= deadline {
                    return Err(timed_out);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(Errno::INPROGRESS) => {
                if !wait(sock, Ready::Writable, deadline)? {
                    return Err(timed_out);
                }
                return match sockopt::socket_error(sock)
                    .map_err(Error::at("getsockopt(SO_ERROR)"))?
                {
                    Ok(()) => Ok(()),
                    Err(e) => Err(Error::new("connect", e.raw_os_error())),
                };
            }
            Err(e) => return Err(Error::new("connect", e.raw_os_error())),
        }
    }
}

/// Accept one connection (non-blocking, close-on-exec); `None` when none is
/// waiting. A peer that gave up before it was accepted is skipped.
pub fn accept(listener: BorrowedFd<'_>) -> Result<Option<OwnedFd>> {
    loop {
        match net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
            Ok(fd) => return Ok(Some(fd)),
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => return Ok(None),
            // The peer gave up before we got to it: not our error.
            Err(Errno::CONNABORTED) | Err(Errno::PROTO) => continue,
            Err(e) => return Err(Error::new("accept4", e.raw_os_error())),
        }
    }
}

/// The peer's credentials (`SO_PEERCRED`), as the kernel recorded them at connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id (0 when the kernel has none to give).
    pub pid: u32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected unix socket.
pub fn peer_cred(sock: BorrowedFd<'_>) -> Result<PeerCred> {
    let c = sockopt::socket_peercred(sock).map_err(Error::at("getsockopt(SO_PEERCRED)"))?;
    Ok(PeerCred {
        pid: c.pid.as_raw_nonzero().get() as u32,
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

/// Set `SO_RCVTIMEO` and `SO_SNDTIMEO` (zero: no timeout).
pub fn set_timeouts(sock: BorrowedFd<'_>, timeout: Duration) -> Result<()> {
    let t = (!timeout.is_zero()).then_some(timeout);
    for (id, op) in [
        (sockopt::Timeout::Recv, "setsockopt(SO_RCVTIMEO)"),
        (sockopt::Timeout::Send, "setsockopt(SO_SNDTIMEO)"),
    ] {
        sockopt::set_socket_timeout(sock, id, t).map_err(Error::at(op))?;
    }
    Ok(())
}

/// What [`wait`] waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Data to read, or a hang-up or error that a read reports (`POLLIN`).
    Readable,
    /// Room to write, or a finished non-blocking connect (`POLLOUT`).
    Writable,
}

/// Waits until `fd` is ready as asked or `deadline` passes: `true` when
/// ready (or in error or hung up: the next call says which), `false` at the
/// deadline. Signals do not shorten the wait.
pub fn wait(fd: BorrowedFd<'_>, ready: Ready, deadline: Instant) -> Result<bool> {
    let events = match ready {
        Ready::Readable => PollFlags::IN,
        Ready::Writable => PollFlags::OUT,
    };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        // At least 1 ms, as poll(2) counts: a wait never spins.
        let left = left.max(Duration::from_millis(1));
        let ts = Timespec {
            tv_sec: left.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: left.subsec_nanos().into(),
        };
        let mut p = [PollFd::from_borrowed_fd(fd, events)];
        match rustix::event::poll(&mut p, Some(&ts)) {
            Ok(n) if n > 0 && !p[0].revents().is_empty() => return Ok(true),
            Ok(_) => continue, // re-check the deadline
            Err(e) if e.raw_os_error() == EINTR => continue,
            Err(e) => return Err(Error::new("poll", e.raw_os_error())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    fn path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("tandem-os-{}-{name}", std::process::id()))
    }

    #[test]
    fn connect_accept_and_peer_cred_over_a_listening_socket() {
        let p = path("listen");
        let _ = std::fs::remove_file(&p);
        let addr = UnixAddr::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let l = seqpacket(true).unwrap();
        bind(l.as_fd(), &addr).unwrap();
        listen(l.as_fd(), 4).unwrap();
        assert!(accept(l.as_fd()).unwrap().is_none(), "nobody connected yet");
        let c = seqpacket(true).unwrap();
        connect(c.as_fd(), &addr, Instant::now() + Duration::from_secs(1)).unwrap();
        let s = accept(l.as_fd()).unwrap().expect("a connection waits");
        let cred = peer_cred(s.as_fd()).unwrap();
        assert_eq!(cred.pid, std::process::id());
        assert_eq!(cred.uid, std::fs::metadata("/proc/self").unwrap().uid());
        // Nothing sent yet: not readable within the deadline.
        assert!(!wait(
            s.as_fd(),
            Ready::Readable,
            Instant::now() + Duration::from_millis(5)
        )
        .unwrap());
        drop(c);
        // The hang-up makes it readable (a read reports it).
        assert!(wait(
            s.as_fd(),
            Ready::Readable,
            Instant::now() + Duration::from_secs(1)
        )
        .unwrap());
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn connect_errors_keep_their_errno() {
        let p = path("absent");
        let _ = std::fs::remove_file(&p);
        let addr = UnixAddr::new(p.as_os_str().as_encoded_bytes()).unwrap();
        let c = seqpacket(true).unwrap();
        let e = connect(c.as_fd(), &addr, Instant::now() + Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            (e.op(), e.errno()),
            ("connect", Errno::NOENT.raw_os_error())
        );
        let long = vec![b'a'; SUN_PATH_LEN];
        let e = UnixAddr::new(&long).unwrap_err();
        assert!(e.is(Errno::NAMETOOLONG.raw_os_error()));
        assert!(UnixAddr::new(&long[..SUN_PATH_LEN - 1]).is_ok());
        assert!(UnixAddr::new(b"a\0b")
            .unwrap_err()
            .is(Errno::INVAL.raw_os_error()));
    }
}
