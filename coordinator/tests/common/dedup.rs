//! Fake-shim side of weight deduplication: Dedup messages out (with an fd
//! for PUBLISHED), Dedup messages in (with the fd of an OFFER), memfds that
//! stand in for exported device memory, and looking at tandemd's fds.

use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus, WithdrawReason};
use tandem_proto::wire::{self, Message, MAX_MESSAGE_LEN, WELCOME_FLAG_SHARE_WEIGHTS};

use super::{recv_raw, Peer, Tandemd};

/// The granule size tandemd accepts.
pub const GRANULE: u64 = 2 << 20;

impl Peer {
    /// The Welcome granted weight sharing.
    pub fn shares(&self) -> bool {
        self.welcome.flags & WELCOME_FLAG_SHARE_WEIGHTS != 0
    }

    /// Send one Dedup message, with an fd if given.
    pub fn send_dedup(&self, m: &Dedup, fd: Option<BorrowedFd<'_>>) {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = Message::Dedup(*m).encode(&mut buf).unwrap();
        wire::send(self.sock.as_fd(), &buf[..n], fd).unwrap();
    }

    /// CANDIDATE(granule, hash) of one granule.
    pub fn candidate(&self, granule: u64, hash: [u8; 16]) {
        let mut d = Dedup::new(DedupOp::Candidate, granule, GRANULE);
        d.hash = hash;
        self.send_dedup(&d, None);
    }

    /// PUBLISHED OK for a PUBLISH, with `fd` (the exported copy).
    pub fn published(&self, publish: &Dedup, fd: BorrowedFd<'_>) {
        let d = Dedup {
            op: DedupOp::Published,
            ..*publish
        };
        self.send_dedup(&d, Some(fd));
    }

    /// RESULT(status) for an OFFER.
    pub fn result(&self, offer: &Dedup, status: DedupStatus) {
        let d = Dedup {
            op: DedupOp::Result,
            status: status.0,
            elapsed_ns: 12_345,
            ..*offer
        };
        self.send_dedup(&d, None);
    }

    /// WITHDRAW(granule, shared, reason).
    pub fn withdraw(&self, granule: u64, shared: u64, why: WithdrawReason) {
        let mut d = Dedup::new(DedupOp::Withdraw, granule, GRANULE);
        d.shared_id = shared;
        d.status = why.0;
        self.send_dedup(&d, None);
    }

    /// The next message, which must be a Dedup (bounded by the socket's 5 s timeout).
    pub fn recv_dedup(&self) -> (Dedup, Option<OwnedFd>) {
        let (b, fd) = recv_raw(&self.sock);
        match Message::decode(&b) {
            Ok(Message::Dedup(d)) => (d, fd),
            other => panic!("expected a Dedup message, got {other:?}"),
        }
    }

    /// Whether a message is waiting on the socket right now.
    pub fn has_message(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut pfd, 1, 0) > 0 && pfd.revents & libc::POLLIN != 0 }
    }
}

/// Of `peers`, the one whose socket receives a message first (within 20 s).
pub fn first_with_message(peers: &[&Peer]) -> usize {
    let mut pfds: Vec<libc::pollfd> = peers
        .iter()
        .map(|p| libc::pollfd {
            fd: p.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `pfds` is a valid array of pollfd for the call.
    let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 20_000) };
    assert!(n > 0, "no peer received a message");
    pfds.iter()
        .position(|p| p.revents & libc::POLLIN != 0)
        .expect("a readable peer")
}

/// A memfd named `name` of `len` bytes holding `pattern(i)` at byte i (what
/// an exported granule stands for in these tests).
pub fn memfd_with(name: &str, len: usize, pattern: impl Fn(usize) -> u8) -> OwnedFd {
    let c = CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name; the result is checked.
    let raw = unsafe { libc::memfd_create(c.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(
        raw >= 0,
        "memfd_create: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let data: Vec<u8> = (0..len).map(pattern).collect();
    let mut off = 0;
    while off < len {
        // SAFETY: writing from a valid buffer of `len - off` bytes at `off`.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                data[off..].as_ptr().cast(),
                len - off,
                off as libc::off_t,
            )
        };
        assert!(n > 0, "pwrite: {}", std::io::Error::last_os_error());
        off += n as usize;
    }
    fd
}

/// The first `len` bytes behind `fd` (pread).
pub fn read_fd(fd: BorrowedFd<'_>, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    let mut off = 0;
    while off < len {
        // SAFETY: reading into a valid buffer of `len - off` bytes at `off`.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                v[off..].as_mut_ptr().cast(),
                len - off,
                off as libc::off_t,
            )
        };
        assert!(n > 0, "pread: {}", std::io::Error::last_os_error());
        off += n as usize;
    }
    v
}

/// How many of process `pid`'s open fds point at a memfd named `name`.
pub fn memfds_of(pid: u32, name: &str) -> usize {
    let needle = format!("/memfd:{name} ");
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter(|l| format!("{} ", l.display()).starts_with(&needle))
        .count()
}

impl Tandemd {
    /// Stop this tandemd and start a fresh one on the same socket and config.
    pub fn restart(&mut self) {
        self.stop();
        self.child = Some(self.spawn());
        self.wait_ready();
    }

    /// Poll until tandemd holds exactly `n` fds of memfd `name`.
    pub fn wait_memfds(&self, name: &str, n: usize) {
        let pid = self.pid();
        super::wait_for(&format!("tandemd holds {n} fds of {name}"), || {
            (memfds_of(pid, name) == n).then_some(())
        });
    }
}
