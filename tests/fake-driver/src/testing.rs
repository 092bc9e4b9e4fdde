//! Helpers for unit tests that drive the fake through its exported entry points, in this test
//! process.
//!
//! The driver state is one per process and the test harness runs tests on parallel threads, so
//! every such test holds [`Driver`] (a global test lock) for its whole body. `Driver` also makes
//! the primary context current on the calling thread and clears a sticky error a previous test
//! may have left on purpose.

use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use crate::exports::*;
use crate::types::*;
use crate::vmm::GRANULARITY;

static SERIAL: Mutex<()> = Mutex::new(());

const CU_MEM_ALLOCATION_TYPE_PINNED: u32 = 1;
const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: u32 = 1;
pub const PROT_NONE: u32 = 0;
pub const PROT_READ: u32 = 1;
pub const PROT_READWRITE: u32 = 3;

/// Asserts a driver call returned `CUDA_SUCCESS`.
#[track_caller]
pub fn ok(rc: CUresult) {
    assert_eq!(rc, CUDA_SUCCESS, "driver call failed");
}

/// Exclusive use of the (process-global) fake driver, initialised, with a current context.
pub struct Driver {
    _serial: MutexGuard<'static, ()>,
}

impl Driver {
    pub fn new() -> Driver {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        crate::state::lock().sticky_error = None;
        let mut ctx: Handle = std::ptr::null_mut();
        // SAFETY: valid flags and out-pointers.
        unsafe {
            ok(cuInit(0));
            ok(cuDevicePrimaryCtxRetain(&mut ctx, 0));
            ok(cuCtxSetCurrent(ctx));
        }
        Driver { _serial: serial }
    }

    /// The sticky error of the context, if any.
    pub fn sticky(&self) -> Option<CUresult> {
        crate::state::lock().sticky_error
    }

    /// `cuMemAlloc_v2(size)`.
    pub fn alloc(&self, size: usize) -> CUdeviceptr {
        let mut p = 0;
        // SAFETY: valid out-pointer.
        ok(unsafe { cuMemAlloc_v2(&mut p, size) });
        p
    }

    /// `cuMemFree_v2`.
    pub fn free(&self, p: CUdeviceptr) {
        // SAFETY: plain value arguments.
        ok(unsafe { cuMemFree_v2(p) });
    }

    /// `cuMemCreate(size)`, exportable as a POSIX fd.
    pub fn create(&self, size: usize) -> CUmemGenericAllocationHandle {
        let prop = prop();
        let mut h = 0;
        // SAFETY: valid out-pointer and property struct.
        ok(unsafe { cuMemCreate(&mut h, size, &prop, 0) });
        h
    }

    /// `cuMemAddressReserve(size)`.
    pub fn reserve(&self, size: usize) -> CUdeviceptr {
        let mut p = 0;
        // SAFETY: valid out-pointer.
        ok(unsafe { cuMemAddressReserve(&mut p, size, 0, 0, 0) });
        p
    }

    /// `cuMemMap` + `cuMemSetAccess(prot)` of `handle` (of `size` bytes) at `ptr`.
    pub fn map(&self, ptr: CUdeviceptr, size: usize, h: CUmemGenericAllocationHandle, prot: u32) {
        // SAFETY: plain value arguments.
        ok(unsafe { cuMemMap(ptr, size, 0, h, 0) });
        self.set_access(ptr, size, prot);
    }

    /// `cuMemSetAccess(prot)` on device 0.
    pub fn set_access(&self, ptr: CUdeviceptr, size: usize, prot: u32) {
        let desc = CUmemAccessDesc {
            location: CUmemLocation {
                type_: CU_MEM_LOCATION_TYPE_DEVICE,
                id: 0,
            },
            flags: prot,
        };
        // SAFETY: one valid descriptor.
        ok(unsafe { cuMemSetAccess(ptr, size, &desc, 1) });
    }

    /// One granule created, reserved, mapped with `prot`: `(address, handle)`.
    pub fn vmm_granule(&self, prot: u32) -> (CUdeviceptr, CUmemGenericAllocationHandle) {
        let h = self.create(GRANULARITY);
        let p = self.reserve(GRANULARITY);
        self.map(p, GRANULARITY, h, prot);
        (p, h)
    }

    /// Undoes `vmm_granule`.
    pub fn vmm_free(&self, p: CUdeviceptr, h: CUmemGenericAllocationHandle) {
        // SAFETY: plain value arguments.
        unsafe {
            ok(cuMemUnmap(p, GRANULARITY));
            ok(cuMemRelease(h));
            ok(cuMemAddressFree(p, GRANULARITY));
        }
    }

    /// Writes `bytes` at device address `p` (`cuMemcpyHtoD_v2`).
    pub fn upload(&self, p: CUdeviceptr, bytes: &[u8]) {
        // SAFETY: `bytes` is valid for its length.
        ok(unsafe { cuMemcpyHtoD_v2(p, bytes.as_ptr().cast(), bytes.len()) });
    }

    /// Reads `n` bytes at device address `p` (`cuMemcpyDtoH_v2`).
    pub fn download(&self, p: CUdeviceptr, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        // SAFETY: `v` is valid for `n` bytes of writes.
        ok(unsafe { cuMemcpyDtoH_v2(v.as_mut_ptr().cast(), p, n) });
        v
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // A test that poisoned the context on purpose must not poison the next one.
        crate::state::lock().sticky_error = None;
    }
}

/// Pinned device memory on device 0, exportable as a POSIX fd.
pub fn prop() -> CUmemAllocationProp {
    CUmemAllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requested_handle_types: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: CUmemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: 0,
        },
        win32_handle_meta_data: std::ptr::null_mut(),
        alloc_flags: CUmemAllocFlags {
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        },
    }
}

/// A host buffer's address as a `CUdeviceptr` (for the unified-addressing copies).
pub fn host_addr<T>(p: *const T) -> CUdeviceptr {
    p.cast::<c_void>().expose_provenance() as CUdeviceptr
}
