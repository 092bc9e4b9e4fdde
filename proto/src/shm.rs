//! Shared-memory regions: sealed memfds mapped `MAP_SHARED`.
//!
//! The coordinator [`create`]s a region (memfd, `ftruncate`, `mmap`, then
//! seals `F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) and sends the fd with
//! SCM_RIGHTS. The client [`map_received`]s it, which checks with `fstat` and
//! `F_GET_SEALS` that the fd is the announced size and can never shrink (a
//! shrink under a live mapping would turn the next ring access into SIGBUS)
//! before mapping it. Seals are applied before the fd leaves the creator, so
//! the creator's own mapping is equally protected. The system calls are
//! `tandem_os`'s ([`tandem_os::memfd`], [`tandem_os::mm`]); this module is the
//! policy over them.

use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tandem_os::memfd;

use crate::error::{Error, Result};

/// The owned `MAP_SHARED` mapping (`tandem_os::Mapping`), unmapped on drop.
pub use tandem_os::Mapping;

/// Seals every tandem region carries, and that [`map_received`] requires.
pub const REQUIRED_SEALS: u32 = memfd::SEAL_SHRINK | memfd::SEAL_GROW | memfd::SEAL_SEAL;

/// Create a sealed memfd of `len` zero bytes, named `name` (visible in
/// `/proc/PID/fd`), and map it. Returns the fd (close-on-exec) and the mapping.
pub fn create(name: &CStr, len: usize) -> Result<(OwnedFd, Mapping)> {
    let fd = memfd::create(name)?;
    memfd::set_len(fd.as_fd(), len as u64)?;
    let map = map_fd(fd.as_fd(), len, false)?;
    memfd::add_seals(fd.as_fd(), REQUIRED_SEALS)?;
    Ok((fd, map))
}

fn map_fd(fd: BorrowedFd<'_>, len: usize, read_only: bool) -> Result<Mapping> {
    if len == 0 {
        return Err(Error::RegionTooSmall { len, needed: 1 });
    }
    Ok(Mapping::shared(fd, len, read_only)?)
}

/// Map a region fd received from the peer, after checking that it is exactly
/// `expected_len` bytes (`fstat`) and carries [`REQUIRED_SEALS`] (`F_GET_SEALS`;
/// a non-memfd fails here too).
pub fn map_received(fd: BorrowedFd<'_>, expected_len: usize) -> Result<Mapping> {
    check_received(fd, expected_len)?;
    map_fd(fd, expected_len, false)
}

/// [`map_received`], mapped read-only (a descriptor opened read-only, as
/// [`reopen_read_only`] makes, can be mapped no other way).
pub fn map_received_read_only(fd: BorrowedFd<'_>, expected_len: usize) -> Result<Mapping> {
    check_received(fd, expected_len)?;
    map_fd(fd, expected_len, true)
}

/// A second descriptor of the same memfd, opened read-only
/// (`/proc/self/fd/N`, `O_RDONLY`): a process given only this one can read
/// the memory and never write it.
pub fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    Ok(memfd::reopen_read_only(fd)?)
}

/// The checks of [`map_received`]: seals and size.
fn check_received(fd: BorrowedFd<'_>, expected_len: usize) -> Result<()> {
    let seals = memfd::seals(fd)?;
    if seals & REQUIRED_SEALS != REQUIRED_SEALS {
        return Err(Error::MissingSeals {
            have: seals,
            need: REQUIRED_SEALS,
        });
    }
    let actual = memfd::len(fd)?;
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
    use std::os::fd::{AsRawFd, FromRawFd};

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
