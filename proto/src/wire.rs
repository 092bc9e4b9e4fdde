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
//! Device   0 ordinal u32   4 uuid[16]   20 name_len u16   22 name[name_len]
//!                                                                 (shim -> tandemd)
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
//! [`Error::VersionMismatch`], naming both versions.
//!
//! Decoding is zero-copy and allocation-free, checks every length against the
//! datagram and against the protocol maxima, and rejects unknown values,
//! except flag bits: the Hello's and Welcome's flags are capabilities, each
//! answered only by a peer that knows it, so a bit this build does not know
//! is dropped on decode (a newer shim's request for a feature registers with
//! this tandemd and is simply not granted). Encoding refuses unknown bits, so
//! a message that encodes also decodes to itself. Encoding writes into a
//! caller-provided buffer.

use std::os::fd::{BorrowedFd, OwnedFd};

use crate::bytes::{get_u16, get_u32, get_u64};
use crate::dedup::{Dedup, DEDUP_LEN};
use crate::error::{Error, Result};
use crate::follow::{Follow, FOLLOW_LEN};
use crate::mps::MpsJoin;
use crate::ring::{RingLayout, RING_LAYOUT_VERSION};

pub use crate::magic::WIRE_MAGIC;
/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Bytes in the message header.
pub const HEADER_LEN: usize = 12;
/// Longest executable path a Hello may carry (Linux `PATH_MAX`).
pub const MAX_EXE_LEN: usize = 4096;
/// Longest cgroup path a Hello may carry.
pub const MAX_CGROUP_LEN: usize = 4096;
/// Longest Reject message text.
pub const MAX_REJECT_MESSAGE_LEN: usize = 1024;
/// Fixed part of a Hello body.
pub const HELLO_FIXED_LEN: usize = 10;
/// Welcome body length (without the MPS tail [`WELCOME_FLAG_MPS`] adds).
pub const WELCOME_LEN: usize = 32;
/// Fixed part of a Reject body.
pub const REJECT_FIXED_LEN: usize = 4;
/// Longest kernel name a FuncName may carry (the shim truncates longer ones).
pub const MAX_FUNC_NAME_LEN: usize = 1024;
/// Longest device name a Device message may carry.
pub const MAX_DEVICE_NAME_LEN: usize = 256;
/// Longest ControlReply message text.
pub const MAX_CONTROL_MESSAGE_LEN: usize = 1024;
/// Fixed part of a FuncName body.
pub const FUNC_NAME_FIXED_LEN: usize = 10;
/// Fixed part of a Device body.
pub const DEVICE_FIXED_LEN: usize = 22;
/// Control body length.
pub const CONTROL_LEN: usize = 12;
/// Fixed part of a ControlReply body.
pub const CONTROL_REPLY_FIXED_LEN: usize = 4;
/// Largest valid message: size receive buffers with this.
pub const MAX_MESSAGE_LEN: usize = HEADER_LEN + HELLO_FIXED_LEN + MAX_EXE_LEN + MAX_CGROUP_LEN;
/// Largest heartbeat interval a Welcome may announce.
pub const MAX_HEARTBEAT_INTERVAL_MS: u32 = 60_000;

/// Hello flag: the job asked for weight sharing (`TANDEM_SHARE_WEIGHTS=on`).
pub const HELLO_FLAG_SHARE_WEIGHTS: u8 = 1 << 0;
/// Hello flag: the job set `TANDEM_SHARE_WEIGHTS=off`: never share, whatever
/// the configuration (wins over [`HELLO_FLAG_SHARE_WEIGHTS`] and over the
/// coordinator's per-class defaults).
pub const HELLO_FLAG_NO_SHARE_WEIGHTS: u8 = 1 << 1;
/// Hello flag: the job set `TANDEM_FOLLOW=on`: it may share regions for
/// followers or follow them ([`crate::follow`]). Sent only when set, so a job
/// that does not use follow mode still registers with an older coordinator.
pub const HELLO_FLAG_FOLLOW: u8 = 1 << 2;
/// Hello flag: this shim maps the GPU board ([`crate::board`]): answer with
/// a [`Message::Board`] after the Welcome. Sent always by shims that know
/// it; a coordinator that does not drops the bit.
pub const HELLO_FLAG_BOARD: u8 = 1 << 3;
/// Hello flag: this shim can join tandem's MPS control daemon: it reads the
/// Welcome's MPS tail and sets the MPS environment before the driver
/// initialises ([`crate::mps`]). A shim that can no longer do that (CUDA
/// already initialised) does not send it.
pub const HELLO_FLAG_MPS: u8 = 1 << 4;
/// Every Hello flag this build knows.
const HELLO_FLAGS: u8 = HELLO_FLAG_SHARE_WEIGHTS
    | HELLO_FLAG_NO_SHARE_WEIGHTS
    | HELLO_FLAG_FOLLOW
    | HELLO_FLAG_BOARD
    | HELLO_FLAG_MPS;
/// Welcome flag: weight sharing is enabled for this client. Only a coordinator
/// that speaks [`Message::Dedup`] sets it, and a shim sends Dedup messages only
/// after seeing it, so the Dedup message needed no protocol version bump.
pub const WELCOME_FLAG_SHARE_WEIGHTS: u8 = 1 << 0;
/// Welcome flag: this coordinator speaks [`Message::Follow`] and follow mode
/// is enabled for this client. Set only in answer to [`HELLO_FLAG_FOLLOW`]
/// (a shim that did not send it may not know this bit).
pub const WELCOME_FLAG_FOLLOW: u8 = 1 << 1;
/// Welcome flag: tandem over MPS is in force and this client is to join it;
/// the Welcome carries the MPS tail ([`Welcome::mps`]). Set only in answer
/// to [`HELLO_FLAG_MPS`]: a shim that did not send it decodes only a 32-byte
/// Welcome.
pub const WELCOME_FLAG_MPS: u8 = 1 << 2;
/// Every Welcome flag this build knows.
const WELCOME_FLAGS: u8 = WELCOME_FLAG_SHARE_WEIGHTS | WELCOME_FLAG_FOLLOW | WELCOME_FLAG_MPS;

const TYPE_HELLO: u16 = 1;
const TYPE_WELCOME: u16 = 2;
const TYPE_REJECT: u16 = 3;
const TYPE_FUNC_NAME: u16 = 4;
const TYPE_DEVICE: u16 = 5;
const TYPE_CONTROL: u16 = 6;
const TYPE_CONTROL_REPLY: u16 = 7;
const TYPE_DEDUP: u16 = 8;
const TYPE_FOLLOW: u16 = 9;
const TYPE_BOARD: u16 = 10;

/// Board body length.
pub const BOARD_MSG_LEN: usize = 8;
/// Board flag: the descriptor is writable (the client may claim inference).
pub const BOARD_FLAG_WRITABLE: u8 = 1 << 0;

/// The type code of [`Message::Dedup`] (see [`message_type`]).
pub const MESSAGE_TYPE_DEDUP: u16 = TYPE_DEDUP;
/// The type code of [`Message::Follow`] (see [`message_type`]).
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

