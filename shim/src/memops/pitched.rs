//! 2D and 3D copies (`cuMemcpy2D`, `cuMemcpy2DUnaligned`, `cuMemcpy3D`, their
//! async and per-thread forms) and pitched memsets (`cuMemsetD2D8/16/32` and
//! their async and per-thread forms): forwarded after dedup's copy-on-write
//! check of what they write.
//!
//! Their extent takes work to find (a descriptor to read, rows and slices to
//! add up), so it is worked out only when this process has dedup-backed
//! memory (`crate::dedup::before_write_with`): without dedup a call costs one
//! relaxed load, as a one-range copy does. The extent is the [`Span`] from the
//! write's first byte to its last, the gaps between rows and slices included:
//! a shared granule that only a gap touches gets a private copy it did not
//! need, and none that the write touches is missed.
//!
//! A copy's destination is device memory when its memory type is DEVICE or
//! UNIFIED: `dstDevice` is then its address (a UNIFIED host pointer simply is
//! no dedup memory). HOST and ARRAY destinations never are. The descriptor and
//! the sizes come from the program and may be garbage: a NULL descriptor, a
//! memory type cuda.h does not define, or sizes whose sum overflows give no
//! span, and the call goes to the driver unchecked, which answers it.

use crate::client::Client;
use crate::table::Hook;
use crate::types::{
    CUdeviceptr, CUstream, CuResult, Memcpy2D, Memcpy3D, MEMORYTYPE_DEVICE, MEMORYTYPE_UNIFIED,
};
use core::mem::size_of;

/// The device memory a write covers: `len` bytes from `start` (an empty
/// write has `len` 0, and then nothing to check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: CUdeviceptr,
    pub len: usize,
}

/// Where a pitched write lands, in cuda.h's terms: `width` bytes in each of
/// `height` rows `pitch` bytes apart, in each of `depth` slices of
/// `slice_height` rows, starting `x` bytes into row `y` of slice `z` of `base`.
#[derive(Clone, Copy, Debug)]
struct Extent {
    base: CUdeviceptr,
    x: usize,
    y: usize,
    z: usize,
    pitch: usize,
    slice_height: usize,
    width: usize,
    height: usize,
    depth: usize,
}

impl Extent {
    /// From the first byte written to the last; `None` when that does not fit
    /// in the address space. The pitch and slice height count only where they
    /// are used: one row needs no pitch, one slice at `z` 0 no slice height
    /// (cuda.h lets a program leave what is not used unset).
    fn span(&self) -> Option<Span> {
        if self.width == 0 || self.height == 0 || self.depth == 0 {
            return Some(Span {
                start: self.base,
                len: 0,
            });
        }
        let slice = if self.z == 0 && self.depth == 1 {
            0
        } else {
            self.pitch.checked_mul(self.slice_height)?
        };
        let offset = self
            .x
            .checked_add(self.y.checked_mul(self.pitch)?)?
            .checked_add(self.z.checked_mul(slice)?)?;
        let len = self
            .width
            .checked_add((self.height - 1).checked_mul(self.pitch)?)?
            .checked_add((self.depth - 1).checked_mul(slice)?)?;
        let start = self.base.checked_add(u64::try_from(offset).ok()?)?;
        start.checked_add(u64::try_from(len).ok()?)?;
        Some(Span { start, len })
    }
}

/// Whether a copy's destination of this memory type is addressed by
/// `dstDevice` (device or unified memory).
fn device_destination(memory_type: core::ffi::c_uint) -> bool {
    memory_type == MEMORYTYPE_DEVICE || memory_type == MEMORYTYPE_UNIFIED
}

/// A copy descriptor: which device memory the copy writes.
pub trait Descriptor: Copy {
    /// The device memory this copy writes, or `None` (a host or array
    /// destination, an unknown memory type, sizes that overflow).
    fn dst_span(&self) -> Option<Span>;
}

