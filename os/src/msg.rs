//! One datagram with at most one descriptor attached (`SCM_RIGHTS`): how a
//! region or a shared copy travels between tandemd and a shim.
//!
//! The control-message buffers are on the stack; nothing allocates.

use core::mem::MaybeUninit;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    self, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

use crate::error::{Error, Result, EINTR};

/// Room for one descriptor's control message.
const SPACE: usize = rustix::cmsg_space!(ScmRights(1));

/// Send `msg` as one datagram, with `fd` attached if given. `MSG_NOSIGNAL`:
/// a closed peer is an `EPIPE` error, never a `SIGPIPE` that would kill the
/// host job. Retries on `EINTR`; returns the bytes sent.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<usize> {
    let iov = [IoSlice::new(msg)];
    let fds = fd.map(|fd| [fd]);
    let mut space = [MaybeUninit::<u8>::uninit(); SPACE];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if let Some(fds) = &fds {
        let pushed = control.push(SendAncillaryMessage::ScmRights(fds));
        debug_assert!(pushed, "SPACE holds one descriptor");
    }
    loop {
        match net::sendmsg(sock, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => return Ok(n),
            Err(e) if e.raw_os_error() == EINTR => continue,
            Err(e) => return Err(Error::new("sendmsg", e.raw_os_error())),
        }
    }
}

/// What [`recv`] got.
#[derive(Debug)]
pub struct Received {
    /// Datagram length; 0 means the peer closed the connection.
    pub len: usize,
    /// The first descriptor that came with it, if any (close-on-exec).
    pub fd: Option<OwnedFd>,
    /// More than one descriptor came (the others are closed already), or
    /// the kernel cut the control message short (`MSG_CTRUNC`).
    pub extra_fds: bool,
    /// The datagram was longer than `buf` (`MSG_TRUNC`).
    pub truncated: bool,
}

/// Receive one datagram into `buf` with the descriptors attached to it
/// (`MSG_CMSG_CLOEXEC`). Every descriptor but the first is closed before
/// this returns, whatever else went wrong. Retries on `EINTR`; set
/// `SO_RCVTIMEO` on the socket to bound the wait.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<Received> {
    let mut iov = [IoSliceMut::new(buf)];
    let mut space = [MaybeUninit::<u8>::uninit(); SPACE];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match net::recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(r) => break r,
            Err(e) if e.raw_os_error() == EINTR => continue,
            Err(e) => return Err(Error::new("recvmsg", e.raw_os_error())),
        }
    };
    let mut fd = None;
    let mut extra = false;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            for owned in fds {
                if fd.is_none() {
                    fd = Some(owned);
                } else {
                    extra = true; // dropped (closed) here
                }
            }
        }
    }
    Ok(Received {
        len: got.bytes,
        fd,
        extra_fds: extra || got.flags.contains(ReturnFlags::CTRUNC),
        truncated: got.flags.contains(ReturnFlags::TRUNC),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn pair() -> (OwnedFd, OwnedFd) {
        net::socketpair(
            net::AddressFamily::UNIX,
            net::SocketType::SEQPACKET,
            net::SocketFlags::CLOEXEC,
            None,
        )
        .unwrap()
    }

    #[test]
    fn a_datagram_and_its_descriptor_arrive_together() {
        let (a, b) = pair();
        let (x, _y) = pair();
        assert_eq!(send(a.as_fd(), b"hello", Some(x.as_fd())).unwrap(), 5);
        let mut buf = [0u8; 16];
        let r = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!(
            (&buf[..r.len], r.extra_fds, r.truncated),
            (&b"hello"[..], false, false)
        );
        let got = r.fd.expect("the descriptor came along");
        let flags = rustix::io::fcntl_getfd(&got).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn a_long_datagram_says_truncated_and_a_closed_peer_epipe() {
        let (a, b) = pair();
        send(a.as_fd(), &[7u8; 32], None).unwrap();
        let mut buf = [0u8; 8];
        let r = recv(b.as_fd(), &mut buf).unwrap();
        assert!(r.truncated && r.fd.is_none());
        drop(b);
        let e = send(a.as_fd(), b"x", None).unwrap_err();
        assert_eq!(
            (e.op(), e.errno()),
            ("sendmsg", rustix::io::Errno::PIPE.raw_os_error())
        );
    }
}
