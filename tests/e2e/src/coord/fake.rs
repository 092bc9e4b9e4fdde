//! A fake coordinator that greets, refuses or ignores the shims that connect.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::peer::{poll_in, unix_addr, Peer};

/// What a [`FakeCoordinator`] does with each connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeBehaviour {
    /// Reads the first message, answers a Reject VERSION_MISMATCH sent as
    /// protocol version `PROTOCOL_VERSION + 1`, and closes the connection (what
    /// a newer tandemd does).
    RejectVersion,
    /// Accepts and holds the connection without ever reading or answering (a
    /// stalled coordinator).
    Silent,
}

/// A listener on a main-socket path that counts connections and misbehaves
/// as told; stops (closing everything) on drop.
pub struct FakeCoordinator {
    accepted: Arc<AtomicU64>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

fn listen_seqpacket(path: &Path) -> Result<OwnedFd, String> {
    // SAFETY: plain socket(2); the result is checked.
    let raw = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if raw < 0 {
        return Err(format!("socket: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: fresh fd owned by nothing else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let addr = unix_addr(path)?;
    let _ = std::fs::remove_file(path);
    // SAFETY: addr is a valid sockaddr_un of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(format!("bind: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: listen on our bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } != 0 {
        return Err(format!("listen: {}", std::io::Error::last_os_error()));
    }
    Ok(fd)
}

impl FakeCoordinator {
    /// Listens on `path` (a `SOCK_SEQPACKET` socket, like tandemd's).
    pub fn start(path: &Path, behaviour: FakeBehaviour) -> FakeCoordinator {
        let lfd = listen_seqpacket(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (acc, st) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !st.load(Ordering::Relaxed) {
                if poll_in(lfd.as_fd(), 50) == 0 {
                    continue;
                }
                // SAFETY: accept4 on our listening socket; no address wanted.
                let c = unsafe {
                    libc::accept4(
                        lfd.as_raw_fd(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        libc::SOCK_CLOEXEC,
                    )
                };
                if c < 0 {
                    continue;
                }
                // SAFETY: fresh fd from accept4, owned by nothing else.
                let conn = unsafe { OwnedFd::from_raw_fd(c) };
                acc.fetch_add(1, Ordering::Relaxed);
                match behaviour {
                    FakeBehaviour::Silent => held.push(conn),
                    FakeBehaviour::RejectVersion => {
                        let peer = Peer { fd: conn };
                        let _ = peer.recv(Duration::from_secs(5));
                        let msg = tandem_proto::Message::Reject(tandem_proto::Reject {
                            reason: tandem_proto::RejectReason::VERSION_MISMATCH,
                            peer_version: 0,
                            message: "this tandemd speaks a newer protocol; upgrade libtandem.so",
                        });
                        let mut buf = vec![0u8; msg.encoded_len()];
                        if let Ok(n) = msg.encode(&mut buf) {
                            buf.truncate(n);
                            let v = tandem_proto::PROTOCOL_VERSION + 1;
                            buf[4..6].copy_from_slice(&v.to_le_bytes());
                            let _ = peer.send(&buf);
                        }
                    }
                }
            }
        });
        FakeCoordinator {
            accepted,
            stop,
            thread: Some(thread),
        }
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for FakeCoordinator {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
