//! The GPU board's hand-over: tandemd's Board message, sent after the
//! Welcome with the board's memfd attached.

use crate::bytes::get_u32;
use crate::error::{Error, Result};

use super::envelope::{exact, flags};

/// Board body length.
pub const BOARD_MSG_LEN: usize = 8;
/// Board flag: the descriptor is writable (the client may claim inference).
pub const BOARD_FLAG_WRITABLE: u8 = 1 << 0;

/// Coordinator -> shim, after the Welcome, in answer to
/// [`HELLO_FLAG_BOARD`](super::HELLO_FLAG_BOARD): the GPU board ([`crate::board`]). Sent once more,
/// writable, when a client that got it read-only is granted the inference
/// class later (an operator's set-class, a reload); the shim then replaces
/// its read-only mapping. A writable board is never taken back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardMsg {
    /// `BOARD_FLAG_*` bits.
    pub flags: u8,
}

impl BoardMsg {
    pub(super) fn decode_body(body: &[u8]) -> Result<BoardMsg> {
        exact("Board", BOARD_MSG_LEN, body.len())?;
        let len = get_u32(body, 0);
        if len as usize != crate::board::BOARD_LEN {
            return Err(Error::BadValue {
                field: "board length",
                value: u64::from(len),
            });
        }
        Ok(BoardMsg {
            flags: body[4] & BOARD_FLAG_WRITABLE,
        })
    }

    pub(super) fn validate(&self) -> Result<()> {
        flags("board flags", self.flags, BOARD_FLAG_WRITABLE).map(|_| ())
    }

    /// Write the body into `b`, exactly [`BOARD_MSG_LEN`] bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&(crate::board::BOARD_LEN as u32).to_le_bytes());
        b[4] = self.flags;
        b[5..8].fill(0);
    }
}
