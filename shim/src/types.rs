//! C types at the driver boundary.
//!
//! Handles and structs come from `cudarc::driver::sys` (bindgen of `cuda.h`); its
//! functions are never called from the shim (they would re-enter our own hooks).
//! `CUresult` is *not* taken from there: a newer driver may return values that no
//! Rust enum knows, so results cross the boundary as a transparent `u32`.

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
