//! The client side of the coordinator protocol.
//!
//! One word ([`published`]) says where this process stands: never tried, no
//! session (no coordinator, refused, `off`, or reconnecting), or the address
//! of the live [`Session`]. Every hook loads it once ([`current`]); that is
//! all a hook pays without a coordinator.
//!
//! - The first hooked call of a process registers, synchronously and bounded
//!   (connect 200 ms, answer 1 s), then starts the [`watcher`] thread, which
//!   notices a hang-up, unpublishes the session and re-registers every 200 ms.
//! - With a session, launches pass the gate ([`gate`]: the local in-flight
//!   bound of [`local`], then the coordinator's gate) and every reported
//!   event is one ring record ([`emit`]); names of kernels and the device go out once per
//!   session as FuncName / Device messages ([`funcs`]).
//! - Sessions are leaked (`&'static`), never freed: a launching thread may
//!   still hold one that was just retired (its ring is then swapped for
//!   anonymous memory, see [`session`]).
//! - Where the coordinator asks for them, launches are followed by completion
//!   marks (driver events) that the watcher reports as they complete
//!   ([`marks`]).
//! - Where tandemd asks a training client for the SM reservation, its gate
//!   marks launches made while inference is active to carry a TPC mask, which
//!   [`spatial`] writes into the launch's descriptor from the driver's launch
//!   callback (probed once; off, with one log line, on anything unknown).
//! - The modules form one direction: [`session`] (the state, the ring push
//!   and its counters) and [`local`] (the board and estimates) at the
//!   bottom; [`features`] (the slot through which the session tells dedup
//!   and follow mode, which stand above the client, what happened) and
//!   [`published`] (publication) over the session; [`marks`] over the
//!   session; [`spatial`] beside [`local`]; [`gate`] and [`emit`] over
//!   both; the [`watcher`] over publication; this module (registration, the
//!   hooks' one load) on top.
//!   Dedup and follow mode name [`session::Session`] directly.
//! - After `fork` the child unpublishes and abandons the parent's session and
//!   registers as a new client on its own next CUDA call.
//! - Under tandem over MPS, the first registration also puts the MPS
//!   variables the Welcome names into the environment, before the driver
//!   initialises ([`mps`]; a `cuInit` on another thread waits for it).

pub mod emit;

mod config;
mod connect;
pub mod features;
mod funcs;
pub(crate) use funcs::clustered;
mod gate;
mod interval;
mod local;
pub(crate) mod marks;
pub(crate) mod mps;
mod outbox;
mod published;
mod qmd;
pub(crate) mod session;
mod slots;
pub(crate) mod spatial;
mod timing;
mod wake;
mod watcher;

use core::sync::atomic::Ordering;

pub(crate) use config::{env_u64, follow_enabled};
pub use features::Features;
use published::{publish, published, session_at, CURRENT, IDLE, UNTRIED};
pub use session::{Client, Session};

/// The session hooks report to: one Acquire load. The first hooked call of a
/// process (cold) registers with the coordinator first.
#[inline(always)]
pub fn current() -> Client {
    let w = CURRENT.load(Ordering::Acquire);
    if w > IDLE {
        // SAFETY: a value above IDLE is a published session.
        Some(unsafe { session_at(w) })
    } else if w == UNTRIED {
        first_call()
    } else {
        None
    }
}

/// The live session, without ever connecting (for dedup's messages).
pub(crate) fn published_session() -> Client {
    published()
}

/// Sends the Device message of `s` if it has not gone out yet; whether it
/// is out now (what the coordinator keys a client's GPU state by): not
/// while another thread is still sending it, so what the caller sends next
/// cannot pass it.
pub(crate) fn send_device(s: &Session) -> bool {
    funcs::send_device(s);
    s.device_out.load(Ordering::Acquire)
}

#[cold]
#[inline(never)]
fn first_call() -> Client {
    // Seen by a cuInit on another thread, which waits for the registration.
    let _pending = mps::Pending::enter();
    // One thread registers; the others (and any re-entry) carry on unscheduled.
    if CURRENT
        .compare_exchange(UNTRIED, IDLE, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return published();
    }
    let mut cfg = config::load()?;
    let outcome = mps::registering(|ask| {
        cfg.flags |= ask;
        let o = connect::attempt(&cfg);
        // Reconnections never ask: CUDA has initialised by then.
        cfg.flags &= !tandem_proto::wire::HELLO_FLAG_MPS;
        if let connect::Outcome::Welcome(_, Some(m)) = &o {
            mps::join(m);
        }
        o
    });
    timing::read_env();
    match outcome {
        connect::Outcome::Welcome(s, _) => {
            let ok = publish(s);
            connect::HANDSHAKE_FD.store(-1, Ordering::SeqCst);
            if !ok {
                s.retire();
                return published();
            }
            watcher::spawn(cfg, Some(s));
            Some(s)
        }
        connect::Outcome::Unavailable => {
            watcher::spawn(cfg, None);
            None
        }
        connect::Outcome::Refused => None,
    }
}

/// The atfork child handler's part: forget the parent's registration. Only
/// atomics, `mmap` and `close`.
pub fn after_fork_in_child() {
    published::after_fork_in_child();
    let fd = connect::HANDSHAKE_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: the child's copy of a socket the parent was registering on
        // (possibly already closed above: then this is a harmless EBADF).
        unsafe { libc::close(fd) };
    }
    watcher::after_fork_in_child();
    marks::after_fork_in_child();
    mps::after_fork_in_child();
    session::reset_counts();
}

/// Records this process pushed into its coordinator ring since it started (or
/// forked). Declared in `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_records_pushed() -> u64 {
    session::retired_pushed() + published().map_or(0, |s| s.ring_head())
}

/// Records this process dropped (ring full or busy) since it started (or forked).
/// Declared in `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_records_dropped() -> u64 {
    session::dropped()
}

/// The coordinator's id for this process, or 0 when it is not registered now.
/// Declared in `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_client_id() -> u64 {
    published().map_or(0, |s| s.client_id)
}

/// An inference request begins (explicit API, `include/tandem.h`): one
/// REQUEST_BEGIN record when registered, else nothing. Never connects, never
/// blocks.
#[no_mangle]
pub extern "C" fn tandem_request_begin() {
    if let Some(s) = published() {
        s.request_mark(true);
        emit::request(s, tandem_proto::EventKind::REQUEST_BEGIN);
    }
}

/// The inference request ends (its result is ready): one REQUEST_END record
/// when registered, else nothing. Never connects, never blocks.
#[no_mangle]
pub extern "C" fn tandem_request_end() {
    if let Some(s) = published() {
        s.request_mark(false);
        emit::request(s, tandem_proto::EventKind::REQUEST_END);
    }
}

/// For tests that call an export: this process never tries to reach a
/// coordinator (as if its first call had found none), so a test cannot
/// register with a tandemd that happens to run on the machine.
#[cfg(test)]
pub(crate) fn never_connect() {
    let _ = CURRENT.compare_exchange(UNTRIED, IDLE, Ordering::AcqRel, Ordering::Acquire);
}
