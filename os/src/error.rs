//! The layer's one error type: which call failed, and its `errno`.

use core::fmt;

/// Result alias used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;

/// A system call that failed: its name and the raw `errno`, exactly.
///
/// `Copy`, two words, never allocates (formatting it for a log line is the
/// only thing that may, as `std::io::Error`'s message does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    op: &'static str,
    errno: i32,
}

impl Error {
    /// The call `op` failed with `errno`.
    #[must_use]
    pub const fn new(op: &'static str, errno: i32) -> Error {
        Error { op, errno }
    }

    /// A closure that names a rustix error after `op` (for `map_err`).
    pub(crate) fn at(op: &'static str) -> impl Fn(rustix::io::Errno) -> Error {
        move |e| Error::new(op, e.raw_os_error())
    }

    /// The call that failed (`"memfd_create"`, `"connect"`, ...).
    #[must_use]
    pub const fn op(&self) -> &'static str {
        self.op
    }

    /// The raw `errno`.
    #[must_use]
    pub const fn errno(&self) -> i32 {
        self.errno
    }

    /// Whether the call failed with `errno`.
    #[must_use]
    pub const fn is(&self, errno: i32) -> bool {
        self.errno == errno
    }
}

/// `EINTR`, as this layer's retry loops compare it.
pub(crate) const EINTR: i32 = rustix::io::Errno::INTR.raw_os_error();

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed: {} (errno {})",
            self.op,
            std::io::Error::from_raw_os_error(self.errno),
            self.errno
        )
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        std::io::Error::from_raw_os_error(e.errno)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_call_and_errno_and_says_both() {
        let e = Error::new("connect", rustix::io::Errno::CONNREFUSED.raw_os_error());
        assert_eq!(e.op(), "connect");
        assert!(e.is(rustix::io::Errno::CONNREFUSED.raw_os_error()));
        let io: std::io::Error = e.into();
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        let s = e.to_string();
        assert!(s.starts_with("connect failed: "), "{s}");
        assert!(s.ends_with(&format!("(errno {})", e.errno())), "{s}");
    }
}
