//! The crate's one error type.
//!
//! A thin typed layer in the style of `rustix`/`nix`: OS failures keep the
//! operation name and the raw `errno`; layout, ring and wire failures carry the
//! values that were wrong. No variant allocates, so errors can be built on the
//! shim's allocation-free paths. `Display` says what was wrong and, where there
//! is one, what to do about it.

use core::fmt;

/// Result alias used throughout the crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Everything that can go wrong in `tandem-proto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    // ---- operating system ----
    /// A system call failed; `errno` is preserved exactly.
    Os {
        /// The call that failed (`"memfd_create"`, `"mmap"`, ...).
        op: &'static str,
        /// The raw `errno` value.
        errno: i32,
    },

    // ---- shared-memory region / layout ----
    /// A ring capacity that is zero, not a power of two, or out of range.
    BadCapacity {
        /// The capacity (in records) that was asked for or found.
        capacity: u64,
    },
    /// The region is smaller than the layout needs.
    RegionTooSmall {
        /// Bytes available.
        len: usize,
        /// Bytes the layout needs.
        needed: usize,
    },
    /// The region's base address is not aligned as the layout requires.
    RegionMisaligned {
        /// The base address.
        addr: usize,
        /// The required alignment in bytes.
        align: usize,
    },
    /// A received memfd's size (fstat) differs from what was announced.
    RegionSize {
        /// The size announced in the Welcome message.
        expected: u64,
        /// The size `fstat` reports.
        actual: u64,
    },
    /// A received memfd lacks seals that make it safe to map.
    MissingSeals {
        /// The seals present (`F_GET_SEALS`).
        have: u32,
        /// The seals required.
        need: u32,
    },
    /// The ring header's magic number is wrong (not a tandem ring, or overwritten).
    RingMagic {
        /// The value found.
        found: u64,
    },
    /// The GPU board ([`crate::board`]) has a foreign magic or another
    /// layout version.
    BoardHeader {
        /// The magic found.
        magic: u64,
        /// The version found.
        version: u32,
    },
    /// The ring header was written by a different layout version.
    LayoutVersion {
        /// The layout version this build uses.
        ours: u32,
        /// The layout version found in the region or message.
        theirs: u32,
    },
    /// A header field that must never change after initialisation has changed
    /// (capacity, record size, offsets, region length).
    HeaderTampered {
        /// Which field.
        field: &'static str,
        /// The value this side knows to be right.
        expected: u64,
        /// The value found in shared memory.
        found: u64,
    },
    /// The producer's published head is behind the consumer's tail or more than
    /// a full ring ahead of it: the head index is garbage.
    RingOverrun {
        /// The head read from shared memory.
        head: u64,
        /// The consumer's own tail.
        tail: u64,
        /// The consumer's own capacity.
        capacity: u64,
    },
    /// The tail in shared memory is not the value the consumer last wrote
    /// (only the consumer writes it; someone else did).
    TailTampered {
        /// The consumer's own tail.
        expected: u64,
        /// The value found in shared memory.
        found: u64,
    },
    /// A record carries an event kind this build does not know.
    UnknownEventKind {
        /// The raw value.
        raw: u16,
    },

    // ---- wire messages ----
    /// A message is shorter than its header or fixed body says it must be.
    Truncated {
        /// What was being decoded.
        what: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// A message does not start with the tandem wire magic.
    WireMagic {
        /// The value found.
        found: u32,
    },
    /// The peer speaks another protocol version.
    VersionMismatch {
        /// The protocol version this side speaks.
        ours: u16,
        /// The protocol version the peer sent.
        theirs: u16,
    },
    /// An unknown message type.
    UnknownMessage {
        /// The raw type value.
        raw: u16,
    },
    /// A message arrived that is valid but not the one expected here.
    UnexpectedMessage {
        /// The message type expected.
        expected: &'static str,
        /// The message type received.
        got: &'static str,
    },
    /// A variable-length field is longer than the protocol allows.
    FieldTooLong {
        /// Which field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The maximum allowed.
        max: usize,
    },
    /// The message length disagrees with the lengths declared inside it.
    LengthMismatch {
        /// Which message.
        what: &'static str,
        /// The length the header and fields declare.
        declared: usize,
        /// The length actually received.
        actual: usize,
    },
    /// A field holds a value outside its allowed set.
    BadValue {
        /// Which field.
        field: &'static str,
        /// The raw value.
        value: u64,
    },
    /// The caller's output buffer cannot hold the encoded message.
    BufferTooSmall {
        /// Bytes needed.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A control message (SCM_RIGHTS) was truncated or malformed, or the
    /// datagram itself was cut short.
    BadAncillary {
        /// What was wrong.
        what: &'static str,
    },
}

impl Error {
    /// Capture the calling thread's `errno` for a failed call named `op`.
    #[must_use]
    pub fn last_os(op: &'static str) -> Self {
        Error::Os {
            op,
            errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        }
    }

    /// The raw `errno`, for OS errors.
    #[must_use]
    pub fn errno(&self) -> Option<i32> {
        match *self {
            Error::Os { errno, .. } => Some(errno),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Os { op, errno } => write!(
                f,
                "{op} failed: {} (errno {errno})",
                std::io::Error::from_raw_os_error(errno)
            ),
            Error::BadCapacity { capacity } => write!(
                f,
                "ring capacity {capacity} is invalid: it must be a power of two between {} and {} records",
                crate::magic::MIN_CAPACITY,
                crate::magic::MAX_CAPACITY
            ),
            Error::RegionTooSmall { len, needed } => write!(
                f,
                "shared-memory region is {len} bytes but the ring layout needs {needed}"
            ),
            Error::RegionMisaligned { addr, align } => write!(
                f,
                "shared-memory region at {addr:#x} is not {align}-byte aligned"
            ),
            Error::RegionSize { expected, actual } => write!(
                f,
                "received shared-memory fd is {actual} bytes, the coordinator announced {expected}; refusing to map it"
            ),
            Error::MissingSeals { have, need } => write!(
                f,
                "received shared-memory fd has seals {have:#x}, needs at least {need:#x} (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL); refusing to map it"
            ),
            Error::RingMagic { found } => write!(
                f,
                "ring header magic is {found:#018x}, expected {:#018x}: not a tandem ring or the header was overwritten",
                crate::magic::RING_MAGIC
            ),
            Error::BoardHeader { magic, version } => write!(
                f,
                "the GPU board has magic {magic:#018x} and version {version}, expected {:#018x} and {}: not a tandem board, or libtandem.so and tandemd come from different tandem releases (install both from one)",
                crate::magic::BOARD_MAGIC,
                crate::magic::BOARD_VERSION
            ),
            Error::LayoutVersion { ours, theirs } => write!(
                f,
                "ring layout version mismatch: this side uses v{ours}, the region says v{theirs}; install libtandem.so and tandemd from the same tandem release"
            ),
            Error::HeaderTampered { field, expected, found } => write!(
                f,
                "ring header field `{field}` changed after initialisation: expected {expected}, found {found}; the client corrupted its ring"
            ),
            Error::RingOverrun { head, tail, capacity } => write!(
                f,
                "ring head {head} is impossible for tail {tail} and capacity {capacity}: the client corrupted its ring"
            ),
            Error::TailTampered { expected, found } => write!(
                f,
                "ring tail in shared memory is {found} but the consumer last wrote {expected}: the client corrupted its ring"
            ),
            Error::UnknownEventKind { raw } => {
                write!(f, "ring record has unknown event kind {raw}")
            }
            Error::Truncated { what, need, have } => write!(
                f,
                "truncated {what}: need {need} bytes, got {have}"
            ),
            Error::WireMagic { found } => write!(
                f,
                "message magic is {found:#010x}, expected {:#010x}: the peer is not speaking the tandem protocol (check $TANDEM_SOCKET points at tandemd)",
                crate::magic::WIRE_MAGIC
            ),
            Error::VersionMismatch { ours, theirs } => write!(
                f,
                "protocol version mismatch: this side speaks tandem protocol v{ours}, the peer speaks v{theirs}; install libtandem.so and tandemd from the same tandem release"
            ),
            Error::UnknownMessage { raw } => write!(f, "unknown message type {raw}"),
            Error::UnexpectedMessage { expected, got } => {
                write!(f, "expected a {expected} message, got {got}")
            }
            Error::FieldTooLong { field, len, max } => write!(
                f,
                "{field} is {len} bytes, the protocol allows at most {max}"
            ),
            Error::LengthMismatch { what, declared, actual } => write!(
                f,
                "malformed {what}: fields declare {declared} bytes but the message is {actual}"
            ),
            Error::BadValue { field, value } => {
                write!(f, "field `{field}` has invalid value {value}")
            }
            Error::BufferTooSmall { need, have } => write!(
                f,
                "output buffer too small: need {need} bytes, have {have}"
            ),
            Error::BadAncillary { what } => write!(f, "bad socket message: {what}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<tandem_os::Error> for Error {
    fn from(e: tandem_os::Error) -> Self {
        Error::Os {
            op: e.op(),
            errno: e.errno(),
        }
    }
}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Os { errno, .. } => std::io::Error::from_raw_os_error(errno),
            other => std::io::Error::new(std::io::ErrorKind::InvalidData, other),
        }
    }
}
