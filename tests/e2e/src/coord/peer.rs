//! Raw wire peers: as this process, or as another uid (root).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use super::wait::SETTLE;

/// A raw `SOCK_SEQPACKET` connection to the coordinator's main socket, for
/// sending well-formed or deliberately broken messages.
pub struct Peer {
    pub(super) fd: OwnedFd,
}

impl Peer {
    /// Connects to `sock`.
    pub fn connect(sock: &Path) -> Result<Peer, String> {
        // SAFETY: plain socket(2) call; the result is checked.
        let raw =
            unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(format!("socket: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a fresh, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let addr = unix_addr(sock)?;
        // SAFETY: addr is a valid, NUL-terminated sockaddr_un of the size given.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(format!(
                "connect {}: {}",
                sock.display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(Peer { fd })
    }

    /// Sends one datagram.
    pub fn send(&self, bytes: &[u8]) -> Result<(), String> {
        tandem_proto::wire::send(self.fd.as_fd(), bytes, None).map_err(|e| e.to_string())
    }

    /// Whether a datagram is waiting to be read, waiting at most `timeout`;
    /// reads nothing.
    pub fn readable(&self, timeout: Duration) -> bool {
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        poll_in(self.fd.as_fd(), ms) & libc::POLLIN != 0
    }

    /// Sends one datagram without blocking; `Ok(false)` when the socket is full.
    pub fn send_nonblocking(&self, bytes: &[u8]) -> Result<bool, String> {
        // SAFETY: send(2) from a live buffer on our own fd.
        let r = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if r >= 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(false),
            _ => Err(e.to_string()),
        }
    }

    /// Receives one datagram (and the fd riding along), waiting at most
    /// `timeout`. `Ok((empty, None))` means the coordinator closed the
    /// connection.
    pub fn recv(&self, timeout: Duration) -> Result<(Vec<u8>, Option<OwnedFd>), String> {
        let tv = libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: setsockopt with a valid timeval of the size given.
        let r = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(format!("SO_RCVTIMEO: {}", std::io::Error::last_os_error()));
        }
        let mut buf = vec![0u8; tandem_proto::wire::MAX_MESSAGE_LEN + 64];
        let got = tandem_proto::wire::recv(self.fd.as_fd(), &mut buf).map_err(|e| e.to_string())?;
        buf.truncate(got.len);
        Ok((buf, got.fd))
    }

    /// The socket.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }
}

/// An encoded Hello from this process (class auto, exe = the test executable).
pub fn hello_bytes() -> Vec<u8> {
    let exe = std::env::current_exe().expect("current_exe");
    let msg = tandem_proto::Message::Hello(tandem_proto::Hello {
        pid: std::process::id(),
        class: tandem_proto::ClientClass::Auto,
        flags: 0,
        exe: exe.as_os_str().as_bytes(),
        cgroup: b"/",
    });
    let mut buf = vec![0u8; msg.encoded_len()];
    let n = msg.encode(&mut buf).expect("encode Hello");
    buf.truncate(n);
    buf
}

/// Log lines of `log` that mention `needle` (case-insensitive) at warn level
/// or above (`WARN`/`ERROR` in the line, as tracing prints the level).
pub fn warn_lines<'a>(log: &'a str, needle: &str) -> Vec<&'a str> {
    let needle = needle.to_ascii_lowercase();
    log.lines()
        .filter(|l| {
            (l.contains("WARN") || l.contains("ERROR")) && l.to_ascii_lowercase().contains(&needle)
        })
        .collect()
}

