//! C types at the driver boundary.
//!
//! Handles and structs come from `cudarc::driver::sys` (bindgen of `cuda.h`); its
//! functions are never called from the shim (they would re-enter our own hooks).
//! `CUresult` is *not* taken from there: a newer driver may return values that no
//! Rust enum knows, so results cross the boundary as a transparent `u32`. Nor are
//! the copy descriptors the program hands in (`CUDA_MEMCPY2D`, `CUDA_MEMCPY3D`):
//! their memory type is a C enum the program may fill with anything, so they are
//! declared here with plain integers, their layout checked against cudarc's.

use core::ffi::{c_uint, c_void};
pub use cudarc::driver::sys::{
    CUcontext, CUdeviceptr, CUevent, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUlaunchConfig,
    CUmemAllocationProp, CUmemGenericAllocationHandle, CUmemoryPool, CUstream,
};

/// A `CUresult` as the driver returns it, whatever its value.
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuResult(pub u32);

impl CuResult {
    pub const SUCCESS: Self = Self(0);
    /// `CUDA_ERROR_INVALID_VALUE`.
    pub const INVALID_VALUE: Self = Self(1);
    /// `CUDA_ERROR_ILLEGAL_ADDRESS`: a kernel touched memory it may not (sticky).
    pub const ILLEGAL_ADDRESS: Self = Self(700);
    /// `CUDA_ERROR_NOT_READY`: queried work has not completed yet.
    pub const NOT_READY: Self = Self(600);
    /// Returned by hooks when the real driver could not be loaded at all.
    pub const SHARED_OBJECT_INIT_FAILED: Self = Self(303);
    /// Returned by a hook whose variant the loaded driver does not export.
    pub const NOT_SUPPORTED: Self = Self(801);
}

/// `CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM`.
pub const GPA_PER_THREAD_DEFAULT_STREAM: u64 = 1 << 1;

/// `CU_MEMORYTYPE_DEVICE` and `CU_MEMORYTYPE_UNIFIED` (cuda.h; HOST is 1,
/// ARRAY 3). The descriptors below hold a memory type as a plain integer, not
/// cudarc's enum: they come from the program, and a value no enum variant has
/// must still be readable (and then simply not device memory).
pub const MEMORYTYPE_DEVICE: c_uint = 2;
pub const MEMORYTYPE_UNIFIED: c_uint = 4;

/// `CUDA_MEMCPY2D` (cuda.h, the `_v2` layout `cuMemcpy2D_v2` takes), with the
/// memory types as plain integers; checked below against cudarc's bindgen of
/// cuda.h, field by field.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

/// `CUDA_MEMCPY3D` (cuda.h, the `_v2` layout `cuMemcpy3D_v2` takes), memory
/// types as plain integers, as [`Memcpy2D`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: *mut c_void,
    pub reserved0: *mut c_void,
    pub src_pitch: usize,
    pub src_height: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_z: usize,
    pub dst_lod: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: *mut c_void,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

// The layouts above are cuda.h's: every field where cudarc's bindgen puts it.
const _: () = {
    use core::mem::{offset_of, size_of};
    use cudarc::driver::sys::{CUDA_MEMCPY2D as C2, CUDA_MEMCPY3D as C3};
    assert!(size_of::<Memcpy2D>() == size_of::<C2>());
    assert!(offset_of!(Memcpy2D, src_memory_type) == offset_of!(C2, srcMemoryType));
    assert!(offset_of!(Memcpy2D, src_host) == offset_of!(C2, srcHost));
    assert!(offset_of!(Memcpy2D, src_pitch) == offset_of!(C2, srcPitch));
    assert!(offset_of!(Memcpy2D, dst_x_in_bytes) == offset_of!(C2, dstXInBytes));
    assert!(offset_of!(Memcpy2D, dst_y) == offset_of!(C2, dstY));
    assert!(offset_of!(Memcpy2D, dst_memory_type) == offset_of!(C2, dstMemoryType));
    assert!(offset_of!(Memcpy2D, dst_host) == offset_of!(C2, dstHost));
    assert!(offset_of!(Memcpy2D, dst_device) == offset_of!(C2, dstDevice));
    assert!(offset_of!(Memcpy2D, dst_array) == offset_of!(C2, dstArray));
    assert!(offset_of!(Memcpy2D, dst_pitch) == offset_of!(C2, dstPitch));
    assert!(offset_of!(Memcpy2D, width_in_bytes) == offset_of!(C2, WidthInBytes));
    assert!(offset_of!(Memcpy2D, height) == offset_of!(C2, Height));
    assert!(size_of::<Memcpy3D>() == size_of::<C3>());
    assert!(offset_of!(Memcpy3D, src_memory_type) == offset_of!(C3, srcMemoryType));
    assert!(offset_of!(Memcpy3D, src_height) == offset_of!(C3, srcHeight));
    assert!(offset_of!(Memcpy3D, dst_x_in_bytes) == offset_of!(C3, dstXInBytes));
    assert!(offset_of!(Memcpy3D, dst_y) == offset_of!(C3, dstY));
    assert!(offset_of!(Memcpy3D, dst_z) == offset_of!(C3, dstZ));
    assert!(offset_of!(Memcpy3D, dst_lod) == offset_of!(C3, dstLOD));
    assert!(offset_of!(Memcpy3D, dst_memory_type) == offset_of!(C3, dstMemoryType));
    assert!(offset_of!(Memcpy3D, dst_device) == offset_of!(C3, dstDevice));
    assert!(offset_of!(Memcpy3D, dst_pitch) == offset_of!(C3, dstPitch));
    assert!(offset_of!(Memcpy3D, dst_height) == offset_of!(C3, dstHeight));
    assert!(offset_of!(Memcpy3D, width_in_bytes) == offset_of!(C3, WidthInBytes));
    assert!(offset_of!(Memcpy3D, height) == offset_of!(C3, Height));
    assert!(offset_of!(Memcpy3D, depth) == offset_of!(C3, Depth));
};
