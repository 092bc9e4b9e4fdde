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

pub(super) fn insert(r: Region) {
    let mut t = regions();
    t.insert(r);
    ANY.store(true, Ordering::Release);
}
