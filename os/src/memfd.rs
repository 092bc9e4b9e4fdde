//! memfds: anonymous files that back tandem's shared regions, their size,
//! their seals, and a read-only second descriptor of one.

use core::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use rustix::fs::{self, MemfdFlags, Mode, OFlags, SealFlags};

use crate::error::{Error, Result};

/// `F_SEAL_SHRINK`.
pub const SEAL_SHRINK: u32 = SealFlags::SHRINK.bits();
/// `F_SEAL_GROW`.
pub const SEAL_GROW: u32 = SealFlags::GROW.bits();
/// `F_SEAL_SEAL`.
pub const SEAL_SEAL: u32 = SealFlags::SEAL.bits();

/// A new memfd named `name` (visible in `/proc/PID/fd`), close-on-exec,
/// sealable.
pub fn create(name: &CStr) -> Result<OwnedFd> {
    fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(Error::at("memfd_create"))
}

/// Set the file's size (`ftruncate`).
pub fn set_len(fd: BorrowedFd<'_>, len: u64) -> Result<()> {
    fs::ftruncate(fd, len).map_err(Error::at("ftruncate"))
}

/// The file's size (`fstat`).
pub fn len(fd: BorrowedFd<'_>) -> Result<u64> {
    let st = fs::fstat(fd).map_err(Error::at("fstat"))?;
    Ok(st.st_size as u64)
}

/// Add the `F_SEAL_*` bits `seals` (`F_ADD_SEALS`).
pub fn add_seals(fd: BorrowedFd<'_>, seals: u32) -> Result<()> {
    fs::fcntl_add_seals(fd, SealFlags::from_bits_retain(seals))
        .map_err(Error::at("fcntl(F_ADD_SEALS)"))
}

/// The file's `F_SEAL_*` bits (`F_GET_SEALS`; `EINVAL` for a file that is
/// not a memfd).
pub fn seals(fd: BorrowedFd<'_>) -> Result<u32> {
    fs::fcntl_get_seals(fd)
        .map(|s| s.bits())
        .map_err(Error::at("fcntl(F_GET_SEALS)"))
}

/// A second descriptor of the same file, opened read-only through
/// `/proc/self/fd/N` (close-on-exec): a process given only this one can
/// read the memory and never write it. The path is built on the stack.
pub fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut path = [0u8; PREFIX.len() + 11];
    path[..PREFIX.len()].copy_from_slice(PREFIX);
    let mut digits = [0u8; 10];
    let mut n = fd.as_raw_fd() as u32;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let d = &digits[i..];
    path[PREFIX.len()..PREFIX.len() + d.len()].copy_from_slice(d);
    let path = CStr::from_bytes_until_nul(&path).expect("the buffer ends in NUL");
    fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .map_err(Error::at("open(/proc/self/fd, O_RDONLY)"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn seals_hold_and_a_reopened_descriptor_is_read_only() {
        let fd = create(c"tandem-os-test").unwrap();
        set_len(fd.as_fd(), 8192).unwrap();
        assert_eq!(len(fd.as_fd()).unwrap(), 8192);
        add_seals(fd.as_fd(), SEAL_SHRINK | SEAL_GROW | SEAL_SEAL).unwrap();
        assert_eq!(seals(fd.as_fd()).unwrap() & SEAL_SHRINK, SEAL_SHRINK);
        let e = set_len(fd.as_fd(), 4096).unwrap_err();
        assert_eq!(
            (e.op(), e.errno()),
            ("ftruncate", rustix::io::Errno::PERM.raw_os_error())
        );
        let ro = reopen_read_only(fd.as_fd()).unwrap();
        assert_eq!(len(ro.as_fd()).unwrap(), 8192);
        let flags = rustix::fs::fcntl_getfl(&ro).unwrap();
        assert_eq!(flags & OFlags::ACCMODE, OFlags::RDONLY);
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(seals(f.as_fd())
            .unwrap_err()
            .is(rustix::io::Errno::INVAL.raw_os_error()));
    }
}
