//! Little-endian reads from byte slices, shared by the wire codecs
//! ([`crate::wire`], [`crate::dedup`], [`crate::follow`]). A leaf module.
//! Bounds are checked by the callers before they read.

/// The `u16` at `b[at..at + 2]`, little-endian.
pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at `b[at..at + 4]`, little-endian.
pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The `u64` at `b[at..at + 8]`, little-endian.
pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
