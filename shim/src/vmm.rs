//! A thin typed layer over the VMM driver calls the shim makes on its own
//! behalf (never the program's), for weight dedup and follow mode:
//! reserve/create/map/access/export/import, context and stream plumbing, and
//! the copies dedup uses to hash and compare granules.
//!
//! Built on [`crate::calls`] (one error type, [`DriverError`], naming the call).

use core::ffi::{c_int, c_uint, c_void};

use crate::types::{CUdeviceptr, CUmemGenericAllocationHandle, CUstream};

use crate::calls::{check, hooked, missing, support};
pub use crate::calls::{ctx_current, ctx_set_current, DriverError, Result};

/// `CUmemLocation` (cuda.h): type + id.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemLocation {
    type_: c_uint,
    id: c_int,
}

/// `CUmemAllocationProp` (cuda.h, 32 bytes on 64-bit Linux).
#[repr(C)]
#[derive(Clone, Copy)]
struct AllocationProp {
    type_: c_uint,
    requested_handle_types: c_uint,
    location: MemLocation,
    win32_handle_meta_data: *mut c_void,
    compression_type: u8,
    gpu_direct_rdma_capable: u8,
    usage: u16,
    reserved: [u8; 4],
}

/// `CUmemAccessDesc` (cuda.h, 12 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
struct AccessDesc {
    location: MemLocation,
    flags: c_uint,
}

const _: () = assert!(core::mem::size_of::<AllocationProp>() == 32);
const _: () = assert!(core::mem::size_of::<AccessDesc>() == 12);

const CU_MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;
const CU_MEM_LOCATION_TYPE_DEVICE: c_uint = 1;
const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: c_uint = 1;
const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: c_uint = 1;
const CU_STREAM_NON_BLOCKING: c_uint = 1;

/// Access a mapping grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `CU_MEM_ACCESS_FLAGS_PROT_READ`.
    Read = 1,
    /// `CU_MEM_ACCESS_FLAGS_PROT_READWRITE`.
    ReadWrite = 3,
}

fn prop(device: c_int) -> AllocationProp {
    AllocationProp {
        type_: CU_MEM_ALLOCATION_TYPE_PINNED,
        requested_handle_types: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        location: MemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        win32_handle_meta_data: core::ptr::null_mut(),
        compression_type: 0,
        gpu_direct_rdma_capable: 0,
        usage: 0,
        reserved: [0; 4],
    }
}

/// The device of the current context.
pub fn ctx_device() -> Result<c_int> {
    let f = support!(CtxGetDevice, fn(*mut c_int))?;
    let mut d: c_int = 0;
    // SAFETY: valid out-pointer.
    check("cuCtxGetDevice", unsafe { f(&mut d) })?;
    Ok(d)
}

/// Waits for all work of the current context.
pub fn ctx_synchronize() -> Result<()> {
    let f = hooked!(cuCtxSynchronize, fn())?;
    // SAFETY: no arguments.
    check("cuCtxSynchronize", unsafe { f() })
}

/// The recommended VMM granularity for shareable device memory on `device`.
pub fn granularity(device: c_int) -> Result<usize> {
    let f = support!(
        MemGetAllocationGranularity,
        fn(*mut usize, *const AllocationProp, c_uint)
    )?;
    let p = prop(device);
    let mut g = 0usize;
    // SAFETY: valid out-pointer and property struct.
    check("cuMemGetAllocationGranularity", unsafe {
        f(&mut g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    })?;
    if g == 0 {
        return Err(missing("cuMemGetAllocationGranularity"));
    }
    Ok(g)
}

/// Reserves `size` bytes of device address space aligned to `align`.
pub fn reserve(size: usize, align: usize) -> Result<CUdeviceptr> {
    let f = support!(
        MemAddressReserve,
        fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, u64)
    )?;
    let mut va: CUdeviceptr = 0;
    // SAFETY: valid out-pointer; no fixed address requested.
    check("cuMemAddressReserve", unsafe {
        f(&mut va, size, align, 0, 0)
    })?;
    Ok(va)
}

