//! What the tests ask the fake (extra C-ABI exports, declared in the contract):
//!
//! ```c
//! uint64_t fakecuda_calls(const char *symbol);   /* times that exact exported symbol was entered */
//! uint64_t fakecuda_kernels_executed(void);      /* direct launches + kernel nodes of launched graphs */
//! uint64_t fakecuda_bytes_allocated(void);
//! void     fakecuda_reset_counts(void);
//! ```
//!
//! After `fork()` the child's counts restart at zero (as the shim's do), so that
//! `tandem_hook_count(S) == fakecuda_calls(S)` holds in a child too.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::exports::TABLE;
use crate::state::lock;

static KERNELS_EXECUTED: AtomicU64 = AtomicU64::new(0);

/// Counts `n` more executed kernels.
pub fn kernels_executed_add(n: u64) {
    KERNELS_EXECUTED.fetch_add(n, Ordering::Relaxed);
}

/// Zeroes every call counter and the executed-kernel count (not the allocation state).
fn reset_counts() {
    for e in TABLE {
        e.calls.store(0, Ordering::Relaxed);
    }
    KERNELS_EXECUTED.store(0, Ordering::Relaxed);
}

/// Times the exact exported symbol `symbol` was entered (directly or through its trampoline);
/// 0 for NULL or an unknown name.
///
/// # Safety
/// `symbol` must be NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn fakecuda_calls(symbol: *const c_char) -> u64 {
    if symbol.is_null() {
        return 0;
    }
    // SAFETY: non-NULL and NUL-terminated (caller contract).
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    TABLE
        .iter()
        .find(|e| e.symbol.as_bytes() == name)
        .map_or(0, |e| e.calls.load(Ordering::Relaxed))
}

#[no_mangle]
pub extern "C" fn fakecuda_kernels_executed() -> u64 {
    KERNELS_EXECUTED.load(Ordering::Relaxed)
}

/// Bytes of device memory this process owns now (`cuMemAlloc*` + `cuMemCreate`; imports are
/// free).
#[no_mangle]
pub extern "C" fn fakecuda_bytes_allocated() -> u64 {
    lock().bytes_allocated
}

#[no_mangle]
pub extern "C" fn fakecuda_reset_counts() {
    reset_counts();
}

extern "C" fn reset_counts_in_child() {
    reset_counts();
}

/// Run from `.init_array` when the library is loaded: registers the fork handler.
extern "C" fn on_load() {
    // SAFETY: registers a plain function that only stores to atomics (async-signal-safe).
    unsafe { libc::pthread_atfork(None, None, Some(reset_counts_in_child)) };
}

#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