impl Descriptor for Memcpy2D {
    fn dst_span(&self) -> Option<Span> {
        if !device_destination(self.dst_memory_type) {
            return None;
        }
        Extent {
            base: self.dst_device,
            x: self.dst_x_in_bytes,
            y: self.dst_y,
            z: 0,
            pitch: self.dst_pitch,
            slice_height: 0,
            width: self.width_in_bytes,
            height: self.height,
            depth: 1,
        }
        .span()
    }
}

impl Descriptor for Memcpy3D {
    fn dst_span(&self) -> Option<Span> {
        if !device_destination(self.dst_memory_type) {
            return None;
        }
        Extent {
            base: self.dst_device,
            x: self.dst_x_in_bytes,
            y: self.dst_y,
            z: self.dst_z,
            pitch: self.dst_pitch,
            slice_height: self.dst_height,
            width: self.width_in_bytes,
            height: self.height,
            depth: self.depth,
        }
        .span()
    }
}

/// What a pitched memset of `width` elements of `T` in each of `height` rows
/// `pitch` bytes apart from `dst` writes.
fn memset_span<T>(dst: CUdeviceptr, pitch: usize, width: usize, height: usize) -> Option<Span> {
    Extent {
        base: dst,
        x: 0,
        y: 0,
        z: 0,
        pitch,
        slice_height: 0,
        width: width.checked_mul(size_of::<T>())?,
        height,
        depth: 1,
    }
    .span()
}

/// The device memory the copy `copy` points to writes; `None` for a NULL
/// descriptor (the driver refuses it) and as [`Descriptor::dst_span`].
///
/// # Safety
/// `copy` is NULL or valid for reads of a `D`: the driver function's own
/// contract on its argument.
unsafe fn copy_span<D: Descriptor>(copy: *const D) -> Option<(CUdeviceptr, usize)> {
    if copy.is_null() {
        return None;
    }
    // SAFETY: non-NULL, so valid for reads of a `D` (this function's
    // contract); unaligned, as a C caller may hand in a packed copy. Every bit
    // pattern is a valid `D`: integers and raw pointers only.
    let d = unsafe { copy.read_unaligned() };
    d.dst_span().map(|s| (s.start, s.len))
}

/// `cuMemcpy2D_v2`, `cuMemcpy2DUnaligned_v2`, `cuMemcpy3D_v2` and their
/// `_ptds` forms (`D` the descriptor type), after dedup's copy-on-write check
/// of a device destination. Not reported to the coordinator.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy<D: Descriptor>(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(*const D) -> CuResult,
    copy: *const D,
) -> CuResult {
    // SAFETY: `copy` is the caller's descriptor argument, NULL or readable
    // (the driver function's contract), passed on unchanged.
    crate::dedup::before_write_with(|| unsafe { copy_span(copy) });
    // SAFETY: forwarded unchanged.
    unsafe { real(copy) }
}

/// `cuMemcpy2DAsync_v2`, `cuMemcpy3DAsync_v2` and their `_ptsz` forms (see [`copy`]).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn copy_async<D: Descriptor>(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(*const D, CUstream) -> CuResult,
    copy: *const D,
    stream: CUstream,
) -> CuResult {
    // SAFETY: as in [`copy`].
    crate::dedup::before_write_with(|| unsafe { copy_span(copy) });
    // SAFETY: forwarded unchanged.
    unsafe { real(copy, stream) }
}

/// `cuMemsetD2D8/16/32_v2` and their `_ptds` forms, `T` the element type:
/// `width` elements in each of `height` rows `pitch` bytes apart from `dst`,
/// after dedup's copy-on-write check.
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn memset<T: Copy>(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, usize, T, usize, usize) -> CuResult,
    dst: CUdeviceptr,
    pitch: usize,
    value: T,
    width: usize,
    height: usize,
) -> CuResult {
    crate::dedup::before_write_with(|| {
        memset_span::<T>(dst, pitch, width, height).map(|s| (s.start, s.len))
    });
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, pitch, value, width, height) }
}

