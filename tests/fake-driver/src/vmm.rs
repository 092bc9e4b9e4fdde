//! Virtual memory management (`cuMemCreate` & co.) on real host VM primitives. Here the
//! physical allocations (create, release, granularity, export, import); the address space
//! (reserve, map, access) is `crate::address_space`:
//!
//! - a physical allocation is a memfd (`memfd_create` + `ftruncate`), its size a multiple of the
//!   2 MiB granularity;
//! - `cuMemAddressReserve` is `mmap(PROT_NONE, MAP_NORESERVE)`, `cuMemAddressFree` is `munmap`;
//! - `cuMemMap` maps the memfd `MAP_SHARED | MAP_FIXED` at the address, initially `PROT_NONE`;
//!   `cuMemSetAccess` is `mprotect`; `cuMemUnmap` puts the reserved `PROT_NONE` pages back;
//! - shareable handles are POSIX file descriptors (`dup` of the memfd).
//!
//! So a read-only mapping really is read-only, and an exported allocation imported in another
//! process really shares its bytes.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::state::memory::total_mem;
use crate::state::vmm::Phys;
use crate::state::{lock, State};
use crate::types::*;

/// Allocation granularity (minimum and recommended), as measured on an H100.
pub const GRANULARITY: usize = 2 << 20;

const CU_MEM_ALLOCATION_TYPE_PINNED: c_uint = 1;
pub(crate) const CU_MEM_LOCATION_TYPE_DEVICE: c_int = 1;
const CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: c_uint = 1;
/// `CU_MEM_HANDLE_TYPE_WIN32 | _WIN32_KMT | _FABRIC`: known to CUDA, not supported here.
const UNSUPPORTED_HANDLE_TYPES: c_uint = 0x2 | 0x4 | 0x8;
/// Drops a physical allocation once it is released and unmapped (closing its memfd).
pub(crate) fn reap(st: &mut State, handle: u64) {
    let done = matches!(st.vmm.handles.get(&handle), Some(p) if p.released && p.mappings == 0);
    if done {
        if let Some(p) = st.vmm.handles.remove(&handle) {
            if !p.imported {
                st.bytes_allocated = st.bytes_allocated.saturating_sub(p.size as u64);
            }
        }
    }
}

