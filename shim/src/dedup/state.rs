//! The process's dedup state: the table of dedup-backed allocations behind
//! one lock (cold paths only), the context they live in, the fork flag, and
//! sending Dedup messages to the coordinator.

use core::ffi::c_int;
use core::sync::atomic::AtomicBool;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, MutexGuard};

use tandem_proto::dedup::{Dedup, DEDUP_LEN};
use tandem_proto::wire::{Message, HEADER_LEN};

use super::granules::Table;
use crate::client::session::Session;
use crate::types::CUcontext;

/// Allocations smaller than this are never dedup-backed.
pub const MIN_BYTES: usize = 2 << 20;

/// Process-wide dedup state, behind one lock (cold paths only).
pub(super) struct State {
    pub(super) table: Table,
    /// The context every dedup-backed allocation was made in (as an address);
    /// 0 until the first one. Allocations in another context are left plain.
    pub(super) ctx: usize,
    pub(super) device: c_int,
    pub(super) granule: usize,
}

static STATE: Mutex<State> = Mutex::new(State {
    table: Table::new(),
    ctx: 0,
    device: 0,
    granule: 0,
});

/// Set in a fork child: the parent's CUDA state is not usable there.
pub(super) static FORKED: AtomicBool = AtomicBool::new(false);

pub(super) fn state() -> MutexGuard<'static, State> {
    // A panic while holding it aborts the process (panic = "abort"), so a
    // poisoned lock is never observed; take the data either way.
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Posts a Dedup message: none may be lost while the session lasts (a lost
/// WITHDRAW would keep this job a holder of a shared copy, and the copy open,
/// until it leaves), so a full socket holds it for later, in order.
pub(super) fn send(s: &Session, d: Dedup, fd: Option<BorrowedFd<'_>>) {
    let Some((buf, n)) = encode(&d) else {
        return;
    };
    if !s.post(&buf[..n], fd) {
        crate::log!(
            Debug,
            "dedup: could not send {} for {:#x}",
            d.op.name(),
            d.granule
        );
    }
}

/// Sends a CANDIDATE only if the socket takes it now and nothing is held
/// ([`Session::send_in_order`]): a candidate not sent is offered again by
/// the next scan pass, so it never takes a held message's room (a scan
/// over a large model while tandemd stalls would fill it). Whether it went.
pub(super) fn send_candidate(s: &Session, d: Dedup) -> bool {
    encode(&d).is_some_and(|(buf, n)| s.send_in_order(&buf[..n], None))
}

/// `d` as one wire message (its length in the buffer), or `None`, logged.
fn encode(d: &Dedup) -> Option<([u8; HEADER_LEN + DEDUP_LEN], usize)> {
    let mut buf = [0u8; HEADER_LEN + DEDUP_LEN];
    match Message::Dedup(*d).encode(&mut buf) {
        Ok(n) => Some((buf, n)),
        Err(e) => {
            crate::log!(Debug, "dedup: cannot encode {}: {e}", d.op.name());
            None
        }
    }
}

/// The context dedup works in, as the driver type.
pub(super) fn ctx_of(addr: usize) -> CUcontext {
    addr as CUcontext
}
