//! Kernel launches: forwarded unchanged; what did not run is noted; with a
//! coordinator, the gate is obeyed first and the launch is reported after.
//!
//! The per-variant call counters already count every launch call. Here only the
//! rare cases are counted — a launch that failed, or one recorded into a graph by
//! stream capture — so that "kernels launched" can be derived exactly without a
//! second shared counter on the fast path.
//!
//! With a session (`client` is `Some`), a launch does: one Acquire load of the
//! gate (bounded wait only when the coordinator closed it), the real call, and
//! for a launch that ran, one ring record ([`crate::client::emit::launch`]).
//! Failed and stream-captured launches are not reported: the coordinator's count
//! is the count of kernels sent to the GPU, like `tandem_kernels_launched`.

use crate::client::{emit, marks, Client};
use crate::table::Hook;
use crate::types::{CUfunction, CUlaunchConfig, CUstream, CuResult};
use core::ffi::{c_uint, c_void};
use tandem_proto::estimates::kernel_key;
use tandem_proto::record::FLAG_COOPERATIVE;
use tandem_proto::EventKind;

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

/// Whether a launch that returned `rc` sent a kernel to the GPU (counts the
/// ones that did not).
#[inline(always)]
fn ran(hook: Hook, rc: CuResult, stream: CUstream) -> bool {
    if rc != CuResult::SUCCESS {
        crate::counters::launch_failed();
        false
    } else if crate::capture::is_capturing(stream, hook.info().per_thread) {
        crate::counters::launch_captured();
        false
    } else {
        true
    }
}

/// Whether `stream` is being captured into a graph (for a launch to time).
#[cold]
fn capturing(hook: Hook, stream: CUstream) -> bool {
    crate::capture::is_capturing(stream, hook.info().per_thread)
}

/// With a session: the launch's stable function id, after the session's
/// gate for the kernel's key (function and grid) let it go. Without: 0, and
/// nothing else.
#[inline(always)]
fn gate(client: Client, f: CUfunction, grid: [c_uint; 3]) -> u64 {
    match client {
        Some(s) => {
            let func_id = emit::func_id(s, f);
            s.gate(kernel_key(func_id, grid));
            func_id
        }
        None => 0,
    }
}

/// `cuLaunchKernel` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the driver's 11 arguments + hook, session, real
pub unsafe fn kernel(
    hook: Hook,
    client: Client,
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
    let func_id = gate(client, f, [gx, gy, gz]);
    let timing = marks::before_launch(client, hook, stream, || capturing(hook, stream));
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra) };
    if ran(hook, rc, stream) {
        if let Some(s) = client {
            let dims = emit::Dims {
                grid: [gx, gy, gz],
                block: [bx, by, bz],
                shared_mem,
            };
            emit::launch(s, hook, EventKind::LAUNCH, 0, func_id, dims, stream, timing);
        }
    } else {
        marks::abandon(timing);
    }
    rc
}

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const ATTR_COOPERATIVE: u32 = 2;

/// Whether a `CUlaunchConfig`'s attributes ask for a cooperative launch.
///
/// # Safety
/// `config` points at the caller's valid `CUlaunchConfig` (the driver accepted it).
#[inline(always)]
unsafe fn cooperative_attr(config: &CUlaunchConfig) -> bool {
    if config.attrs.is_null() {
        return false;
    }
    let base = config.attrs.cast::<u8>().cast_const();
    let stride = core::mem::size_of::<cudarc::driver::sys::CUlaunchAttribute>();
    // Bounded: a launch carries a handful of attributes.
    for i in 0..(config.numAttrs as usize).min(64) {
        // SAFETY: `attrs` holds `numAttrs` CUlaunchAttribute structs (cuda.h); the id
        // is read as a raw u32 at offset 0 (a Rust enum read could meet an unknown
        // value), the cooperative flag as an int at offset 8 (the value union).
        let (id, value) = unsafe {
            let a = base.add(i * stride);
            (
                a.cast::<u32>().read_unaligned(),
                a.add(8).cast::<i32>().read_unaligned(),
            )
        };
        if id == ATTR_COOPERATIVE && value != 0 {
            return true;
        }
    }
    false
}

/// `cuLaunchKernelEx` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
#[inline(always)]
pub unsafe fn kernel_ex(
    hook: Hook,
    client: Client,
    real: LaunchEx,
    config: *const CUlaunchConfig,
    f: CUfunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    // SAFETY: non-null config points at the caller's CUlaunchConfig, valid for the call.
    let cfg = unsafe { config.as_ref() };
    let grid = cfg.map_or([0; 3], |c| [c.gridDimX, c.gridDimY, c.gridDimZ]);
    let func_id = gate(client, f, grid);
    let stream = cfg.map_or(core::ptr::null_mut(), |c| c.hStream);
    let timing = marks::before_launch(client, hook, stream, || capturing(hook, stream));
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(config, f, params, extra) };
    if !ran(hook, rc, stream) {
        marks::abandon(timing);
    } else {
        if let (Some(s), Some(c)) = (client, cfg) {
            // SAFETY: `c` is the caller's valid config, as above.
            let flags = if unsafe { cooperative_attr(c) } {
                FLAG_COOPERATIVE
            } else {
                0
            };
            let dims = emit::Dims {
                grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
                block: [c.blockDimX, c.blockDimY, c.blockDimZ],
                shared_mem: c.sharedMemBytes,
            };
            emit::launch(
                s,
                hook,
                EventKind::LAUNCH_EX,
                flags,
                func_id,
                dims,
                stream,
                timing,
            );
        } else {
            marks::abandon(timing);
        }
    }
    rc
}

/// `cuLaunchCooperativeKernel` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
#[inline(always)]
#[allow(clippy::too_many_arguments)] // the driver's 10 arguments + hook, session, real
pub unsafe fn cooperative(
    hook: Hook,
    client: Client,
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
    let func_id = gate(client, f, [gx, gy, gz]);
    let timing = marks::before_launch(client, hook, stream, || capturing(hook, stream));
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params) };
    if !ran(hook, rc, stream) {
        marks::abandon(timing);
    } else {
        if let Some(s) = client {
            let dims = emit::Dims {
                grid: [gx, gy, gz],
                block: [bx, by, bz],
                shared_mem,
            };
            emit::launch(
                s,
                hook,
                EventKind::LAUNCH,
                FLAG_COOPERATIVE,
                func_id,
                dims,
                stream,
                timing,
            );
        }
    }
    rc
}