/// Returns a reservation.
pub fn address_free(va: CUdeviceptr, size: usize) -> Result<()> {
    let f = support!(MemAddressFree, fn(CUdeviceptr, usize))?;
    // SAFETY: `va..va+size` is a reservation we made and no longer map.
    check("cuMemAddressFree", unsafe { f(va, size) })
}

/// Creates one shareable (POSIX fd) physical allocation of `size` bytes.
pub fn create(size: usize, device: c_int) -> Result<CUmemGenericAllocationHandle> {
    let f = hooked!(
        cuMemCreate,
        fn(*mut CUmemGenericAllocationHandle, usize, *const CUmemAllocationPropRaw, u64)
    )?;
    let p = prop(device);
    let mut h: CUmemGenericAllocationHandle = 0;
    // SAFETY: valid out-pointer and property struct (our layout is cuda.h's;
    // the hook table types the pointer as cudarc's struct of the same layout).
    check("cuMemCreate", unsafe {
        f(&mut h, size, (&raw const p).cast(), 0)
    })?;
    Ok(h)
}

/// Whether a program's `cuMemCreate` property struct asks for device memory
/// (`location.type == CU_MEM_LOCATION_TYPE_DEVICE`; not host or host-NUMA
/// memory). Read through this module's own layout, whose fields are plain
/// integers: the value may be one no Rust enum knows.
///
/// # Safety
/// `prop` is NULL or the pointer the program passed to a `cuMemCreate` that
/// succeeded (the driver read a whole struct there).
pub unsafe fn prop_is_device(prop: *const crate::types::CUmemAllocationProp) -> bool {
    if prop.is_null() {
        return false;
    }
    // SAFETY: per this function's contract the struct is readable; ours has
    // cuda.h's layout (size asserted above) and integer fields only.
    let p = unsafe { prop.cast::<AllocationProp>().read_unaligned() };
    p.location.type_ == CU_MEM_LOCATION_TYPE_DEVICE
}

/// cudarc's `CUmemAllocationProp`, as the hook table declares cuMemCreate.
type CUmemAllocationPropRaw = crate::types::CUmemAllocationProp;

/// Releases one reference to a physical allocation.
pub fn release(h: CUmemGenericAllocationHandle) -> Result<()> {
    let f = hooked!(cuMemRelease, fn(CUmemGenericAllocationHandle))?;
    // SAFETY: `h` is a handle we hold.
    check("cuMemRelease", unsafe { f(h) })
}

/// Maps `h` at `va` (a reserved, unmapped range of `size` bytes).
pub fn map(va: CUdeviceptr, size: usize, h: CUmemGenericAllocationHandle) -> Result<()> {
    let f = hooked!(
        cuMemMap,
        fn(CUdeviceptr, usize, usize, CUmemGenericAllocationHandle, u64)
    )?;
    // SAFETY: `va` is reserved by us and unmapped; `h` is a handle we hold.
    check("cuMemMap", unsafe { f(va, size, 0, h, 0) })
}

/// Unmaps the whole mapping at `va`.
pub fn unmap(va: CUdeviceptr, size: usize) -> Result<()> {
    let f = hooked!(cuMemUnmap, fn(CUdeviceptr, usize))?;
    // SAFETY: `va..va+size` is exactly one mapping we made.
    check("cuMemUnmap", unsafe { f(va, size) })
}

/// Grants `access` to `va..va+size` from `device`.
pub fn set_access(va: CUdeviceptr, size: usize, device: c_int, access: Access) -> Result<()> {
    let f = support!(
        MemSetAccess,
        fn(CUdeviceptr, usize, *const AccessDesc, usize)
    )?;
    let d = AccessDesc {
        location: MemLocation {
            type_: CU_MEM_LOCATION_TYPE_DEVICE,
            id: device,
        },
        flags: access as c_uint,
    };
    // SAFETY: one valid descriptor; the range is mapped by us.
    check("cuMemSetAccess", unsafe { f(va, size, &d, 1) })
}

