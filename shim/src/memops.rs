//! Allocations, frees, copies, memsets and synchronisations: forwarded
//! unchanged; with a coordinator session, reported in the ring. The copies and
//! memsets live in [`copies`] (one contiguous range) and [`pitched`] (2D and
//! 3D copies, pitched memsets).
//!
//! Without a session each body is the real call and one test of `client`.
//! Weight dedup (`crate::dedup`) hooks in here too: `cuMemAlloc_v2` of a client
//! allowed to share is VMM-backed, `cuMemFree_v2` releases such memory, and
//! every copy or memset into device memory first breaks sharing of what it
//! overwrites (copy-on-write). Without dedup that is one relaxed load per call.
//! With one: ALLOC (bytes, address) and FREE (address) after a successful call
//! (for the program's own `cuMemCreate` / `cuMemRelease` of device memory, by
//! handle, flagged `FLAG_VMM_HANDLE`),
//! COPY_H2D (bytes, destination) after a successful copy, and SYNC_BEGIN /
//! SYNC_END around every synchronising call (stream, context, event, and the
//! synchronous device-to-host copy). A stream or event query that finds work
//! still in flight counts, in an inference client, as activity on its GPU's
//! board (a host that waits by polling). Nothing here waits on the coordinator.

pub mod copies;
pub mod pitched;

use crate::client::{emit, Client};
use crate::table::Hook;
use crate::types::{
    CUcontext, CUdeviceptr, CUevent, CUmemAllocationProp, CUmemGenericAllocationHandle,
    CUmemoryPool, CUstream, CuResult,
};
use core::ffi::c_uint;
use core::sync::atomic::{AtomicBool, Ordering};
use tandem_proto::record::{FLAG_CONTEXT_SYNC, FLAG_VMM_HANDLE};
use tandem_proto::EventKind;

/// The device address (or handle) the driver wrote to `dptr` on success.
///
/// # Safety
/// `dptr` is NULL or the caller's out-pointer the driver just wrote.
#[inline(always)]
unsafe fn written(dptr: *mut CUdeviceptr) -> u64 {
    if dptr.is_null() {
        0
    } else {
        // SAFETY: per this function's contract.
        unsafe { dptr.read() }
    }
}

/// `cuMemAlloc_v2`.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn alloc(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize) -> CuResult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
) -> CuResult {
    if let Some(s) = client.filter(|s| s.share_weights && !dptr.is_null()) {
        if let Some(addr) = crate::dedup::alloc(bytes) {
            // SAFETY: `dptr` is the caller's non-NULL out-pointer.
            unsafe { dptr.write(addr) };
            emit::memory(s, hook, EventKind::ALLOC, 0, bytes as u64, addr, 0);
            return CuResult::SUCCESS;
        }
    }
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dptr, bytes) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        // SAFETY: the driver wrote the new address on success.
        let addr = unsafe { written(dptr) };
        emit::memory(s, hook, EventKind::ALLOC, 0, bytes as u64, addr, 0);
    }
    rc
}

/// `cuMemAllocPitch_v2`: reports `pitch * height` bytes.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn alloc_pitch(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(*mut CUdeviceptr, *mut usize, usize, usize, c_uint) -> CuResult,
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dptr, pitch, width, height, elem) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        // SAFETY: the driver wrote both out-parameters on success.
        let (addr, pitch) = unsafe {
            (
                written(dptr),
                if pitch.is_null() { width } else { pitch.read() },
            )
        };
        let bytes = (pitch as u64).saturating_mul(height as u64);
        emit::memory(s, hook, EventKind::ALLOC, 0, bytes, addr, 0);
    }
    rc
}

/// `cuMemAllocAsync` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn alloc_async(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, CUstream) -> CuResult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dptr, bytes, stream) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        // SAFETY: the driver wrote the new address on success.
        let addr = unsafe { written(dptr) };
        emit::memory(
            s,
            hook,
            EventKind::ALLOC,
            0,
            bytes as u64,
            addr,
            stream as u64,
        );
    }
    rc
}

/// `cuMemAllocFromPoolAsync` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn alloc_from_pool(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(*mut CUdeviceptr, usize, CUmemoryPool, CUstream) -> CuResult,
    dptr: *mut CUdeviceptr,
    bytes: usize,
    pool: CUmemoryPool,
    stream: CUstream,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dptr, bytes, pool, stream) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        // SAFETY: the driver wrote the new address on success.
        let addr = unsafe { written(dptr) };
        emit::memory(
            s,
            hook,
            EventKind::ALLOC,
            0,
            bytes as u64,
            addr,
            stream as u64,
        );
    }
    rc
}

/// `cuMemFree_v2`.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn free(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUdeviceptr) -> CuResult,
    dptr: CUdeviceptr,
) -> CuResult {
    // A dedup-backed allocation is released by dedup, a follow-mode region by
    // follow, anything else by the driver.
    let rc = crate::dedup::free(dptr)
        .or_else(|| crate::follow::free(dptr))
        // SAFETY: forwarded unchanged.
        .unwrap_or_else(|| unsafe { real(dptr) });
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        emit::memory(s, hook, EventKind::FREE, 0, 0, dptr, 0);
    }
    rc
}

