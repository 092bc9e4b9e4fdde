//! What follow mode holds in this process: the regions behind one lock,
//! the mailbox answers arrive in, whether any region exists (`cuMemFree`'s
//! only cost otherwise), the byte counts the C API reports, and the fork flag.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::mailbox::Mailbox;
use super::regions::{Region, Regions};

static REGIONS: Mutex<Regions> = Mutex::new(Regions::new());
pub(super) static MAILBOX: Mailbox = Mailbox::new();
/// Whether this process has any region (`cuMemFree`'s only cost otherwise).
pub(super) static ANY: AtomicBool = AtomicBool::new(false);
pub(super) static SHARED_BYTES: AtomicU64 = AtomicU64::new(0);
pub(super) static MAPPED_BYTES: AtomicU64 = AtomicU64::new(0);
/// Set in a fork child: the parent's CUDA state is not usable there.
pub(super) static FORKED: AtomicBool = AtomicBool::new(false);

pub(super) fn regions() -> MutexGuard<'static, Regions> {
    // A panic aborts the process (panic = "abort"): never poisoned in use.
    REGIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `TANDEM_FOLLOW=on`.
pub(super) fn enabled() -> bool {
    crate::client::follow_enabled()
}

/// In a fork child (one thread, async-signal-safe calls only): closes the
/// child's copies of the shared regions' exported fds, which would keep
/// their memory alive for the child's life after the parent frees it.
/// Frees nothing; skipped if the table was locked at the fork (its holder
/// does not exist here). The fds are close-on-exec besides.
pub(super) fn close_exports_in_child() {
    let Ok(mut t) = REGIONS.try_lock() else {
        return;
    };
    t.drop_exports();
}

pub(super) fn insert(r: Region) {
    let mut t = regions();
    t.insert(r);
    ANY.store(true, Ordering::Release);
}
