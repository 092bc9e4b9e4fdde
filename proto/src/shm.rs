//! Shared-memory regions: sealed memfds mapped `MAP_SHARED`.
//!
//! The coordinator [`create`]s a region (memfd, `ftruncate`, `mmap`, then
//! seals `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) and sends the fd with
//! SCM_RIGHTS. The client [`map_received`]s it, which checks with `fstat` and
//! `F_GET_SEALS` that the fd is the announced size and can never shrink (a
//! shrink under a live mapping would turn the next ring access into SIGBUS)
//! before mapping it. Seals are applied before the fd leaves the creator, so
//! the creator's own mapping is equally protected.

use core::ptr::NonNull;
use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::error::{Error, Result};

/// Seals every tandem region carries, and that [`map_received`] requires.
pub const REQUIRED_SEALS: u32 =
    (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL) as u32;

/// An owned `MAP_SHARED` read-write mapping; unmapped on drop.
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
    /// Map `len` bytes of `fd` at offset 0, shared, read-write.
    fn map_fd(fd: BorrowedFd<'_>, len: usize) -> Result<Mapping> {
        Self::mmap_shared(len, libc::MAP_SHARED, fd.as_raw_fd())
    }

    /// Map `len` bytes of `fd` at offset 0, shared, read-only: a store
    /// through it faults (an fd opened read-only can be mapped no other way).
    fn map_fd_read_only(fd: BorrowedFd<'_>, len: usize) -> Result<Mapping> {
        Self::mmap_prot(len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd())
    }

    /// An anonymous `MAP_SHARED` mapping of `len` zero bytes: shared with
    /// children across `fork`, no fd. For tests, benches, and single-process use.
    pub fn anonymous_shared(len: usize) -> Result<Mapping> {
        Self::mmap_shared(len, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1)
    }

    /// A fresh read-write mapping of `len` bytes with `flags`, of `fd` at
    /// offset 0 (or -1 with `MAP_ANONYMOUS`).
    fn mmap_shared(len: usize, flags: libc::c_int, fd: libc::c_int) -> Result<Mapping> {
        Self::mmap_prot(len, libc::PROT_READ | libc::PROT_WRITE, flags, fd)
    }

    fn mmap_prot(
        len: usize,
        prot: libc::c_int,
        flags: libc::c_int,
        fd: libc::c_int,
    ) -> Result<Mapping> {
        if len == 0 {
            return Err(Error::RegionTooSmall { len, needed: 1 });
        }
        // SAFETY: asking the kernel for a fresh mapping; no existing memory is
        // affected. The result is checked for MAP_FAILED.
        let p = unsafe { libc::mmap(core::ptr::null_mut(), len, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            return Err(Error::last_os("mmap"));
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).ok_or(Error::Os {
                op: "mmap",
                errno: libc::EINVAL,
            })?,
            len,
        })
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
        // the borrow checker guarantees no Producer/Consumer/ControlBlock
        // borrowing it is still alive.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Create a sealed memfd of `len` zero bytes, named `name` (visible in
/// `/proc/PID/fd`), and map it. Returns the fd (close-on-exec) and the mapping.
pub fn create(name: &CStr, len: usize) -> Result<(OwnedFd, Mapping)> {
    // SAFETY: `name` is a valid NUL-terminated string; flags are constants.
    let raw =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if raw < 0 {
        return Err(Error::last_os("memfd_create"));
    }
    // SAFETY: memfd_create returned a fresh fd that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let off = libc::off_t::try_from(len).map_err(|_| Error::Os {
        op: "ftruncate",
        errno: libc::EFBIG,
    })?;
    // SAFETY: plain syscall on an fd we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), off) } < 0 {
        return Err(Error::last_os("ftruncate"));
    }
    let map = Mapping::map_fd(fd_borrow(&fd), len)?;
    // SAFETY: plain fcntl on an fd we own.
    if unsafe {
        libc::fcntl(
            fd.as_raw_fd(),
            libc::F_ADD_SEALS,
            REQUIRED_SEALS as libc::c_int,
        )
    } < 0
    {
        return Err(Error::last_os("fcntl(F_ADD_SEALS)"));
    }
    Ok((fd, map))
}

