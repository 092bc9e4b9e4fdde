//! Which session hooks report to: one word, [`CURRENT`], says where this
//! process stands: never tried ([`UNTRIED`]), no session ([`IDLE`]: no
//! coordinator, refused, `off`, or reconnecting), or the address of the live
//! [`Session`]. Publishing and retiring a session happen here; loading it is
//! `super::current`, every hook's one load.

use core::sync::atomic::{AtomicUsize, Ordering};

use super::features;
use super::session::{self, Client, Session};

/// [`CURRENT`]: no CUDA call yet in this process (or since fork).
pub(super) const UNTRIED: usize = 0;
/// [`CURRENT`]: no session now.
pub(super) const IDLE: usize = 1;

/// `UNTRIED`, `IDLE`, or a `&'static Session` as an address.
pub(super) static CURRENT: AtomicUsize = AtomicUsize::new(UNTRIED);

/// A session being retired by the watcher (0: none), so that a child forked in
/// the middle of that abandons it too.
static RETIRING: AtomicUsize = AtomicUsize::new(0);

/// # Safety
/// `w` is a value of [`CURRENT`] or [`RETIRING`] greater than [`IDLE`].
#[inline(always)]
pub(super) unsafe fn session_at(w: usize) -> &'static Session {
    // SAFETY: such values are only ever addresses of leaked (never freed)
    // sessions, published with Release and loaded with Acquire.
    unsafe { &*(w as *const Session) }
}

/// The live session, without ever connecting.
pub(super) fn published() -> Client {
    let w = CURRENT.load(Ordering::Acquire);
    // SAFETY: a value above IDLE is a published session.
    (w > IDLE).then(|| unsafe { session_at(w) })
}

/// Makes `s` the session hooks report to. `false` if the state changed under us.
pub(super) fn publish(s: &'static Session) -> bool {
    CURRENT
        .compare_exchange(
            IDLE,
            s as *const Session as usize,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_ok()
}

/// Unpublishes and retires `s` (the coordinator hung up).
pub(super) fn retire(s: &'static Session) {
    let addr = s as *const Session as usize;
    RETIRING.store(addr, Ordering::SeqCst);
    let _ = CURRENT.compare_exchange(addr, IDLE, Ordering::AcqRel, Ordering::Acquire);
    // A thread that loaded `s` just before may still push a record or two after
    // this count: those go into a ring nobody reads any more, uncounted.
    session::retired(s.ring_head());
    s.retire();
    (features::get().session_lost)();
    RETIRING.store(0, Ordering::SeqCst);
}

/// In a fork child: forget the parent's registration and abandon its
/// sessions (the published one and one being retired). Only atomics, `mmap`
/// and `close`.
pub(super) fn after_fork_in_child() {
    let w = CURRENT.swap(UNTRIED, Ordering::AcqRel);
    if w > IDLE {
        // SAFETY: a value above IDLE is a published session.
        unsafe { session_at(w) }.abandon_in_child();
    }
    let r = RETIRING.swap(0, Ordering::AcqRel);
    if r > IDLE && r != w {
        // SAFETY: RETIRING only holds addresses of leaked sessions.
        unsafe { session_at(r) }.abandon_in_child();
    }
}
