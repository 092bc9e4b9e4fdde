//! C types, constants and `#[repr(C)]` layouts of cuda.h that the fake driver needs.
//!
//! Defined locally (not taken from cudarc) so that the fake stays independent of the
//! shim's type choices: a layout mistake on one side is then not silently shared by both.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::size_of;

/// `CUresult`: a plain `u32`, never a Rust enum (a driver may return values we do not know).
pub type CUresult = c_uint;
pub type CUdevice = c_int;
pub type CUdeviceptr = u64;
pub type CUmemGenericAllocationHandle = u64;
/// Every opaque handle of cuda.h (`CUcontext`, `CUmodule`, `CUfunction`, `CUstream`, `CUevent`,
/// `CUgraph`, `CUgraphNode`, `CUgraphExec`, `CUmemoryPool`) is a pointer-sized opaque value.
pub type Handle = *mut c_void;

pub const CUDA_SUCCESS: CUresult = 0;
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
pub const CUDA_ERROR_INVALID_IMAGE: CUresult = 200;
pub const CUDA_ERROR_INVALID_CONTEXT: CUresult = 201;
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
pub const CUDA_ERROR_NOT_FOUND: CUresult = 500;
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_ILLEGAL_ADDRESS: CUresult = 700;
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;
pub const CUDA_ERROR_ILLEGAL_STATE: CUresult = 401;
pub const CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED: CUresult = 900;

/// Internal result type: `Err` carries the `CUresult` to hand back.
pub type CuResult<T> = Result<T, CUresult>;

/// `CU_STREAM_LEGACY` and `CU_STREAM_PER_THREAD` (cuda.h: `((CUstream)0x1)`, `((CUstream)0x2)`).
pub const CU_STREAM_LEGACY: usize = 0x1;
pub const CU_STREAM_PER_THREAD: usize = 0x2;

/// `CUlaunchConfig` (cuda.h, CUDA 11.8+).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUlaunchConfig {
    pub grid_dim_x: c_uint,
    pub grid_dim_y: c_uint,
    pub grid_dim_z: c_uint,
    pub block_dim_x: c_uint,
    pub block_dim_y: c_uint,
    pub block_dim_z: c_uint,
    pub shared_mem_bytes: c_uint,
    pub h_stream: Handle,
    pub attrs: *mut c_void,
    pub num_attrs: c_uint,
}

/// `CUDA_KERNEL_NODE_PARAMS_v2` (cuda.h, CUDA 12.0+).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct KernelNodeParamsV2 {
    pub func: Handle,
    pub grid_dim_x: c_uint,
    pub grid_dim_y: c_uint,
    pub grid_dim_z: c_uint,
    pub block_dim_x: c_uint,
    pub block_dim_y: c_uint,
    pub block_dim_z: c_uint,
    pub shared_mem_bytes: c_uint,
    pub kernel_params: *mut *mut c_void,
    pub extra: *mut *mut c_void,
    pub kern: Handle,
    pub ctx: Handle,
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemLocation {
    pub type_: c_int,
    pub id: c_int,
}

/// The `allocFlags` member of `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocFlags {
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

/// `CUmemAllocationProp`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAllocationProp {
    pub type_: c_uint,
    pub requested_handle_types: c_uint,
    pub location: CUmemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub alloc_flags: CUmemAllocFlags,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUmemAccessDesc {
    pub location: CUmemLocation,
    pub flags: c_uint,
}

/// `CUuuid`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CUuuid {
    pub bytes: [c_char; 16],
}

/// `CUmemorytype` (cuda.h): where one side of a 2D/3D copy lies.
pub const CU_MEMORYTYPE_HOST: c_uint = 1;
pub const CU_MEMORYTYPE_DEVICE: c_uint = 2;
pub const CU_MEMORYTYPE_ARRAY: c_uint = 3;
pub const CU_MEMORYTYPE_UNIFIED: c_uint = 4;

/// `CUDA_MEMCPY2D` (the `_v2` layout). Memory types are plain integers: the caller may put
/// anything there.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy2D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: Handle,
    pub src_pitch: usize,
    pub dst_x_in_bytes: usize,
    pub dst_y: usize,
    pub dst_memory_type: c_uint,
    pub dst_host: *mut c_void,
    pub dst_device: CUdeviceptr,
    pub dst_array: Handle,
    pub dst_pitch: usize,
    pub width_in_bytes: usize,
    pub height: usize,
}

/// `CUDA_MEMCPY3D` (the `_v2` layout), memory types as plain integers.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Memcpy3D {
    pub src_x_in_bytes: usize,
    pub src_y: usize,
    pub src_z: usize,
    pub src_lod: usize,
    pub src_memory_type: c_uint,
    pub src_host: *const c_void,
    pub src_device: CUdeviceptr,
    pub src_array: Handle,
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
    pub dst_array: Handle,
    pub reserved1: *mut c_void,
    pub dst_pitch: usize,
    pub dst_height: usize,
    pub width_in_bytes: usize,
    pub height: usize,
    pub depth: usize,
}

// The layouts must match cuda.h on x86_64/aarch64 Linux exactly.
const _: () = assert!(size_of::<CUlaunchConfig>() == 56);
const _: () = assert!(size_of::<KernelNodeParamsV2>() == 72);
const _: () = assert!(size_of::<CUmemAllocationProp>() == 32);
const _: () = assert!(size_of::<CUmemAccessDesc>() == 12);
const _: () = assert!(size_of::<CUuuid>() == 16);
const _: () = assert!(size_of::<Memcpy2D>() == 128);
const _: () = assert!(size_of::<Memcpy3D>() == 200);
const _: () = assert!(std::mem::offset_of!(Memcpy3D, dst_memory_type) == 120);

/// Writes `value` through an out-pointer, failing with `CUDA_ERROR_INVALID_VALUE` on NULL.
///
/// # Safety
/// `out` must be NULL or valid for a write of `T` (the cuda.h contract of the caller).
pub unsafe fn write_out<T>(out: *mut T, value: T) -> CuResult<()> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, and the caller guarantees it is valid for a write of `T`.
    unsafe { out.write_unaligned(value) };
    Ok(())
}

/// Reads a `T` through an in-pointer, failing with `CUDA_ERROR_INVALID_VALUE` on NULL.
///
/// # Safety
/// `ptr` must be NULL or valid for a read of `T`.
pub unsafe fn read_in<T: Copy>(ptr: *const T) -> CuResult<T> {
    if ptr.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-NULL, and the caller guarantees it is valid for a read of `T`.
    Ok(unsafe { ptr.read_unaligned() })
}

/// Turns an opaque handle into the key the fake's tables use.
pub fn key(handle: Handle) -> usize {
    handle.addr()
}

/// Turns a table key back into an opaque handle.
pub fn handle(key: usize) -> Handle {
    std::ptr::without_provenance_mut(key)
}
