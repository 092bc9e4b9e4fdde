//! Follow mode's side of the conversation with tandemd: building Follow
//! messages, sending them, and asking (send, then wait in the mailbox for
//! the answer).

use core::ffi::c_int;
use core::sync::atomic::{AtomicU64, Ordering};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use tandem_proto::follow::{api, Follow, FollowOp, FollowStatus, FOLLOW_LEN};
use tandem_proto::wire::{Message, HEADER_LEN};

use super::state::MAILBOX;
use super::steps::Args;
use crate::client::session::Session;

/// How long `tandem_follow_offer` waits for tandemd's answer.
pub const SHARE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between two tries of a request the socket did not take (full, or
/// messages held before it).
const SEND_RETRY: Duration = Duration::from_millis(1);
/// Pause between two MAPs while the region is not there yet.
pub(super) const RETRY_EVERY: Duration = Duration::from_millis(50);

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

pub(super) fn request_id() -> u64 {
    NEXT_REQUEST.fetch_add(1, Ordering::Relaxed)
}

/// A message about region `name` of `bytes` with `layout` (names were
/// validated on the way in: `None` never happens in practice).
pub(super) fn message(
    op: FollowOp,
    request: u64,
    name: &[u8],
    bytes: u64,
    layout: [u8; 16],
) -> Option<Follow> {
    let mut f = Follow::new(op, request, name, bytes)?;
    f.layout = layout;
    Some(f)
}

/// Sends an UNSHARE or UNMAP, which nobody answers.
pub(super) fn notify(s: &Session, op: FollowOp, name: &[u8], bytes: u64, layout: [u8; 16]) {
    if let Some(f) = message(op, 0, name, bytes, layout) {
        send(s, &f, None);
    }
}

/// Whether `code` (a `tandem_follow_offer` result, or a late SHARED's
/// status as one) is tandemd saying no: final, so the region's name goes.
/// Not an answer at all (none in time, no coordinator, follow mode off) is
/// no refusal: the name stays, and a later tandemd is offered it.
pub(super) fn refused(code: c_int) -> bool {
    !matches!(
        code,
        api::OK | api::TIMEOUT | api::NO_COORDINATOR | api::DISABLED
    )
}

/// Posts `f`: sent now, or held while the socket is full and sent in order
/// as it drains (`Session::post`: nothing posted is lost while the session
/// lasts). `false` if it is lost all the same.
pub(super) fn send(s: &Session, f: &Follow, fd: Option<BorrowedFd<'_>>) -> bool {
    encode(f).is_some_and(|(buf, n)| s.post(&buf[..n], fd))
}

fn encode(f: &Follow) -> Option<([u8; HEADER_LEN + FOLLOW_LEN], usize)> {
    let mut buf = [0u8; HEADER_LEN + FOLLOW_LEN];
    match Message::Follow(*f).encode(&mut buf) {
        Ok(n) => Some((buf, n)),
        Err(e) => {
            crate::log!(Debug, "follow: cannot encode {}: {e}", f.op.name());
            None
        }
    }
}

/// Sends `f` and waits for its answer until `deadline`; `None`: not sent or
/// not answered (or answered with something that is not the answer to it).
pub(super) fn ask(
    s: &Session,
    f: &Follow,
    fd: Option<BorrowedFd<'_>>,
    deadline: Instant,
) -> Option<(Follow, Option<OwnedFd>)> {
    MAILBOX.expect(f.request);
    // Never held (its asker would give up before a held request went out):
    // tried until the socket takes it behind whatever is held, or the deadline.
    let sent = encode(f).is_some_and(|(buf, n)| loop {
        if s.send_in_order(&buf[..n], fd) {
            break true;
        }
        // A closed socket will not take it later: the session is ending.
        if s.socket().is_none() || Instant::now() + SEND_RETRY >= deadline {
            break false;
        }
        std::thread::sleep(SEND_RETRY);
    });
    let (a, fd) = MAILBOX.wait(f.request, if sent { deadline } else { Instant::now() })?;
    let expected = if f.op == FollowOp::Share {
        FollowOp::Shared
    } else {
        FollowOp::Mapped
    };
    if a.op != expected || a.name() != f.name() {
        crate::log!(
            Debug,
            "follow: tandemd answered {} for {:?} to a {} of {:?}; ignored",
            a.op.name(),
            a.name_str(),
            f.op.name(),
            f.name_str()
        );
        return None;
    }
    Some((a, fd))
}

/// The registered session, if it speaks follow mode (connects on a first call).
pub(super) fn follow_session() -> Result<&'static Session, c_int> {
    match crate::client::current() {
        Some(s) if s.follow => {
            // tandemd keys regions by GPU: it must know ours first (a
            // Device not sent now is tried again by the next launch).
            let _ = crate::client::send_device(s);
            Ok(s)
        }
        _ => Err(api::NO_COORDINATOR),
    }
}

/// Offers a shared region to tandemd and waits for the answer.
pub(super) fn offer(s: &Session, a: &Args, fd: BorrowedFd<'_>) -> c_int {
    let deadline = Instant::now() + SHARE_TIMEOUT;
    loop {
        let Some(f) = message(FollowOp::Share, request_id(), &a.name, a.bytes, a.layout) else {
            return api::INVALID;
        };
        let Some((answer, _)) = ask(s, &f, Some(fd), deadline) else {
            return api::TIMEOUT;
        };
        match api::from_status(FollowStatus(answer.status)) {
            Some(code) => return code,
            None if Instant::now() + RETRY_EVERY < deadline => std::thread::sleep(RETRY_EVERY),
            None => return api::TIMEOUT,
        }
    }
}