/// Validates a `CUmemAllocationProp` (pinned device memory on device 0); returns whether POSIX
/// fd export was requested.
///
/// # Safety
/// `prop` must be NULL or valid for a read.
unsafe fn check_prop(prop: *const CUmemAllocationProp) -> CuResult<bool> {
    // SAFETY: forwarded caller contract.
    let prop = unsafe { read_in(prop) }?;
    if prop.type_ != CU_MEM_ALLOCATION_TYPE_PINNED
        || prop.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE
    {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if prop.location.id != 0 {
        return Err(CUDA_ERROR_INVALID_DEVICE);
    }
    let types = prop.requested_handle_types;
    if types & UNSUPPORTED_HANDLE_TYPES != 0 {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    if types & !(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | UNSUPPORTED_HANDLE_TYPES) != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    Ok(types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR != 0)
}

/// # Safety
/// `granularity` must be NULL or valid for a write; `prop` NULL or valid for a read.
pub unsafe fn get_allocation_granularity(
    granularity: *mut usize,
    prop: *const CUmemAllocationProp,
    option: c_uint,
) -> CuResult<()> {
    // SAFETY: forwarded caller contract.
    unsafe { check_prop(prop) }?;
    // CU_MEM_ALLOC_GRANULARITY_MINIMUM (0) or _RECOMMENDED (1).
    if option > 1 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: forwarded caller contract.
    unsafe { write_out(granularity, reported_granularity()) }
}

/// The granularity `cuMemGetAllocationGranularity` answers: [`GRANULARITY`],
/// or `FAKECUDA_VMM_GRANULARITY_MIB` MiB when set (a GPU whose granules are
/// larger than the H100's; the driver's own checks stay at 2 MiB, which the
/// larger sizes are multiples of), for the shim's refusal to share on such
/// a GPU (`tests/e2e/tests/dedup.rs`).
fn reported_granularity() -> usize {
    static MIB: std::sync::OnceLock<Option<usize>> = std::sync::OnceLock::new();
    MIB.get_or_init(|| {
        std::env::var("FAKECUDA_VMM_GRANULARITY_MIB")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|&m| m > 0)
    })
    .map_or(GRANULARITY, |m| m << 20)
}

/// # Safety
/// `out` must be NULL or valid for a write; `prop` NULL or valid for a read.
pub unsafe fn mem_create(
    out: *mut CUmemGenericAllocationHandle,
    size: usize,
    prop: *const CUmemAllocationProp,
    flags: c_ulonglong,
) -> CuResult<()> {
    if out.is_null() || flags != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: forwarded caller contract.
    let exportable = unsafe { check_prop(prop) }?;
    let mut st = lock();
    st.check_sticky()?;
    if st.bytes_allocated.saturating_add(size as u64) > total_mem() {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let len = libc::off_t::try_from(size).map_err(|_| CUDA_ERROR_OUT_OF_MEMORY)?;
    // SAFETY: a valid NUL-terminated name and valid flags.
    let raw = unsafe { libc::memfd_create(c"fakecuda-vmm".as_ptr(), libc::MFD_CLOEXEC) };
    if raw < 0 {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: `raw` is a fresh fd we own; `OwnedFd` closes it exactly once.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: plain syscall on an fd we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len) } != 0 {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    let h = st.new_handle() as u64;
    st.vmm.handles.insert(
        h,
        Phys {
            fd,
            size,
            imported: false,
            exportable,
            released: false,
            mappings: 0,
        },
    );
    st.bytes_allocated = st.bytes_allocated.saturating_add(size as u64);
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, h) }
}

pub fn mem_release(h: CUmemGenericAllocationHandle) -> CuResult<()> {
    let mut st = lock();
    match st.vmm.handles.get_mut(&h) {
        Some(p) if !p.released => p.released = true,
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    }
    reap(&mut st, h);
    Ok(())
}

