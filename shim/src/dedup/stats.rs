//! What dedup did in this process: the counters the `tandem_dedup_*`
//! functions (`include/tandem.h`) and the exit dump read.

use core::sync::atomic::{AtomicU64, Ordering};

pub(super) static SHARED_GRANULES: AtomicU64 = AtomicU64::new(0);
pub(super) static SHARED_BYTES: AtomicU64 = AtomicU64::new(0);
pub(super) static MERGES: AtomicU64 = AtomicU64::new(0);
pub(super) static COW_BREAKS: AtomicU64 = AtomicU64::new(0);
pub(super) static PUBLISHED: AtomicU64 = AtomicU64::new(0);
pub(super) static BACKED_BYTES: AtomicU64 = AtomicU64::new(0);

pub(super) fn shared_changed(len: u64, added: bool) {
    if added {
        SHARED_GRANULES.fetch_add(1, Ordering::Relaxed);
        SHARED_BYTES.fetch_add(len, Ordering::Relaxed);
    } else {
        SHARED_GRANULES.fetch_sub(1, Ordering::Relaxed);
        SHARED_BYTES.fetch_sub(len, Ordering::Relaxed);
    }
}

/// Bytes of this process's memory that map a shared copy now. Declared in
/// `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_dedup_shared_bytes() -> u64 {
    SHARED_BYTES.load(Ordering::Relaxed)
}

/// Granules this process merged into a shared copy (offers accepted) since it
/// started. Declared in `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_dedup_merges() -> u64 {
    MERGES.load(Ordering::Relaxed)
}

/// Copy-on-write breaks (a driver copy or memset into shared memory) since it
/// started. Declared in `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_dedup_cow_breaks() -> u64 {
    COW_BREAKS.load(Ordering::Relaxed)
}

/// Bytes of device memory this process holds through dedup-backed allocations
/// (shared or private), rounded up to whole granules. Declared in `include/tandem.h`.
#[no_mangle]
pub extern "C" fn tandem_dedup_backed_bytes() -> u64 {
    BACKED_BYTES.load(Ordering::Relaxed)
}

/// One line for the exit dump (`TANDEM_LOG=debug`), when dedup did anything.
pub fn summary() -> Option<String> {
    let backed = BACKED_BYTES.load(Ordering::Relaxed);
    let merges = MERGES.load(Ordering::Relaxed);
    if backed == 0 && merges == 0 {
        return None;
    }
    Some(format!(
        "dedup backed_bytes={backed} shared_bytes={} merges={merges} published={} cow_breaks={}",
        SHARED_BYTES.load(Ordering::Relaxed),
        PUBLISHED.load(Ordering::Relaxed),
        COW_BREAKS.load(Ordering::Relaxed)
    ))
}
