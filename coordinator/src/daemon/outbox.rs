//! What tandemd could not send to a registered client at once: its socket
//! was full (the shim's watcher busy merging, or the job stopped with
//! SIGSTOP). A message to a live client is then held, in order, with a copy
//! of its descriptor, and sent as the socket drains (the event loop tries
//! every [`RETRY_EVERY`] while anything is held); later messages never pass
//! it. Before this, such a message was dropped: a FORGET lost for good left
//! the publisher's granule frozen read-only, a PUBLISH or OFFER the shim
//! never saw kept its candidate out of every later merge, a MAPPED the
//! follower never saw was counted as a mapping.
//!
//! At most [`MAX_HELD`] are held per client; past that the message is lost
//! (as before, and the caller's undelivered path runs): a client that
//! reads nothing for that long is not going to.

use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use tandem_proto::wire;

/// Most messages held for one client.
pub(super) const MAX_HELD: usize = 1024;
/// How often the event loop tries the held messages again.
pub(super) const RETRY_EVERY: Duration = Duration::from_millis(5);

/// What became of one message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Sent {
    /// Sent now.
    Now,
    /// Held, to go out in order as the socket drains.
    Held,
    /// Not sent and not held: the socket failed, the descriptor could not
    /// be kept, or [`MAX_HELD`] are already held.
    Lost(String),
}

/// One client's held messages.
#[derive(Default)]
pub(super) struct Outbox {
    held: VecDeque<(Vec<u8>, Option<OwnedFd>)>,
}

/// The socket cannot take it now but may later: full (`EAGAIN`), out of
/// buffer memory for the moment (`ENOBUFS`, which the shim's own sends
/// treat as full too), or too many descriptors in flight to a peer that
/// has not read them yet (`ETOOMANYREFS`).
fn would_block(e: &tandem_proto::Error) -> bool {
    matches!(
        e.errno(),
        Some(libc::EAGAIN | libc::ENOBUFS | libc::ETOOMANYREFS)
    )
}

impl Outbox {
    /// Sends `msg` (with `fd`) on `sock`, or holds it behind what is held.
    /// What is held goes first, as far as the socket now takes it, so a
    /// socket that has drained since the last flush takes `msg` (or holds
    /// it) rather than refusing it at the bound.
    pub(super) fn send(
        &mut self,
        sock: BorrowedFd<'_>,
        msg: &[u8],
        fd: Option<BorrowedFd<'_>>,
    ) -> Sent {
        if !self.held.is_empty() {
            self.flush(sock);
        }
        if self.held.is_empty() {
            match wire::send(sock, msg, fd) {
                Ok(()) => return Sent::Now,
                Err(e) if would_block(&e) => {}
                Err(e) => return Sent::Lost(e.to_string()),
            }
        }
        if self.held.len() >= MAX_HELD {
            return Sent::Lost(format!("{MAX_HELD} messages already wait for its socket"));
        }
        let fd = match fd.map(|f| f.try_clone_to_owned()).transpose() {
            Ok(fd) => fd,
            Err(e) => return Sent::Lost(format!("keeping its descriptor: {e}")),
        };
        self.held.push_back((msg.to_vec(), fd));
        Sent::Held
    }

    /// Sends what is held, in order, until the socket is full again; drops
    /// a message the socket refuses for another reason (as a send would).
    /// Returns how many are still held.
    pub(super) fn flush(&mut self, sock: BorrowedFd<'_>) -> usize {
        while let Some((msg, fd)) = self.held.front() {
            match wire::send(sock, msg, fd.as_ref().map(AsFd::as_fd)) {
                Ok(()) => {}
                Err(e) if would_block(&e) => break,
                Err(e) => tracing::debug!("a held message was lost: {e}"),
            }
            self.held.pop_front();
        }
        self.held.len()
    }

    /// How many are held.
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-blocking datagram pair, as a client's connection is.
    fn pair() -> (OwnedFd, OwnedFd) {
        tandem_os::socket::seqpacket_pair().unwrap()
    }