/// `cuMemsetD2D8/16/32Async` and their `_ptsz` forms (see [`memset`]).
///
/// # Safety
/// Arguments as the driver function requires.
pub unsafe fn memset_async<T: Copy>(
    _hook: Hook,
    _client: Client,
    real: unsafe extern "C" fn(CUdeviceptr, usize, T, usize, usize, CUstream) -> CuResult,
    dst: CUdeviceptr,
    pitch: usize,
    value: T,
    width: usize,
    height: usize,
    stream: CUstream,
) -> CuResult {
    crate::dedup::before_write_with(|| {
        memset_span::<T>(dst, pitch, width, height).map(|s| (s.start, s.len))
    });
    // SAFETY: forwarded unchanged.
    unsafe { real(dst, pitch, value, width, height, stream) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `CU_MEMORYTYPE_HOST` and `CU_MEMORYTYPE_ARRAY` (cuda.h).
    const MEMORYTYPE_HOST: core::ffi::c_uint = 1;
    const MEMORYTYPE_ARRAY: core::ffi::c_uint = 3;

    const BASE: CUdeviceptr = 0x7f00_0000_0000;

    fn copy_2d(dst_type: core::ffi::c_uint) -> Memcpy2D {
        // SAFETY: all integers and raw pointers: zero is a valid value of each.
        let mut c: Memcpy2D = unsafe { core::mem::zeroed() };
        c.dst_memory_type = dst_type;
        c.dst_device = BASE;
        c.dst_x_in_bytes = 16;
        c.dst_y = 2;
        c.dst_pitch = 512;
        c.width_in_bytes = 100;
        c.height = 3;
        c
    }

    fn copy_3d() -> Memcpy3D {
        // SAFETY: as in copy_2d.
        let mut c: Memcpy3D = unsafe { core::mem::zeroed() };
        c.dst_memory_type = MEMORYTYPE_DEVICE;
        c.dst_device = BASE;
        c.dst_x_in_bytes = 8;
        c.dst_y = 1;
        c.dst_z = 2;
        c.dst_pitch = 256;
        c.dst_height = 4;
        c.width_in_bytes = 64;
        c.height = 2;
        c.depth = 3;
        c
    }

    fn span(start: CUdeviceptr, len: usize) -> Option<Span> {
        Some(Span { start, len })
    }

    #[test]
    fn a_2d_copy_covers_its_first_row_to_the_end_of_its_last() {
        let c = copy_2d(MEMORYTYPE_DEVICE);
        // From x 16 of row 2 to the end of row 4: two pitches and one width.
        assert_eq!(c.dst_span(), span(BASE + 16 + 2 * 512, 2 * 512 + 100));
        // Unified memory is addressed the same way.
        assert_eq!(copy_2d(MEMORYTYPE_UNIFIED).dst_span(), c.dst_span());
        // One row needs no pitch: a garbage one is never multiplied.
        let mut one = c;
        (one.height, one.dst_y, one.dst_pitch) = (1, 0, usize::MAX);
        assert_eq!(one.dst_span(), span(BASE + 16, 100));
        // Nothing written: nothing to check.
        let mut empty = c;
        empty.width_in_bytes = 0;
        assert_eq!(empty.dst_span().map(|s| s.len), Some(0));
    }

    #[test]
    fn host_array_and_unknown_destinations_are_not_device_memory() {
        for t in [MEMORYTYPE_HOST, MEMORYTYPE_ARRAY, 0, 5, u32::MAX] {
            assert_eq!(copy_2d(t).dst_span(), None, "memory type {t}");
            let mut c = copy_3d();
            c.dst_memory_type = t;
            assert_eq!(c.dst_span(), None, "memory type {t}");
        }
    }

    #[test]
    fn a_2d_copy_whose_sizes_overflow_has_no_span() {
        let mut c = copy_2d(MEMORYTYPE_DEVICE);
        c.dst_y = usize::MAX / 2;
        assert_eq!(c.dst_span(), None, "y * pitch");
        let mut c = copy_2d(MEMORYTYPE_DEVICE);
        c.height = usize::MAX;
        assert_eq!(c.dst_span(), None, "(height - 1) * pitch");
        let mut c = copy_2d(MEMORYTYPE_DEVICE);
        c.dst_x_in_bytes = usize::MAX;
        assert_eq!(c.dst_span(), None, "x + y * pitch");
        let mut c = copy_2d(MEMORYTYPE_DEVICE);
        c.width_in_bytes = usize::MAX - 512;
        assert_eq!(c.dst_span(), None, "width + rows");
        let mut c = copy_2d(MEMORYTYPE_DEVICE);
        c.dst_device = u64::MAX - 1000;
        assert_eq!(c.dst_span(), None, "base + offset");
        let mut c = copy_2d(MEMORYTYPE_DEVICE);
        c.dst_device = u64::MAX - 2000;
        assert_eq!(c.dst_span(), None, "the last byte past the address space");
        c.dst_device = u64::MAX - 16 - 1024 - 1124;
        assert!(c.dst_span().is_some(), "ends exactly at the top");
    }

    #[test]
    fn a_3d_copy_adds_whole_slices() {
        // Slices of dst_height 4 rows of 256 bytes: 1024 bytes apart.
        let c = copy_3d();
        let start = BASE + 8 + 256 + 2 * 1024;
        assert_eq!(c.dst_span(), span(start, 64 + 256 + 2 * 1024));
        // One slice at z 0 needs no slice height: garbage is never multiplied.
        let mut flat = c;
        (flat.dst_z, flat.depth, flat.dst_height) = (0, 1, usize::MAX);
        assert_eq!(flat.dst_span(), span(BASE + 8 + 256, 64 + 256));
        // But more than one slice does.
        flat.depth = 2;
        assert_eq!(flat.dst_span(), None, "pitch * dst_height");
        let mut c = copy_3d();
        c.dst_z = usize::MAX / 1024 + 1;
        assert_eq!(c.dst_span(), None, "z * slice");
        let mut c = copy_3d();
        c.depth = usize::MAX / 1024 + 2;
        assert_eq!(c.dst_span(), None, "(depth - 1) * slice");
        let mut c = copy_3d();
        c.depth = 0;
        assert_eq!(c.dst_span().map(|s| s.len), Some(0));
    }

    #[test]
    fn a_pitched_memset_covers_its_rows_of_elements() {
        assert_eq!(
            memset_span::<u32>(BASE, 1024, 10, 3),
            span(BASE, 2 * 1024 + 40)
        );
        assert_eq!(memset_span::<u16>(BASE, 1024, 10, 1), span(BASE, 20));
        assert_eq!(memset_span::<u8>(BASE, usize::MAX, 10, 1), span(BASE, 10));
        assert_eq!(memset_span::<u32>(BASE, 64, usize::MAX / 2, 2), None);
        assert_eq!(memset_span::<u8>(BASE, usize::MAX, 1, 3), None);
        assert_eq!(memset_span::<u8>(u64::MAX, 0, 1, 1), None);
        assert_eq!(memset_span::<u32>(BASE, 64, 0, 9).map(|s| s.len), Some(0));
    }

    #[test]
    fn a_null_descriptor_has_no_span_and_a_real_one_is_read() {
        // SAFETY: NULL is allowed by copy_span's contract.
        assert_eq!(unsafe { copy_span::<Memcpy2D>(core::ptr::null()) }, None);
        // SAFETY: as above.
        assert_eq!(unsafe { copy_span::<Memcpy3D>(core::ptr::null()) }, None);
        let c = copy_2d(MEMORYTYPE_DEVICE);
        // SAFETY: a live descriptor.
        let got = unsafe { copy_span(&c) };
        assert_eq!(got, Some((BASE + 16 + 1024, 1124)));
        // A descriptor at an odd address (a packed C struct) reads the same.
        let mut buf = [0u8; size_of::<Memcpy2D>() + 1];
        // SAFETY: `buf[1..]` holds exactly one Memcpy2D's bytes.
        unsafe {
            core::ptr::write_unaligned(buf.as_mut_ptr().add(1).cast::<Memcpy2D>(), c);
        }
        // SAFETY: as above: readable, unaligned.
        let got = unsafe { copy_span(buf.as_ptr().add(1).cast::<Memcpy2D>()) };
        assert_eq!(got, Some((BASE + 16 + 1024, 1124)));
    }
}