/// `cuMemExportToShareableHandle` for `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: writes a new fd
/// (a `dup` of the memfd, close-on-exec) as an `int` to `*shareable`; the caller owns it.
///
/// # Safety
/// `shareable` must be NULL or valid for a write of `int`.
pub unsafe fn export_to_shareable_handle(
    shareable: *mut c_void,
    h: CUmemGenericAllocationHandle,
    handle_type: c_uint,
    flags: c_ulonglong,
) -> CuResult<()> {
    if shareable.is_null() || flags != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let st = lock();
    let fd = match st.vmm.handles.get(&h) {
        Some(p) if !p.released && p.exportable => p.fd.as_raw_fd(),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    // SAFETY: plain syscall on a live fd we own.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    // SAFETY: non-NULL, caller contract (an `int` for this handle type).
    unsafe { write_out(shareable.cast::<c_int>(), dup) }
}

/// `cuMemImportFromShareableHandle` for a POSIX fd (passed as `(void*)(uintptr_t)fd`). The
/// caller keeps its fd; the fake holds its own `dup`. An import costs no device memory.
///
/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn import_from_shareable_handle(
    out: *mut CUmemGenericAllocationHandle,
    os_handle: *mut c_void,
    handle_type: c_uint,
) -> CuResult<()> {
    if out.is_null() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if handle_type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR {
        return Err(CUDA_ERROR_NOT_SUPPORTED);
    }
    let fd = c_int::try_from(os_handle.addr()).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    // SAFETY: `stat` is plain old data; fstat fills it or fails (then it is not read).
    let mut sb: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `sb` is a valid out-buffer; a bad fd just makes fstat fail.
    if unsafe { libc::fstat(fd, &mut sb) } != 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let size = usize::try_from(sb.st_size).map_err(|_| CUDA_ERROR_INVALID_VALUE)?;
    if size == 0 || !size.is_multiple_of(GRANULARITY) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: plain syscall; `fd` was just checked to be open.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `dup` is a fresh fd we own; `OwnedFd` closes it exactly once.
    let owned = unsafe { OwnedFd::from_raw_fd(dup) };
    let mut st = lock();
    let h = st.new_handle() as u64;
    st.vmm.handles.insert(
        h,
        Phys {
            fd: owned,
            size,
            imported: true,
            exportable: true,
            released: false,
            mappings: 0,
        },
    );
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, h) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::*;
    use crate::introspect::{
        fakecuda_device_bytes_used, fakecuda_vmm_created_bytes, fakecuda_vmm_imported_bytes,
    };
    use crate::state::memory::{Access, RangeFault};
    use crate::state::vmm::{Mapping, Prot, Vmm};
    use crate::testing::{ok, Driver, PROT_READ, PROT_READWRITE};

    /// (created, imported, used, cuMemGetInfo free).
    fn accounting() -> (u64, u64, u64, u64) {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers.
        ok(unsafe { cuMemGetInfo_v2(&mut free, &mut total) });
        assert_eq!(total as u64, crate::state::memory::total_mem());
        assert_eq!(
            free as u64,
            total as u64 - fakecuda_device_bytes_used(),
            "cuMemGetInfo's free is total minus what this process costs the device"
        );
        (
            fakecuda_vmm_created_bytes(),
            fakecuda_vmm_imported_bytes(),
            fakecuda_device_bytes_used(),
            free as u64,
        )
    }

    #[test]
    fn created_and_imported_bytes_through_a_memfd_round_trip() {
        let d = Driver::new();
        let g = GRANULARITY as u64;
        let (c0, i0, u0, f0) = accounting();

        // Created: costs the device.
        let h = d.create(2 * GRANULARITY);
        assert_eq!(accounting(), (c0 + 2 * g, i0, u0 + 2 * g, f0 - 2 * g));

        // Exported as an fd and imported again: the import costs nothing.
        let mut fd: c_int = -1;
        // SAFETY: `fd` is valid for a write of an int.
        ok(unsafe {
            cuMemExportToShareableHandle(
                (&raw mut fd).cast(),
                h,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            )
        });
        assert!(fd >= 0);
        let mut imp = 0;
        // SAFETY: valid out-pointer; the fd travels as the pointer's value.
        ok(unsafe {
            cuMemImportFromShareableHandle(
                &mut imp,
                std::ptr::without_provenance_mut(fd as usize),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            )
        });
        // SAFETY: the fd the export handed us, closed once; the import holds its own.
        unsafe { libc::close(fd) };
        assert_eq!(
            accounting(),
            (c0 + 2 * g, i0 + 2 * g, u0 + 2 * g, f0 - 2 * g)
        );

        // Both map the same bytes: written through the creator, read through the import,
        // and the import mapped read-only refuses a write.
        let size = 2 * GRANULARITY;
        let (p1, p2) = (d.reserve(size), d.reserve(size));
        d.map(p1, size, h, PROT_READWRITE);
        d.map(p2, size, imp, PROT_READ);
        let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
        d.upload(p1 + g + 5, &bytes);
        assert_eq!(d.download(p2 + g + 5, bytes.len()), bytes);
        // SAFETY: a live host buffer of that length.
        let rc = unsafe { cuMemcpyHtoD_v2(p2, bytes.as_ptr().cast(), bytes.len()) };
        assert_eq!(rc, CUDA_ERROR_INVALID_VALUE);

        // Released but still mapped: still referenced, still counted.
        // SAFETY: plain value arguments.
        unsafe {
            ok(cuMemRelease(imp));
            ok(cuMemRelease(h));
        }
        assert_eq!(
            accounting(),
            (c0 + 2 * g, i0 + 2 * g, u0 + 2 * g, f0 - 2 * g)
        );
        // Unmapping the import frees nothing of the device; the creator's data is intact.
        // SAFETY: plain value arguments.
        ok(unsafe { cuMemUnmap(p2, size) });
        assert_eq!(accounting(), (c0 + 2 * g, i0, u0 + 2 * g, f0 - 2 * g));
        assert_eq!(d.download(p1 + g + 5, bytes.len()), bytes);
        // Unmapping the creator's last mapping gives the memory back.
        // SAFETY: plain value arguments.
        ok(unsafe { cuMemUnmap(p1, size) });
        assert_eq!(accounting(), (c0, i0, u0, f0));

        // A plain allocation is device memory but not VMM memory.
        let a = d.alloc(12345);
        assert_eq!(accounting(), (c0, i0, u0 + 12345, f0 - 12345));
        d.free(a);
        // An unreleased import with no mapping is still referenced by its handle.
        let h = d.create(GRANULARITY);
        let mut fd: c_int = -1;
        let mut imp = 0;
        // SAFETY: as above.
        unsafe {
            ok(cuMemExportToShareableHandle(
                (&raw mut fd).cast(),
                h,
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                0,
            ));
            ok(cuMemImportFromShareableHandle(
                &mut imp,
                std::ptr::without_provenance_mut(fd as usize),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
            ));
            libc::close(fd);
            ok(cuMemRelease(h));
        }
        assert_eq!(accounting(), (c0, i0 + g, u0, f0));
        // SAFETY: plain value arguments.
        unsafe {
            ok(cuMemRelease(imp));
            ok(cuMemAddressFree(p1, size));
            ok(cuMemAddressFree(p2, size));
        }
        assert_eq!(accounting(), (c0, i0, u0, f0));
    }

    fn vmm_with(maps: &[(u64, usize, Prot)]) -> Vmm {
        let mut v = Vmm::new();
        for &(start, size, prot) in maps {
            v.mappings.insert(
                start,
                Mapping {
                    size,
                    handle: 1,
                    prot,
                },
            );
        }
        v
    }

    #[test]
    fn range_across_contiguous_mappings() {
        let g = GRANULARITY as u64;
        let v = vmm_with(&[
            (g, GRANULARITY, Prot::ReadWrite),
            (2 * g, GRANULARITY, Prot::Read),
        ]);
        assert_eq!(v.check_range(g, GRANULARITY, Access::Write), Ok(()));
        assert_eq!(v.check_range(g, 2 * GRANULARITY, Access::Read), Ok(()));
        assert_eq!(
            v.check_range(g, 2 * GRANULARITY, Access::Write),
            Err(RangeFault::Protected)
        );
        assert_eq!(
            v.check_range(2 * g, GRANULARITY + 1, Access::Read),
            Err(RangeFault::Unmapped)
        );
        assert_eq!(v.check_range(0, 1, Access::Read), Err(RangeFault::Unmapped));
    }

    #[test]
    fn unset_access_is_protected() {
        let g = GRANULARITY as u64;
        let v = vmm_with(&[(g, GRANULARITY, Prot::None)]);
        assert_eq!(
            v.check_range(g, 4, Access::Read),
            Err(RangeFault::Protected)
        );
    }

    #[test]
    fn whole_mappings_must_tile_exactly() {
        let g = GRANULARITY as u64;
        let v = vmm_with(&[
            (g, GRANULARITY, Prot::None),
            (2 * g, GRANULARITY, Prot::None),
        ]);
        assert_eq!(v.whole_mappings(g, 2 * GRANULARITY), Some(vec![g, 2 * g]));
        assert_eq!(v.whole_mappings(g, GRANULARITY), Some(vec![g]));
        assert_eq!(v.whole_mappings(g, GRANULARITY / 2), None);
        assert_eq!(v.whole_mappings(g + 4096, GRANULARITY), None);
        assert_eq!(v.whole_mappings(g, 0), None);
    }
}
