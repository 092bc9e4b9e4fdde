//! How each shared layout and message recognises itself: the magic numbers,
//! versions and bounds checked when a region is attached or a message decoded.
//!
//! A leaf module: the layouts ([`crate::ring`], [`crate::board`],
//! [`crate::wire`]) check these values and re-export them, and the error type
//! ([`crate::error`]) quotes them in its messages, without either depending on
//! the other.

/// Magic number at offset 0 of every ring region (`"TANDEMRG"` in ASCII, little-endian).
pub const RING_MAGIC: u64 = u64::from_le_bytes(*b"TANDEMRG");
/// Smallest allowed ring capacity, in records.
pub const MIN_CAPACITY: u32 = 16;
/// Largest allowed ring capacity, in records (256 MiB of records).
pub const MAX_CAPACITY: u32 = 1 << 22;

/// The GPU board's magic: `TANDEMBD`, little-endian.
pub const BOARD_MAGIC: u64 = u64::from_le_bytes(*b"TANDEMBD");
/// The GPU board's layout version; a mismatch means shim and tandemd were built apart.
pub const BOARD_VERSION: u32 = 1;

/// Wire magic, the first four bytes of every message (`"TNDM"`).
pub const WIRE_MAGIC: u32 = u32::from_le_bytes(*b"TNDM");
