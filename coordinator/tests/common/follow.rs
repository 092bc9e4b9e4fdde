//! Fake-shim side of follow mode: Follow messages out (a SHARE with the
//! region's fd), answers in (a MAPPED OK with the fd tandemd lent), and raw
//! datagrams of the Follow type that do not decode.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tandem_proto::follow::{Follow, FollowOp, FollowStatus, FOLLOW_LEN};
use tandem_proto::wire::{
    self, Message, HEADER_LEN, MAX_MESSAGE_LEN, MESSAGE_TYPE_FOLLOW, WELCOME_FLAG_FOLLOW,
};

use super::{recv_raw, Peer};

impl Peer {
    /// The Welcome granted follow mode.
    pub fn follows(&self) -> bool {
        self.welcome.flags & WELCOME_FLAG_FOLLOW != 0
    }

    /// Send one Follow message, with an fd if given.
    pub fn send_follow(&self, m: &Follow, fd: Option<BorrowedFd<'_>>) {
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = Message::Follow(*m).encode(&mut buf).unwrap();
        wire::send(self.sock.as_fd(), &buf[..n], fd).unwrap();
    }

    /// The next message, which must be a Follow (bounded by the socket's 5 s timeout).
    pub fn recv_follow(&self) -> (Follow, Option<OwnedFd>) {
        let (b, fd) = recv_raw(&self.sock);
        match Message::decode(&b) {
            Ok(Message::Follow(f)) => (f, fd),
            other => panic!("expected a Follow message, got {other:?}"),
        }
    }

    /// SHARE(request, name, len, layout) with `fd`; returns the SHARED answer's status.
    pub fn share(
        &self,
        request: u64,
        name: &str,
        len: u64,
        layout: [u8; 16],
        fd: Option<BorrowedFd<'_>>,
    ) -> FollowStatus {
        let m = follow_msg(FollowOp::Share, request, name, len, layout);
        self.send_follow(&m, fd);
        let (a, afd) = self.recv_follow();
        assert!(afd.is_none(), "SHARED carries no fd");
        assert_eq!(a.op, FollowOp::Shared);
        assert_eq!(
            (a.request, a.name(), a.len, a.layout),
            (request, name.as_bytes(), len, layout),
            "the answer echoes the request"
        );
        FollowStatus(a.status)
    }

    /// MAP(request, name, len, layout); returns the MAPPED answer's status
    /// and the fd that came with it.
    pub fn map(
        &self,
        request: u64,
        name: &str,
        len: u64,
        layout: [u8; 16],
    ) -> (FollowStatus, Option<OwnedFd>) {
        let m = follow_msg(FollowOp::Map, request, name, len, layout);
        self.send_follow(&m, None);
        let (a, fd) = self.recv_follow();
        assert_eq!(a.op, FollowOp::Mapped);
        assert_eq!(
            (a.request, a.name(), a.len, a.layout),
            (request, name.as_bytes(), len, layout),
            "the answer echoes the request"
        );
        (FollowStatus(a.status), fd)
    }

    /// A MAP that must be refused: its status (no fd may come with it).
    pub fn map_refused(
        &self,
        request: u64,
        name: &str,
        len: u64,
        layout: [u8; 16],
    ) -> FollowStatus {
        let (st, fd) = self.map(request, name, len, layout);
        assert!(fd.is_none(), "a refusal carries no fd");
        assert_ne!(st, FollowStatus::OK, "MAP {name} was not refused");
        st
    }

    /// UNSHARE or UNMAP of `name` (no answer comes).
    pub fn follow_op(&self, op: FollowOp, name: &str) {
        self.send_follow(&follow_msg(op, 0, name, 1, [0; 16]), None);
    }

    /// A datagram with a valid header of the Follow type whose body does
    /// not decode (reserved field set).
    pub fn send_bad_follow(&self) {
        let m = follow_msg(FollowOp::Map, 1, "bad", 1, [0; 16]);
        let mut buf = [0u8; MAX_MESSAGE_LEN];
        let n = Message::Follow(m).encode(&mut buf).unwrap();
        assert_eq!(n, HEADER_LEN + FOLLOW_LEN);
        assert_eq!(wire::message_type(&buf[..n]), Some(MESSAGE_TYPE_FOLLOW));
        buf[HEADER_LEN + 6] = 1; // reserved must be 0
        assert!(Message::decode(&buf[..n]).is_err());
        wire::send(self.sock.as_fd(), &buf[..n], None).unwrap();
    }
}

/// A Follow message of `op` for region `name`.
pub fn follow_msg(op: FollowOp, request: u64, name: &str, len: u64, layout: [u8; 16]) -> Follow {
    let mut f = Follow::new(op, request, name.as_bytes(), len).unwrap();
    f.layout = layout;
    f
}
