//! Messages on the coordinator's `SOCK_SEQPACKET` socket.
//!
//! Each datagram is one message: a fixed 12-byte header followed by a body,
//! every integer little-endian.
//!
//! ```text
//! header   0 magic u32 = "TNDM"   4 version u16   6 type u16   8 body_len u32
//! Hello    0 pid u32   4 class u8   5 flags u8   6 exe_len u16   8 cgroup_len u16
//!          10 exe[exe_len]   cgroup[cgroup_len]                  (shim -> tandemd)
//! Welcome  0 client_id u64   8 region_len u64   16 ring_capacity u32
//!          20 layout_version u32   24 heartbeat_interval_ms u32
//!          28 class u8   29 flags u8   30 reserved u16 (0)      (tandemd -> shim,
//!                                                   region memfd attached by SCM_RIGHTS)
//!          with WELCOME_FLAG_MPS only, an MPS tail (see [`crate::mps`]):
//!          32 priority u8   33 thread_percentage u8   34 pipe_dir_len u16
//!          36 pipe_dir[pipe_dir_len]
//! Reject   0 reason u16   2 message_len u16   4 message[message_len] (UTF-8)
//! FuncName 0 func_id u64   8 name_len u16   10 name[name_len]     (shim -> tandemd)
//!          with WELCOME_FLAG_FUNC_ATTRS only, an attributes tail:
//!          10+name_len regs_per_thread u32   14+name_len static_smem_bytes u32
//! Device   0 ordinal u32   4 uuid[16]   20 name_len u16   22 name[name_len]
//!                                                                 (shim -> tandemd)
//!          with WELCOME_FLAG_DEVICE_SHAPE only, a shape tail (u32 each):
//!          22+name_len sms   threads_per_sm   regs_per_sm   smem_per_sm
//!          blocks_per_sm
//! Control  0 op u16   2 class u8   3 reserved u8 (0)   4 client_id u64
//!                                        (tandemctl -> tandemd, first message)
//! ControlReply 0 status u16   2 message_len u16   4 message[message_len] (UTF-8)
//!                                                            (tandemd -> tandemctl)
//! Dedup    56 bytes, see [`crate::dedup`]       (both ways; PUBLISHED and OFFER
//!                                                carry a shareable fd by SCM_RIGHTS)
//! Follow   96 bytes, see [`crate::follow`]      (both ways; SHARE and MAPPED
//!                                                carry a shareable fd by SCM_RIGHTS)
//! ```
//!
//! Type codes: Hello 1, Welcome 2, Reject 3, FuncName 4, Device 5, Control 6,
//! ControlReply 7, Dedup 8, Follow 9.
//!
//! The header's `version` is the sender's [`PROTOCOL_VERSION`]. The header and
//! the Reject message are frozen across versions: a receiver always decodes a
//! Reject, whatever its version, so a peer can always say "wrong version" and
//! be understood. Any other message of another version fails to decode with
//! [`Error::VersionMismatch`](crate::Error::VersionMismatch), naming both versions.
//!
//! Decoding is zero-copy and allocation-free, checks every length against the
//! datagram and against the protocol maxima, and rejects unknown values,
//! except flag bits: the Hello's and Welcome's flags are capabilities, each
//! answered only by a peer that knows it, so a bit this build does not know
//! is dropped on decode (a newer shim's request for a feature registers with
//! this tandemd and is simply not granted). Encoding refuses unknown bits, so
//! a message that encodes also decodes to itself. Encoding writes into a
//! caller-provided buffer.
//!
//! The code is split by message family, each with its layout constants and
//! body codec: `wire/envelope.rs` (the header, type codes, shared field checks),
//! `wire/registration.rs` (Hello, Welcome, Reject), `wire/reports.rs` (FuncName,
//! Device), `wire/operator.rs` (Control, ControlReply), `wire/board_msg.rs` (Board),
//! [`crate::dedup`] and [`crate::follow`]; `wire/message.rs` is the [`Message`]
//! they all decode to, `wire/datagram.rs` the socket transport. Every public name
//! is re-exported here, at `tandem_proto::wire::*`.

mod board_msg;
mod datagram;
mod envelope;
mod message;
mod operator;
mod registration;
mod reports;
#[cfg(test)]
mod tests;

pub use board_msg::{BoardMsg, BOARD_FLAG_WRITABLE, BOARD_MSG_LEN};
pub use datagram::{recv, send, Received};
pub use envelope::{
    message_type, HEADER_LEN, MESSAGE_TYPE_DEDUP, MESSAGE_TYPE_FOLLOW, PROTOCOL_VERSION, WIRE_MAGIC,
};
pub use message::{Message, MAX_MESSAGE_LEN};
pub use operator::{
    Control, ControlOp, ControlReply, CONTROL_LEN, CONTROL_REPLY_FIXED_LEN, MAX_CONTROL_MESSAGE_LEN,
};
pub use registration::{
    ClientClass, Hello, Reject, RejectReason, Welcome, HELLO_FIXED_LEN, HELLO_FLAG_BOARD,
    HELLO_FLAG_FOLLOW, HELLO_FLAG_MPS, HELLO_FLAG_NO_SHARE_WEIGHTS, HELLO_FLAG_SHARE_WEIGHTS,
    MAX_CGROUP_LEN, MAX_EXE_LEN, MAX_HEARTBEAT_INTERVAL_MS, MAX_REJECT_MESSAGE_LEN,
    REJECT_FIXED_LEN, WELCOME_FLAG_DEVICE_SHAPE, WELCOME_FLAG_FOLLOW, WELCOME_FLAG_FUNC_ATTRS,
    WELCOME_FLAG_MPS, WELCOME_FLAG_SHARE_WEIGHTS, WELCOME_LEN,
};
pub use reports::{
    Device, DeviceShape, FuncAttrs, FuncName, DEVICE_FIXED_LEN, DEVICE_SHAPE_LEN, FUNC_ATTRS_LEN,
    FUNC_NAME_FIXED_LEN, MAX_DEVICE_NAME_LEN, MAX_FUNC_NAME_LEN,
};
