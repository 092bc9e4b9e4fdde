//! The `SOCK_SEQPACKET` transport: one datagram per message, with at most one
//! file descriptor (SCM_RIGHTS), over [`tandem_os::msg`].

use std::os::fd::{BorrowedFd, OwnedFd};

use crate::error::{Error, Result};

/// What [`recv`] got.
#[derive(Debug)]
pub struct Received {
    /// Datagram length; 0 means the peer closed the connection.
    pub len: usize,
    /// The fd that came with it, if any (close-on-exec).
    pub fd: Option<OwnedFd>,
}

/// Send one datagram, optionally with one fd (SCM_RIGHTS). Uses
/// `MSG_NOSIGNAL`: a closed peer is an `EPIPE` error, never a `SIGPIPE` that
/// would kill the host job.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<()> {
    let sent = tandem_os::msg::send(sock, msg, fd)?;
    if sent != msg.len() {
        return Err(Error::BadAncillary {
            what: "datagram sent short",
        });
    }
    Ok(())
}

/// Receive one datagram into `buf` (size it [`MAX_MESSAGE_LEN`](super::MAX_MESSAGE_LEN)), with at most
/// one fd. A datagram longer than `buf`, or more than one fd, is an error (any
/// fds that arrived are closed). Set `SO_RCVTIMEO` on the socket to bound the wait.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<Received> {
    let got = tandem_os::msg::recv(sock, buf)?;
    if got.truncated {
        return Err(Error::BadAncillary {
            what: "datagram longer than the receive buffer (truncated)",
        });
    }
    if got.extra_fds {
        return Err(Error::BadAncillary {
            what: "more than one file descriptor attached",
        });
    }
    Ok(Received {
        len: got.len,
        fd: got.fd,
    })
}
