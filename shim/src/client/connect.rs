//! One bounded registration attempt: connect (non-blocking, 200 ms), Hello,
//! Welcome or Reject (1 s), map the ring. Cold path: allocates, makes syscalls,
//! formats log lines; never runs on a hook's fast path.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use tandem_proto::mps::MpsJoin;
use tandem_proto::wire::{self, Message, RejectReason, PROTOCOL_VERSION};
use tandem_proto::{ring, Error, Producer, SyncProducer};

use super::config::Config;
use super::session::Session;

/// Bound on the non-blocking connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(200);
/// Bound on waiting for the Welcome or Reject.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(1);

/// The socket of a handshake in progress (-1: none), so that a child forked in
/// the middle of one closes its copy (see `super::after_fork_in_child`).
pub(super) static HANDSHAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Sessions created in this process so far (the next one's `gen`).
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// How an attempt ended.
pub enum Outcome {
    /// Registered; with how to join tandem's MPS daemon when the Hello
    /// asked and the Welcome says so.
    Welcome(&'static Session, Option<Box<MpsJoin>>),
    /// No coordinator now (absent, refused, stalled, hung up): worth retrying.
    Unavailable,
    /// The coordinator refused this client, or answered something this shim
    /// cannot use: said once on stderr; not retried.
    Refused,
}

/// Said-once flags for conditions that repeat on every retry.
static SAID_STALLED: AtomicBool = AtomicBool::new(false);
static SAID_DENIED: AtomicBool = AtomicBool::new(false);

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Polls `fd` for `events` until `deadline`; the revents, or 0 on timeout.
fn poll_until(fd: i32, events: i16, deadline: Instant) -> Result<i16, i32> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(0);
        }
        let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
        let mut p = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return Ok(p.revents);
        }
        if r == 0 {
            continue; // re-check the deadline
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// A connected, non-blocking, close-on-exec SEQPACKET socket to `cfg.socket`.
fn connect(cfg: &Config) -> Result<OwnedFd, i32> {
    // SAFETY: plain socket(2) call.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if raw < 0 {
        return Err(errno());
    }
    // SAFETY: a fresh descriptor that nothing else owns.
    let sock = unsafe { OwnedFd::from_raw_fd(raw) };
    HANDSHAKE_FD.store(raw, Ordering::SeqCst);
    // SAFETY: an all-zero sockaddr_un is valid.
    let mut addr: libc::sockaddr_un = unsafe { core::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let path = cfg.socket.as_bytes();
    if path.len() >= addr.sun_path.len() {
        return Err(libc::ENAMETOOLONG);
    }
    for (d, s) in addr.sun_path.iter_mut().zip(path) {
        *d = *s as libc::c_char;
    }
    let len = (core::mem::size_of::<libc::sa_family_t>() + path.len() + 1) as libc::socklen_t;
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
        let r = unsafe {
            libc::connect(
                raw,
                (&addr as *const libc::sockaddr_un).cast::<libc::sockaddr>(),
                len,
            )
        };
        if r == 0 {
            return Ok(sock);
        }
        match errno() {
            libc::EINTR => continue,
            // A full backlog on a unix socket: retry briefly, within the bound.
            libc::EAGAIN => {
                if Instant::now() >= deadline {
                    return Err(libc::ETIMEDOUT);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            libc::EINPROGRESS => {
                let ev = poll_until(raw, libc::POLLOUT, deadline)?;
                if ev == 0 {
                    return Err(libc::ETIMEDOUT);
                }
                let mut err: libc::c_int = 0;
                let mut l = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
                // SAFETY: SO_ERROR into a c_int of the stated length.
                let r = unsafe {
                    libc::getsockopt(
                        raw,
                        libc::SOL_SOCKET,
                        libc::SO_ERROR,
                        (&mut err as *mut libc::c_int).cast(),
                        &mut l,
                    )
                };
                if r < 0 {
                    return Err(errno());
                }
                return if err == 0 { Ok(sock) } else { Err(err) };
            }
            e => return Err(e),
        }
    }
}

/// One registration attempt with the coordinator `cfg` names. After a
/// Welcome, [`HANDSHAKE_FD`] still names the session's socket: the caller
/// clears it once the session is published (so a fork in between still closes
/// the child's copy).
pub fn attempt(cfg: &Config) -> Outcome {
    let outcome = attempt_inner(cfg);
    if !matches!(outcome, Outcome::Welcome(..)) {
        HANDSHAKE_FD.store(-1, Ordering::SeqCst);
    }
    outcome
}

fn attempt_inner(cfg: &Config) -> Outcome {
    let path = crate::log::String8(cfg.socket.as_bytes());
    let sock = match connect(cfg) {
        Ok(s) => s,
        Err(e) => {
            if e == libc::EACCES || e == libc::EPERM {
                if !SAID_DENIED.swap(true, Ordering::Relaxed) {
                    crate::log!(
                        Warn,
                        "may not connect to the coordinator socket {:?} (permission denied); \
                         running unscheduled (the socket should be mode 0666)",
                        path
                    );
                }
            } else {
                crate::log!(
                    Debug,
                    "no coordinator at {:?} ({}); running unscheduled",
                    path,
                    std::io::Error::from_raw_os_error(e)
                );
            }
            return Outcome::Unavailable;
        }
    };
    // ---- Hello ----
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let hello = Message::Hello(wire::Hello {
        pid,
        class: cfg.class,
        // Every shim of this build maps the GPU board.
        flags: cfg.flags | wire::HELLO_FLAG_BOARD,
        exe: &cfg.exe,
        cgroup: &cfg.cgroup,
    });
    let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
    let n = match hello.encode(&mut buf) {
        Ok(n) => n,
        Err(e) => {
            crate::log!(Warn, "cannot encode the Hello ({e}); running unscheduled");
            return Outcome::Refused;
        }
    };
    if let Err(e) = wire::send(sock.as_fd(), &buf[..n], None) {
        crate::log!(Debug, "sending Hello to {:?} failed: {e}", path);
        return Outcome::Unavailable;
    }
    // ---- Welcome / Reject ----
    let deadline = Instant::now() + ANSWER_TIMEOUT;
    match poll_until(sock.as_raw_fd(), libc::POLLIN, deadline) {
        Ok(0) => {
            if !SAID_STALLED.swap(true, Ordering::Relaxed) {
                crate::log!(
                    Warn,
                    "the coordinator at {:?} accepted but did not answer within {} ms; \
                     running unscheduled, retrying in the background",
                    path,
                    ANSWER_TIMEOUT.as_millis()
                );
            }
            return Outcome::Unavailable;
        }
        Ok(_) => {}
        Err(e) => {
            crate::log!(
                Debug,
                "poll on the coordinator socket failed: {}",
                std::io::Error::from_raw_os_error(e)
            );
            return Outcome::Unavailable;
        }
    }
    let got = match wire::recv(sock.as_fd(), &mut buf) {
        Ok(g) => g,
        Err(e) => {
            crate::log!(Debug, "no answer from the coordinator at {:?}: {e}", path);
            return Outcome::Unavailable;
        }
    };
    if got.len == 0 {
        crate::log!(
            Debug,
            "the coordinator at {:?} hung up during registration",
            path
        );
        return Outcome::Unavailable;
    }
    let welcome = match Message::decode(&buf[..got.len]) {
        Ok(Message::Welcome(w)) => w,
        Ok(Message::Reject(r)) => return rejected(&r, &path),
        Ok(other) => {
            refuse(format_args!(
                "the coordinator at {:?} answered the Hello with a {} message",
                path,
                other.type_name()
            ));
            return Outcome::Refused;
        }
        Err(Error::VersionMismatch { ours, theirs }) => {
            refuse(format_args!(
                "the coordinator at {:?} speaks protocol v{theirs}, this libtandem.so speaks \
                 v{ours}; use the libtandem.so installed with that tandemd (or a tandemd of the \
                 same version as this shim)",
                path
            ));
            return Outcome::Refused;
        }
        Err(e) => {
            refuse(format_args!(
                "the coordinator at {:?} sent a malformed answer: {e}",
                path
            ));
            return Outcome::Refused;
        }
    };
    let Some(region_fd) = got.fd else {
        refuse(format_args!(
            "the coordinator at {:?} sent a Welcome without its ring region",
            path
        ));
        return Outcome::Refused;
    };
    match open_session(sock, region_fd, &welcome) {
        Ok(s) => {
            crate::log!(
                Info,
                "registered with the coordinator at {:?} as client {} (class {}, claimed {})",
                path,
                s.client_id,
                welcome.class.name(),
                cfg.class.name()
            );
            Outcome::Welcome(s, welcome.mps.map(Box::new))
        }
        Err(e) => {
            refuse(format_args!(
                "cannot use the ring region the coordinator at {:?} sent: {e}",
                path
            ));
            Outcome::Refused
        }
    }
}

/// One stderr line for a refusal, with what it means for the job.
fn refuse(what: core::fmt::Arguments<'_>) {
    crate::log!(
        Warn,
        "{what}; the job runs unscheduled (no retry until the coordinator restarts)"
    );
}

fn rejected(r: &wire::Reject<'_>, path: &crate::log::String8<'_>) -> Outcome {
    if r.reason == RejectReason::SHUTTING_DOWN {
        // Not about this client: a new coordinator is worth joining.
        crate::log!(Debug, "{r}; will retry");
        return Outcome::Unavailable;
    }
    let hint = match r.reason {
        RejectReason::VERSION_MISMATCH => {
            "use the libtandem.so installed with that tandemd (or a tandemd of the same version)"
        }
        RejectReason::NOT_PERMITTED => {
            "ask the operator (tandemd.toml) or set TANDEM_CLASS=training or auto"
        }
        RejectReason::TOO_MANY_CLIENTS => "the operator can raise the client limit in tandemd.toml",
        _ => "see the coordinator's log",
    };
    crate::log!(
        Warn,
        "{r} [coordinator {:?}; this libtandem.so speaks protocol v{PROTOCOL_VERSION}]; \
         the job runs unscheduled; {hint}",
        path
    );
    Outcome::Refused
}

/// Maps the region, attaches the producer, leaks everything into a session.
fn open_session(
    sock: OwnedFd,
    region_fd: OwnedFd,
    w: &wire::Welcome,
) -> tandem_proto::Result<&'static Session> {
    let layout = w.layout()?;
    let len = usize::try_from(w.region_len).map_err(|_| Error::BadValue {
        field: "region_len",
        value: w.region_len,
    })?;
    let map = tandem_proto::shm::map_received(region_fd.as_fd(), len)?;
    drop(region_fd); // the mapping keeps the memory
                     // Leaked: the session (and so the mapping) lives for the rest of the process.
    let map: &'static tandem_proto::Mapping = Box::leak(Box::new(map));
    let producer = Producer::attach(map, layout)?;
    let control = ring::control_block(map, layout)?;
    let estimates = ring::estimates(map, layout)?;
    if control.client_id() != w.client_id {
        crate::log!(
            Debug,
            "the control block says client {} but the Welcome {}; using the Welcome's",
            control.client_id(),
            w.client_id
        );
    }
    let gen = GENERATION
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_add(1)
        .max(1);
    let raw = sock.as_raw_fd();
    let session = Session::new(
        SyncProducer::new(producer),
        control,
        estimates,
        (map.as_ptr() as usize, map.len()),
        raw,
        w.client_id,
        gen,
        w.heartbeat_interval_ms,
        w.flags,
    );
    // The session owns the socket from here on.
    core::mem::forget(sock);
    Ok(Box::leak(Box::new(session)))
}
