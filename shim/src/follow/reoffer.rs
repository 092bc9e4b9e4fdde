//! A new coordinator session (after a tandemd restart, or with one that was
//! not running at the first offer): every named region this process shares
//! is offered to it again, unasked, and every region it follows is reported
//! (HELD), since the new tandemd knows nothing of what was mapped from the
//! last one and its accounting would miss it. Nobody waits for the answers:
//! they come to `super::on_message`.
//!
//! tandemd keys regions by GPU, which it learns from the session's Device
//! message. A SHARE it reads before that is answered NOT_READY and the region
//! stays unknown to it, so none of this goes out until the Device is out
//! (`crate::client::send_device`, which is false while another thread is
//! still sending it): until then it stays pending, and the watcher's tick
//! tries again. A late NOT_READY for a re-offer makes that region pending too.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::os::fd::AsFd;

use tandem_proto::follow::FollowOp;

use super::messages::{message, request_id, send};
use super::state::{regions, ANY, FORKED};
use crate::client::session::Session;
use crate::vmm;

/// Offers (or HELDs) wait for the session's Device message.
static PENDING: AtomicBool = AtomicBool::new(false);
/// The followed regions still have to be reported to this session.
static HELD_DUE: AtomicBool = AtomicBool::new(false);
/// No try before this (monotonic ns): a tandemd that keeps answering
/// NOT_READY is not asked at every turn of the watcher.
static NEXT_TRY_NS: AtomicU64 = AtomicU64::new(0);
/// Pause between two tries while pending.
const RETRY_NS: u64 = 200_000_000;

/// A new session was published (watcher thread): what it must be told.
pub fn session_started(s: &Session) {
    if !s.follow || !ANY.load(Ordering::Acquire) || FORKED.load(Ordering::Relaxed) {
        return;
    }
    // The new tandemd has none of them, whatever the last one answered.
    regions().unoffer_shared();
    HELD_DUE.store(true, Ordering::Relaxed);
    PENDING.store(true, Ordering::Release);
    try_now(s);
}

/// Periodic work (watcher thread): a pending re-offer, once due.
pub fn tick(s: &Session) {
    if !PENDING.load(Ordering::Acquire)
        || !s.follow
        || tandem_proto::monotonic_ns() < NEXT_TRY_NS.load(Ordering::Relaxed)
    {
        return;
    }
    try_now(s);
}

/// tandemd answered a re-offer of the region at `base` NOT_READY (it did
/// not know our GPU yet): offer it again once the Device is out.
pub fn not_ready(base: crate::types::CUdeviceptr) {
    if regions().set_offered(base, false) {
        PENDING.store(true, Ordering::Release);
    }
}

