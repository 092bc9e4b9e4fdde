//! Device memory as host memory: `cuMemAlloc*` allocations, range validation (allocations and
//! mapped VMM ranges), copies, memsets, `cuMemGetInfo`.
//!
//! A `CUdeviceptr` is a host address. Every copy, memset and kernel checks that its range lies
//! inside one live allocation or inside mapped VMM ranges with the access it needs.

use std::alloc::Layout;
use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};

use crate::state::{lock, State};
use crate::streams::{now_ns, wait_until};
use crate::types::*;

/// Alignment of `cuMemAlloc` results (the real driver guarantees at least 256 bytes).
const ALLOC_ALIGN: usize = 256;
/// Row alignment of `cuMemAllocPitch`.
const PITCH_ALIGN: usize = 512;
/// Default for `FAKECUDA_TOTAL_MEM`: 80 GiB.
const DEFAULT_TOTAL_MEM: u64 = 80 << 30;
/// The device's default memory pool (`cuDeviceGetDefaultMemPool`): a constant handle.
const DEFAULT_POOL: usize = 0x7100;

/// The device's total memory: `FAKECUDA_TOTAL_MEM` (bytes) or 80 GiB.
pub fn total_mem() -> u64 {
    std::env::var("FAKECUDA_TOTAL_MEM")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_TOTAL_MEM)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Why a range may not be touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeFault {
    /// Not inside a live allocation or mapped VMM ranges.
    Unmapped,
    /// Mapped, but without the access needed (e.g. a write into a read-only mapping).
    Protected,
}

pub struct Memory {
    /// start address -> size of every live `cuMemAlloc*` allocation.
    allocs: BTreeMap<u64, usize>,
}

impl Memory {
    pub const fn new() -> Self {
        Self {
            allocs: BTreeMap::new(),
        }
    }

    /// Whether `[addr, addr + len)` lies inside one live allocation.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        match self.allocs.range(..=addr).next_back() {
            Some((&start, &size)) => end <= start.saturating_add(size as u64),
            None => false,
        }
    }
}

/// Checks that `[addr, addr + len)` may be accessed as `access`. A zero-length range is fine.
pub fn check_range(st: &State, addr: u64, len: usize, access: Access) -> Result<(), RangeFault> {
    if len == 0 || st.memory.contains(addr, len) {
        return Ok(());
    }
    st.vmm.check_range(addr, len, access)
}

/// `check_range` for copies and memsets: any fault is `CUDA_ERROR_INVALID_VALUE`, as the real
/// driver answers a copy into a read-only mapping.
fn check_copy_range(st: &State, addr: u64, len: usize, access: Access) -> CuResult<()> {
    check_range(st, addr, len, access).map_err(|_| CUDA_ERROR_INVALID_VALUE)
}

/// The host pointer behind a fake device address. Every address the fake hands out had its
/// provenance exposed when it was created (`expose_provenance`), so this is the matching cast.
pub fn device_ptr(addr: CUdeviceptr) -> *mut u8 {
    std::ptr::with_exposed_provenance_mut(addr as usize)
}

fn alloc_bytes(st: &mut State, size: usize) -> CuResult<u64> {
    if size == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if st.bytes_allocated.saturating_add(size as u64) > total_mem() {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let layout =
        Layout::from_size_align(size, ALLOC_ALIGN).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: `layout` has a non-zero size.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let addr = p.expose_provenance() as u64;
    st.memory.allocs.insert(addr, size);
    st.bytes_allocated = st.bytes_allocated.saturating_add(size as u64);
    Ok(addr)
}

fn free_bytes(st: &mut State, addr: u64) -> CuResult<()> {
    let size = st
        .memory
        .allocs
        .remove(&addr)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let layout =
        Layout::from_size_align(size, ALLOC_ALIGN).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    // SAFETY: `addr` was returned by `alloc_zeroed` with exactly this layout (same size, same
    // alignment) and is removed from the table, so it is freed once.
    unsafe { std::alloc::dealloc(device_ptr(addr), layout) };
    st.bytes_allocated = st.bytes_allocated.saturating_sub(size as u64);
    Ok(())
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
pub unsafe fn mem_alloc(dptr: *mut CUdeviceptr, size: usize) -> CuResult<()> {
    if dptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    st.require_ctx()?;
    let addr = alloc_bytes(&mut st, size)?;
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(dptr, addr) }
}

/// # Safety
/// `dptr` and `pitch` must be NULL or valid for a write.
pub unsafe fn mem_alloc_pitch(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: c_uint,
) -> CuResult<()> {
    if dptr.is_null() || pitch.is_null() || width == 0 || height == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !matches!(element_size, 4 | 8 | 16) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let row = width
        .checked_next_multiple_of(PITCH_ALIGN)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    let size = row.checked_mul(height).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
    let mut st = lock();
    st.require_ctx()?;
    let addr = alloc_bytes(&mut st, size)?;
    // SAFETY: both non-NULL, caller contract.
    unsafe {
        write_out(dptr, addr)?;
        write_out(pitch, row)
    }
}

/// `cuMemAllocAsync` (and `cuMemAllocFromPoolAsync` with `pool` set): stream-ordered on a real
/// GPU, immediate here (the memory exists before any later work on the stream can touch it).
///
/// # Safety
/// `dptr` must be NULL or valid for a write.
pub unsafe fn mem_alloc_async(
    dptr: *mut CUdeviceptr,
    size: usize,
    pool: Option<Handle>,
    stream: Handle,
    per_thread_default: bool,
) -> CuResult<()> {
    if dptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if let Some(pool) = pool {
        if key(pool) != DEFAULT_POOL {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
    }
    let mut st = lock();
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    let addr = alloc_bytes(&mut st, size)?;
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(dptr, addr) }
}

pub fn mem_free(dptr: CUdeviceptr) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    free_bytes(&mut st, dptr)
}

