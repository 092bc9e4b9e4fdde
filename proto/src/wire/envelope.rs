//! The envelope every message travels in: the 12-byte header (magic,
//! version, type code, body length), the type codes, and the length and value
//! checks every body codec shares.

use crate::bytes::{get_u16, get_u32};
use crate::error::{Error, Result};

pub use crate::magic::WIRE_MAGIC;
/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Bytes in the message header.
pub const HEADER_LEN: usize = 12;

pub(crate) const TYPE_HELLO: u16 = 1;
pub(crate) const TYPE_WELCOME: u16 = 2;
pub(crate) const TYPE_REJECT: u16 = 3;
pub(crate) const TYPE_FUNC_NAME: u16 = 4;
pub(crate) const TYPE_DEVICE: u16 = 5;
pub(crate) const TYPE_CONTROL: u16 = 6;
pub(crate) const TYPE_CONTROL_REPLY: u16 = 7;
pub(crate) const TYPE_DEDUP: u16 = 8;
pub(crate) const TYPE_FOLLOW: u16 = 9;
pub(crate) const TYPE_BOARD: u16 = 10;

/// The type code of [`Message::Dedup`](super::Message::Dedup) (see [`message_type`]).
pub const MESSAGE_TYPE_DEDUP: u16 = TYPE_DEDUP;
/// The type code of [`Message::Follow`](super::Message::Follow) (see [`message_type`]).
pub const MESSAGE_TYPE_FOLLOW: u16 = TYPE_FOLLOW;

/// The type code in a datagram's header, if it has a whole header with the
/// right magic (whatever its version or body). Lets a receiver tell which
/// kind of message failed to decode.
#[must_use]
pub fn message_type(buf: &[u8]) -> Option<u16> {
    if buf.len() < HEADER_LEN || get_u32(buf, 0) != WIRE_MAGIC {
        return None;
    }
    Some(get_u16(buf, 6))
}

pub(super) fn need(what: &'static str, have: usize, need: usize) -> Result<()> {
    if have < need {
        Err(Error::Truncated { what, need, have })
    } else {
        Ok(())
    }
}

pub(super) fn exact(what: &'static str, declared: usize, actual: usize) -> Result<()> {
    if declared != actual {
        Err(Error::LengthMismatch {
            what,
            declared,
            actual,
        })
    } else {
        Ok(())
    }
}

pub(super) fn bounded(field: &'static str, len: usize, max: usize) -> Result<()> {
    if len > max {
        Err(Error::FieldTooLong { field, len, max })
    } else {
        Ok(())
    }
}

pub(super) fn no_nul(field: &'static str, bytes: &[u8]) -> Result<()> {
    if bytes.contains(&0) {
        Err(Error::BadValue { field, value: 0 })
    } else {
        Ok(())
    }
}

/// Encoding's check of a flags byte: only bits this build knows.
pub(super) fn flags(field: &'static str, v: u8, known: u8) -> Result<u8> {
    if v & !known != 0 {
        Err(Error::BadValue {
            field,
            value: u64::from(v),
        })
    } else {
        Ok(v)
    }
}
