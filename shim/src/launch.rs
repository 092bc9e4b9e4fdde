//! Kernel launches: forwarded unchanged; what did not run is noted.
//!
//! The per-variant call counters already count every launch call. Here only the
//! rare cases are counted — a launch that failed, or one recorded into a graph by
//! stream capture — so that "kernels launched" can be derived exactly without a
//! second shared counter on the fast path.

use crate::table::Hook;
use crate::types::{CUfunction, CUlaunchConfig, CUstream, CuResult};
use core::ffi::{c_uint, c_void};

type Launch = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;

type LaunchEx = unsafe extern "C" fn(
    *const CUlaunchConfig,
    CUfunction,
    *mut *mut c_void,
    *mut *mut c_void,
) -> CuResult;

type Cooperative = unsafe extern "C" fn(
    CUfunction,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    CUstream,
    *mut *mut c_void,
) -> CuResult;

#[inline(always)]
fn note(hook: Hook, rc: CuResult, stream: CUstream) {
    if rc != CuResult::SUCCESS {
        crate::counters::launch_failed();
    } else if crate::capture::is_capturing(stream, hook.info().per_thread) {
        crate::counters::launch_captured();
    }
}

/// `cuLaunchKernel` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
#[inline(always)]
pub unsafe fn kernel(
    hook: Hook,
    real: Launch,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared_mem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra) };
    note(hook, rc, stream);
    rc
}

/// `cuLaunchKernelEx` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
#[inline(always)]
pub unsafe fn kernel_ex(
    hook: Hook,
    real: LaunchEx,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(config, f, params, extra) };
    let stream = if config.is_null() {
        core::ptr::null_mut()
    } else {
        // SAFETY: non-null config points at the caller's CUlaunchConfig, valid for the call.
        unsafe { (*config).hStream }
    };
    note(hook, rc, stream);
    rc
}

/// `cuLaunchCooperativeKernel` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
#[inline(always)]
pub unsafe fn cooperative(
    hook: Hook,
    real: Cooperative,
    f: CUfunction,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared_mem: c_uint,
    stream: CUstream,
    params: *mut *mut c_void,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params) };
    note(hook, rc, stream);
    rc
}
