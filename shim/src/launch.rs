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

use crate::client::spatial::MaskAsk;
use crate::client::{emit, marks, spatial, Client};
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
/// gate for the kernel's key (function and grid) let it go, and the launch's
/// estimate where it may carry the SM reservation's mask (0: it may not).
/// Without: 0, and nothing else.
#[inline(always)]
fn gate(client: Client, f: CUfunction, grid: [c_uint; 3]) -> (u64, MaskAsk) {
    match client {
        Some(s) => {
            let func_id = emit::func_id(s, f);
            let mask = s.gate(kernel_key(func_id, grid));
            (func_id, mask)
        }
        None => (0, MaskAsk::NONE),
    }
}

/// Arms this thread's next launch of `f`, shaped `dims`, with the
/// reservation's mask when the gate allowed it (`ask`), the launch is not
/// being captured into a graph (a
/// captured launch's descriptor, if the driver builds one then, would be
/// replayed with the mask long after inference went idle), `f` was not
/// compiled for thread-block clusters, and its blocks hold their SMs at
/// least the minimum the gate set (a kernel of many short waves gives each
/// SM back within that time, to inference first under MPS client priority).
/// Returns whether it armed.
#[inline(always)]
fn arm(
    ask: MaskAsk,
    hook: Hook,
    client: Client,
    stream: CUstream,
    f: CUfunction,
    dims: &emit::Dims,
) -> bool {
    if ask.est != 0
        && !crate::capture::is_capturing(stream, hook.info().per_thread)
        && !crate::client::clustered(f)
        && client.is_some()
        && spatial::holds_long(f, ask.est, dims, ask.min_block_ns)
    {
        spatial::arm(dims.grid, dims.block);
        true
    } else {
        false
    }
}

/// After the real call of a launch [`arm`] armed (`rc`, what it returned):
/// disarms this thread, and counts the launch in the session's control
/// block if the callback masked it and it launched.
#[inline(always)]
fn disarm(armed: bool, client: Client, rc: CuResult) {
    if armed {
        if let Some(s) = client {
            spatial::disarm(s.control(), rc == CuResult::SUCCESS);
        }
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
    let (func_id, mask) = gate(client, f, [gx, gy, gz]);
    let timing = marks::before_launch(client, hook, stream, || capturing(hook, stream));
    let dims = emit::Dims {
        grid: [gx, gy, gz],
        block: [bx, by, bz],
        shared_mem,
    };
    let armed = arm(mask, hook, client, stream, f, &dims);
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra) };
    marks::launch_returned(timing);
    disarm(armed, client, rc);
    if ran(hook, rc, stream) {
        if let Some(s) = client {
            emit::launch(s, hook, EventKind::LAUNCH, 0, func_id, dims, stream, timing);
        }
    } else {
        marks::abandon(timing);
    }
    rc
}

/// `CU_LAUNCH_ATTRIBUTE_COOPERATIVE`.
const ATTR_COOPERATIVE: u32 = 2;
/// `CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION`.
const ATTR_CLUSTER_DIMENSION: u32 = 4;
/// `CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION` (CUDA 12.8).
const ATTR_PREFERRED_CLUSTER_DIMENSION: u32 = 11;
/// Most attributes read of one launch.
const MAX_ATTRS: usize = 64;

/// What a `CUlaunchConfig`'s attributes ask for, of what the shim minds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Attrs {
    /// A cooperative launch.
    cooperative: bool,
    /// Thread-block clusters of more than one block (asked, or preferred).
    clustered: bool,
    /// More attributes than the shim reads: what the rest ask is unknown.
    unread: bool,
}

/// What a `CUlaunchConfig`'s attributes ask for.
///
/// # Safety
/// `config` is the caller's valid `CUlaunchConfig` (the driver accepts it).
#[inline(always)]
unsafe fn attrs(config: &CUlaunchConfig) -> Attrs {
    let mut a = Attrs::default();
    if config.attrs.is_null() {
        return a;
    }
    let base = config.attrs.cast::<u8>().cast_const();
    let stride = core::mem::size_of::<cudarc::driver::sys::CUlaunchAttribute>();
    // Bounded: a launch carries a handful of attributes.
    a.unread = config.numAttrs as usize > MAX_ATTRS;
    for i in 0..(config.numAttrs as usize).min(MAX_ATTRS) {
        // SAFETY: `attrs` holds `numAttrs` CUlaunchAttribute structs (cuda.h); the id
        // is read as a raw u32 at offset 0 (a Rust enum read could meet an unknown
        // value), the value union's first three 32-bit words from offset 8 (the
        // cooperative flag is the first; a cluster's x, y, z are all three).
        let (id, v) = unsafe {
            let at = base.add(i * stride);
            let w = |k: usize| at.add(8 + 4 * k).cast::<u32>().read_unaligned();
            (at.cast::<u32>().read_unaligned(), [w(0), w(1), w(2)])
        };
        match id {
            ATTR_COOPERATIVE => a.cooperative |= v[0] != 0,
            ATTR_CLUSTER_DIMENSION | ATTR_PREFERRED_CLUSTER_DIMENSION => {
                a.clustered |= v.iter().any(|&d| d > 1);
            }
            _ => {}
        }
    }
    a
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
    let (func_id, mask) = gate(client, f, grid);
    let stream = cfg.map_or(core::ptr::null_mut(), |c| c.hStream);
    let timing = marks::before_launch(client, hook, stream, || capturing(hook, stream));
    // Read once, with a session: the record's flags and the mask both need them.
    // SAFETY: `c` is the caller's valid config, as above.
    let asked = cfg
        .filter(|_| client.is_some())
        .map(|c| unsafe { attrs(c) });
    let dims = cfg.map(|c| emit::Dims {
        grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
        block: [c.blockDimX, c.blockDimY, c.blockDimZ],
        shared_mem: c.sharedMemBytes,
    });
    // A cooperative or clustered launch is never masked (`crate::client::spatial`),
    // nor one with more attributes than the shim reads.
    let armed = match dims {
        Some(d) if asked == Some(Attrs::default()) => arm(mask, hook, client, stream, f, &d),
        _ => false,
    };
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(config, f, params, extra) };
    marks::launch_returned(timing);
    disarm(armed, client, rc);
    if !ran(hook, rc, stream) {
        marks::abandon(timing);
    } else {
        if let (Some(s), Some(dims)) = (client, dims) {
            let flags = if asked.is_some_and(|a| a.cooperative) {
                FLAG_COOPERATIVE
            } else {
                0
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
    // Never masked: every block of a cooperative grid must be resident at once.
    let (func_id, _) = gate(client, f, [gx, gy, gz]);
    let timing = marks::before_launch(client, hook, stream, || capturing(hook, stream));
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params) };
    marks::launch_returned(timing);
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
