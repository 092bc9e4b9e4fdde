//! Path 3: `cuGetProcAddress` / `cuGetProcAddress_v2`, how the CUDA runtime
//! (PyTorch, JAX, …) finds every driver function.
//!
//! The real driver is asked first, with the caller's exact name, version and
//! flags, so which variant is chosen stays the driver's decision. Its answer is
//! then replaced by our hook for that same variant:
//! 1. by identity: the pointer is the driver's exported variant we resolved;
//! 2. otherwise by the `cuda.h` rules in the table (newest variant not newer than
//!    the requested version, per-thread form when the flags ask for it) — but only
//!    once the driver confirms it: asked again at that variant's own version it
//!    must return the same pointer. A newer variant the table does not know (a
//!    future `_v3` with another signature) fails that check and is left alone
//!    rather than routed into a hook of the wrong signature.
//!
//! Anything else is returned untouched.

use crate::table::Hook;
use crate::types::CuResult;
use core::ffi::{c_char, c_int, c_void, CStr};

type V1 = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> CuResult;
type V2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_void) -> CuResult;

/// Body of the `cuGetProcAddress` hook.
///
/// # Safety
/// Arguments as `cuGetProcAddress` (CUDA 11.3) requires; `real` is the driver's.
pub unsafe fn answer_v1(
    hook: Hook,
    _: crate::client::Client,
    real: V1,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
) -> CuResult {
    // SAFETY: the caller's arguments, unchanged.
    let rc = unsafe { real(symbol, pfn, version, flags) };
    let ask = |v: c_int| {
        let mut p = core::ptr::null_mut();
        crate::counters::own_call(hook);
        // SAFETY: same symbol and flags as the caller's call, our own out-pointer.
        let rc = unsafe { real(symbol, &mut p, v, flags) };
        (rc == CuResult::SUCCESS).then_some(p as usize)
    };
    // SAFETY: forwarded from the caller, who passed them to the driver just now.
    unsafe { substitute(rc, symbol, pfn, version, flags, &ask) };
    rc
}

/// Body of the `cuGetProcAddress_v2` hook.
///
/// # Safety
/// Arguments as `cuGetProcAddress_v2` (CUDA 12.0) requires; `real` is the driver's.
pub unsafe fn answer_v2(
    hook: Hook,
    _: crate::client::Client,
    real: V2,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    status: *mut c_void,
) -> CuResult {
    // SAFETY: the caller's arguments, unchanged.
    let rc = unsafe { real(symbol, pfn, version, flags, status) };
    let ask = |v: c_int| {
        let mut p = core::ptr::null_mut();
        crate::counters::own_call(hook);
        // SAFETY: same symbol and flags as the caller's call; status may be NULL.
        let rc = unsafe { real(symbol, &mut p, v, flags, core::ptr::null_mut()) };
        (rc == CuResult::SUCCESS).then_some(p as usize)
    };
    // SAFETY: as above.
    unsafe { substitute(rc, symbol, pfn, version, flags, &ask) };
    rc
}

/// Replaces a successful answer by our hook for the same variant.
///
/// # Safety
/// `symbol` is NULL or NUL-terminated; `pfn` is NULL or writable.
unsafe fn substitute(
    rc: CuResult,
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: u64,
    ask: &dyn Fn(c_int) -> Option<usize>,
) {
    if rc != CuResult::SUCCESS || symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: pfn is non-null and the driver just wrote it.
    let found = unsafe { *pfn };
    if found.is_null() {
        return;
    }
    // SAFETY: non-null and NUL-terminated per the API contract.
    let name = unsafe { CStr::from_ptr(symbol) };
    if let Some(hook) = choose(name.to_bytes(), found as usize, version, flags, ask) {
        crate::log!(
            Trace,
            "cuGetProcAddress({:?}, {}, {}) -> hook {:?}",
            name,
            version,
            flags,
            hook.info().symbol
        );
        // SAFETY: pfn is non-null and writable (the driver just wrote it).
        unsafe { *pfn = hook.export().cast_mut() };
    }
}

/// Which hook answers `name` asked at `version` with `flags`, given that the
/// driver answered `found`; `ask(v)` asks the driver the same question at `v`.
fn choose(
    name: &[u8],
    found: usize,
    version: c_int,
    flags: u64,
    ask: &dyn Fn(c_int) -> Option<usize>,
) -> Option<Hook> {
    if Hook::by_export_address(found as *const c_void).is_some() {
        return None; // already ours
    }
    crate::driver::ensure_loaded();
    if let Some(hook) = crate::driver::hook_for_real(found) {
        return Some(hook);
    }
    let hook = Hook::select(name, version, flags)?;
    let since = hook.info().since;
    if since != version && ask(since) != Some(found) {
        crate::log!(
            Debug,
            "cuGetProcAddress({:?}, {}) answers a variant newer than {:?}; not hooked",
            crate::log::String8(name),
            version,
            hook.info().symbol
        );
        return None;
    }
    crate::driver::adopt(hook, found);
    crate::log!(
        Debug,
        "cuGetProcAddress({:?}, {}) returned a pointer the driver does not export as {:?}; \
         hooked by the version rules",
        crate::log::String8(name),
        version,
        hook.info().symbol
    );
    Some(hook)
}
