//! What the tests ask the fake (extra C-ABI exports, declared in the contract):
//!
//! ```c
//! uint64_t fakecuda_calls(const char *symbol);   /* times that exact exported symbol was entered */
//! uint64_t fakecuda_kernels_executed(void);      /* direct launches + kernel nodes of launched graphs */
//! uint64_t fakecuda_bytes_allocated(void);
//! /* Bytes of physical allocations this process created with cuMemCreate and still references
//!  * (through its handle or a mapping): released-but-mapped memory counts, released-and-unmapped
//!  * memory does not. */
//! uint64_t fakecuda_vmm_created_bytes(void);
//! /* The same for physical allocations this process imported (cuMemImportFromShareableHandle):
//!  * they cost this process no device memory. */
//! uint64_t fakecuda_vmm_imported_bytes(void);
//! /* What this process costs the device: cuMemAlloc* bytes + fakecuda_vmm_created_bytes().
//!  * cuMemGetInfo reports total minus this as free. */
//! uint64_t fakecuda_device_bytes_used(void);
//! void     fakecuda_reset_counts(void);
//! /* Where the last kernel this process ran was placed on the (possibly shared) device, in ns on
//!  * CLOCK_MONOTONIC; both 0 before the first kernel. Returns 0, or -1 for a NULL pointer. */
//! int      fakecuda_last_kernel(uint64_t *start_ns, uint64_t *end_ns);
//! /* With FAKECUDA_SHARED_DEVICE: ns of kernel work queued on the shared device from now
//!  * (device_ready_at - now, every process's); 0 when it is idle or there is none. */
//! uint64_t fakecuda_shared_device_backlog_ns(void);
//! /* With FAKECUDA_SHARED_DEVICE and FAKECUDA_SHARED_SMS=1: the SMs the last kernel this process
//!  * ran was placed on, bit i of out[i / 64] for SM i (all zero otherwise, or before the first).
//!  * Returns the number of SMs, or -1 for a NULL pointer. */
//! int      fakecuda_last_kernel_sms(uint64_t out[4]);
//! ```
//!
//! After `fork()` the child's counts restart at zero (as the shim's do), so that
//! `tandem_hook_count(S) == fakecuda_calls(S)` holds in a child too.
//!
//! With `FAKECUDA_INIT_ENV_FILE=<path>`, the first successful `cuInit` of the
//! process writes there what the real driver would read from its environment
//! at that moment for MPS ([`INIT_ENV_VARS`]), one `NAME=value` line each
//! (`NAME` alone when unset), written whole (a rename) so that a reader never
//! sees half a file.

use std::ffi::{c_char, CStr};
use std::sync::atomic::Ordering;

use crate::counts::{KERNELS_EXECUTED, LAST_END, LAST_START};
use crate::exports::TABLE;
use crate::state::lock;

/// `fakecuda_last_kernel`: see the module docs.
///
/// # Safety
/// `start_ns` and `end_ns` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn fakecuda_last_kernel(start_ns: *mut u64, end_ns: *mut u64) -> i32 {
    if start_ns.is_null() || end_ns.is_null() {
        return -1;
    }
    let (s, e) = {
        let _st = lock(); // a consistent pair: both are written under the state lock
        (
            LAST_START.load(Ordering::Relaxed),
            LAST_END.load(Ordering::Relaxed),
        )
    };
    let (s, e) = if e == 0 {
        (0, 0)
    } else {
        let base = crate::clock::base_ns();
        (s.saturating_add(base), e.saturating_add(base))
    };
    // SAFETY: both non-NULL and valid for a write (caller contract).
    unsafe {
        start_ns.write(s);
        end_ns.write(e);
    }
    0
}

/// `fakecuda_last_kernel_sms`: see the module docs.
///
/// # Safety
/// `out` must be NULL or valid for writing four `u64`.
#[no_mangle]
pub unsafe extern "C" fn fakecuda_last_kernel_sms(out: *mut u64) -> i32 {
    if out.is_null() {
        return -1;
    }
    let sms = {
        let _st = lock(); // written under the state lock
        *crate::counts::LAST_SMS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    for (i, w) in sms.0.iter().enumerate() {
        // SAFETY: `out` holds four u64 (caller contract).
        unsafe { out.add(i).write_unaligned(*w) };
    }
    i32::try_from(sms.len()).unwrap_or(i32::MAX)
}

/// `fakecuda_shared_device_backlog_ns`: see the module docs.
#[no_mangle]
pub extern "C" fn fakecuda_shared_device_backlog_ns() -> u64 {
    let Some(dev) = crate::shared::device() else {
        return 0;
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_MONOTONIC is the shared device's clock.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let now = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
    dev.ready_at().load(Ordering::Acquire).saturating_sub(now)
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

/// `fakecuda_vmm_created_bytes`: see the module docs.
#[no_mangle]
pub extern "C" fn fakecuda_vmm_created_bytes() -> u64 {
    lock().vmm.created_bytes()
}

/// `fakecuda_vmm_imported_bytes`: see the module docs.
#[no_mangle]
pub extern "C" fn fakecuda_vmm_imported_bytes() -> u64 {
    lock().vmm.imported_bytes()
}

/// `fakecuda_device_bytes_used`: see the module docs.
#[no_mangle]
pub extern "C" fn fakecuda_device_bytes_used() -> u64 {
    let st = lock();
    st.memory.bytes() + st.vmm.created_bytes()
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
