//! Stream capture: launches made while a stream is captured into a CUDA graph
//! do not run then; they run each time the graph is launched.
//!
//! Counting them as executed kernels would disagree with any independent count
//! (CUPTI) and would make the scheduler gate work that never reaches the GPU. The
//! begin/end-capture hooks keep a count of captures in progress; only while it is
//! nonzero does a launch ask the driver whether its stream is capturing, so the
//! launch fast path without captures costs one relaxed load.

use crate::driver::{self, Support};
use crate::table::Hook;
use crate::types::{CUgraph, CUgraphNode, CUstream, CuResult};
use core::ffi::{c_uint, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Captures begun minus captures ended (may overstate; never understates for long).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// `CU_STREAM_CAPTURE_STATUS_NONE`.
const STATUS_NONE: u32 = 0;

type IsCapturing = unsafe extern "C" fn(CUstream, *mut u32) -> CuResult;

/// Whether a launch on `stream` is being recorded into a graph instead of run.
/// `per_thread` says how the launch's variant reads stream 0.
#[inline(always)]
pub fn is_capturing(stream: CUstream, per_thread: bool) -> bool {
    if ACTIVE.load(Ordering::Relaxed) == 0 {
        return false;
    }
    is_capturing_slow(stream, per_thread)
}

#[cold]
fn is_capturing_slow(stream: CUstream, per_thread: bool) -> bool {
    let which = if per_thread {
        Support::StreamIsCapturingPtsz
    } else {
        Support::StreamIsCapturing
    };
    let Some(f) = driver::support(which) else {
        return false;
    };
    // SAFETY: the driver's cuStreamIsCapturing{,_ptsz} has this signature.
    let f = unsafe { core::mem::transmute::<usize, IsCapturing>(f) };
    let mut status = STATUS_NONE;
    crate::counters::support_call(which);
    // SAFETY: `stream` is the caller's launch stream; `status` is ours.
    let rc = unsafe { f(stream, &mut status) };
    rc == CuResult::SUCCESS && status != STATUS_NONE
}

fn begun(rc: CuResult) -> CuResult {
    if rc == CuResult::SUCCESS {
        ACTIVE.fetch_add(1, Ordering::Relaxed);
    }
    rc
}

/// `cuStreamBeginCapture` (CUDA 10.0, no mode) and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn begin_v1(
    _: Hook,
    _: crate::client::Client,
    real: unsafe extern "C" fn(CUstream) -> CuResult,
    stream: CUstream,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    begun(unsafe { real(stream) })
}

/// `cuStreamBeginCapture_v2` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn begin_v2(
    _: Hook,
    _: crate::client::Client,
    real: unsafe extern "C" fn(CUstream, c_uint) -> CuResult,
    stream: CUstream,
    mode: c_uint,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    begun(unsafe { real(stream, mode) })
}

type BeginToGraph = unsafe extern "C" fn(
    CUstream,
    CUgraph,
    *const CUgraphNode,
    *const c_void,
    usize,
    c_uint,
) -> CuResult;

/// `cuStreamBeginCaptureToGraph` (CUDA 12.3) and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn begin_to_graph(
    _: Hook,
    _: crate::client::Client,
    real: BeginToGraph,
    stream: CUstream,
    graph: CUgraph,
    deps: *const CUgraphNode,
    edges: *const c_void,
    n: usize,
    mode: c_uint,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    begun(unsafe { real(stream, graph, deps, edges, n, mode) })
}

/// `cuStreamEndCapture` and its `_ptsz` form. A capture ends when this succeeds,
/// and also when it fails on a capturing stream (the capture was invalidated).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn end(
    hook: Hook,
    _: crate::client::Client,
    real: unsafe extern "C" fn(CUstream, *mut CUgraph) -> CuResult,
    stream: CUstream,
    graph: *mut CUgraph,
) -> CuResult {
    let was = is_capturing(stream, hook.info().per_thread);
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(stream, graph) };
    if was || rc == CuResult::SUCCESS {
        let _ = ACTIVE.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }
    rc
}
