//! The VMM address space: `cuMemAddressReserve`/`cuMemAddressFree` (`mmap(PROT_NONE)` and
//! `munmap`), `cuMemMap`/`cuMemUnmap` (the memfd mapped `MAP_SHARED | MAP_FIXED`, and
//! `PROT_NONE` pages put back), `cuMemSetAccess` (`mprotect`).

use std::ffi::{c_uint, c_ulonglong, c_void};
use std::os::fd::AsRawFd;

use crate::state::memory::device_ptr;
use crate::state::vmm::{Mapping, Prot};
use crate::state::{lock, State};
use crate::types::*;
use crate::vmm::{reap, CU_MEM_LOCATION_TYPE_DEVICE, GRANULARITY};

const CU_MEM_ACCESS_FLAGS_PROT_NONE: c_uint = 0;
const CU_MEM_ACCESS_FLAGS_PROT_READ: c_uint = 1;
const CU_MEM_ACCESS_FLAGS_PROT_READWRITE: c_uint = 3;

/// Puts reserved `PROT_NONE` pages back over `[start, start + size)` and forgets the mapping.
fn unmap_one(st: &mut State, start: u64) -> CuResult<()> {
    let Some(m) = st.vmm.mappings.get(&start) else {
        return Err(CUDA_ERROR_INVALID_VALUE);
    };
    let (size, h) = (m.size, m.handle);
    // SAFETY: `[start, start + size)` is one of our mappings inside one of our reservations;
    // replacing it with fresh PROT_NONE anonymous pages touches no memory of anyone else.
    let r = unsafe {
        libc::mmap(
            device_ptr(start).cast::<c_void>(),
            size,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if r == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    st.vmm.mappings.remove(&start);
    if let Some(p) = st.vmm.handles.get_mut(&h) {
        p.mappings = p.mappings.saturating_sub(1);
    }
    reap(st, h);
    Ok(())
}

/// # Safety
/// `out` must be NULL or valid for a write.
pub unsafe fn address_reserve(
    out: *mut CUdeviceptr,
    size: usize,
    alignment: usize,
    addr: CUdeviceptr,
    flags: c_ulonglong,
) -> CuResult<()> {
    if out.is_null() || flags != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if alignment != 0 && !alignment.is_power_of_two() {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let align = alignment.max(GRANULARITY);
    let prot = libc::PROT_NONE;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    let mut st = lock();
    // First honour the caller's hint if the kernel gives exactly that address.
    let mut start = None;
    if addr != 0 && addr.is_multiple_of(align as u64) {
        // SAFETY: no MAP_FIXED: the kernel picks a free range (the hint or elsewhere).
        let p = unsafe { libc::mmap(device_ptr(addr).cast(), size, prot, flags, -1, 0) };
        if p != libc::MAP_FAILED {
            if p.addr() as u64 == addr {
                start = Some(p.expose_provenance() as u64);
            } else {
                // SAFETY: unmapping the range this call just mapped.
                unsafe { libc::munmap(p, size) };
            }
        }
    }
    let start = match start {
        Some(s) => s,
        None => {
            let total = size.checked_add(align).ok_or(CUDA_ERROR_OUT_OF_MEMORY)?;
            // SAFETY: no MAP_FIXED: a fresh range chosen by the kernel.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), total, prot, flags, -1, 0) };
            if p == libc::MAP_FAILED {
                return Err(CUDA_ERROR_OUT_OF_MEMORY);
            }
            let base = p.expose_provenance();
            let aligned = base.next_multiple_of(align);
            let head = aligned - base;
            let tail = total - head - size;
            // SAFETY: trimming the unaligned head and the tail of the range just mapped.
            unsafe {
                if head > 0 {
                    libc::munmap(p, head);
                }
                if tail > 0 {
                    libc::munmap(p.cast::<u8>().add(head + size).cast(), tail);
                }
            }
            aligned as u64
        }
    };
    st.vmm.reservations.insert(start, size);
    // SAFETY: non-NULL, caller contract.
    unsafe { write_out(out, start) }
}

pub fn address_free(ptr: CUdeviceptr, size: usize) -> CuResult<()> {
    let mut st = lock();
    if st.vmm.reservations.get(&ptr) != Some(&size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // Mappings still inside the range are dropped with it (their handles lose a reference).
    let end = ptr.saturating_add(size as u64);
    let inside: Vec<(u64, u64)> = st
        .vmm
        .mappings
        .range(ptr..end)
        .map(|(&s, m)| (s, m.handle))
        .collect();
    for (s, h) in inside {
        st.vmm.mappings.remove(&s);
        if let Some(p) = st.vmm.handles.get_mut(&h) {
            p.mappings = p.mappings.saturating_sub(1);
        }
        reap(&mut st, h);
    }
    st.vmm.reservations.remove(&ptr);
    // SAFETY: `[ptr, ptr + size)` is exactly a reservation this fake mmapped.
    unsafe { libc::munmap(device_ptr(ptr).cast(), size) };
    Ok(())
}

pub fn mem_map(
    ptr: CUdeviceptr,
    size: usize,
    offset: usize,
    h: CUmemGenericAllocationHandle,
    flags: c_ulonglong,
) -> CuResult<()> {
    // CUDA: offset "must be zero" and flags "must be zero".
    if flags != 0 || offset != 0 || size == 0 || !size.is_multiple_of(GRANULARITY) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if !ptr.is_multiple_of(GRANULARITY as u64) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut st = lock();
    let (fd, phys_size) = match st.vmm.handles.get(&h) {
        Some(p) if !p.released => (p.fd.as_raw_fd(), p.size),
        _ => return Err(CUDA_ERROR_INVALID_VALUE),
    };
    if size > phys_size {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    if st.vmm.reservation_containing(ptr, size).is_none() || st.vmm.overlaps_mapping(ptr, size) {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    // SAFETY: `[ptr, ptr + size)` lies in one of our reservations and overlaps no mapping, so
    // MAP_FIXED replaces only our own PROT_NONE placeholder pages; `fd` is a live memfd of at
    // least `size` bytes.
    let p = unsafe {
        libc::mmap(
            device_ptr(ptr).cast(),
            size,
            libc::PROT_NONE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(CUDA_ERROR_OUT_OF_MEMORY);
    }
    st.vmm.mappings.insert(
        ptr,
        Mapping {
            size,
            handle: h,
            prot: Prot::None,
        },
    );
    if let Some(p) = st.vmm.handles.get_mut(&h) {
        p.mappings += 1;
    }
    Ok(())
}

/// `cuMemUnmap`: the range must consist of whole mappings.
pub fn mem_unmap(ptr: CUdeviceptr, size: usize) -> CuResult<()> {
    let mut st = lock();
    let starts = st
        .vmm
        .whole_mappings(ptr, size)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    for s in starts {
        unmap_one(&mut st, s)?;
    }
    Ok(())
}

/// `cuMemSetAccess`: the range must consist of whole mappings; device 0 only.
///
/// # Safety
/// `desc` must be NULL or valid for `count` reads.
pub unsafe fn mem_set_access(
    ptr: CUdeviceptr,
    size: usize,
    desc: *const CUmemAccessDesc,
    count: usize,
) -> CuResult<()> {
    if desc.is_null() || count == 0 {
        return Err(CUDA_ERROR_INVALID_VALUE);
    }
    let mut prot = Prot::None;
    for i in 0..count {
        // SAFETY: `desc` is valid for `count` reads (caller contract) and `i < count`.
        let d = unsafe { desc.add(i).read_unaligned() };
        if d.location.type_ != CU_MEM_LOCATION_TYPE_DEVICE {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        if d.location.id != 0 {
            return Err(CUDA_ERROR_INVALID_DEVICE);
        }
        prot = match d.flags {
            CU_MEM_ACCESS_FLAGS_PROT_NONE => Prot::None,
            CU_MEM_ACCESS_FLAGS_PROT_READ => Prot::Read,
            CU_MEM_ACCESS_FLAGS_PROT_READWRITE => Prot::ReadWrite,
            _ => return Err(CUDA_ERROR_INVALID_VALUE),
        };
    }
    let mut st = lock();
    let starts = st
        .vmm
        .whole_mappings(ptr, size)
        .ok_or(CUDA_ERROR_INVALID_VALUE)?;
    for s in starts {
        let Some(m) = st.vmm.mappings.get_mut(&s) else {
            return Err(CUDA_ERROR_INVALID_VALUE);
        };
        // SAFETY: `[s, s + m.size)` is one of our own mappings.
        let r = unsafe { libc::mprotect(device_ptr(s).cast(), m.size, prot.to_mprotect()) };
        if r != 0 {
            return Err(CUDA_ERROR_INVALID_VALUE);
        }
        m.prot = prot;
    }
    Ok(())
}
