//! The operator's requests: tandemctl's Control (reload, set-class) and
//! tandemd's ControlReply.

use crate::bytes::{get_u16, get_u64};
use crate::error::{Error, Result};

use super::envelope::{bounded, exact, need};
use super::registration::{class, ClientClass};

/// Longest ControlReply message text.
pub const MAX_CONTROL_MESSAGE_LEN: usize = 1024;
/// Control body length.
pub const CONTROL_LEN: usize = 12;
/// Fixed part of a ControlReply body.
pub const CONTROL_REPLY_FIXED_LEN: usize = 4;

/// An operator's request (the first message of a tandemctl connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum ControlOp {
    /// Re-read the configuration file (same as SIGHUP).
    Reload = 1,
    /// Change the class of client `client_id` to `class`.
    SetClass = 2,
}

impl ControlOp {
    /// Checked decode of a wire value.
    #[must_use]
    pub const fn from_u16(v: u16) -> Option<ControlOp> {
        match v {
            1 => Some(ControlOp::Reload),
            2 => Some(ControlOp::SetClass),
            _ => None,
        }
    }

    /// Lower-case name, for logs.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ControlOp::Reload => "reload",
            ControlOp::SetClass => "set-class",
        }
    }
}

/// tandemctl -> coordinator: an operator request. Needs privilege (checked with `SO_PEERCRED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Control {
    /// What to do.
    pub op: ControlOp,
    /// The client concerned ([`ControlOp::SetClass`]); 0 otherwise.
    pub client_id: u64,
    /// The class to set ([`ControlOp::SetClass`]); [`ClientClass::Auto`] otherwise.
    pub class: ClientClass,
}

/// Coordinator -> tandemctl: the outcome of a [`Control`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlReply<'a> {
    /// [`ControlReply::OK`], else a [`RejectReason`](super::RejectReason) value.
    pub status: u16,
    /// Human-readable detail, UTF-8, at most [`MAX_CONTROL_MESSAGE_LEN`] bytes.
    pub message: &'a str,
}

impl ControlReply<'_> {
    /// Status of a request that succeeded.
    pub const OK: u16 = 0;

    /// Whether the request succeeded.
    #[must_use]
    pub const fn is_ok(&self) -> bool {
        self.status == Self::OK
    }
}

impl Control {
    pub(super) fn decode_body(b: &[u8]) -> Result<Control> {
        exact("Control", CONTROL_LEN, b.len())?;
        let raw_op = get_u16(b, 0);
        let op = ControlOp::from_u16(raw_op).ok_or(Error::BadValue {
            field: "control op",
            value: u64::from(raw_op),
        })?;
        let class = class("class", b[2])?;
        if b[3] != 0 {
            return Err(Error::BadValue {
                field: "control reserved",
                value: u64::from(b[3]),
            });
        }
        let client_id = get_u64(b, 4);
        Ok(Control {
            op,
            client_id,
            class,
        })
    }

    /// Write the body into `b`, exactly [`CONTROL_LEN`] bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&(self.op as u16).to_le_bytes());
        b[2] = self.class as u8;
        b[3] = 0;
        b[4..12].copy_from_slice(&self.client_id.to_le_bytes());
    }
}

impl<'a> ControlReply<'a> {
    pub(super) fn decode_body(b: &'a [u8]) -> Result<ControlReply<'a>> {
        need("ControlReply", b.len(), CONTROL_REPLY_FIXED_LEN)?;
        let status = get_u16(b, 0);
        let len = usize::from(get_u16(b, 2));
        bounded("control reply message", len, MAX_CONTROL_MESSAGE_LEN)?;
        exact("ControlReply", CONTROL_REPLY_FIXED_LEN + len, b.len())?;
        let message =
            core::str::from_utf8(&b[CONTROL_REPLY_FIXED_LEN..]).map_err(|e| Error::BadValue {
                field: "control reply message (not UTF-8)",
                value: e.valid_up_to() as u64,
            })?;
        Ok(ControlReply { status, message })
    }

    pub(super) fn body_len(&self) -> usize {
        CONTROL_REPLY_FIXED_LEN + self.message.len()
    }

    pub(super) fn validate(&self) -> Result<()> {
        bounded(
            "control reply message",
            self.message.len(),
            MAX_CONTROL_MESSAGE_LEN,
        )
    }

    /// Write the body into `b`, exactly [`body_len`](Self::body_len) bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.status.to_le_bytes());
        b[2..4].copy_from_slice(&(self.message.len() as u16).to_le_bytes());
        b[CONTROL_REPLY_FIXED_LEN..].copy_from_slice(self.message.as_bytes());
    }
}