// Every message fits in a MAX_MESSAGE_LEN receive buffer.
const _: () = {
    assert!(HEADER_LEN + FUNC_NAME_FIXED_LEN + MAX_FUNC_NAME_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + DEVICE_FIXED_LEN + MAX_DEVICE_NAME_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + CONTROL_REPLY_FIXED_LEN + MAX_CONTROL_MESSAGE_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + DEDUP_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + FOLLOW_LEN <= MAX_MESSAGE_LEN);
    assert!(HEADER_LEN + BOARD_MSG_LEN <= MAX_MESSAGE_LEN);
    assert!(
        HEADER_LEN + WELCOME_LEN + crate::mps::TAIL_FIXED_LEN + crate::mps::MAX_PIPE_DIR_LEN
            <= MAX_MESSAGE_LEN
    );
};

/// The scheduling class a client claims (Hello) or is granted (Welcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ClientClass {
    /// Let the coordinator decide (the default).
    Auto = 0,
    /// Latency-sensitive inference.
    Inference = 1,
    /// Throughput training.
    Training = 2,
}

impl ClientClass {
    /// Checked decode of a wire byte.
    #[must_use]
    pub const fn from_u8(v: u8) -> Option<ClientClass> {
        match v {
            0 => Some(ClientClass::Auto),
            1 => Some(ClientClass::Inference),
            2 => Some(ClientClass::Training),
            _ => None,
        }
    }

    /// Parse a `TANDEM_CLASS` value (`auto`, `inference`, `training`; `off`
    /// is handled by the shim before it ever connects, so it is `None` here).
    #[must_use]
    pub fn from_env_value(v: &[u8]) -> Option<ClientClass> {
        match v {
            b"auto" | b"" => Some(ClientClass::Auto),
            b"inference" => Some(ClientClass::Inference),
            b"training" => Some(ClientClass::Training),
            _ => None,
        }
    }

    /// Lower-case name.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ClientClass::Auto => "auto",
            ClientClass::Inference => "inference",
            ClientClass::Training => "training",
        }
    }
}

/// Why the coordinator refused a client. A transparent `u16`: a newer
/// coordinator may send reasons this build does not know, and they still decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct RejectReason(pub u16);

impl RejectReason {
    /// Protocol version mismatch.
    pub const VERSION_MISMATCH: RejectReason = RejectReason(1);
    /// The Hello was malformed.
    pub const MALFORMED: RejectReason = RejectReason(2);
    /// The claimed class is not allowed for this user/cgroup.
    pub const NOT_PERMITTED: RejectReason = RejectReason(3);
    /// The coordinator is at its client limit.
    pub const TOO_MANY_CLIENTS: RejectReason = RejectReason(4);
    /// The coordinator is shutting down.
    pub const SHUTTING_DOWN: RejectReason = RejectReason(5);
    /// Internal error in the coordinator (e.g. could not create the region).
    pub const INTERNAL: RejectReason = RejectReason(6);
    /// A control request named a client id that is not registered.
    pub const NO_SUCH_CLIENT: RejectReason = RejectReason(7);
    /// A reload found the configuration file missing or invalid; the
    /// running configuration is kept.
    pub const CONFIG_NOT_APPLIED: RejectReason = RejectReason(8);
    /// The sender of a control request may not make it (not root, not
    /// tandemd's user, not in `admins`, or in a container).
    pub const CONTROL_DENIED: RejectReason = RejectReason(9);

    /// A short description, or `"unknown reason"` for a code this release
    /// does not know (a newer peer's: every code decodes).
    #[must_use]
    pub const fn describe(self) -> &'static str {
        match self.0 {
            1 => "protocol version mismatch",
            2 => "malformed hello",
            3 => "class not permitted",
            4 => "too many clients",
            5 => "coordinator shutting down",
            6 => "coordinator internal error",
            7 => "no such client",
            8 => "configuration not applied",
            9 => "operation not permitted",
            _ => "unknown reason",
        }
    }
}

/// Shim -> coordinator: who I am.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The client's pid (the coordinator trusts `SO_PEERCRED`, not this).
    pub pid: u32,
    /// The claimed class.
    pub class: ClientClass,
    /// `HELLO_FLAG_*` bits.
    pub flags: u8,
    /// Executable path bytes (`/proc/self/exe`), no NUL, at most [`MAX_EXE_LEN`].
    pub exe: &'a [u8],
    /// cgroup path bytes (from `/proc/self/cgroup`), no NUL, at most [`MAX_CGROUP_LEN`].
    pub cgroup: &'a [u8],
}

/// Coordinator -> shim: accepted; the region memfd rides along (SCM_RIGHTS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Welcome {
    /// The id the coordinator assigned (also in the control block).
    pub client_id: u64,
    /// Region size in bytes; equals `RingLayout::new(ring_capacity).region_len()`.
    pub region_len: u64,
    /// Ring capacity in records.
    pub ring_capacity: u32,
    /// How often the coordinator beats; the shim's staleness bound derives from it.
    pub heartbeat_interval_ms: u32,
    /// The class granted (may differ from the claim).
    pub class: ClientClass,
    /// `WELCOME_FLAG_*` bits. [`WELCOME_FLAG_MPS`] is set exactly when
    /// [`mps`](Self::mps) is (encoding refuses a mismatch).
    pub flags: u8,
    /// How to join tandem's MPS control daemon ([`WELCOME_FLAG_MPS`]).
    pub mps: Option<MpsJoin>,
}

impl Welcome {
    /// The ring layout this Welcome announces (validated at decode).
    pub fn layout(&self) -> Result<RingLayout> {
        RingLayout::new(self.ring_capacity)
    }
}

/// Coordinator -> shim: refused. Layout frozen across protocol versions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject<'a> {
    /// Why.
    pub reason: RejectReason,
    /// The sender's protocol version (from the header; set by decode, ignored by encode).
    pub peer_version: u16,
    /// Human-readable detail, UTF-8, at most [`MAX_REJECT_MESSAGE_LEN`] bytes.
    pub message: &'a str,
}

impl core::fmt::Display for Reject<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "tandemd (protocol v{}) refused this client: {} ({})",
            self.peer_version,
            self.reason.describe(),
            self.reason.0
        )?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// Shim -> coordinator: the name of a kernel, sent once per function id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FuncName<'a> {
    /// [`func_id`](crate::record::func_id) of the full name.
    pub func_id: u64,
    /// Name bytes (mangled, as the driver reports it), no NUL, at most
    /// [`MAX_FUNC_NAME_LEN`] (the shim truncates; `func_id` hashes the full name).
    pub name: &'a [u8],
}

/// Shim -> coordinator: the device the client runs on, sent once per connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Device<'a> {
    /// The CUDA device ordinal in the client's numbering (`CUDA_VISIBLE_DEVICES` applies).
    pub ordinal: u32,
    /// The device UUID (`cuDeviceGetUuid`): the key that is the same in every process.
    pub uuid: [u8; 16],
    /// Device name bytes (`cuDeviceGetName`), no NUL, at most [`MAX_DEVICE_NAME_LEN`].
    pub name: &'a [u8],
}

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
    /// [`ControlReply::OK`], else a [`RejectReason`] value.
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

/// Coordinator -> shim, after the Welcome, in answer to
/// [`HELLO_FLAG_BOARD`]: the GPU board ([`crate::board`]). Sent once more,
/// writable, when a client that got it read-only is granted the inference
/// class later (an operator's set-class, a reload); the shim then replaces
/// its read-only mapping. A writable board is never taken back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardMsg {
    /// `BOARD_FLAG_*` bits.
    pub flags: u8,
}

fn need(what: &'static str, have: usize, need: usize) -> Result<()> {
    if have < need {
        Err(Error::Truncated { what, need, have })
    } else {
        Ok(())
    }
}

