//! 2D and 3D copies (`cuMemcpy2D*`, `cuMemcpy3D*`) and pitched memsets (`cuMemsetD2D*`): row
//! by row, each row checked like a one-range copy (`copies`), so a row in a read-only mapping
//! is refused with `CUDA_ERROR_INVALID_VALUE` as the real driver refuses a copy into one.
//! Every row is checked before any byte moves: a refused call writes nothing.
//!
//! A side of a copy is HOST (its host pointer, which the caller vouches for), DEVICE (its
//! device address, which must be device memory the fake knows), or UNIFIED (its device
//! address, taken as device memory when the fake knows it, else as a host pointer). The fake
//! has no CUDA arrays: an ARRAY side, or a memory type cuda.h does not define, is
//! `CUDA_ERROR_INVALID_VALUE`. As cuda.h requires: with more than one row, each pitch is at
//! least the width; with more than one slice, each slice height at least the height; both
//! levels of detail are 0.

use crate::copies::{copy_side, finish_on_stream, moves_data};
use crate::state::memory::Access;
use crate::state::{check_range, lock, State};
use crate::types::*;

/// One side of a pitched copy, from its descriptor.
#[derive(Clone, Copy, Debug)]
struct Side {
    /// `Some(true)`: device memory; `Some(false)`: a host pointer; `None`: decided per row by
    /// the address (unified addressing).
    device: Option<bool>,
    base: u64,
    x: usize,
    y: usize,
    z: usize,
    pitch: usize,
    /// Rows per slice (3D only).
    slice_height: usize,
}

