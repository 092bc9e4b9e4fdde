//! Copies and memsets of one range: host to device, device to host, device to device (peer
//! copies included), unified addressing, each range checked and the work timed on its stream.
//! (2D and 3D copies and pitched memsets are `pitched`, built on the checks here.)
//!
//! `cuMemcpy`/`cuMemcpyAsync` (unified addressing) take either side as a device or a host
//! address: a side is device memory when its address lies in a live allocation or in a reserved
//! VMM range (mapped or not), and is then checked like any device range; otherwise it is a host
//! pointer the caller vouches for.

use std::ffi::c_void;

use crate::clock::{now_ns, wait_until};
use crate::state::memory::{device_ptr, Access};
use crate::state::{check_range, lock, State};
use crate::types::*;

/// `check_range` for copies and memsets: any fault is `CUDA_ERROR_INVALID_VALUE`, as the real
/// driver answers a copy into a read-only mapping.
fn check_copy_range(st: &State, addr: u64, len: usize, access: Access) -> CuResult<()> {
    check_range(st, addr, len, access).map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

/// Whether `addr` is a device address the fake knows: inside a live allocation or a reserved VMM
/// range (mapped or not). Anything else is, to the unified-addressing copies, a host address.
fn is_device_addr(st: &State, addr: u64) -> bool {
    st.memory.contains(addr, 1) || st.vmm.is_reserved(addr)
}

pub(crate) fn finish_on_stream(
    mut st: std::sync::MutexGuard<'static, State>,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    let s = st.streams.resolve(stream, per_thread_default)?;
    let (_, end) = st.streams.enqueue(s, now_ns(), 0);
    drop(st);
    if sync {
        wait_until(end);
    }
    Ok(())
}

/// `cuMemcpyHtoD*`. `sync` selects the synchronous form (then `stream` is NULL).
///
/// # Safety
/// `src` must be NULL or valid for `n` bytes of reads.
pub unsafe fn memcpy_htod(
    dst: CUdeviceptr,
    src: *const c_void,
    n: usize,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    let src = src.expose_provenance() as u64;
    // SAFETY: the source is a host pointer valid for `n` reads (caller contract).
    unsafe {
        memcpy(
            dst,
            src,
            n,
            CopyKind::HostToDevice,
            stream,
            per_thread_default,
            sync,
        )
    }
}

/// `cuMemcpyDtoH*`.
///
/// # Safety
/// `dst` must be NULL or valid for `n` bytes of writes.
pub unsafe fn memcpy_dtoh(
    dst: *mut c_void,
    src: CUdeviceptr,
    n: usize,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    let dst = dst.expose_provenance() as u64;
    // SAFETY: the destination is a host pointer valid for `n` writes (caller contract).
    unsafe {
        memcpy(
            dst,
            src,
            n,
            CopyKind::DeviceToHost,
            stream,
            per_thread_default,
            sync,
        )
    }
}

/// How a copy names its sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyKind {
    /// `cuMemcpyHtoD*`: a host source, a device destination.
    HostToDevice,
    /// `cuMemcpyDtoH*`: a device source, a host destination.
    DeviceToHost,
    /// `cuMemcpyDtoD*`: both sides must be device memory.
    DeviceToDevice,
    /// `cuMemcpy`/`cuMemcpyAsync`: each side is device memory if the fake knows its address
    /// (see [`is_device_addr`]), else a host pointer.
    Unified,
}

impl CopyKind {
    /// Whether (source, destination) are device memory; `None`: decided by the address.
    fn sides(self) -> (Option<bool>, Option<bool>) {
        match self {
            CopyKind::HostToDevice => (Some(false), Some(true)),
            CopyKind::DeviceToHost => (Some(true), Some(false)),
            CopyKind::DeviceToDevice => (Some(true), Some(true)),
            CopyKind::Unified => (None, None),
        }
    }
}

/// Checks one side of a copy (`device`: whether it is device memory, `None` to decide by the
/// address); returns the host pointer to copy through.
pub(crate) fn copy_side(
    st: &State,
    addr: u64,
    n: usize,
    access: Access,
    device: Option<bool>,
) -> CuResult<*mut u8> {
    if device.unwrap_or_else(|| is_device_addr(st, addr)) {
        check_copy_range(st, addr, n, access)?;
        return Ok(device_ptr(addr));
    }
    if addr == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // A host pointer: the caller vouches for it (cuda.h contract).
    Ok(std::ptr::with_exposed_provenance_mut(addr as usize))
}

/// Every copy: `cuMemcpyHtoD*`/`DtoH*` (through the wrappers above), `cuMemcpyDtoD*`
/// (`kind` `DeviceToDevice`) and `cuMemcpy`/`cuMemcpyAsync` (`Unified`), sync or async: the source must be readable and the destination writable (a read-only VMM mapping
/// refuses), else `CUDA_ERROR_INVALID_VALUE`. The bytes move at the call; the copy is ordered on
/// the stream like the other copies, and the synchronous forms wait for the stream.
///
/// # Safety
/// A side that is not device memory the fake knows must be a host pointer valid for `n` bytes
/// (reads for `src`, writes for `dst`).
pub unsafe fn memcpy(
    dst: CUdeviceptr,
    src: CUdeviceptr,
    n: usize,
    kind: CopyKind,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    let st = lock();
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    if n > 0 {
        let (src_device, dst_device) = kind.sides();
        let from = copy_side(&st, src, n, Access::Read, src_device)?;
        let to = copy_side(&st, dst, n, Access::Write, dst_device)?;
        if moves_data() {
            // SAFETY: each side is either checked live fake-device memory with the access it
            // needs (kept live by the lock) or a host pointer valid for `n` bytes (caller
            // contract). `copy` tolerates overlap.
            unsafe { std::ptr::copy(from.cast_const(), to, n) };
        }
    }
    finish_on_stream(st, stream, per_thread_default, sync)
}

/// `cuMemcpyPeer*`: a device-to-device copy between two contexts. The fake has one device, so
/// both must be valid contexts of it (else `CUDA_ERROR_INVALID_CONTEXT`); the copy is then
/// checked and moved as `cuMemcpyDtoD`'s.
#[allow(clippy::too_many_arguments)]
pub fn memcpy_peer(
    dst: CUdeviceptr,
    dst_ctx: Handle,
    src: CUdeviceptr,
    src_ctx: Handle,
    n: usize,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    {
        let st = lock();
        st.contexts.check(key(dst_ctx))?;
        st.contexts.check(key(src_ctx))?;
    }
    // SAFETY: both sides are device memory (DeviceToDevice): checked, never host pointers.
    unsafe {
        memcpy(
            dst,
            src,
            n,
            CopyKind::DeviceToDevice,
            stream,
            per_thread_default,
            sync,
        )
    }
}

/// Whether copies move their bytes: yes unless `FAKECUDA_COPY_NO_DATA=1`, which a replay of a
/// trace sets (tests/hosts/replay.c). There a copy stands for a real GPU's (an async copy
/// from pinned memory returns at once), and moving 9.6 MB on the CPU took 1.5 ms inside the
/// call that the capture measured as the job's own host time (ResNet50 b32's request, whose
/// source has 68 us of CPU around its input copy). Checks and timing are the same either way.
pub(crate) fn moves_data() -> bool {
    static MOVES: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MOVES.get_or_init(|| std::env::var_os("FAKECUDA_COPY_NO_DATA").is_none_or(|v| v != "1"))
}