fn exact(what: &'static str, declared: usize, actual: usize) -> Result<()> {
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

fn bounded(field: &'static str, len: usize, max: usize) -> Result<()> {
    if len > max {
        Err(Error::FieldTooLong { field, len, max })
    } else {
        Ok(())
    }
}

fn no_nul(field: &'static str, bytes: &[u8]) -> Result<()> {
    if bytes.contains(&0) {
        Err(Error::BadValue { field, value: 0 })
    } else {
        Ok(())
    }
}

fn class(field: &'static str, v: u8) -> Result<ClientClass> {
    ClientClass::from_u8(v).ok_or(Error::BadValue {
        field,
        value: u64::from(v),
    })
}

/// Encoding's check of a flags byte: only bits this build knows.
fn flags(field: &'static str, v: u8, known: u8) -> Result<u8> {
    if v & !known != 0 {
        Err(Error::BadValue {
            field,
            value: u64::from(v),
        })
    } else {
        Ok(v)
    }
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
            return Self::decode_reject(body, version);
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
                Self::decode_hello(body)
            }
            TYPE_WELCOME => {
                exact("Welcome", body_len, body.len())?;
                Self::decode_welcome(body)
            }
            TYPE_FUNC_NAME => {
                exact("FuncName", body_len, body.len())?;
                Self::decode_func_name(body)
            }
            TYPE_DEVICE => {
                exact("Device", body_len, body.len())?;
                Self::decode_device(body)
            }
            TYPE_CONTROL => {
                exact("Control", body_len, body.len())?;
                Self::decode_control(body)
            }
            TYPE_CONTROL_REPLY => {
                exact("ControlReply", body_len, body.len())?;
                Self::decode_control_reply(body)
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
                exact("Board", BOARD_MSG_LEN, body.len())?;
                let len = get_u32(body, 0);
                if len as usize != crate::board::BOARD_LEN {
                    return Err(Error::BadValue {
                        field: "board length",
                        value: u64::from(len),
                    });
                }
                Ok(Message::Board(BoardMsg {
                    flags: body[4] & BOARD_FLAG_WRITABLE,
                }))
            }
            raw => Err(Error::UnknownMessage { raw }),
        }
    }

    fn decode_hello(b: &'a [u8]) -> Result<Message<'a>> {
        need("Hello", b.len(), HELLO_FIXED_LEN)?;
        let pid = get_u32(b, 0);
        let class = class("class", b[4])?;
        // Unknown bits are a newer peer's requests: not granted, not an error.
        let flags = b[5] & HELLO_FLAGS;
        let exe_len = usize::from(get_u16(b, 6));
        let cgroup_len = usize::from(get_u16(b, 8));
        bounded("executable path", exe_len, MAX_EXE_LEN)?;
        bounded("cgroup path", cgroup_len, MAX_CGROUP_LEN)?;
        exact("Hello", HELLO_FIXED_LEN + exe_len + cgroup_len, b.len())?;
        let exe = &b[HELLO_FIXED_LEN..HELLO_FIXED_LEN + exe_len];
        let cgroup = &b[HELLO_FIXED_LEN + exe_len..];
        no_nul("executable path", exe)?;
        no_nul("cgroup path", cgroup)?;
        Ok(Message::Hello(Hello {
            pid,
            class,
            flags,
            exe,
            cgroup,
        }))
    }

    fn decode_welcome(b: &'a [u8]) -> Result<Message<'a>> {
        need("Welcome", b.len(), WELCOME_LEN)?;
        let client_id = get_u64(b, 0);
        let region_len = get_u64(b, 8);
        let ring_capacity = get_u32(b, 16);
        let layout_version = get_u32(b, 20);
        let heartbeat_interval_ms = get_u32(b, 24);
        if layout_version != RING_LAYOUT_VERSION {
            return Err(Error::LayoutVersion {
                ours: RING_LAYOUT_VERSION,
                theirs: layout_version,
            });
        }
        let layout = RingLayout::new(ring_capacity)?;
        if region_len != layout.region_len() as u64 {
            return Err(Error::BadValue {
                field: "region_len",
                value: region_len,
            });
        }
        if heartbeat_interval_ms == 0 || heartbeat_interval_ms > MAX_HEARTBEAT_INTERVAL_MS {
            return Err(Error::BadValue {
                field: "heartbeat_interval_ms",
                value: u64::from(heartbeat_interval_ms),
            });
        }
        let class = class("class", b[28])?;
        let flags = b[29] & WELCOME_FLAGS;
        let mps = if flags & WELCOME_FLAG_MPS != 0 {
            Some(MpsJoin::decode_tail(&b[WELCOME_LEN..])?)
        } else {
            exact("Welcome", WELCOME_LEN, b.len())?;
            None
        };
        Ok(Message::Welcome(Welcome {
            client_id,
            region_len,
            ring_capacity,
            heartbeat_interval_ms,
            class,
            flags,
            mps,
        }))
    }

    fn decode_reject(b: &'a [u8], version: u16) -> Result<Message<'a>> {
        need("Reject", b.len(), REJECT_FIXED_LEN)?;
        let reason = RejectReason(get_u16(b, 0));
        let len = usize::from(get_u16(b, 2));
        bounded("reject message", len, MAX_REJECT_MESSAGE_LEN)?;
        exact("Reject", REJECT_FIXED_LEN + len, b.len())?;
        let message =
            core::str::from_utf8(&b[REJECT_FIXED_LEN..]).map_err(|e| Error::BadValue {
                field: "reject message (not UTF-8)",
                value: e.valid_up_to() as u64,
            })?;
        Ok(Message::Reject(Reject {
            reason,
            peer_version: version,
            message,
        }))
    }

    fn decode_func_name(b: &'a [u8]) -> Result<Message<'a>> {
        need("FuncName", b.len(), FUNC_NAME_FIXED_LEN)?;
        let func_id = get_u64(b, 0);
        let len = usize::from(get_u16(b, 8));
        bounded("kernel name", len, MAX_FUNC_NAME_LEN)?;
        exact("FuncName", FUNC_NAME_FIXED_LEN + len, b.len())?;
        let name = &b[FUNC_NAME_FIXED_LEN..];
        no_nul("kernel name", name)?;
        Ok(Message::FuncName(FuncName { func_id, name }))
    }

    fn decode_device(b: &'a [u8]) -> Result<Message<'a>> {
        need("Device", b.len(), DEVICE_FIXED_LEN)?;
        let ordinal = get_u32(b, 0);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[4..20]);
        let len = usize::from(get_u16(b, 20));
        bounded("device name", len, MAX_DEVICE_NAME_LEN)?;
        exact("Device", DEVICE_FIXED_LEN + len, b.len())?;
        let name = &b[DEVICE_FIXED_LEN..];
        no_nul("device name", name)?;
        Ok(Message::Device(Device {
            ordinal,
            uuid,
            name,
        }))
    }

    fn decode_control(b: &'a [u8]) -> Result<Message<'a>> {
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
        Ok(Message::Control(Control {
            op,
            client_id,
            class,
        }))
    }

    fn decode_control_reply(b: &'a [u8]) -> Result<Message<'a>> {
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
        Ok(Message::ControlReply(ControlReply { status, message }))
    }

    fn body_len(&self) -> usize {
        match self {
            Message::Hello(h) => HELLO_FIXED_LEN + h.exe.len() + h.cgroup.len(),
            Message::Welcome(w) => WELCOME_LEN + w.mps.map_or(0, |m| m.tail_len()),
            Message::Reject(r) => REJECT_FIXED_LEN + r.message.len(),
            Message::FuncName(f) => FUNC_NAME_FIXED_LEN + f.name.len(),
            Message::Device(d) => DEVICE_FIXED_LEN + d.name.len(),
            Message::Control(_) => CONTROL_LEN,
            Message::ControlReply(r) => CONTROL_REPLY_FIXED_LEN + r.message.len(),
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
            Message::Hello(h) => {
                bounded("executable path", h.exe.len(), MAX_EXE_LEN)?;
                bounded("cgroup path", h.cgroup.len(), MAX_CGROUP_LEN)?;
                no_nul("executable path", h.exe)?;
                no_nul("cgroup path", h.cgroup)?;
                flags("hello flags", h.flags, HELLO_FLAGS)?;
                TYPE_HELLO
            }
            Message::Welcome(w) => {
                let layout = w.layout()?;
                if w.region_len != layout.region_len() as u64 {
                    return Err(Error::BadValue {
                        field: "region_len",
                        value: w.region_len,
                    });
                }
                if w.heartbeat_interval_ms == 0
                    || w.heartbeat_interval_ms > MAX_HEARTBEAT_INTERVAL_MS
                {
                    return Err(Error::BadValue {
                        field: "heartbeat_interval_ms",
                        value: u64::from(w.heartbeat_interval_ms),
                    });
                }
                flags("welcome flags", w.flags, WELCOME_FLAGS)?;
                if (w.flags & WELCOME_FLAG_MPS != 0) != w.mps.is_some() {
                    return Err(Error::BadValue {
                        field: "welcome flags (MPS flag without the MPS tail, or the reverse)",
                        value: u64::from(w.flags),
                    });
                }
                TYPE_WELCOME
            }
            Message::Reject(r) => {
                bounded("reject message", r.message.len(), MAX_REJECT_MESSAGE_LEN)?;
                TYPE_REJECT
            }
            Message::FuncName(f) => {
                bounded("kernel name", f.name.len(), MAX_FUNC_NAME_LEN)?;
                no_nul("kernel name", f.name)?;
                TYPE_FUNC_NAME
            }
            Message::Device(d) => {
                bounded("device name", d.name.len(), MAX_DEVICE_NAME_LEN)?;
                no_nul("device name", d.name)?;
                TYPE_DEVICE
            }
            Message::Control(_) => TYPE_CONTROL,
            Message::ControlReply(r) => {
                bounded(
                    "control reply message",
                    r.message.len(),
                    MAX_CONTROL_MESSAGE_LEN,
                )?;
                TYPE_CONTROL_REPLY
            }
            Message::Dedup(d) => {
                d.validate()?;
                TYPE_DEDUP
            }
            Message::Follow(f) => {
                f.validate()?;
                TYPE_FOLLOW
            }
            Message::Board(m) => {
                flags("board flags", m.flags, BOARD_FLAG_WRITABLE)?;
                TYPE_BOARD
            }
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
            Message::Hello(h) => {
                b[0..4].copy_from_slice(&h.pid.to_le_bytes());
                b[4] = h.class as u8;
                b[5] = h.flags;
                b[6..8].copy_from_slice(&(h.exe.len() as u16).to_le_bytes());
                b[8..10].copy_from_slice(&(h.cgroup.len() as u16).to_le_bytes());
                let e = HELLO_FIXED_LEN + h.exe.len();
                b[HELLO_FIXED_LEN..e].copy_from_slice(h.exe);
                b[e..].copy_from_slice(h.cgroup);
            }
            Message::Welcome(w) => {
                b[0..8].copy_from_slice(&w.client_id.to_le_bytes());
                b[8..16].copy_from_slice(&w.region_len.to_le_bytes());
                b[16..20].copy_from_slice(&w.ring_capacity.to_le_bytes());
                b[20..24].copy_from_slice(&RING_LAYOUT_VERSION.to_le_bytes());
                b[24..28].copy_from_slice(&w.heartbeat_interval_ms.to_le_bytes());
                b[28] = w.class as u8;
                b[29] = w.flags;
                b[30..32].copy_from_slice(&0u16.to_le_bytes());
                if let Some(m) = &w.mps {
                    m.encode_tail(&mut b[WELCOME_LEN..]);
                }
            }
            Message::Reject(r) => {
                b[0..2].copy_from_slice(&r.reason.0.to_le_bytes());
                b[2..4].copy_from_slice(&(r.message.len() as u16).to_le_bytes());
                b[REJECT_FIXED_LEN..].copy_from_slice(r.message.as_bytes());
            }
            Message::FuncName(f) => {
                b[0..8].copy_from_slice(&f.func_id.to_le_bytes());
                b[8..10].copy_from_slice(&(f.name.len() as u16).to_le_bytes());
                b[FUNC_NAME_FIXED_LEN..].copy_from_slice(f.name);
            }
            Message::Device(d) => {
                b[0..4].copy_from_slice(&d.ordinal.to_le_bytes());
                b[4..20].copy_from_slice(&d.uuid);
                b[20..22].copy_from_slice(&(d.name.len() as u16).to_le_bytes());
                b[DEVICE_FIXED_LEN..].copy_from_slice(d.name);
            }
            Message::Control(c) => {
                b[0..2].copy_from_slice(&(c.op as u16).to_le_bytes());
                b[2] = c.class as u8;
                b[3] = 0;
                b[4..12].copy_from_slice(&c.client_id.to_le_bytes());
            }
            Message::ControlReply(r) => {
                b[0..2].copy_from_slice(&r.status.to_le_bytes());
                b[2..4].copy_from_slice(&(r.message.len() as u16).to_le_bytes());
                b[CONTROL_REPLY_FIXED_LEN..].copy_from_slice(r.message.as_bytes());
            }
            Message::Dedup(d) => d.encode_body(b)?,
            Message::Follow(f) => f.encode_body(b)?,
            Message::Board(m) => {
                b[0..4].copy_from_slice(&(crate::board::BOARD_LEN as u32).to_le_bytes());
                b[4] = m.flags;
                b[5..8].fill(0);
            }
        }
        Ok(total)
    }
}

// ------------------------------------------------------------------------
// SOCK_SEQPACKET transport with one optional SCM_RIGHTS fd
// ------------------------------------------------------------------------

/// What [`recv`] got.
#[derive(Debug)]
pub struct Received {
    /// Datagram length; 0 means the peer closed the connection.
    pub len: usize,
    /// The fd that came with it, if any (close-on-exec).
    pub fd: Option<OwnedFd>,
}

/// Send one datagram, optionally with one fd (SCM_RIGHTS). Uses
/// `MSG_NOSIGNAL`: a closed peer is an `EPIPE` error, never a `SIGPIPE` that
/// would kill the host job.
pub fn send(sock: BorrowedFd<'_>, msg: &[u8], fd: Option<BorrowedFd<'_>>) -> Result<()> {
    let sent = tandem_os::msg::send(sock, msg, fd)?;
    if sent != msg.len() {
        return Err(Error::BadAncillary {
            what: "datagram sent short",
        });
    }
    Ok(())
}

/// Receive one datagram into `buf` (size it [`MAX_MESSAGE_LEN`]), with at most
/// one fd. A datagram longer than `buf`, or more than one fd, is an error (any
/// fds that arrived are closed). Set `SO_RCVTIMEO` on the socket to bound the wait.
pub fn recv(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<Received> {
    let got = tandem_os::msg::recv(sock, buf)?;
    if got.truncated {
        return Err(Error::BadAncillary {
            what: "datagram longer than the receive buffer (truncated)",
        });
    }
    if got.extra_fds {
        return Err(Error::BadAncillary {
            what: "more than one file descriptor attached",
        });
    }
    Ok(Received {
        len: got.len,
        fd: got.fd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn hello() -> Hello<'static> {
        Hello {
            pid: 4242,
            class: ClientClass::Inference,
            flags: HELLO_FLAG_SHARE_WEIGHTS,
            exe: b"/usr/bin/python3.12",
            cgroup: b"/user.slice/user-1000.slice/session-3.scope",
        }
    }

    fn welcome() -> Welcome {
        Welcome {
            client_id: 77,
            region_len: RingLayout::new(1024).unwrap().region_len() as u64,
            ring_capacity: 1024,
            heartbeat_interval_ms: 50,
            class: ClientClass::Training,
            flags: 0,
            mps: None,
        }
    }

    fn enc(m: &Message<'_>) -> Vec<u8> {
        let mut v = vec![0u8; MAX_MESSAGE_LEN];
        let n = m.encode(&mut v).unwrap();
        assert_eq!(n, m.encoded_len());
        v.truncate(n);
        v
    }

    #[test]
    fn round_trips() {
        for m in [
            Message::Hello(hello()),
            Message::Hello(Hello {
                exe: &[b'x'; MAX_EXE_LEN],
                cgroup: &[b'y'; MAX_CGROUP_LEN],
                ..hello()
            }),
            Message::Hello(Hello {
                exe: b"",
                cgroup: b"",
                class: ClientClass::Auto,
                flags: 0,
                ..hello()
            }),
            Message::Welcome(welcome()),
            Message::Reject(Reject {
                reason: RejectReason::NOT_PERMITTED,
                peer_version: PROTOCOL_VERSION,
                message: "user 1000 may not claim class inference; see /etc/tandem/tandemd.toml",
            }),
        ] {
            let b = enc(&m);
            assert_eq!(Message::decode(&b), Ok(m));
        }
        assert_eq!(
            enc(&Message::Hello(hello())).len(),
            MAX_MESSAGE_LEN - 8192 + 19 + 43
        );
    }

    #[test]
    fn header_errors() {
        let good = enc(&Message::Hello(hello()));
        for n in 0..HEADER_LEN {
            assert_eq!(
                Message::decode(&good[..n]),
                Err(Error::Truncated {
                    what: "message header",
                    need: HEADER_LEN,
                    have: n
                })
            );
        }
        let mut b = good.clone();
        b[0] = b'X';
        assert!(matches!(Message::decode(&b), Err(Error::WireMagic { .. })));
        let mut b = good.clone();
        b[4..6].copy_from_slice(&7u16.to_le_bytes());
        let e = Message::decode(&b).unwrap_err();
        assert_eq!(
            e,
            Error::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs: 7
            }
        );
        let text = e.to_string();
        assert!(text.contains("v1") && text.contains("v7"), "{text}");
        let mut b = good.clone();
        b[6..8].copy_from_slice(&99u16.to_le_bytes());
        assert_eq!(Message::decode(&b), Err(Error::UnknownMessage { raw: 99 }));
        // body_len disagrees with the datagram
        let mut b = good.clone();
        b[8..12].copy_from_slice(&5u32.to_le_bytes());
        assert!(matches!(
            Message::decode(&b),
            Err(Error::LengthMismatch { .. })
        ));
        let mut b = good.clone();
        b.push(0);
        assert!(matches!(
            Message::decode(&b),
            Err(Error::LengthMismatch { .. })
        ));
    }

    #[test]
    fn hello_no_share_flag_round_trips_and_unknown_bits_are_dropped_on_decode_refused_on_encode() {
        for flags in [
            HELLO_FLAG_NO_SHARE_WEIGHTS,
            HELLO_FLAG_SHARE_WEIGHTS | HELLO_FLAG_NO_SHARE_WEIGHTS,
        ] {
            let m = Message::Hello(Hello { flags, ..hello() });
            let b = enc(&m);
            assert_eq!(b[HEADER_LEN + 5], flags);
            assert_eq!(Message::decode(&b), Ok(m));
        }
        assert_ne!(HELLO_FLAG_NO_SHARE_WEIGHTS, HELLO_FLAG_SHARE_WEIGHTS);
        // A newer shim's unknown request bits: the Hello still decodes, with
        // only the bits this build knows.
        for unknown in [1u8 << 5, 1 << 7, !HELLO_FLAGS] {
            let mut b = enc(&Message::Hello(hello()));
            b[HEADER_LEN + 5] = HELLO_FLAG_NO_SHARE_WEIGHTS | unknown;
            assert_eq!(
                Message::decode(&b),
                Ok(Message::Hello(Hello {
                    flags: HELLO_FLAG_NO_SHARE_WEIGHTS,
                    ..hello()
                }))
            );
            let mut out = [0u8; MAX_MESSAGE_LEN];
            assert_eq!(
                Message::Hello(Hello {
                    flags: unknown,
                    ..hello()
                })
                .encode(&mut out),
                Err(Error::BadValue {
                    field: "hello flags",
                    value: u64::from(unknown)
                })
            );
        }
        // The same for the Welcome.
        let mut w = enc(&Message::Welcome(welcome()));
        w[HEADER_LEN + 29] = WELCOME_FLAG_FOLLOW | 1 << 3;
        assert_eq!(
            Message::decode(&w),
            Ok(Message::Welcome(Welcome {
                flags: WELCOME_FLAG_FOLLOW,
                ..welcome()
            }))
        );
        let mut out = [0u8; MAX_MESSAGE_LEN];
        assert!(Message::Welcome(Welcome {
            flags: 1 << 3,
            ..welcome()
        })
        .encode(&mut out)
        .is_err());
    }

    fn mps_welcome() -> Welcome {
        Welcome {
            flags: WELCOME_FLAG_FOLLOW | WELCOME_FLAG_MPS,
            mps: Some(
                MpsJoin::new(crate::mps::PRIORITY_BELOW_NORMAL, 40, b"/run/tandem/mps").unwrap(),
            ),
            ..welcome()
        }
    }

    #[test]
    fn mps_welcome_round_trips_with_its_tail() {
        let w = Message::Welcome(mps_welcome());
        let b = enc(&w);
        assert_eq!(b.len(), HEADER_LEN + WELCOME_LEN + 4 + 15);
        assert_eq!(&b[HEADER_LEN + 32..HEADER_LEN + 36], &[1, 40, 15, 0]);
        assert_eq!(&b[HEADER_LEN + 36..], b"/run/tandem/mps");
        assert_eq!(Message::decode(&b), Ok(w));
        let h = Message::Hello(Hello {
            flags: HELLO_FLAG_MPS | HELLO_FLAG_FOLLOW,
            ..hello()
        });
        assert_eq!(Message::decode(&enc(&h)), Ok(h));
    }

    #[test]
    fn mps_flag_and_tail_must_agree() {
        let mut out = [0u8; MAX_MESSAGE_LEN];
        // The flag without the tail, and the tail without the flag.
        for w in [
            Welcome {
                flags: WELCOME_FLAG_MPS,
                ..welcome()
            },
            Welcome {
                flags: 0,
                ..mps_welcome()
            },
        ] {
            assert!(matches!(
                Message::Welcome(w).encode(&mut out),
                Err(Error::BadValue { .. })
            ));
        }
        // On the wire: the flag on a 32-byte Welcome, or a tail without the
        // flag (what a shim that did not ask must never get), fail to decode.
        let mut b = enc(&Message::Welcome(welcome()));
        b[HEADER_LEN + 29] |= WELCOME_FLAG_MPS;
        assert!(matches!(Message::decode(&b), Err(Error::Truncated { .. })));
        let mut b = enc(&Message::Welcome(mps_welcome()));
        b[HEADER_LEN + 29] &= !WELCOME_FLAG_MPS;
        assert!(matches!(
            Message::decode(&b),
            Err(Error::LengthMismatch { .. })
        ));
        // A bad tail value is refused.
        let mut b = enc(&Message::Welcome(mps_welcome()));
        b[HEADER_LEN + 33] = 101;
        assert!(Message::decode(&b).is_err());
    }

    #[test]
    fn follow_flags_and_messages_round_trip() {
        let m = Message::Hello(Hello {
            flags: HELLO_FLAG_FOLLOW,
            ..hello()
        });
        assert_eq!(Message::decode(&enc(&m)), Ok(m));
        let w = Message::Welcome(Welcome {
            flags: WELCOME_FLAG_SHARE_WEIGHTS | WELCOME_FLAG_FOLLOW,
            ..welcome()
        });
        assert_eq!(Message::decode(&enc(&w)), Ok(w));
        let mut f = Follow::new(crate::follow::FollowOp::Map, 3, b"gpt2", 64 << 20).unwrap();
        f.layout = [9; 16];
        let b = enc(&Message::Follow(f));
        assert_eq!(b.len(), HEADER_LEN + FOLLOW_LEN);
        assert_eq!(message_type(&b), Some(MESSAGE_TYPE_FOLLOW));
        assert_eq!(Message::decode(&b), Ok(Message::Follow(f)));
        // A body of the wrong length is named as a Follow.
        let mut short = b.clone();
        short.truncate(b.len() - 1);
        short[8..12].copy_from_slice(&((FOLLOW_LEN - 1) as u32).to_le_bytes());
        assert!(matches!(
            Message::decode(&short),
            Err(Error::LengthMismatch { what: "Follow", .. })
        ));
    }

    #[test]
    fn message_type_peeks_only_well_framed_headers() {
        let b = enc(&Message::Dedup({
            let mut d = Dedup::new(crate::dedup::DedupOp::Candidate, 1 << 21, 2 << 20);
            d.hash = [7; 16];
            d
        }));
        assert_eq!(message_type(&b), Some(MESSAGE_TYPE_DEDUP));
        assert_eq!(message_type(&b[..HEADER_LEN]), Some(MESSAGE_TYPE_DEDUP));
        assert_eq!(message_type(&b[..HEADER_LEN - 1]), None);
        let mut bad = b.clone();
        bad[0] ^= 0xff;
        assert_eq!(message_type(&bad), None);
        assert_eq!(
            message_type(&enc(&Message::Hello(hello()))),
            Some(TYPE_HELLO)
        );
    }

    /// Re-frame a body with a correct header so only the body is at fault.
    fn framed(ty: u16, version: u16, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&WIRE_MAGIC.to_le_bytes());
        v.extend_from_slice(&version.to_le_bytes());
        v.extend_from_slice(&ty.to_le_bytes());
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn hello_body_errors() {
        let good = enc(&Message::Hello(hello()));
        let body = good[HEADER_LEN..].to_vec();
        // Every truncation of the body is an error, never a panic.
        for n in 0..body.len() {
            assert!(
                Message::decode(&framed(TYPE_HELLO, 1, &body[..n])).is_err(),
                "n={n}"
            );
        }
        // oversize declared lengths
        let mut b = body.clone();
        b[6..8].copy_from_slice(&(MAX_EXE_LEN as u16 + 1).to_le_bytes());
        assert_eq!(
            Message::decode(&framed(TYPE_HELLO, 1, &b)),
            Err(Error::FieldTooLong {
                field: "executable path",
                len: MAX_EXE_LEN + 1,
                max: MAX_EXE_LEN
            })
        );
        let mut b = body.clone();
        b[8..10].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_HELLO, 1, &b)),
            Err(Error::FieldTooLong {
                field: "cgroup path",
                ..
            })
        ));
        // lengths that do not add up
        let mut b = body.clone();
        b[6..8].copy_from_slice(&3u16.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_HELLO, 1, &b)),
            Err(Error::LengthMismatch { what: "Hello", .. })
        ));
        // bad class, NUL in a path
        let mut b = body.clone();
        b[4] = 9;
        assert_eq!(
            Message::decode(&framed(TYPE_HELLO, 1, &b)),
            Err(Error::BadValue {
                field: "class",
                value: 9
            })
        );
        let mut b = body.clone();
        b[HELLO_FIXED_LEN + 2] = 0;
        assert!(matches!(
            Message::decode(&framed(TYPE_HELLO, 1, &b)),
            Err(Error::BadValue {
                field: "executable path",
                ..
            })
        ));
        // encode refuses what decode would refuse
        let mut out = [0u8; MAX_MESSAGE_LEN + 16];
        let long = [b'a'; MAX_EXE_LEN + 1];
        assert!(matches!(
            Message::Hello(Hello {
                exe: &long,
                ..hello()
            })
            .encode(&mut out),
            Err(Error::FieldTooLong { .. })
        ));
        assert_eq!(
            Message::Hello(hello()).encode(&mut out[..20]),
            Err(Error::BufferTooSmall {
                need: good.len(),
                have: 20
            })
        );
    }

    #[test]
    fn welcome_body_errors() {
        let good = enc(&Message::Welcome(welcome()));
        let body = good[HEADER_LEN..].to_vec();
        for n in 0..body.len() {
            assert!(Message::decode(&framed(TYPE_WELCOME, 1, &body[..n])).is_err());
        }
        let mut b = body.clone();
        b[16..20].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            Message::decode(&framed(TYPE_WELCOME, 1, &b)),
            Err(Error::BadCapacity { capacity: 1000 })
        );
        let mut b = body.clone();
        b[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_WELCOME, 1, &b)),
            Err(Error::BadValue {
                field: "region_len",
                ..
            })
        ));
        let mut b = body.clone();
        let foreign = RING_LAYOUT_VERSION + 1;
        b[20..24].copy_from_slice(&foreign.to_le_bytes());
        assert_eq!(
            Message::decode(&framed(TYPE_WELCOME, 1, &b)),
            Err(Error::LayoutVersion {
                ours: RING_LAYOUT_VERSION,
                theirs: foreign
            })
        );
        let mut b = body.clone();
        b[24..28].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_WELCOME, 1, &b)),
            Err(Error::BadValue {
                field: "heartbeat_interval_ms",
                ..
            })
        ));
    }

    #[test]
    fn reject_decodes_under_any_version() {
        let msg = "speak v1";
        let mut body = Vec::new();
        body.extend_from_slice(&RejectReason::VERSION_MISMATCH.0.to_le_bytes());
        body.extend_from_slice(&(msg.len() as u16).to_le_bytes());
        body.extend_from_slice(msg.as_bytes());
        let frame = framed(TYPE_REJECT, 9, &body);
        let m = Message::decode(&frame).unwrap();
        let Message::Reject(r) = m else {
            panic!("not a reject: {m:?}")
        };
        assert_eq!(r.peer_version, 9);
        assert_eq!(r.reason, RejectReason::VERSION_MISMATCH);
        let shown = r.to_string();
        assert!(
            shown.contains("v9") && shown.contains("version mismatch") && shown.contains(msg),
            "{shown}"
        );
        // every refusal has its own description; unknown reasons still decode
        let described: std::collections::BTreeSet<&str> =
            (1..=9).map(|c| RejectReason(c).describe()).collect();
        assert_eq!(described.len(), 9);
        assert!(!described.contains("unknown reason"));
        assert_eq!(RejectReason(10).describe(), "unknown reason");
        let mut b = body.clone();
        b[0..2].copy_from_slice(&500u16.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_REJECT, 1, &b)),
            Ok(Message::Reject(Reject {
                reason: RejectReason(500),
                ..
            }))
        ));
        // malformed rejects
        for n in 0..body.len() {
            assert!(Message::decode(&framed(TYPE_REJECT, 1, &body[..n])).is_err());
        }
        let mut b = body.clone();
        b[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_REJECT, 1, &b)),
            Err(Error::FieldTooLong { .. })
        ));
        let mut b = body.clone();
        b[4] = 0xFF;
        assert!(matches!(
            Message::decode(&framed(TYPE_REJECT, 1, &b)),
            Err(Error::BadValue { .. })
        ));
    }

    fn func_name() -> FuncName<'static> {
        FuncName {
            func_id: crate::record::func_id(b"_Z6matmulPfS_S_i"),
            name: b"_Z6matmulPfS_S_i",
        }
    }

    fn device() -> Device<'static> {
        Device {
            ordinal: 3,
            uuid: *b"0123456789abcdef",
            name: b"NVIDIA H100 80GB HBM3",
        }
    }

    fn control() -> Control {
        Control {
            op: ControlOp::SetClass,
            client_id: 0x0102_0304_0506_0708,
            class: ClientClass::Inference,
        }
    }

    #[test]
    fn new_messages_round_trip() {
        let long_name = [b'k'; MAX_FUNC_NAME_LEN];
        let long_dev = [b'd'; MAX_DEVICE_NAME_LEN];
        let long_msg = "m".repeat(MAX_CONTROL_MESSAGE_LEN);
        for m in [
            Message::FuncName(func_name()),
            Message::FuncName(FuncName {
                func_id: u64::MAX,
                name: &long_name,
            }),
            Message::FuncName(FuncName {
                func_id: 0,
                name: b"",
            }),
            Message::Device(device()),
            Message::Device(Device {
                name: &long_dev,
                ..device()
            }),
            Message::Device(Device {
                ordinal: 0,
                uuid: [0; 16],
                name: b"",
            }),
            Message::Control(control()),
            Message::Control(Control {
                op: ControlOp::Reload,
                client_id: 0,
                class: ClientClass::Auto,
            }),
            Message::ControlReply(ControlReply {
                status: ControlReply::OK,
                message: "reloaded /etc/tandem/tandemd.toml",
            }),
            Message::ControlReply(ControlReply {
                status: RejectReason::NOT_PERMITTED.0,
                message: &long_msg,
            }),
        ] {
            let b = enc(&m);
            assert_eq!(Message::decode(&b), Ok(m), "{}", m.type_name());
            assert!(b.len() <= MAX_MESSAGE_LEN);
        }
        // Pinned type codes and fixed offsets (the shim and tandemctl rely on them).
        let b = enc(&Message::FuncName(func_name()));
        assert_eq!(get_u16(&b, 6), 4);
        assert_eq!(get_u64(&b, HEADER_LEN), func_name().func_id);
        assert_eq!(get_u16(&b, HEADER_LEN + 8), 16);
        let b = enc(&Message::Device(device()));
        assert_eq!(get_u16(&b, 6), 5);
        assert_eq!(get_u32(&b, HEADER_LEN), 3);
        assert_eq!(&b[HEADER_LEN + 4..HEADER_LEN + 20], b"0123456789abcdef");
        let b = enc(&Message::Control(control()));
        assert_eq!(get_u16(&b, 6), 6);
        assert_eq!(b.len(), HEADER_LEN + CONTROL_LEN);
        assert_eq!(get_u16(&b, HEADER_LEN), 2);
        assert_eq!(b[HEADER_LEN + 2], 1);
        assert_eq!(get_u64(&b, HEADER_LEN + 4), 0x0102_0304_0506_0708);
        let b = enc(&Message::ControlReply(ControlReply {
            status: 3,
            message: "no",
        }));
        assert_eq!(get_u16(&b, 6), 7);
        assert!(ControlReply {
            status: 0,
            message: ""
        }
        .is_ok());
    }

    #[test]
    fn board_message_round_trips_and_checks_the_board_length() {
        for flags in [0, BOARD_FLAG_WRITABLE] {
            let m = Message::Board(BoardMsg { flags });
            let b = enc(&m);
            assert_eq!(get_u16(&b, 6), 10, "pinned type code");
            assert_eq!(b.len(), HEADER_LEN + BOARD_MSG_LEN);
            assert_eq!(Message::decode(&b), Ok(m));
        }
        let mut b = enc(&Message::Board(BoardMsg {
            flags: BOARD_FLAG_WRITABLE,
        }));
        b[HEADER_LEN] ^= 1;
        assert!(matches!(
            Message::decode(&b),
            Err(Error::BadValue {
                field: "board length",
                ..
            })
        ));
        let mut b = enc(&Message::Board(BoardMsg { flags: 0 }));
        b[HEADER_LEN + 4] = 0xFE;
        assert_eq!(
            Message::decode(&b),
            Ok(Message::Board(BoardMsg { flags: 0 })),
            "unknown flag bits are dropped on decode"
        );
        let mut out = [0u8; 64];
        assert!(Message::Board(BoardMsg { flags: 2 })
            .encode(&mut out)
            .is_err());
        assert!(Message::decode(&b[..b.len() - 1]).is_err(), "truncated");
    }

    #[test]
    fn new_messages_reject_malformed_bodies() {
        for (ty, good) in [
            (TYPE_FUNC_NAME, enc(&Message::FuncName(func_name()))),
            (TYPE_DEVICE, enc(&Message::Device(device()))),
            (TYPE_CONTROL, enc(&Message::Control(control()))),
            (
                TYPE_CONTROL_REPLY,
                enc(&Message::ControlReply(ControlReply {
                    status: 0,
                    message: "ok",
                })),
            ),
            (
                TYPE_DEDUP,
                enc(&Message::Dedup({
                    let mut d = Dedup::new(crate::dedup::DedupOp::Offer, 1 << 21, 2 << 20);
                    d.shared_id = 4;
                    d
                })),
            ),
        ] {
            let body = good[HEADER_LEN..].to_vec();
            // every truncation is an error, never a panic
            for n in 0..body.len() {
                assert!(
                    Message::decode(&framed(ty, 1, &body[..n])).is_err(),
                    "type {ty} n={n}"
                );
            }
            // one extra byte is an error
            let mut long = body.clone();
            long.push(b'x');
            assert!(Message::decode(&framed(ty, 1, &long)).is_err(), "type {ty}");
            // another version is a version mismatch
            assert_eq!(
                Message::decode(&framed(ty, 2, &body)),
                Err(Error::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                    theirs: 2
                })
            );
        }

        // FuncName: oversize declared name, NUL in the name
        let mut b = enc(&Message::FuncName(func_name()))[HEADER_LEN..].to_vec();
        b[8..10].copy_from_slice(&(MAX_FUNC_NAME_LEN as u16 + 1).to_le_bytes());
        assert_eq!(
            Message::decode(&framed(TYPE_FUNC_NAME, 1, &b)),
            Err(Error::FieldTooLong {
                field: "kernel name",
                len: MAX_FUNC_NAME_LEN + 1,
                max: MAX_FUNC_NAME_LEN
            })
        );
        let mut b = enc(&Message::FuncName(func_name()))[HEADER_LEN..].to_vec();
        b[FUNC_NAME_FIXED_LEN + 1] = 0;
        assert!(matches!(
            Message::decode(&framed(TYPE_FUNC_NAME, 1, &b)),
            Err(Error::BadValue {
                field: "kernel name",
                ..
            })
        ));

        // Device: oversize name, NUL in the name
        let mut b = enc(&Message::Device(device()))[HEADER_LEN..].to_vec();
        b[20..22].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_DEVICE, 1, &b)),
            Err(Error::FieldTooLong {
                field: "device name",
                ..
            })
        ));
        let mut b = enc(&Message::Device(device()))[HEADER_LEN..].to_vec();
        b[DEVICE_FIXED_LEN] = 0;
        assert!(matches!(
            Message::decode(&framed(TYPE_DEVICE, 1, &b)),
            Err(Error::BadValue {
                field: "device name",
                ..
            })
        ));

        // Control: unknown op, bad class, non-zero reserved byte
        let good = enc(&Message::Control(control()))[HEADER_LEN..].to_vec();
        let mut b = good.clone();
        b[0..2].copy_from_slice(&9u16.to_le_bytes());
        assert_eq!(
            Message::decode(&framed(TYPE_CONTROL, 1, &b)),
            Err(Error::BadValue {
                field: "control op",
                value: 9
            })
        );
        let mut b = good.clone();
        b[2] = 7;
        assert_eq!(
            Message::decode(&framed(TYPE_CONTROL, 1, &b)),
            Err(Error::BadValue {
                field: "class",
                value: 7
            })
        );
        let mut b = good.clone();
        b[3] = 1;
        assert!(matches!(
            Message::decode(&framed(TYPE_CONTROL, 1, &b)),
            Err(Error::BadValue {
                field: "control reserved",
                ..
            })
        ));

        // ControlReply: oversize, not UTF-8
        let good = enc(&Message::ControlReply(ControlReply {
            status: 0,
            message: "ok",
        }))[HEADER_LEN..]
            .to_vec();
        let mut b = good.clone();
        b[2..4].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(matches!(
            Message::decode(&framed(TYPE_CONTROL_REPLY, 1, &b)),
            Err(Error::FieldTooLong { .. })
        ));
        let mut b = good.clone();
        b[4] = 0xFF;
        assert!(matches!(
            Message::decode(&framed(TYPE_CONTROL_REPLY, 1, &b)),
            Err(Error::BadValue { .. })
        ));

        // encode refuses what decode refuses
        let mut out = vec![0u8; MAX_MESSAGE_LEN];
        let long = [b'a'; MAX_FUNC_NAME_LEN + 1];
        assert!(matches!(
            Message::FuncName(FuncName {
                func_id: 1,
                name: &long
            })
            .encode(&mut out),
            Err(Error::FieldTooLong { .. })
        ));
        assert!(matches!(
            Message::Device(Device {
                name: b"a\0b",
                ..device()
            })
            .encode(&mut out),
            Err(Error::BadValue { .. })
        ));
        let long = "x".repeat(MAX_CONTROL_MESSAGE_LEN + 1);
        assert!(matches!(
            Message::ControlReply(ControlReply {
                status: 0,
                message: &long
            })
            .encode(&mut out),
            Err(Error::FieldTooLong { .. })
        ));
    }

    #[test]
    fn garbage_never_panics_new_messages() {
        let mut x: u64 = 0x0123_4567_89AB_CDEF;
        let goods = [
            enc(&Message::FuncName(func_name())),
            enc(&Message::Device(device())),
            enc(&Message::Control(control())),
            enc(&Message::ControlReply(ControlReply {
                status: 1,
                message: "hello",
            })),
        ];
        for i in 0..40_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = goods[i % goods.len()].clone();
            let at = (x as usize) % b.len();
            b[at] = (x >> 32) as u8;
            b.truncate(((x >> 40) as usize) % (b.len() + 1));
            let _ = Message::decode(&b);
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut x: u64 = 0xDEAD_BEEF_1234_5678;
        let good = enc(&Message::Hello(hello()));
        for _ in 0..50_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = good.clone();
            let i = (x as usize) % b.len();
            b[i] = (x >> 32) as u8;
            b.truncate(((x >> 40) as usize) % (b.len() + 1));
            let _ = Message::decode(&b);
        }
    }

    #[test]
    fn seqpacket_with_fd() {
        use std::os::fd::AsFd;
        let mut sv = [0; 2];
        // SAFETY: sv is a valid out-array of two ints.
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        // SAFETY: fresh fds from socketpair, owned by us.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };

        // Hello without fd.
        let hello_bytes = enc(&Message::Hello(hello()));
        send(a.as_fd(), &hello_bytes, None).unwrap();
        let mut buf = vec![0u8; MAX_MESSAGE_LEN];
        let got = recv(b.as_fd(), &mut buf).unwrap();
        assert!(got.fd.is_none());
        assert_eq!(
            Message::decode(&buf[..got.len]),
            Ok(Message::Hello(hello()))
        );

        // Welcome with a region fd; the receiver maps it and sees the ring.
        let layout = RingLayout::new(1024).unwrap();
        let (memfd, map) = crate::shm::create(c"tandem-ring", layout.region_len()).unwrap();
        let mut consumer = crate::ring::Consumer::init(&map, layout, 77).unwrap();
        send(
            b.as_fd(),
            &enc(&Message::Welcome(welcome())),
            Some(memfd.as_fd()),
        )
        .unwrap();
        let got = recv(a.as_fd(), &mut buf).unwrap();
        let Ok(Message::Welcome(w)) = Message::decode(&buf[..got.len]) else {
            panic!("no welcome")
        };
        let fd = got.fd.expect("fd attached");
        let client_map = crate::shm::map_received(fd.as_fd(), w.region_len as usize).unwrap();
        let mut p = crate::ring::Producer::attach(&client_map, w.layout().unwrap()).unwrap();
        assert!(p.push(&crate::record::Record::new(
            crate::record::EventKind::ALLOC,
            5
        )));
        let r = consumer.pop().unwrap().unwrap();
        assert_eq!(r.kind(), Ok(crate::record::EventKind::ALLOC));
        assert_eq!(
            crate::ring::control_block(&client_map, layout)
                .unwrap()
                .client_id(),
            77
        );

        // Too-small receive buffer: reported, not silently truncated.
        send(a.as_fd(), &hello_bytes, None).unwrap();
        assert!(matches!(
            recv(b.as_fd(), &mut buf[..8]),
            Err(Error::BadAncillary { .. })
        ));

        // Peer closes: len 0.
        drop(a);
        assert_eq!(recv(b.as_fd(), &mut buf).unwrap().len, 0);
    }
}