/// Connects to `sock` as `uid`/`gid`: a forked child drops to those ids,
/// connects (the kernel records its credentials for `SO_PEERCRED` at
/// connect time), hands the connected socket back over a socketpair and
/// exits. The returned [`Peer`] is used from this process, but the
/// coordinator sees the child's uid/gid/pid. Needs root.
pub fn connect_as(sock: &Path, uid: u32, gid: u32) -> Result<Peer, String> {
    // Everything the child needs is prepared before fork: between fork and
    // _exit it only makes system calls (no allocation, no locks).
    let addr = unix_addr(sock)?;
    let mut pair = [0 as libc::c_int; 2];
    // SAFETY: socketpair writes two fds into `pair`.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            pair.as_mut_ptr(),
        )
    } < 0
    {
        return Err(format!("socketpair: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds are fresh and owned by nothing else.
    let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(pair[0]), OwnedFd::from_raw_fd(pair[1])) };
    let one = [1u8];
    // SAFETY: fork; the child below only calls async-signal-safe functions
    // (setgroups, setgid, setuid, socket, connect, sendmsg, _exit) on
    // memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: in the child; see above. Every failure ends in _exit with
        // a code saying which step failed.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0 {
                libc::_exit(10);
            }
            if libc::setgid(gid) != 0 {
                libc::_exit(11);
            }
            if libc::setuid(uid) != 0 {
                libc::_exit(12);
            }
            let s = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
            if s < 0 {
                libc::_exit(13);
            }
            if libc::connect(
                s,
                (&addr as *const libc::sockaddr_un).cast(),
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            ) != 0
            {
                libc::_exit(14);
            }
            let code = match tandem_proto::wire::send(
                theirs.as_fd(),
                &one,
                Some(std::os::fd::BorrowedFd::borrow_raw(s)),
            ) {
                Ok(()) => 0,
                Err(_) => 15,
            };
            libc::_exit(code);
        }
    }
    drop(theirs);
    let mut status = 0;
    // SAFETY: waitpid on the child we just forked.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    if r != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!(
            "child connecting as uid {uid} failed (wait status {status:#x}; exit codes: \
             10 setgroups, 11 setgid, 12 setuid, 13 socket, 14 connect, 15 send)"
        ));
    }
    let mut buf = [0u8; 8];
    let got = tandem_proto::wire::recv(ours.as_fd(), &mut buf).map_err(|e| e.to_string())?;
    let fd = got.fd.ok_or("the child sent no socket")?;
    Ok(Peer { fd })
}

/// An encoded Control message.
pub fn control_bytes(
    op: tandem_proto::wire::ControlOp,
    client_id: u64,
    class: tandem_proto::ClientClass,
) -> Vec<u8> {
    let msg = tandem_proto::Message::Control(tandem_proto::wire::Control {
        op,
        client_id,
        class,
    });
    let mut buf = vec![0u8; msg.encoded_len()];
    let n = msg.encode(&mut buf).expect("encode Control");
    buf.truncate(n);
    buf
}

/// Sends `msg` on `p` and returns the ControlReply's (status, message).
pub fn control_reply(p: &Peer, msg: &[u8]) -> Result<(u16, String), String> {
    p.send(msg)?;
    let (buf, _) = p.recv(SETTLE)?;
    if buf.is_empty() {
        return Err("connection closed without a ControlReply".into());
    }
    match tandem_proto::Message::decode(&buf) {
        Ok(tandem_proto::Message::ControlReply(r)) => Ok((r.status, r.message.to_string())),
        other => Err(format!("want a ControlReply, got {other:?}")),
    }
}

/// poll(2) for input on `fd`, at most `ms` ms: the events that came
/// (`revents`), 0 on a timeout or an error.
pub(super) fn poll_in(fd: BorrowedFd<'_>, ms: libc::c_int) -> libc::c_short {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd, for the length given; `fd` is open
    // for the call (borrowed).
    if unsafe { libc::poll(&mut pfd, 1, ms) } > 0 {
        pfd.revents
    } else {
        0
    }
}

/// The `sockaddr_un` of the socket at `path` (NUL-terminated).
pub(super) fn unix_addr(path: &Path) -> Result<libc::sockaddr_un, String> {
    // SAFETY: an all-zero sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(format!("socket path too long: {}", path.display()));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    Ok(addr)
}