/// `cuMemFreeAsync`: freed at once (effects of earlier work were applied at launch).
pub fn mem_free_async(dptr: CUdeviceptr, stream: Handle, per_thread_default: bool) -> CuResult<()> {
    let mut st = lock();
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    free_bytes(&mut st, dptr)
}

/// # Safety
/// `free` and `total` must be NULL or valid for a write.
pub unsafe fn mem_get_info(free: *mut usize, total: *mut usize) -> CuResult<()> {
    if free.is_null() || total.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let st = lock();
    st.require_ctx()?;
    let t = total_mem();
    let f = t.saturating_sub(st.bytes_allocated);
    let clamp = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    // SAFETY: both non-NULL, caller contract.
    unsafe {
        write_out(free, clamp(f))?;
        write_out(total, clamp(t))
    }
}

/// # Safety
/// `pool` must be NULL or valid for a write.
pub unsafe fn device_get_default_mem_pool(pool: *mut Handle, dev: CUdevice) -> CuResult<()> {
    if dev != 0 {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    // SAFETY: forwarded caller contract.
    unsafe { write_out(pool, handle(DEFAULT_POOL)) }
}

/// Queues a zero-length operation on the stream and, for the synchronous API forms, waits for
/// the stream to drain (as `cuMemcpyHtoD`/`cuMemcpyDtoH`/`cuMemsetD*` do).
fn finish_on_stream(
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
    let st = lock();
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    if n > 0 {
        if src.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        check_copy_range(&st, dst, n, Access::Write)?;
        // SAFETY: `dst..dst+n` lies in live writable fake-device memory (checked, and the lock
        // keeps it live); `src` is valid for `n` reads (caller contract). `copy` tolerates
        // overlap.
        unsafe { std::ptr::copy(src.cast::<u8>(), device_ptr(dst), n) };
    }
    finish_on_stream(st, stream, per_thread_default, sync)
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
    let st = lock();
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    if n > 0 {
        if dst.is_null() {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        check_copy_range(&st, src, n, Access::Read)?;
        // SAFETY: `src..src+n` lies in live readable fake-device memory (checked, kept live by
        // the lock); `dst` is valid for `n` writes (caller contract).
        unsafe { std::ptr::copy(device_ptr(src).cast_const(), dst.cast::<u8>(), n) };
    }
    finish_on_stream(st, stream, per_thread_default, sync)
}

/// `cuMemsetD8/D16/D32` (sync or async): `count` elements of `elem` bytes set to `value`.
pub fn memset(
    dst: CUdeviceptr,
    value: u32,
    elem: usize,
    count: usize,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    let st = lock();
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    if !dst.is_multiple_of(elem as u64) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let bytes = count.checked_mul(elem).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if bytes > 0 {
        check_copy_range(&st, dst, bytes, Access::Write)?;
        let base = device_ptr(dst);
        // SAFETY: `dst..dst+bytes` lies in live writable fake-device memory (checked, kept live
        // by the lock); every write below stays inside it.
        unsafe {
            match elem {
                1 => std::ptr::write_bytes(base, value as u8, bytes),
                2 => {
                    for i in 0..count {
                        base.cast::<u16>().add(i).write_unaligned(value as u16);
                    }
                }
                _ => {
                    for i in 0..count {
                        base.cast::<u32>().add(i).write_unaligned(value);
                    }
                }
            }
        }
    }
    finish_on_stream(st, stream, per_thread_default, sync)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contains_checks_whole_range_inside_one_allocation() {
        let mut m = Memory::new();
        m.allocs.insert(0x1000, 0x100);
        m.allocs.insert(0x1100, 0x100);
        assert!(m.contains(0x1000, 0x100));
        assert!(m.contains(0x10ff, 1));
        assert!(!m.contains(0x10ff, 2), "straddles two allocations");
        assert!(!m.contains(0xfff, 1));
        assert!(!m.contains(0x1200, 1));
        assert!(!m.contains(u64::MAX, 2), "overflow");
    }
}
