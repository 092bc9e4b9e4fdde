//! Unix-socket and epoll plumbing over `libc` (std has no `SOCK_SEQPACKET`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Longest socket path `sockaddr_un` holds (without the NUL).
pub const MAX_SOCKET_PATH: usize = 107;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// Build a `sockaddr_un` for `path`, or a clear error if it cannot hold it.
pub fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
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
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn socket(ty: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, ty | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Bind and listen on a non-blocking `SOCK_SEQPACKET` socket at `path`, mode 0666.
pub fn listen_seqpacket(path: &Path) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let fd = socket(libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    chmod_0666(path)?;
    // SAFETY: plain listen(2) on our socket.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 256) })?;
    Ok(fd)
}

/// `chmod 0666` (any user's job may connect; control is checked by SO_PEERCRED).
pub fn chmod_0666(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
}

/// Connect a blocking `SOCK_SEQPACKET` socket to `path`, with send and receive
/// timeouts of `timeout`.
pub fn connect_seqpacket(path: &Path, timeout: Duration) -> io::Result<OwnedFd> {
    let (addr, len) = sockaddr(path)?;
    let fd = socket(libc::SOCK_SEQPACKET)?;
    set_timeouts(fd.as_raw_fd(), timeout)?;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if r == 0 {
            return Ok(fd);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(e);
        }
    }
}

/// Set `SO_RCVTIMEO` and `SO_SNDTIMEO`.
pub fn set_timeouts(fd: RawFd, timeout: Duration) -> io::Result<()> {
    let tv = libc::timeval {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_usec: libc::suseconds_t::from(timeout.subsec_micros() as i32),
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval for the call.
        cvt(unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
    }
    Ok(())
}

/// Accept one connection (non-blocking, close-on-exec); `None` when none is waiting.
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    loop {
        // SAFETY: accept4 with null address pointers is valid.
        let r = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if r >= 0 {
            // SAFETY: a fresh fd from accept4.
            return Ok(Some(unsafe { OwnedFd::from_raw_fd(r) }));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Ok(None),
            // The peer gave up before we got to it: not our error.
            Some(libc::ECONNABORTED) | Some(libc::EPROTO) => continue,
            _ => return Err(e),
        }
    }
}

/// The peer's credentials (`SO_PEERCRED`), as the kernel recorded them at connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Process id.
    pub pid: u32,
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected unix socket.
pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let mut c = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `c` and `len` are valid out-parameters of the right size.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(PeerCred {
        pid: c.pid as u32,
        uid: c.uid,
        gid: c.gid,
    })
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

/// Look at `path` without disturbing a live daemon much (a connection that is
/// closed at once; tandemd treats it as a peer that hung up before its Hello).
pub fn probe(path: &Path) -> io::Result<Probe> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Probe::Absent),
        Err(e) => return Err(e),
        Ok(m) if !m.file_type().is_socket() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket; remove it or choose another path",
                    path.display()
                ),
            ))
        }
        Ok(_) => {}
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

/// A minimal epoll wrapper: tokens are `u64`.
pub struct Epoll {
    fd: OwnedFd,
}

/// Readiness of one token.
#[derive(Clone, Copy, Debug)]
pub struct Event {
    /// The token given at [`Epoll::add`].
    pub token: u64,
    /// Data to read (or a pending error/hang-up that read will report).
    pub readable: bool,
    /// The peer hung up or the socket failed.
    pub hangup: bool,
}

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain epoll_create1.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: a fresh fd from epoll_create1 that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// Watch `fd` for input and hang-up under `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            u64: token,
        };
        // SAFETY: `ev` is valid for the call; the kernel copies it.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
        Ok(())
    }

    /// Stop watching `fd` (errors ignored: closing the fd also removes it).
    pub fn delete(&self, fd: RawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL since 2.6.9.
        unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Wait up to `timeout` (None = forever) and append events to `out`.
    pub fn wait(&self, out: &mut Vec<Event>, timeout: Option<Duration>) -> io::Result<()> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 64];
        let ms = timeout.map_or(-1, |t| t.as_millis().min(60_000) as libc::c_int);
        // SAFETY: `evs` is a writable array of 64 events.
        let n = unsafe { libc::epoll_wait(self.fd.as_raw_fd(), evs.as_mut_ptr(), 64, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(());
            }
            return Err(e);
        }
        for ev in &evs[..n as usize] {
            let bits = ev.events;
            out.push(Event {
                token: ev.u64,
                readable: bits & libc::EPOLLIN as u32 != 0,
                hangup: bits & (libc::EPOLLHUP | libc::EPOLLRDHUP | libc::EPOLLERR) as u32 != 0,
            });
        }
        Ok(())
    }
}

/// A non-blocking, close-on-exec pipe: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut p = [0; 2];
    // SAFETY: `p` is a valid out-array of two ints.
    cvt(unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) })?;
    // SAFETY: fresh fds from pipe2.
    Ok(unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) })
}

/// Empty a non-blocking pipe.
pub fn drain_pipe(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: `buf` is writable for its length.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            break;
        }
    }
}

/// Write one byte to a (non-blocking) pipe; a full pipe already wakes the reader.
pub fn poke(fd: BorrowedFd<'_>) {
    // SAFETY: writing one byte from a valid buffer.
    unsafe { libc::write(fd.as_raw_fd(), [1u8].as_ptr().cast(), 1) };
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