    fn fill(sock: BorrowedFd<'_>) -> usize {
        let mut n = 0;
        while wire::send(sock, &[0xff; 64], None).is_ok() {
            n += 1;
        }
        n
    }

    /// The messages waiting at `peer`: (first byte, whether an fd came).
    fn read_all(peer: BorrowedFd<'_>) -> Vec<(u8, bool)> {
        let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
        let mut got = Vec::new();
        while let Ok(r) = wire::recv(peer, &mut buf) {
            got.push((buf[0], r.fd.is_some()));
        }
        got
    }

    #[test]
    fn a_full_socket_holds_messages_in_order_with_their_descriptors() {
        let (ours, peer) = pair();
        let mut out = Outbox::default();
        assert_eq!(out.send(ours.as_fd(), &[1], None), Sent::Now);
        let filler = fill(ours.as_fd());
        let (_r, w) = std::io::pipe().unwrap();
        let w = OwnedFd::from(w);
        assert_eq!(out.send(ours.as_fd(), &[2], Some(w.as_fd())), Sent::Held);
        drop(w); // the held copy keeps it
        assert_eq!(out.send(ours.as_fd(), &[3], None), Sent::Held);
        assert_eq!(out.len(), 2);
        assert_eq!(out.flush(ours.as_fd()), 2, "still full");

        let got = read_all(peer.as_fd());
        assert_eq!(got.len(), 1 + filler);
        assert_eq!(got[0], (1, false));
        assert_eq!(out.flush(ours.as_fd()), 0);
        assert_eq!(read_all(peer.as_fd()), vec![(2, true), (3, false)]);
        assert_eq!(
            out.send(ours.as_fd(), &[4], None),
            Sent::Now,
            "nothing held"
        );
        assert_eq!(read_all(peer.as_fd()), vec![(4, false)]);
    }

    #[test]
    fn a_later_message_never_passes_a_held_one() {
        let (ours, peer) = pair();
        let mut out = Outbox::default();
        fill(ours.as_fd());
        assert_eq!(out.send(ours.as_fd(), &[7], None), Sent::Held);
        // Room now, but 7 waits: 8 goes behind it.
        let filler = read_all(peer.as_fd()).len();
        assert!(filler > 0);
        assert_eq!(
            out.send(ours.as_fd(), &[8], None),
            Sent::Now,
            "7 went first"
        );
        assert_eq!(out.flush(ours.as_fd()), 0);
        assert_eq!(read_all(peer.as_fd()), vec![(7, false), (8, false)]);
        // Full again with 9 held: 10 still goes behind it.
        fill(ours.as_fd());
        assert_eq!(out.send(ours.as_fd(), &[9], None), Sent::Held);
        assert_eq!(out.send(ours.as_fd(), &[10], None), Sent::Held);
        let got = read_all(peer.as_fd());
        assert_eq!(got.len(), filler);
        assert_eq!(out.flush(ours.as_fd()), 0);
        assert_eq!(read_all(peer.as_fd()), vec![(9, false), (10, false)]);
    }

    #[test]
    fn past_the_bound_or_on_a_closed_peer_a_message_is_lost() {
        let (ours, peer) = pair();
        let mut out = Outbox::default();
        fill(ours.as_fd());
        for _ in 0..MAX_HELD {
            assert_eq!(out.send(ours.as_fd(), &[5], None), Sent::Held);
        }
        assert!(matches!(out.send(ours.as_fd(), &[6], None), Sent::Lost(_)));
        assert_eq!(out.len(), MAX_HELD);
        // A peer that reads again makes room before the next send is
        // judged: it is held, not lost, although no flush ran in between.
        let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
        for _ in 0..64 {
            wire::recv(peer.as_fd(), &mut buf).expect("a filler message");
        }
        assert!(matches!(
            out.send(ours.as_fd(), &[6], None),
            Sent::Now | Sent::Held
        ));
        drop(peer);
        let mut fresh = Outbox::default();
        assert!(matches!(
            fresh.send(ours.as_fd(), &[1], None),
            Sent::Lost(_)
        ));
        assert_eq!(
            out.flush(ours.as_fd()),
            0,
            "a closed peer takes nothing more"
        );
    }
}
