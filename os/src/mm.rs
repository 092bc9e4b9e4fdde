//! The owned shared mapping every tandem region is seen through.

use core::ffi::c_void;
use core::ptr::NonNull;
use std::os::fd::BorrowedFd;

use rustix::mm::{self, MapFlags, ProtFlags};

use crate::error::{Error, Result};

/// An owned `MAP_SHARED` mapping; unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is an address range; it hands out only raw pointers, and
// all tandem access to the bytes goes through atomics. Unmapping on drop from
// any thread is fine.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` exposes nothing but the pointer and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd` at offset 0, shared; read-write unless
    /// `read_only` (a store through a read-only mapping faults; a descriptor
    /// opened read-only can be mapped no other way).
    pub fn shared(fd: BorrowedFd<'_>, len: usize, read_only: bool) -> Result<Mapping> {
        let prot = if read_only {
            ProtFlags::READ
        } else {
            ProtFlags::READ | ProtFlags::WRITE
        };
        // SAFETY: asking the kernel for a fresh mapping at an address of its
        // choosing; no existing memory is affected.
        let p = unsafe { mm::mmap(core::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }
            .map_err(Error::at("mmap"))?;
        Self::from_raw(p, len)
    }

    /// An anonymous `MAP_SHARED` mapping of `len` zero bytes: shared with
    /// children across `fork`, no fd.
    pub fn anonymous_shared(len: usize) -> Result<Mapping> {
        // SAFETY: as in `shared`: a fresh mapping, nothing else affected.
        let p = unsafe {
            mm::mmap_anonymous(
                core::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
            )
        }
        .map_err(Error::at("mmap"))?;
        Self::from_raw(p, len)
    }

    fn from_raw(p: *mut c_void, len: usize) -> Result<Mapping> {
        let ptr = NonNull::new(p.cast())
            .ok_or(Error::new("mmap", rustix::io::Errno::INVAL.raw_os_error()))?;
        Ok(Mapping { ptr, len })
    }

    /// Base address (page-aligned).
    #[must_use]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false` (a mapping is never empty); here for clippy's sake.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Give up ownership without unmapping (e.g. to keep a region alive for
    /// the rest of the process from a `static`). Returns `(base, len)`.
    #[must_use]
    pub fn leak(self) -> (*mut u8, usize) {
        let parts = (self.ptr.as_ptr(), self.len);
        core::mem::forget(self);
        parts
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this mapping (created by mmap with this length) and
        // the borrow checker guarantees nothing borrowing it is still alive.
        let _ = unsafe { mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Replace `len` bytes at `addr` in place with anonymous, private, zero
/// memory (`MAP_FIXED`): whatever was mapped there is released and a late
/// access lands harmlessly.
///
/// # Safety
/// `addr..addr + len` is a page-aligned range this process mapped and
/// nothing reads as anything but bytes it may lose.
pub unsafe fn replace_with_anonymous(addr: *mut u8, len: usize) -> Result<()> {
    // SAFETY: the caller guarantees the range is ours to replace; MAP_FIXED
    // over our own mapping swaps its pages atomically.
    unsafe {
        mm::mmap_anonymous(
            addr.cast(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::FIXED,
        )
    }
    .map(|_| ())
    .map_err(Error::at("mmap(MAP_FIXED)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicU64, Ordering};
    use std::os::fd::AsFd;

    #[test]
    fn two_mappings_of_one_memfd_share_their_bytes() {
        let fd = crate::memfd::create(c"tandem-os-mm").unwrap();
        crate::memfd::set_len(fd.as_fd(), 4096).unwrap();
        let a = Mapping::shared(fd.as_fd(), 4096, false).unwrap();
        let b = Mapping::shared(fd.as_fd(), 4096, true).unwrap();
        assert_ne!(a.as_ptr(), b.as_ptr());
        // SAFETY: both mappings are live, page-aligned and 4096 bytes.
        unsafe {
            (*a.as_ptr().cast::<AtomicU64>()).store(0xFEED, Ordering::Relaxed);
            assert_eq!(
                (*b.as_ptr().cast::<AtomicU64>()).load(Ordering::Relaxed),
                0xFEED
            );
        }
        let e = Mapping::anonymous_shared(0).unwrap_err();
        assert_eq!(
            (e.op(), e.errno()),
            ("mmap", rustix::io::Errno::INVAL.raw_os_error())
        );
    }
}