fn fd_borrow(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// Map a region fd received from the peer, after checking that it is exactly
/// `expected_len` bytes (`fstat`) and carries [`REQUIRED_SEALS`] (`F_GET_SEALS`;
/// a non-memfd fails here too).
pub fn map_received(fd: BorrowedFd<'_>, expected_len: usize) -> Result<Mapping> {
    check_received(fd, expected_len)?;
    Mapping::map_fd(fd, expected_len)
}

/// [`map_received`], mapped read-only (a descriptor opened read-only, as
/// [`reopen_read_only`] makes, can be mapped no other way).
pub fn map_received_read_only(fd: BorrowedFd<'_>, expected_len: usize) -> Result<Mapping> {
    check_received(fd, expected_len)?;
    Mapping::map_fd_read_only(fd, expected_len)
}

/// A second descriptor of the same memfd, opened read-only
/// (`/proc/self/fd/N`, `O_RDONLY`): a process given only this one can read
/// the memory and never write it.
pub fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    let path = format!("/proc/self/fd/{}\0", fd.as_raw_fd());
    // SAFETY: `path` is NUL-terminated; flags are constants.
    let raw = unsafe { libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if raw < 0 {
        return Err(Error::last_os("open(/proc/self/fd, O_RDONLY)"));
    }
    // SAFETY: open returned a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The checks of [`map_received`]: seals and size.
fn check_received(fd: BorrowedFd<'_>, expected_len: usize) -> Result<()> {
    // SAFETY: plain fcntl on a borrowed, open fd.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        return Err(Error::last_os("fcntl(F_GET_SEALS)"));
    }
    let seals = seals as u32;
    if seals & REQUIRED_SEALS != REQUIRED_SEALS {
        return Err(Error::MissingSeals {
            have: seals,
            need: REQUIRED_SEALS,
        });
    }
    // SAFETY: an all-zero `stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer; fd is open.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(Error::last_os("fstat"));
    }
    let actual = st.st_size as u64;
    if actual != expected_len as u64 {
        return Err(Error::RegionSize {
            expected: expected_len as u64,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn create_and_map_received_share_memory() {
        let (fd, a) = create(c"tandem-test", 8192).unwrap();
        let b = map_received(fd.as_fd(), 8192).unwrap();
        assert_ne!(a.as_ptr(), b.as_ptr());
        let wa = a.as_ptr().cast::<core::sync::atomic::AtomicU64>();
        let wb = b.as_ptr().cast::<core::sync::atomic::AtomicU64>();
        // SAFETY: both mappings are live, page-aligned, at least 8 bytes.
        unsafe {
            (*wa.add(3)).store(0xFEED, core::sync::atomic::Ordering::Relaxed);
            assert_eq!(
                (*wb.add(3)).load(core::sync::atomic::Ordering::Relaxed),
                0xFEED
            );
        }
        // Seals hold: the fd can neither shrink nor grow.
        // SAFETY: plain syscalls on an fd we own.
        unsafe {
            assert!(libc::ftruncate(fd.as_raw_fd(), 4096) < 0);
            assert!(libc::ftruncate(fd.as_raw_fd(), 16384) < 0);
        }
    }

    #[test]
    fn a_read_only_descriptor_maps_read_only_and_sees_the_writers_stores() {
        let (fd, a) = create(c"tandem-test-ro", 4096).unwrap();
        let ro = reopen_read_only(fd.as_fd()).unwrap();
        assert!(
            map_received(ro.as_fd(), 4096).is_err(),
            "a read-only fd cannot be mapped writable"
        );
        let b = map_received_read_only(ro.as_fd(), 4096).unwrap();
        let wa = a.as_ptr().cast::<core::sync::atomic::AtomicU64>();
        let wb = b.as_ptr().cast::<core::sync::atomic::AtomicU64>();
        // SAFETY: both mappings are live and at least 8 bytes; `b` is only read.
        unsafe {
            (*wa).store(0xBEEF, core::sync::atomic::Ordering::Relaxed);
            assert_eq!((*wb).load(core::sync::atomic::Ordering::Relaxed), 0xBEEF);
        }
        // SAFETY: plain syscall on the fd we own: not writable.
        assert!(unsafe { libc::write(ro.as_raw_fd(), b"x".as_ptr().cast(), 1) } < 0);
    }

    #[test]
    fn map_received_rejects_wrong_size_and_unsealed() {
        let (fd, _a) = create(c"tandem-test", 8192).unwrap();
        assert_eq!(
            map_received(fd.as_fd(), 4096).err(),
            Some(Error::RegionSize {
                expected: 4096,
                actual: 8192
            })
        );
        // An unsealed memfd.
        // SAFETY: valid C string, constant flags.
        let raw = unsafe { libc::memfd_create(c"unsealed".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0);
        // SAFETY: fresh fd.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: fd we own.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), 8192) }, 0);
        assert!(matches!(
            map_received(fd.as_fd(), 8192),
            Err(Error::MissingSeals { .. })
        ));
        // A regular file / pipe: F_GET_SEALS fails with EINVAL.
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert_eq!(
            map_received(f.as_fd(), 8192).err().and_then(|e| e.errno()),
            Some(libc::EINVAL)
        );
    }
}