impl Side {
    fn new(memory_type: u32, host: u64, device: CUdeviceptr) -> CuResult<Side> {
        let (device, base) = match memory_type {
            CU_MEMORYTYPE_HOST => (Some(false), host),
            CU_MEMORYTYPE_DEVICE => (Some(true), device),
            CU_MEMORYTYPE_UNIFIED => (None, device),
            // The fake has no arrays, so no array handle is valid.
            CU_MEMORYTYPE_ARRAY => return Err(CUDA_ERROR_INVALID_VALUE),
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
        Ok(Side {
            device,
            base,
            x: 0,
            y: 0,
            z: 0,
            pitch: 0,
            slice_height: 0,
        })
    }

    /// The address of row `row` of slice `slice` of the copy; `CUDA_ERROR_INVALID_VALUE` when
    /// it is past the address space.
    fn row(&self, slice: usize, row: usize) -> CuResult<u64> {
        let at = || {
            let y = self.y.checked_add(row)?;
            let mut offset = self.x.checked_add(y.checked_mul(self.pitch)?)?;
            let z = self.z.checked_add(slice)?;
            if z > 0 {
                let slice_bytes = self.slice_height.checked_mul(self.pitch)?;
                offset = offset.checked_add(z.checked_mul(slice_bytes)?)?;
            }
            self.base.checked_add(u64::try_from(offset).ok()?)
        };
        at().ok_or(CUDA_ERROR_INVALID_VALUE)
    }
}

/// Moves `width` bytes of each of `height` rows of each of `depth` slices from `src` to `dst`,
/// after checking every row of both sides.
///
/// # Safety
/// A side that is not device memory the fake knows must be a host pointer valid for every row
/// the descriptor names (reads for `src`, writes for `dst`).
#[allow(clippy::too_many_arguments)]
unsafe fn copy_rows(
    st: std::sync::MutexGuard<'static, State>,
    src: Side,
    dst: Side,
    width: usize,
    height: usize,
    depth: usize,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    st.require_ctx()?;
    st.streams.resolve(stream, per_thread_default)?;
    if width > 0 && height > 0 && depth > 0 {
        for side in [src, dst] {
            if (height > 1 && side.pitch < width) || (depth > 1 && side.slice_height < height) {
                return Err(CUDA_ERROR_INVALID_VALUE);
            }
        }
        let mut rows = Vec::new();
        for slice in 0..depth {
            for row in 0..height {
                let from = copy_side(&st, src.row(slice, row)?, width, Access::Read, src.device)?;
                let to = copy_side(&st, dst.row(slice, row)?, width, Access::Write, dst.device)?;
                rows.push((from, to));
            }
        }
        if moves_data() {
            for (from, to) in rows {
                // SAFETY: each row of each side is checked live fake-device memory with the
                // access it needs (kept live by the lock) or a host pointer valid for `width`
                // bytes (caller contract). `copy` tolerates overlap.
                unsafe { std::ptr::copy(from.cast_const(), to, width) };
            }
        }
    }
    finish_on_stream(st, stream, per_thread_default, sync)
}

/// `cuMemcpy2D*` (and `cuMemcpy2DUnaligned*`, the same copy here). `sync` selects the
/// synchronous forms (then `stream` is NULL).
///
/// # Safety
/// `copy` must be NULL or valid for a read of a `Memcpy2D`; its host sides as in `copy_rows`.
pub unsafe fn memcpy_2d(
    copy: *const Memcpy2D,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    // SAFETY: NULL or readable (caller contract).
    let c = unsafe { read_in(copy) }?;
    let mut src = Side::new(
        c.src_memory_type,
        c.src_host.expose_provenance() as u64,
        c.src_device,
    )?;
    (src.x, src.y, src.pitch) = (c.src_x_in_bytes, c.src_y, c.src_pitch);
    let mut dst = Side::new(
        c.dst_memory_type,
        c.dst_host.expose_provenance() as u64,
        c.dst_device,
    )?;
    (dst.x, dst.y, dst.pitch) = (c.dst_x_in_bytes, c.dst_y, c.dst_pitch);
    let st = lock();
    // SAFETY: the host sides are the caller's (contract above).
    unsafe {
        copy_rows(
            st,
            src,
            dst,
            c.width_in_bytes,
            c.height,
            1,
            stream,
            per_thread_default,
            sync,
        )
    }
}

/// `cuMemcpy3D*`.
///
/// # Safety
/// `copy` must be NULL or valid for a read of a `Memcpy3D`; its host sides as in `copy_rows`.
pub unsafe fn memcpy_3d(
    copy: *const Memcpy3D,
    stream: Handle,
    per_thread_default: bool,
    sync: bool,
) -> CuResult<()> {
    // SAFETY: NULL or readable (caller contract).
    let c = unsafe { read_in(copy) }?;
    if c.src_lod != 0 || c.dst_lod != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut src = Side::new(
        c.src_memory_type,
        c.src_host.expose_provenance() as u64,
        c.src_device,
    )?;
    (src.x, src.y, src.z) = (c.src_x_in_bytes, c.src_y, c.src_z);
    (src.pitch, src.slice_height) = (c.src_pitch, c.src_height);
    let mut dst = Side::new(
        c.dst_memory_type,
        c.dst_host.expose_provenance() as u64,
        c.dst_device,
    )?;
    (dst.x, dst.y, dst.z) = (c.dst_x_in_bytes, c.dst_y, c.dst_z);
    (dst.pitch, dst.slice_height) = (c.dst_pitch, c.dst_height);
    let st = lock();
    // SAFETY: the host sides are the caller's (contract above).
    unsafe {
        copy_rows(
            st,
            src,
            dst,
            c.width_in_bytes,
            c.height,
            c.depth,
            stream,
            per_thread_default,
            sync,
        )
    }
}

/// `cuMemsetD2D8/D16/D32` (sync or async): `width` elements of `elem` bytes set to `value` in
/// each of `height` rows `pitch` bytes apart from `dst`. The one-range `cuMemsetD8/D16/D32`
/// are its one row.
#[allow(clippy::too_many_arguments)]
pub fn memset_2d(
    dst: CUdeviceptr,
    pitch: usize,
    value: u32,
    elem: usize,
    width: usize,
    height: usize,
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
    let bytes = width.checked_mul(elem).ok_or(CUDA_ERROR_INVALID_VALUE)?;
    if bytes > 0 && height > 0 {
        if height > 1 && pitch < bytes {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        let side = Side {
            device: Some(true),
            base: dst,
            x: 0,
            y: 0,
            z: 0,
            pitch,
            slice_height: 0,
        };
        let mut rows = Vec::with_capacity(height.min(1 << 16));
        for row in 0..height {
            let at = side.row(0, row)?;
            check_range(&st, at, bytes, Access::Write).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
            rows.push(at);
        }
        for at in rows {
            let base = crate::state::memory::device_ptr(at);
            // SAFETY: `at..at+bytes` lies in live writable fake-device memory (checked above,
            // kept live by the lock).
            unsafe { fill(base, elem, width, value) };
        }
    }
    finish_on_stream(st, stream, per_thread_default, sync)
}

/// Writes `count` elements of `elem` bytes (1, 2, else 4) of `value` at `base`.
///
/// # Safety
/// `base..base + count * elem` is writable memory.
unsafe fn fill(base: *mut u8, elem: usize, count: usize, value: u32) {
    // SAFETY: every write stays inside `base..base + count * elem` (the contract).
    unsafe {
        match elem {
            1 => std::ptr::write_bytes(base, value as u8, count),
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

#[cfg(test)]
mod tests {
    use crate::exports::*;
    use crate::testing::{host_addr, ok, Driver, PROT_READ, PROT_READWRITE};
    use crate::types::*;
    use crate::vmm::GRANULARITY;
    use std::ptr::{null, null_mut};

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
            .collect()
    }

    fn desc_2d() -> Memcpy2D {
        Memcpy2D {
            src_x_in_bytes: 0,
            src_y: 0,
            src_memory_type: 0,
            src_host: null(),
            src_device: 0,
            src_array: null_mut(),
            src_pitch: 0,
            dst_x_in_bytes: 0,
            dst_y: 0,
            dst_memory_type: 0,
            dst_host: null_mut(),
            dst_device: 0,
            dst_array: null_mut(),
            dst_pitch: 0,
            width_in_bytes: 0,
            height: 0,
        }
    }

    /// Host rows of `width` bytes, packed, into `height` rows of `dst` from `x` bytes into row
    /// `y`, `pitch` apart.
    fn host_to_device(
        src: &[u8],
        dst: CUdeviceptr,
        (x, y, pitch): (usize, usize, usize),
        width: usize,
    ) -> Memcpy2D {
        let mut c = desc_2d();
        c.src_memory_type = CU_MEMORYTYPE_HOST;
        c.src_host = src.as_ptr().cast();
        c.src_pitch = width;
        c.dst_memory_type = CU_MEMORYTYPE_DEVICE;
        c.dst_device = dst;
        (c.dst_x_in_bytes, c.dst_y, c.dst_pitch) = (x, y, pitch);
        c.width_in_bytes = width;
        c.height = src.len() / width;
        c
    }

    #[test]
    fn a_2d_copy_writes_its_rows_and_leaves_the_gaps() {
        let d = Driver::new();
        let n = 4096;
        let a = d.alloc(n);
        let before = pattern(n, 1);
        d.upload(a, &before);
        let src = pattern(3 * 100, 7);
        let c = host_to_device(&src, a, (16, 2, 512), 100);
        let mut want = before.clone();
        for r in 0..3 {
            let at = 16 + (2 + r) * 512;
            want[at..at + 100].copy_from_slice(&src[r * 100..(r + 1) * 100]);
        }
        // SAFETY: a live descriptor naming a live host buffer.
        ok(unsafe { cuMemcpy2D_v2(&c) });
        assert_eq!(d.download(a, n), want);
        // Every form writes the same; the async ones on their stream.
        let mut s: Handle = null_mut();
        // SAFETY: valid out-pointer; then live descriptors and a live stream.
        unsafe {
            ok(cuStreamCreate(&mut s, 0));
            d.upload(a, &before);
            ok(cuMemcpy2D_v2_ptds(&c));
            assert_eq!(d.download(a, n), want);
            d.upload(a, &before);
            ok(cuMemcpy2DUnaligned_v2(&c));
            ok(cuMemcpy2DUnaligned_v2_ptds(&c));
            assert_eq!(d.download(a, n), want);
            d.upload(a, &before);
            ok(cuMemcpy2DAsync_v2(&c, s));
            ok(cuMemcpy2DAsync_v2_ptsz(&c, null_mut()));
            ok(cuStreamSynchronize(s));
            assert_eq!(d.download(a, n), want);
            // And back out, device to host, into rows of another pitch.
            let mut back = vec![0u8; 3 * 128];
            let mut out = desc_2d();
            out.src_memory_type = CU_MEMORYTYPE_UNIFIED;
            out.src_device = a;
            (out.src_x_in_bytes, out.src_y, out.src_pitch) = (16, 2, 512);
            out.dst_memory_type = CU_MEMORYTYPE_HOST;
            out.dst_host = back.as_mut_ptr().cast();
            out.dst_pitch = 128;
            (out.width_in_bytes, out.height) = (100, 3);
            ok(cuMemcpy2D_v2(&out));
            for r in 0..3 {
                assert_eq!(back[r * 128..r * 128 + 100], src[r * 100..(r + 1) * 100]);
            }
            ok(cuStreamDestroy_v2(s));
        }
        d.free(a);
    }

    #[test]
    fn a_2d_copy_into_a_read_only_mapping_is_refused_and_writes_nothing() {
        let d = Driver::new();
        let (ro, h) = d.vmm_granule(PROT_READWRITE);
        let before = pattern(GRANULARITY, 3);
        d.upload(ro, &before);
        d.set_access(ro, GRANULARITY, PROT_READ);
        let src = pattern(4 * 64, 9);
        let c = host_to_device(&src, ro, (8, 0, 1 << 19), 64);
        let mut unified = c;
        unified.dst_memory_type = CU_MEMORYTYPE_UNIFIED;
        // SAFETY: live descriptors naming a live host buffer; a live stream.
        unsafe {
            assert_eq!(cuMemcpy2D_v2(&c), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpy2D_v2_ptds(&unified), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpy2DUnaligned_v2(&c), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(cuMemcpy2DAsync_v2(&c, null_mut()), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuMemcpy2DAsync_v2_ptsz(&unified, null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
        }
        assert_eq!(d.download(ro, GRANULARITY), before, "a refused copy wrote");
        // Rows that run past the mapping: refused before the first row is written.
        d.set_access(ro, GRANULARITY, PROT_READWRITE);
        let tall = host_to_device(&pattern(8 * 64, 5), ro, (0, 0, 1 << 19), 64);
        // SAFETY: a live descriptor naming a live host buffer.
        assert_eq!(unsafe { cuMemcpy2D_v2(&tall) }, CUDA_ERROR_INVALID_VALUE);
        assert_eq!(d.download(ro, GRANULARITY), before, "a refused copy wrote");
        d.vmm_free(ro, h);
    }

    #[test]
    fn bad_2d_descriptors_are_refused() {
        let d = Driver::new();
        let a = d.alloc(4096);
        let src = pattern(2 * 64, 1);
        let good = host_to_device(&src, a, (0, 0, 128), 64);
        let mut narrow = good;
        narrow.dst_pitch = 32;
        let mut array = good;
        array.dst_memory_type = CU_MEMORYTYPE_ARRAY;
        let mut unknown = good;
        unknown.src_memory_type = 9;
        let mut wrapped = good;
        wrapped.dst_y = usize::MAX / 64;
        // SAFETY: NULL, then live descriptors naming a live host buffer.
        unsafe {
            assert_eq!(cuMemcpy2D_v2(null()), CUDA_ERROR_INVALID_VALUE);
            for bad in [narrow, array, unknown, wrapped] {
                assert_eq!(cuMemcpy2D_v2(&bad), CUDA_ERROR_INVALID_VALUE);
            }
            ok(cuMemcpy2D_v2(&good));
        }
        d.free(a);
    }

    #[test]
    fn a_3d_copy_moves_whole_slices() {
        let d = Driver::new();
        let n = 8192;
        let (a, b) = (d.alloc(n), d.alloc(n));
        let src = pattern(n, 11);
        d.upload(a, &src);
        d.upload(b, &vec![0u8; n]);
        let mut c = Memcpy3D {
            src_x_in_bytes: 4,
            src_y: 1,
            src_z: 0,
            src_lod: 0,
            src_memory_type: CU_MEMORYTYPE_DEVICE,
            src_host: null(),
            src_device: a,
            src_array: null_mut(),
            reserved0: null_mut(),
            src_pitch: 128,
            src_height: 8,
            dst_x_in_bytes: 0,
            dst_y: 0,
            dst_z: 1,
            dst_lod: 0,
            dst_memory_type: CU_MEMORYTYPE_DEVICE,
            dst_host: null_mut(),
            dst_device: b,
            dst_array: null_mut(),
            reserved1: null_mut(),
            dst_pitch: 256,
            dst_height: 4,
            width_in_bytes: 100,
            height: 3,
            depth: 2,
        };
        // SAFETY: a live descriptor of device memory.
        ok(unsafe { cuMemcpy3D_v2(&c) });
        let got = d.download(b, n);
        let mut want = vec![0u8; n];
        for z in 0..2 {
            for y in 0..3 {
                let from = 4 + (1 + y) * 128 + z * 128 * 8;
                let to = (y * 256) + (1 + z) * 256 * 4;
                want[to..to + 100].copy_from_slice(&src[from..from + 100]);
            }
        }
        assert_eq!(got, want);
        // SAFETY: live descriptors (the async forms on the legacy stream).
        unsafe {
            ok(cuMemcpy3D_v2_ptds(&c));
            ok(cuMemcpy3DAsync_v2(&c, null_mut()));
            ok(cuMemcpy3DAsync_v2_ptsz(&c, null_mut()));
            ok(cuCtxSynchronize());
            c.dst_lod = 1;
            assert_eq!(cuMemcpy3D_v2(&c), CUDA_ERROR_INVALID_VALUE);
            c.dst_lod = 0;
            c.dst_height = 2;
            assert_eq!(
                cuMemcpy3D_v2(&c),
                CUDA_ERROR_INVALID_VALUE,
                "slices overlap"
            );
        }
        assert_eq!(d.download(b, n), want);
        d.free(a);
        d.free(b);
    }

    #[test]
    fn pitched_memsets_fill_their_rows_and_refuse_read_only_memory() {
        let d = Driver::new();
        let n = 4096;
        let a = d.alloc(n);
        d.upload(a, &vec![0u8; n]);
        // SAFETY: plain value arguments.
        unsafe {
            ok(cuMemsetD2D8_v2(a, 1024, 0x11, 10, 2));
            ok(cuMemsetD2D16_v2_ptds(a + 16, 1024, 0x2222, 5, 2));
            ok(cuMemsetD2D32Async(
                a + 32,
                1024,
                0x3333_3333,
                4,
                3,
                null_mut(),
            ));
            ok(cuMemsetD2D8Async_ptsz(a + 64, 2048, 0x44, 1, 2, null_mut()));
            ok(cuCtxSynchronize());
        }
        let got = d.download(a, n);
        let mut want = vec![0u8; n];
        for r in 0..3 {
            let row = r * 1024;
            if r < 2 {
                want[row..row + 10].fill(0x11);
                want[row + 16..row + 26].fill(0x22);
            }
            want[row + 32..row + 48].fill(0x33);
        }
        want[64] = 0x44;
        want[64 + 2048] = 0x44;
        assert_eq!(got, want);
        let (ro, h) = d.vmm_granule(PROT_READ);
        // SAFETY: plain value arguments.
        unsafe {
            assert_eq!(
                cuMemsetD2D32_v2(ro, 4096, 7, 16, 4),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemsetD2D16Async(ro, 4096, 7, 16, 4, null_mut()),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemsetD2D8_v2_ptds(ro, 4096, 7, 16, 4),
                CUDA_ERROR_INVALID_VALUE
            );
            assert_eq!(
                cuMemsetD2D32Async_ptsz(a + 2, 64, 7, 1, 1, null_mut()),
                CUDA_ERROR_INVALID_VALUE,
                "misaligned"
            );
            assert_eq!(
                cuMemsetD2D16_v2(a, 8, 7, 8, 2),
                CUDA_ERROR_INVALID_VALUE,
                "pitch under the width"
            );
            assert_eq!(
                cuMemsetD2D8Async(a, 1024, 7, 8, 5, null_mut()),
                CUDA_ERROR_INVALID_VALUE,
                "past the allocation"
            );
        }
        assert_eq!(d.download(a, n), want, "a refused memset wrote");
        d.vmm_free(ro, h);
        d.free(a);
    }

    #[test]
    fn peer_copies_need_valid_contexts_and_writable_memory() {
        let d = Driver::new();
        let n = 1024;
        let (a, b) = (d.alloc(n), d.alloc(n));
        let src = pattern(n, 13);
        d.upload(a, &src);
        let mut ctx: Handle = null_mut();
        // SAFETY: valid out-pointer; then plain value arguments.
        unsafe {
            ok(cuCtxGetCurrent(&mut ctx));
            ok(cuMemcpyPeer(b, ctx, a, ctx, n));
        }
        assert_eq!(d.download(b, n), src);
        let (ro, h) = d.vmm_granule(PROT_READ);
        let bogus = handle(0x1234);
        let host = src.clone();
        // SAFETY: plain value arguments (the host address is refused, never written).
        unsafe {
            ok(cuMemcpyPeer_ptds(b, ctx, a, ctx, n));
            ok(cuMemcpyPeerAsync(b, ctx, a, ctx, n, null_mut()));
            ok(cuMemcpyPeerAsync_ptsz(b, ctx, a, ctx, n, null_mut()));
            assert_eq!(
                cuMemcpyPeer(b, bogus, a, ctx, n),
                CUDA_ERROR_INVALID_CONTEXT
            );
            assert_eq!(
                cuMemcpyPeerAsync(b, ctx, a, bogus, n, null_mut()),
                CUDA_ERROR_INVALID_CONTEXT
            );
            assert_eq!(cuMemcpyPeer(ro, ctx, a, ctx, n), CUDA_ERROR_INVALID_VALUE);
            assert_eq!(
                cuMemcpyPeer(host_addr(host.as_ptr()), ctx, a, ctx, n),
                CUDA_ERROR_INVALID_VALUE
            );
            ok(cuCtxSynchronize());
        }
        d.vmm_free(ro, h);
        d.free(a);
        d.free(b);
    }
}
