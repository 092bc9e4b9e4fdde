//! One bounded registration attempt: connect (non-blocking, 200 ms, through
//! `tandem_os::socket`, the one connect tandemd's tools use too), Hello,
//! Welcome or Reject (1 s), map the ring. Cold path: allocates, makes syscalls,
//! formats log lines; never runs on a hook's fast path.

use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use tandem_os::socket;
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

/// A connected, non-blocking, close-on-exec SEQPACKET socket to `cfg.socket`
/// (`tandem_os::socket::connect`, bounded by [`CONNECT_TIMEOUT`]); the errno
/// when there is none.
fn connect(cfg: &Config) -> Result<OwnedFd, i32> {
    let sock = socket::seqpacket(true).map_err(|e| e.errno())?;
    HANDSHAKE_FD.store(sock.as_raw_fd(), Ordering::SeqCst);
    let addr = socket::UnixAddr::new(cfg.socket.as_bytes()).map_err(|e| e.errno())?;
    socket::connect(sock.as_fd(), &addr, Instant::now() + CONNECT_TIMEOUT)
        .map_err(|e| e.errno())?;
    Ok(sock)
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
    match socket::wait(sock.as_fd(), socket::Ready::Readable, deadline) {
        Ok(false) => {
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
        Ok(true) => {}
        Err(e) => {
            crate::log!(Debug, "waiting on the coordinator socket failed: {e}");
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
        RejectReason::TOO_MANY_CLIENTS => {
            "the operator can raise the client limit (max_clients in tandemd.toml, or tandemd's open-file limit)"
        }
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