/// Exports `h` as a POSIX file descriptor (owned by the caller).
pub fn export_fd(h: CUmemGenericAllocationHandle) -> Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let f = support!(
        MemExportToShareableHandle,
        fn(*mut c_void, CUmemGenericAllocationHandle, c_uint, u64)
    )?;
    let mut fd: c_int = -1;
    // SAFETY: for POSIX_FILE_DESCRIPTOR the out-parameter is an int.
    check("cuMemExportToShareableHandle", unsafe {
        f(
            (&raw mut fd).cast(),
            h,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            0,
        )
    })?;
    if fd < 0 {
        return Err(missing("cuMemExportToShareableHandle"));
    }
    // Close-on-exec: a program that forks and execs must not hand the
    // memory it names to the new program (the driver does not set it).
    // SAFETY: F_SETFD on the descriptor the driver just gave us.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the driver gave us a new descriptor we now own.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Imports a shareable fd; the fd stays the caller's.
pub fn import_fd(fd: std::os::fd::BorrowedFd<'_>) -> Result<CUmemGenericAllocationHandle> {
    use std::os::fd::AsRawFd;
    let f = support!(
        MemImportFromShareableHandle,
        fn(*mut CUmemGenericAllocationHandle, *mut c_void, c_uint)
    )?;
    let mut h: CUmemGenericAllocationHandle = 0;
    // SAFETY: for POSIX_FILE_DESCRIPTOR the OS handle is the fd's value cast to
    // a pointer (cuda.h); the fd is open for the duration of the call.
    check("cuMemImportFromShareableHandle", unsafe {
        f(
            &mut h,
            fd.as_raw_fd() as isize as *mut c_void,
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        )
    })?;
    Ok(h)
}

/// A non-blocking stream at the lowest priority, for dedup's own copies.
pub fn low_priority_stream() -> Result<CUstream> {
    let create = support!(StreamCreateWithPriority, fn(*mut CUstream, c_uint, c_int))?;
    let mut least: c_int = 0;
    let mut greatest: c_int = 0;
    if let Ok(range) = support!(CtxGetStreamPriorityRange, fn(*mut c_int, *mut c_int)) {
        // SAFETY: valid out-pointers.
        let _ = unsafe { range(&mut least, &mut greatest) };
    }
    let mut s: CUstream = core::ptr::null_mut();
    // SAFETY: valid out-pointer. `least` is the numerically greatest (lowest) priority.
    check("cuStreamCreateWithPriority", unsafe {
        create(&mut s, CU_STREAM_NON_BLOCKING, least)
    })?;
    Ok(s)
}

/// Copies `dst.len()` bytes of device memory at `src` to the host, on `stream`,
/// and waits for it.
pub fn read_to_host(dst: &mut [u8], src: CUdeviceptr, stream: CUstream) -> Result<()> {
    let copy = hooked!(
        cuMemcpyDtoHAsync_v2,
        fn(*mut c_void, CUdeviceptr, usize, CUstream)
    )?;
    let sync = hooked!(cuStreamSynchronize, fn(CUstream))?;
    // SAFETY: `dst` is writable for its length and outlives the synchronise
    // below; `src` is mapped readable by us.
    check("cuMemcpyDtoHAsync_v2", unsafe {
        copy(dst.as_mut_ptr().cast(), src, dst.len(), stream)
    })?;
    // SAFETY: our own stream.
    check("cuStreamSynchronize", unsafe { sync(stream) })
}

/// Synchronous device-to-device copy of `n` bytes.
pub fn copy_on_device(dst: CUdeviceptr, src: CUdeviceptr, n: usize) -> Result<()> {
    let f = hooked!(cuMemcpyDtoD_v2, fn(CUdeviceptr, CUdeviceptr, usize))?;
    // SAFETY: both ranges are mapped by us (dst writable).
    check("cuMemcpyDtoD_v2", unsafe { f(dst, src, n) })
}
