//! Copies and memsets of one contiguous range: host to device, device to
//! device (unified addressing and peer copies included), device to host, and
//! memsets of 8, 16 or 32 bit elements. (`cuMemcpyDtoHAsync` needs no
//! operation: its hook forwards it inside the submission bracket, and it writes
//! host memory only.)
//!
//! Each write into device memory first goes through dedup's copy-on-write
//! check of its destination (`crate::dedup::before_write`: one relaxed load
//! without dedup); the hook around it has already entered the submission
//! bracket (`crate::dedup::quiesce`). With a coordinator session, host-to-device
//! copies are reported (COPY_H2D) and the synchronous device-to-host copy is
//! reported as a sync (`super::synchronizing`).

use crate::client::{emit, Client};
use crate::table::Hook;
use crate::types::{CUcontext, CUdeviceptr, CUstream, CuResult};
use core::ffi::c_void;
use tandem_proto::record::FLAG_ASYNC;
use tandem_proto::EventKind;

/// `cuMemcpyHtoD_v2` and its `_ptds` form.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_h2d(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, *const c_void, usize) -> CuResult,
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> CuResult {
    crate::dedup::before_write(dst, bytes);
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dst, src, bytes) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        emit::memory(s, hook, EventKind::COPY_H2D, 0, bytes as u64, dst, 0);
    }
    rc
}

/// `cuMemcpyHtoDAsync_v2` and its `_ptsz` form (records carry `FLAG_ASYNC`).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_h2d_async(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, *const c_void, usize, CUstream) -> CuResult,
    dst: CUdeviceptr,
    src: *const c_void,
    bytes: usize,
    stream: CUstream,
) -> CuResult {
    crate::dedup::before_write(dst, bytes);
    // SAFETY: forwarded unchanged.
    let rc = unsafe { real(dst, src, bytes, stream) };
    if let (Some(s), CuResult::SUCCESS) = (client, rc) {
        emit::memory(
            s,
            hook,
            EventKind::COPY_H2D,
            FLAG_ASYNC,
            bytes as u64,
            dst,
            stream as u64,
        );
    }
    rc
}

/// `cuMemcpyDtoD_v2`, `cuMemcpy` and their `_ptds` forms: forwarded after
/// dedup's copy-on-write check of the destination (a host destination of
/// `cuMemcpy` is simply not dedup memory). Not reported to the coordinator.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_d2d(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize) -> CuResult,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
) -> CuResult {
    crate::dedup::before_write(dst, bytes);
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, src, bytes) }
}

/// `cuMemcpyDtoDAsync_v2`, `cuMemcpyAsync` and their `_ptsz` forms (see [`copy_d2d`]).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_d2d_async(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, CUdeviceptr, usize, CUstream) -> CuResult,
    dst: CUdeviceptr,
    src: CUdeviceptr,
    bytes: usize,
    stream: CUstream,
) -> CuResult {
    crate::dedup::before_write(dst, bytes);
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, src, bytes, stream) }
}

/// `cuMemsetD8/16/32_v2` and their `_ptds` forms, `T` the element type: `n`
/// elements at `dst`, after dedup's copy-on-write check.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn memset<T: Copy>(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, T, usize) -> CuResult,
    dst: CUdeviceptr,
    value: T,
    n: usize,
) -> CuResult {
    crate::dedup::before_write(dst, n.saturating_mul(core::mem::size_of::<T>()));
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, value, n) }
}

/// `cuMemsetD8/16/32Async` and their `_ptsz` forms (see [`memset`]).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn memset_async<T: Copy>(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, T, usize, CUstream) -> CuResult,
    dst: CUdeviceptr,
    value: T,
    n: usize,
    stream: CUstream,
) -> CuResult {
    crate::dedup::before_write(dst, n.saturating_mul(core::mem::size_of::<T>()));
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, value, n, stream) }
}

/// `cuMemcpyDtoH_v2` and its `_ptds` form: a synchronous copy, reported as a sync.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_d2h(
    hook: Hook,
    client: Client,
    real: unsafe extern "C" fn(*mut c_void, CUdeviceptr, usize) -> CuResult,
    dst: *mut c_void,
    src: CUdeviceptr,
    bytes: usize,
) -> CuResult {
    super::synchronizing(client, hook, 0, 0, || {
        // SAFETY: forwarded unchanged.
        unsafe { real(dst, src, bytes) }
    })
}

/// `cuMemcpyPeer` and its `_ptds` form: a device-to-device copy between two
/// contexts, forwarded after dedup's copy-on-write check of the destination
/// (one address space: dedup finds its memory by address, whatever the
/// context). Not reported to the coordinator.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_peer(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, usize) -> CuResult,
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    bytes: usize,
) -> CuResult {
    crate::dedup::before_write(dst, bytes);
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, dst_ctx, src, src_ctx, bytes) }
}

/// `cuMemcpyPeerAsync` and its `_ptsz` form (see [`copy_peer`]).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_peer_async(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(
        CUdeviceptr,
        CUcontext,
        CUdeviceptr,
        CUcontext,
        usize,
        CUstream,
    ) -> CuResult,
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    bytes: usize,
    stream: CUstream,
) -> CuResult {
    crate::dedup::before_write(dst, bytes);
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, dst_ctx, src, src_ctx, bytes, stream) }
}
