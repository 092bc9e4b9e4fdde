//! [`Message`], the one type every datagram decodes to: the header's
//! checks (magic, version, type, body length) and the dispatch to each
//! family's body codec.

use crate::bytes::{get_u16, get_u32};
use crate::dedup::{Dedup, DEDUP_LEN};
use crate::error::{Error, Result};
use crate::follow::{Follow, FOLLOW_LEN};

use super::board_msg::{BoardMsg, BOARD_MSG_LEN};
use super::envelope::{
    exact, need, HEADER_LEN, PROTOCOL_VERSION, TYPE_BOARD, TYPE_CONTROL, TYPE_CONTROL_REPLY,
    TYPE_DEDUP, TYPE_DEVICE, TYPE_FOLLOW, TYPE_FUNC_NAME, TYPE_HELLO, TYPE_REJECT, TYPE_WELCOME,
    WIRE_MAGIC,
};
use super::operator::{
    Control, ControlReply, CONTROL_LEN, CONTROL_REPLY_FIXED_LEN, MAX_CONTROL_MESSAGE_LEN,
};
use super::registration::{
    Hello, Reject, Welcome, HELLO_FIXED_LEN, MAX_CGROUP_LEN, MAX_EXE_LEN, WELCOME_LEN,
};
use super::reports::{
    Device, FuncName, DEVICE_FIXED_LEN, DEVICE_SHAPE_LEN, FUNC_ATTRS_LEN, FUNC_NAME_FIXED_LEN,
    MAX_DEVICE_NAME_LEN, MAX_FUNC_NAME_LEN,
};

/// Largest valid message: size receive buffers with this.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + HELLO_FIXED_LEN + MAX_EXE_LEN + MAX_CGROUP_LEN;

// Every message fits in a MAX_MESSAGE_LEN receive buffer.
const _: () = {
    assert!(
        HEADER_LEN + FUNC_NAME_FIXED_LEN + MAX_FUNC_NAME_LEN + FUNC_ATTRS_LEN <= MAX_MESSAGE_LEN
    );
    assert!(
        HEADER_LEN + DEVICE_FIXED_LEN + MAX_DEVICE_NAME_LEN + DEVICE_SHAPE_LEN <= MAX_MESSAGE_LEN
    );
    assert!(HEADER_LEN + CONTROL_REPLY_FIXED_LEN + MAX_CONTROL_MESSAGE_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + DEDUP_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + FOLLOW_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + BOARD_MSG_LEN <= MAX_MESSAGE_LEN);
    assert!(
        HEADER_LEN + WELCOME_LEN + crate::mps::TAIL_FIXED_LEN + crate::mps::MAX_PIPE_DIR_LEN
            <= MAX_MESSAGE_LEN
    );
};