/// Sends what is pending if the Device message is out; else leaves it
/// pending for a later tick.
fn try_now(s: &Session) {
    NEXT_TRY_NS.store(
        tandem_proto::monotonic_ns().saturating_add(RETRY_NS),
        Ordering::Relaxed,
    );
    let mut t = regions();
    // The Device message needs a current context in this (the watcher's)
    // thread: any named region's.
    let Some(ctx) = t.named().next().map(|r| r.ctx) else {
        PENDING.store(false, Ordering::Release);
        return;
    };
    if let Err(e) = vmm::ctx_set_current(ctx as crate::types::CUcontext) {
        crate::log!(Debug, "follow: no context for the Device message: {e}");
    }
    if !crate::client::send_device(s) {
        crate::log!(
            Debug,
            "follow: the Device message is not out yet; the re-offers wait for it"
        );
        return;
    }
    let mut offered = Vec::new();
    // A message the shim's outbox could not take (full, or its descriptor
    // not kept) is tried again at the next retry, not forgotten.
    let mut again = false;
    for r in t.unoffered_named() {
        let (Some(fd), Some(f)) = (
            r.export.as_ref(),
            message(FollowOp::Share, request_id(), &r.name, r.bytes, r.layout),
        ) else {
            continue;
        };
        if send(s, &f, Some(fd.as_fd())) {
            offered.push(r.base);
        } else {
            again = true;
        }
    }
    if HELD_DUE.swap(false, Ordering::Relaxed) {
        let mut all = true;
        for r in t.followed() {
            if let Some(f) = message(FollowOp::Held, 0, &r.name, r.bytes, r.layout) {
                all &= send(s, &f, None);
            }
        }
        if !all {
            // All again: a second HELD of a name replaces the first.
            HELD_DUE.store(true, Ordering::Relaxed);
            again = true;
        }
    }
    // Offered means "tandemd will have it": its answer may still refuse.
    for base in offered {
        t.set_offered(base, true);
    }
    PENDING.store(again, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::session::tests::{pair, session_with_flags};
    use crate::client::session::Session;
    use crate::follow::regions::{Region, Role};
    use tandem_proto::follow::{Follow, FollowStatus};
    use tandem_proto::wire::{self, Message, WELCOME_FLAG_FOLLOW};
    use tandem_proto::Consumer;

    /// The tests share this module's statics (PENDING, the regions): one
    /// at a time.
    static GLOBALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The Follow messages the peer has been sent, with whether an fd came.
    fn sent(peer: &std::os::fd::OwnedFd) -> Vec<(FollowOp, Vec<u8>, bool)> {
        let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
        let mut out = Vec::new();
        while let Ok(r) = wire::recv(peer.as_fd(), &mut buf) {
            if let Ok(Message::Follow(f)) = Message::decode(&buf[..r.len]) {
                out.push((f.op, f.name().to_vec(), r.fd.is_some()));
            }
        }
        out
    }

    /// A shared region at `base` named `name` that the last tandemd
    /// accepted, with an export descriptor; returns `base`.
    fn shared_region(base: crate::types::CUdeviceptr, name: &[u8]) -> crate::types::CUdeviceptr {
        let export = std::fs::File::open("/dev/null").unwrap();
        super::super::state::insert(Region {
            base,
            span: 2 << 20,
            bytes: 1 << 20,
            handle: 1,
            ctx: 0,
            role: Role::Shared { offered: true },
            name: name.to_vec(),
            layout: [0; 16],
            export: Some(export.into()),
        });
        base
    }

    /// The module's statics for this test alone, and a session of a
    /// tandemd that asked for follow mode (its peer's end) whose Device
    /// message is claimed, as by a launch on another thread still sending
    /// it.
    fn follow_session() -> (
        std::sync::MutexGuard<'static, ()>,
        Session,
        Consumer<'static>,
        std::os::fd::OwnedFd,
    ) {
        let one = GLOBALS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (sock, peer) = pair();
        let (s, ring) = session_with_flags(sock, WELCOME_FLAG_FOLLOW);
        s.device_sent.store(true, Ordering::Relaxed);
        (one, s, ring, peer)
    }

    #[test]
    fn regions_are_offered_again_only_once_the_device_message_is_out() {
        let (_one, s, _ring, peer) = follow_session();
        // Accepted by the last tandemd.
        let base = shared_region(0x7e00_0000_0000, b"reoffer-test");

        session_started(&s);
        assert_eq!(sent(&peer), vec![], "nothing before the Device message");
        assert!(PENDING.load(Ordering::Relaxed));

        s.device_out.store(true, Ordering::Release);
        tick(&s);
        assert_eq!(sent(&peer), vec![], "not before the retry is due");
        try_now(&s);
        let share = (FollowOp::Share, b"reoffer-test".to_vec(), true);
        assert_eq!(sent(&peer), vec![share.clone()], "offered with its fd");
        assert!(!PENDING.load(Ordering::Relaxed));
        try_now(&s);
        assert_eq!(sent(&peer), vec![], "once");

        // The new tandemd had not read the Device yet: offered again.
        let mut late = Follow::new(FollowOp::Shared, 1, b"reoffer-test", 1 << 20).unwrap();
        late.status = FollowStatus::NOT_READY.0;
        super::super::on_message(late, None);
        assert!(PENDING.load(Ordering::Relaxed));
        try_now(&s);
        assert_eq!(sent(&peer), vec![share]);

        drop(regions().remove(base));
        ANY.store(false, Ordering::Release);
    }

    /// A re-offer the shim's outbox could not take (its bound reached while
    /// tandemd read nothing) stays pending and goes out at a later try, once
    /// the socket has drained; it was forgotten until the next session.
    #[test]
    fn a_re_offer_the_outbox_could_not_take_is_tried_again() {
        let (_one, s, _ring, peer) = follow_session();
        s.device_out.store(true, Ordering::Release);
        let base = shared_region(0x7e10_0000_0000, b"reoffer-full");
        // The socket full, then the outbox at its bound.
        while s.send(&[0u8; 256]) {}
        let mut held = 0;
        while s.post(&[0u8; 16], None) {
            held += 1;
        }
        assert!(held > 0, "the outbox held some before its bound");
        session_started(&s);
        try_now(&s);
        assert!(PENDING.load(Ordering::Relaxed), "still pending");
        assert!(
            regions().unoffered_named().any(|r| r.base == base),
            "not marked offered"
        );
        // tandemd reads again: the held messages go, then the re-offer.
        let mut buf = vec![0u8; wire::MAX_MESSAGE_LEN];
        while s.flush_held() > 0 {
            while wire::recv(peer.as_fd(), &mut buf).is_ok() {}
        }
        while wire::recv(peer.as_fd(), &mut buf).is_ok() {}
        try_now(&s);
        let share = (FollowOp::Share, b"reoffer-full".to_vec(), true);
        assert_eq!(sent(&peer), vec![share], "offered at the retry");
        assert!(!PENDING.load(Ordering::Relaxed));

        drop(regions().remove(base));
        ANY.store(false, Ordering::Release);
    }
}