/// `cuMemCreate` by the program (the shim's own VMM calls do not come
/// here): device memory it maps itself (PyTorch's expandable segments,
/// JAX's allocator). Reported as an ALLOC of the handle
/// ([`FLAG_VMM_HANDLE`]), so the coordinator's per-job memory includes it;
/// host memory made this way is not reported. Weight dedup does not cover it,
/// which a job that asked for sharing is told once.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn create(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(
        *mut CUmemGenericAllocationHandle,
        usize,
        *const CUmemAllocationProp,
        u64,
    ) -> CuResult,
    handle: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: u64,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(handle, size, prop, flags) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        // SAFETY: the call succeeded, so the driver read `*prop`.
        if unsafe { crate::vmm::prop_is_device(prop) } {
            // SAFETY: the driver wrote the handle on success.
            let h = unsafe { written(handle) };
            emit::memory(
                s,
                hook,
                EventKind::ALLOC,
                FLAG_VMM_HANDLE,
                size as u64,
                h,
                0,
            );
            if s.share_weights {
                not_deduplicated(size);
            }
        }
    }
    rc
}

/// Says once that memory the program creates itself is not deduplicated.
#[cold]
fn not_deduplicated(size: usize) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        crate::log!(
            Warn,
            "weight sharing is on (TANDEM_SHARE_WEIGHTS), but this process also creates device \
             memory itself with cuMemCreate ({} MiB the first time; e.g. PyTorch with \
             PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, or JAX); such memory is not \
             deduplicated (only cuMemAlloc memory is)",
            size >> 20
        );
    }
}

/// `cuMemRelease` by the program: the FREE of its handle.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn release(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUmemGenericAllocationHandle) -> CuResult,
    handle: CUmemGenericAllocationHandle,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(handle) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        emit::memory(s, hook, EventKind::FREE, FLAG_VMM_HANDLE, 0, handle, 0);
    }
    rc
}

/// `cuMemFreeAsync` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn free_async(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, CUstream) -> CuResult,
    dptr: CUdeviceptr,
    stream: CUstream,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dptr, stream) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        emit::memory(s, hook, EventKind::FREE, 0, 0, dptr, stream as u64);
    }
    rc
}

/// `cuStreamSynchronize` and its `_ptsz` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn stream_sync(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUstream) -> CuResult,
    stream: CUstream,
) -> CuResult {
    synchronizing(client, hook, 0, stream as u64, || {
        // SAFETY: forwarded unchanged.
        unsafe { real(stream) }
    })
}

/// `cuCtxSynchronize`.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn ctx_sync(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn() -> CuResult,
) -> CuResult {
    synchronizing(client, hook, FLAG_CONTEXT_SYNC, 0, || {
        // SAFETY: forwarded unchanged.
        unsafe { real() }
    })
}

/// `cuCtxSynchronize_v2` (CUDA 13).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn ctx_sync_v2(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUcontext) -> CuResult,
    ctx: CUcontext,
) -> CuResult {
    synchronizing(client, hook, FLAG_CONTEXT_SYNC, 0, || {
        // SAFETY: forwarded unchanged.
        unsafe { real(ctx) }
    })
}

/// `cuEventSynchronize`.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn event_sync(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUevent) -> CuResult,
    event: CUevent,
) -> CuResult {
    synchronizing(client, hook, 0, 0, || {
        // SAFETY: forwarded unchanged.
        unsafe { real(event) }
    })
}

/// Runs a synchronising call between SYNC_BEGIN and SYNC_END records (when a
/// coordinator session exists): the coordinator learns when the work drained.
///
/// An inference client's sync also holds its GPU's board open while it
/// waits, as an explicit request does: a thread blocked in a sync has work
/// in flight on the GPU, so the GPU counts as inference-active until the
/// sync returns (and a hold after), not only a hold after its last launch.
/// A GPU-bound request (a CUDA graph, or kernels queued far ahead of the
/// GPU) runs longer than that hold after its last launch; without this,
/// training's launches in its tail went unmasked and unbounded.
#[inline(always)]
fn synchronizing(
    client: Client,
    hook: Hook,
    flags: u16,
    stream: u64,
    call: impl FnOnce() -> CuResult,
) -> CuResult {
    let mut charged = 0;
    if let Some(s) = client {
        // What was charged before the sync has completed when it returns
        // (one timeline per client: a stream's sync is taken for all).
        charged = s.control().charged_ns();
        emit::sync(s, hook, EventKind::SYNC_BEGIN, flags, stream);
        s.request_mark(true);
    }
    let rc = call();
    if let Some(s) = client {
        s.request_mark(false);
        if rc == CuResult::SUCCESS {
            s.control().complete_through(charged);
        }
        emit::sync(s, hook, EventKind::SYNC_END, flags, stream);
        crate::client::marks::after_sync(s);
    }
    rc
}

/// `cuStreamQuery`, its `_ptsz` form and `cuEventQuery`: forwarded. A query
/// answered `CUDA_ERROR_NOT_READY` found the caller's work still on the GPU,
/// so in an inference client it announces activity on the GPU board, as a
/// launch does (a bump at most every quarter of the hold): a host that waits
/// by polling (TensorFlow's event manager, `torch.cuda.Event.query` loops)
/// keeps the GPU inference-active until its work is done, as one blocked in a
/// sync does ([`synchronizing`]), instead of only for the hold after its last
/// launch; as for a sync, for at most `tandem_proto::board::OPEN_STALE_NS`
/// (10 s) after the last launch, so a job polling for work that never
/// completes does not hold training back for good. Training clients pay one
/// load of their class on that answer.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn query<T: Copy>(
    _hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(T) -> CuResult,
    handle: T,
) -> CuResult {
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(handle) };
    if rc == CuResult::NOT_READY {
        if let Some(s) = client {
            s.work_in_flight();
        }
    }
    rc
}