/// One message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// Shim -> coordinator.
    Hello(Hello<'a>),
    /// Coordinator -> shim.
    Welcome(Welcome),
    /// Coordinator -> shim.
    Reject(Reject<'a>),
    /// Shim -> coordinator.
    FuncName(FuncName<'a>),
    /// Shim -> coordinator.
    Device(Device<'a>),
    /// tandemctl -> coordinator.
    Control(Control),
    /// Coordinator -> tandemctl.
    ControlReply(ControlReply<'a>),
    /// Both ways, between a shim that shares weights and the coordinator.
    Dedup(Dedup),
    /// Both ways, between a shim in follow mode and the coordinator.
    Follow(Follow),
    /// Coordinator -> shim: the GPU board's memfd rides along (SCM_RIGHTS).
    Board(BoardMsg),
}

impl<'a> Message<'a> {
    /// Name of the message type, for errors and logs.
    #[must_use]
    pub const fn type_name(&self) -> &'static str {
        match self {
            Message::Hello(_) => "Hello",
            Message::Welcome(_) => "Welcome",
            Message::Reject(_) => "Reject",
            Message::FuncName(_) => "FuncName",
            Message::Device(_) => "Device",
            Message::Control(_) => "Control",
            Message::ControlReply(_) => "ControlReply",
            Message::Dedup(_) => "Dedup",
            Message::Follow(_) => "Follow",
            Message::Board(_) => "Board",
        }
    }

    /// Decode one datagram, validating everything.
    pub fn decode(buf: &'a [u8]) -> Result<Message<'a>> {
        need("message header", buf.len(), HEADER_LEN)?;
        let magic = get_u32(buf, 0);
        if magic != WIRE_MAGIC {
            return Err(Error::WireMagic { found: magic });
        }
        let version = get_u16(buf, 4);
        let ty = get_u16(buf, 6);
        let body_len = get_u32(buf, 8) as usize;
        let body = &buf[HEADER_LEN..];
        // Reject is decodable under any version (frozen layout).
        if ty == TYPE_REJECT {
            exact("Reject", body_len, body.len())?;
            return Reject::decode_body(body, version).map(Message::Reject);
        }
        if version != PROTOCOL_VERSION {
            return Err(Error::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: version,
            });
        }
        match ty {
            TYPE_HELLO => {
                exact("Hello", body_len, body.len())?;
                Hello::decode_body(body).map(Message::Hello)
            }
            TYPE_WELCOME => {
                exact("Welcome", body_len, body.len())?;
                Welcome::decode_body(body).map(Message::Welcome)
            }
            TYPE_FUNC_NAME => {
                exact("FuncName", body_len, body.len())?;
                FuncName::decode_body(body).map(Message::FuncName)
            }
            TYPE_DEVICE => {
                exact("Device", body_len, body.len())?;
                Device::decode_body(body).map(Message::Device)
            }
            TYPE_CONTROL => {
                exact("Control", body_len, body.len())?;
                Control::decode_body(body).map(Message::Control)
            }
            TYPE_CONTROL_REPLY => {
                exact("ControlReply", body_len, body.len())?;
                ControlReply::decode_body(body).map(Message::ControlReply)
            }
            TYPE_DEDUP => {
                exact("Dedup", body_len, body.len())?;
                Dedup::decode(body).map(Message::Dedup)
            }
            TYPE_FOLLOW => {
                exact("Follow", body_len, body.len())?;
                Follow::decode(body).map(Message::Follow)
            }
            TYPE_BOARD => {
                exact("Board", body_len, body.len())?;
                BoardMsg::decode_body(body).map(Message::Board)
            }
            raw => Err(Error::UnknownMessage { raw }),
        }
    }

    fn body_len(&self) -> usize {
        match self {
            Message::Hello(h) => h.body_len(),
            Message::Welcome(w) => w.body_len(),
            Message::Reject(r) => r.body_len(),
            Message::FuncName(f) => f.body_len(),
            Message::Device(d) => d.body_len(),
            Message::Control(_) => CONTROL_LEN,
            Message::ControlReply(r) => r.body_len(),
            Message::Dedup(_) => DEDUP_LEN,
            Message::Follow(_) => FOLLOW_LEN,
            Message::Board(_) => BOARD_MSG_LEN,
        }
    }

    /// Bytes [`encode`](Self::encode) will write.
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.body_len()
    }

    /// Encode into `out`, returning the number of bytes written. Checks the
    /// same limits the decoder does, so a message that encodes also decodes.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize> {
        let ty = match self {
            Message::Hello(h) => h.validate().map(|()| TYPE_HELLO)?,
            Message::Welcome(w) => w.validate().map(|()| TYPE_WELCOME)?,
            Message::Reject(r) => r.validate().map(|()| TYPE_REJECT)?,
            Message::FuncName(f) => f.validate().map(|()| TYPE_FUNC_NAME)?,
            Message::Device(d) => d.validate().map(|()| TYPE_DEVICE)?,
            Message::Control(_) => TYPE_CONTROL,
            Message::ControlReply(r) => r.validate().map(|()| TYPE_CONTROL_REPLY)?,
            Message::Dedup(d) => d.validate().map(|()| TYPE_DEDUP)?,
            Message::Follow(f) => f.validate().map(|()| TYPE_FOLLOW)?,
            Message::Board(m) => m.validate().map(|()| TYPE_BOARD)?,
        };
        let total = self.encoded_len();
        if out.len() < total {
            return Err(Error::BufferTooSmall {
                need: total,
                have: out.len(),
            });
        }
        let out = &mut out[..total];
        out[0..4].copy_from_slice(&WIRE_MAGIC.to_le_bytes());
        out[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&ty.to_le_bytes());
        out[8..12].copy_from_slice(&(self.body_len() as u32).to_le_bytes());
        let b = &mut out[HEADER_LEN..];
        match self {
            Message::Hello(h) => h.encode_body(b),
            Message::Welcome(w) => w.encode_body(b),
            Message::Reject(r) => r.encode_body(b),
            Message::FuncName(f) => f.encode_body(b),
            Message::Device(d) => d.encode_body(b),
            Message::Control(c) => c.encode_body(b),
            Message::ControlReply(r) => r.encode_body(b),
            Message::Dedup(d) => d.encode_body(b)?,
            Message::Follow(f) => f.encode_body(b)?,
            Message::Board(m) => m.encode_body(b),
        }
        Ok(total)
    }
}
