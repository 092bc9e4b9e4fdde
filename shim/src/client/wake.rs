//! The watcher's wake-up: an eventfd it sleeps on besides its socket, so
//! that an idle process's watcher needs no periodic wake-ups. Launching
//! threads write it when something needs the watcher now rather than at its
//! next slice: the first completion mark after an idle spell
//! (`super::marks`), or a GPU that became known before tandemd claimed its
//! board slot (`super::local`).

use core::sync::atomic::{AtomicI32, Ordering};
use std::os::fd::{BorrowedFd, IntoRawFd};

/// The eventfd (-1: none yet).
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// One eventfd write (cold: launching threads call it rarely).
pub(super) fn wake_watcher() {
    let fd = WAKE.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the watcher's eventfd, never closed while this process runs
        // (except in a fork child, which resets WAKE first); a failed signal
        // only delays the watcher to its next slice.
        tandem_os::poll::eventfd_signal(unsafe { BorrowedFd::borrow_raw(fd) });
    }
}

/// The watcher's end of the wake-up: an eventfd (created once per process),
/// or `None` when none could be made (the watcher then polls on its slices
/// only).
pub fn wake_fd() -> Option<i32> {
    let fd = WAKE.load(Ordering::Acquire);
    if fd >= 0 {
        return Some(fd);
    }
    // Kept for the life of the process (launching threads write it).
    let fd = tandem_os::poll::eventfd().ok()?.into_raw_fd();
    WAKE.store(fd, Ordering::Release);
    Some(fd)
}

/// Whether a wake-up exists (the watcher sleeps its full slices only then).
pub(super) fn wakeable() -> bool {
    WAKE.load(Ordering::Relaxed) >= 0
}

/// Clears the wake-up (after the watcher's poll saw it readable).
pub fn clear_wake(fd: BorrowedFd<'_>) {
    tandem_os::poll::eventfd_clear(fd);
}

/// In a fork child: the parent's eventfd is closed; the child's own watcher
/// makes a new one.
pub(super) fn after_fork_in_child() {
    let fd = WAKE.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the child's copy of the parent's eventfd; nothing in the
        // child uses it (its own watcher makes a new one).
        unsafe { libc::close(fd) };
    }
}
