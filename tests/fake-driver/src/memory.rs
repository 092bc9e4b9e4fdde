//! Device memory as host memory: `cuMemAlloc*` allocations and frees (plain, pitched, async,
//! from a pool), `cuMemGetInfo`, the default memory pool.
//!
//! A `CUdeviceptr` is a host address (`crate::state::memory`). Every copy, memset
//! (`crate::copies`) and kernel (`crate::execute`) checks that its range lies inside one live
//! allocation or inside mapped VMM ranges with the access it needs (`crate::state::check_range`).

use std::alloc::Layout;
use std::ffi::c_uint;

use crate::state::memory::{device_ptr, total_mem};
use crate::state::{lock, State};
use crate::types::*;

/// Alignment of `cuMemAlloc` results (the real driver guarantees at least 256 bytes).
const ALLOC_ALIGN: usize = 256;
/// Row alignment of `cuMemAllocPitch`.
const PITCH_ALIGN: usize = 512;
/// The device's default memory pool (`cuDeviceGetDefaultMemPool`): a constant handle.
const DEFAULT_POOL: usize = 0x7100;

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
    // `bytes_allocated` counts `cuMemAlloc*` and `cuMemCreate` memory this process still
    // references; imported VMM memory belongs to its exporter and is not counted.
    debug_assert_eq!(
        st.bytes_allocated,
        st.memory.bytes() + st.vmm.created_bytes()
    );
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
#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::*;
    use crate::state::memory::Memory;
    use crate::testing::{host_addr, ok, Driver, PROT_NONE, PROT_READ, PROT_READWRITE};
    use crate::vmm::GRANULARITY;

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn dtod_copies_between_allocations_and_vmm_ranges() {
        let d = Driver::new();
        let n = 4096;
        let a = d.alloc(n);
        let b = d.alloc(n);
        let want = pattern(n, 1);
        d.upload(a, &want);
        // SAFETY: plain value arguments.
        ok(unsafe { cuMemcpyDtoD_v2(b, a, n) });
        assert_eq!(d.download(b, n), want);

        // Into a read-write mapping (the per-thread form), then out of it into b's second half.
        let (rw, h) = d.vmm_granule(PROT_READWRITE);
        // SAFETY: plain value arguments.
        ok(unsafe { cuMemcpyDtoD_v2_ptds(rw + 100, a, n) });
        assert_eq!(d.download(rw + 100, n), want);
        let mut s: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        ok(unsafe { cuStreamCreate(&mut s, 0) });
        // SAFETY: plain value arguments; `s` is a live stream.
        unsafe {
            ok(cuMemcpyDtoDAsync_v2(b + 2048, rw + 100, 2048, s));
            ok(cuStreamSynchronize(s));
        }
        let got = d.download(b, n);
        assert_eq!(got[..2048], want[..2048]);
        assert_eq!(got[2048..], want[..2048]);

        // A source or destination that is not (wholly) device memory is refused.
        let host = vec![0u8; n];
        let hp = host_addr(host.as_ptr());
        // SAFETY: the fake checks every device range; nothing is written on failure.
        unsafe {
            assert_eq!(cuMemcpyDtoD_v2(hp, a, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyDtoD_v2(b, hp, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyDtoD_v2(b, a + 1, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyDtoD_v2(b, 0, n), CUDA_ERROR_INVALID_VALUE);
            // Zero bytes is a no-op, whatever the addresses.
            ok(cuMemcpyDtoDAsync_v2_ptsz(0, 0, 0, std::ptr::null_mut()));
            ok(cuStreamDestroy_v2(s));
        }
        assert_eq!(host, vec![0u8; n]);
        d.vmm_free(rw, h);
        d.free(a);
        d.free(b);
    }

    #[test]
    fn copies_into_a_read_only_mapping_are_refused() {
        let d = Driver::new();
        let n = 8192;
        let a = d.alloc(n);
        let src = pattern(n, 7);
        d.upload(a, &src);
        let (ro, h) = d.vmm_granule(PROT_READWRITE);
        let before = pattern(GRANULARITY, 3);
        d.upload(ro, &before);
        d.set_access(ro, GRANULARITY, PROT_READ);
        let host = pattern(n, 9);
        let hp = host_addr(host.as_ptr());
        let mut s: Handle = std::ptr::null_mut();
        // SAFETY: valid out-pointer; then plain values, live host buffers of `n` bytes and a
        // live stream.
        unsafe {
            ok(cuStreamCreate(&mut s, 0));
            assert_eq!(cuMemcpyDtoD_v2(ro, a, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyDtoD_v2_ptds(ro, a, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyDtoDAsync_v2(ro, a, n, s), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuMemcpyDtoDAsync_v2_ptsz(ro, a, n, s),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(cuMemcpy(ro, a, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpy_ptds(ro, hp, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyAsync(ro + 64, hp, n, s), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyAsync_ptsz(ro, a, n, s), CUDA_ERROR_INVALID_VALUE);
            // A range that only ends in the read-only mapping is refused as a whole.
            assert_eq!(
                cuMemcpyHtoD_v2(ro + GRANULARITY as u64 - 16, host.as_ptr().cast(), 32),
                CUDA_ERROR_INVALID_VALUE
            );
            ok(cuStreamSynchronize(s));
        }
        assert_eq!(d.download(ro, GRANULARITY), before, "a refused copy wrote");
        // Reading out of it is fine, into device memory and into host memory.
        let mut back = vec![0u8; n];
        // SAFETY: plain values and a live host buffer of `n` bytes.
        unsafe {
            ok(cuMemcpyDtoD_v2(a, ro, n));
            ok(cuMemcpy(host_addr(back.as_mut_ptr()), ro, n));
        }
        assert_eq!(d.download(a, n), before[..n]);
        assert_eq!(back, before[..n]);
        // Nor can a mapping without access be read.
        d.set_access(ro, GRANULARITY, PROT_NONE);
        // SAFETY: plain value arguments.
        unsafe {
            assert_eq!(cuMemcpyDtoD_v2(a, ro, n), CUDA_ERROR_INVALID_VALUE);
            ok(cuStreamDestroy_v2(s));
        }
        d.vmm_free(ro, h);
        d.free(a);
    }

    #[test]
    fn generic_memcpy_tells_host_from_device() {
        let d = Driver::new();
        let n = 1000;
        let dev = d.alloc(n);
        let (vm, h) = d.vmm_granule(PROT_READWRITE);
        let src = pattern(n, 11);
        let mut dst = vec![0u8; n];
        let mut dst2 = vec![0u8; n];
        let (sp, dp, dp2) = (
            host_addr(src.as_ptr()),
            host_addr(dst.as_mut_ptr()),
            host_addr(dst2.as_mut_ptr()),
        );
        // SAFETY: the host buffers are live and `n` bytes long; the device ranges are checked.
        unsafe {
            // host -> device (a plain allocation), device -> VMM mapping, VMM -> host.
            ok(cuMemcpy(dev, sp, n));
            ok(cuMemcpy_ptds(vm + 10, dev, n));
            ok(cuMemcpy(dp, vm + 10, n));
            // host -> host is a plain memmove.
            ok(cuMemcpy(dp2, sp, n));
        }
        assert_eq!(d.download(dev, n), src);
        assert_eq!(dst, src);
        assert_eq!(dst2, src);

        let mut s: Handle = std::ptr::null_mut();
        // SAFETY: as above, plus a live stream.
        unsafe {
            ok(cuStreamCreate(&mut s, 0));
            ok(cuMemcpyAsync(dev, sp + 1, n - 1, s));
            ok(cuMemcpyAsync_ptsz(vm, dev, n, std::ptr::null_mut()));
            ok(cuStreamSynchronize(s));
            // A device side must lie wholly in device memory: a range running past the end of
            // an allocation is not taken for host memory.
            assert_eq!(cuMemcpy(dev + 1, sp, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpy(dp, dev + 1, n), CUDA_ERROR_INVALID_VALUE);
            // NULL is never a host buffer.
            assert_eq!(cuMemcpy(0, dev, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpyAsync(dev, 0, n, s), CUDA_ERROR_INVALID_VALUE);
            ok(cuStreamDestroy_v2(s));
        }
        assert_eq!(d.download(vm, n - 1), src[1..]);

        // A reserved but unmapped VMM address is device memory (unusable), not host memory.
        // SAFETY: plain values; the fake refuses before touching anything.
        unsafe {
            ok(cuMemUnmap(vm, GRANULARITY));
            assert_eq!(cuMemcpy(vm, sp, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpy(dp, vm, n), CUDA_ERROR_INVALID_VALUE);
            ok(cuMemRelease(h));
            ok(cuMemAddressFree(vm, GRANULARITY));
        }
        d.free(dev);
    }

    #[test]
    fn async_copies_are_stream_ordered_and_sync_copies_wait() {
        let d = Driver::new();
        let n = 256;
        let a = d.alloc(n);
        let b = d.alloc(n);
        let image = c"tandem-fake-module v1\nkernel slow 300000000 noop\n";
        let (mut m, mut f, mut s): (Handle, Handle, Handle) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        // SAFETY: valid out-pointers, a NUL-terminated image, live handles, no kernel params
        // (noop takes none).
        unsafe {
            ok(cuModuleLoadData(&mut m, image.as_ptr().cast()));
            ok(cuModuleGetFunction(&mut f, m, c"slow".as_ptr()));
            ok(cuStreamCreate(&mut s, 0));
            let launch = |s: Handle| {
                cuLaunchKernel(
                    f,
                    1,
                    1,
                    1,
                    1,
                    1,
                    1,
                    0,
                    s,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            // An async copy behind a 300 ms kernel returns at once: the stream is still busy.
            ok(launch(s));
            ok(cuMemcpyDtoDAsync_v2(b, a, n, s));
            ok(cuMemcpyAsync(b, a, n, s));
            assert_eq!(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
            // A synchronous copy on the legacy stream waits for the blocking stream `s`.
            ok(cuMemcpyDtoD_v2(b, a, n));
            ok(cuStreamQuery(s));
            ok(launch(s));
            ok(cuMemcpy(b, a, n));
            ok(cuStreamQuery(s));
            ok(cuStreamDestroy_v2(s));
            ok(cuModuleUnload(m));
        }
        d.free(a);
        d.free(b);
    }

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
