//! Registration: the shim's Hello, and tandemd's answer, a Welcome (with the
//! MPS tail when it asked) or a Reject; the class a client claims or is
//! granted, and the capability flags each side announces.

use crate::bytes::{get_u16, get_u32, get_u64};
use crate::error::{Error, Result};
use crate::mps::MpsJoin;
use crate::ring::{RingLayout, RING_LAYOUT_VERSION};

use super::envelope::{bounded, exact, flags, need, no_nul};

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
/// a [`Message::Board`](super::Message::Board) after the Welcome. Sent always by shims that know
/// it; a coordinator that does not drops the bit.
pub const HELLO_FLAG_BOARD: u8 = 1 << 3;
/// Hello flag: this shim can join tandem's MPS control daemon: it reads the
/// Welcome's MPS tail and sets the MPS environment before the driver
/// initialises ([`crate::mps`]). A shim that can no longer do that (CUDA
/// already initialised) does not send it.
pub const HELLO_FLAG_MPS: u8 = 1 << 4;
/// Every Hello flag this build knows.
pub(crate) const HELLO_FLAGS: u8 = HELLO_FLAG_SHARE_WEIGHTS
    | HELLO_FLAG_NO_SHARE_WEIGHTS
    | HELLO_FLAG_FOLLOW
    | HELLO_FLAG_BOARD
    | HELLO_FLAG_MPS;
/// Welcome flag: weight sharing is enabled for this client. Only a coordinator
/// that speaks [`Message::Dedup`](super::Message::Dedup) sets it, and a shim sends Dedup messages only
/// after seeing it, so the Dedup message needed no protocol version bump.
pub const WELCOME_FLAG_SHARE_WEIGHTS: u8 = 1 << 0;
/// Welcome flag: this coordinator speaks [`Message::Follow`](super::Message::Follow) and follow mode
/// is enabled for this client. Set only in answer to [`HELLO_FLAG_FOLLOW`]
/// (a shim that did not send it may not know this bit).
pub const WELCOME_FLAG_FOLLOW: u8 = 1 << 1;
/// Welcome flag: tandem over MPS is in force and this client is to join it;
/// the Welcome carries the MPS tail ([`Welcome::mps`]). Set only in answer
/// to [`HELLO_FLAG_MPS`]: a shim that did not send it decodes only a 32-byte
/// Welcome.
pub const WELCOME_FLAG_MPS: u8 = 1 << 2;
/// Welcome flag: this coordinator decodes a FuncName that ends in the
/// function's attributes ([`FuncAttrs`](super::FuncAttrs)); a shim appends
/// them only where it is set (an older coordinator refuses the longer body).
pub const WELCOME_FLAG_FUNC_ATTRS: u8 = 1 << 3;
/// Welcome flag: this coordinator decodes a Device that ends in the
/// device's SM capacity ([`DeviceShape`](super::DeviceShape)); a shim
/// appends it only where it is set.
pub const WELCOME_FLAG_DEVICE_SHAPE: u8 = 1 << 4;
/// Every Welcome flag this build knows.
pub(crate) const WELCOME_FLAGS: u8 = WELCOME_FLAG_SHARE_WEIGHTS
    | WELCOME_FLAG_FOLLOW
    | WELCOME_FLAG_MPS
    | WELCOME_FLAG_FUNC_ATTRS
    | WELCOME_FLAG_DEVICE_SHAPE;

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

pub(super) fn class(field: &'static str, v: u8) -> Result<ClientClass> {
    ClientClass::from_u8(v).ok_or(Error::BadValue {
        field,
        value: u64::from(v),
    })
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

impl<'a> Hello<'a> {
    pub(super) fn decode_body(b: &'a [u8]) -> Result<Hello<'a>> {
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
        Ok(Hello {
            pid,
            class,
            flags,
            exe,
            cgroup,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        HELLO_FIXED_LEN + self.exe.len() + self.cgroup.len()
    }

    pub(super) fn validate(&self) -> Result<()> {
        bounded("executable path", self.exe.len(), MAX_EXE_LEN)?;
        bounded("cgroup path", self.cgroup.len(), MAX_CGROUP_LEN)?;
        no_nul("executable path", self.exe)?;
        no_nul("cgroup path", self.cgroup)?;
        flags("hello flags", self.flags, HELLO_FLAGS)?;
        Ok(())
    }

    /// Write the body into `b`, exactly [`body_len`](Self::body_len) bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..4].copy_from_slice(&self.pid.to_le_bytes());
        b[4] = self.class as u8;
        b[5] = self.flags;
        b[6..8].copy_from_slice(&(self.exe.len() as u16).to_le_bytes());
        b[8..10].copy_from_slice(&(self.cgroup.len() as u16).to_le_bytes());
        let e = HELLO_FIXED_LEN + self.exe.len();
        b[HELLO_FIXED_LEN..e].copy_from_slice(self.exe);
        b[e..].copy_from_slice(self.cgroup);
    }
}

impl Welcome {
    pub(super) fn decode_body(b: &[u8]) -> Result<Welcome> {
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
        Ok(Welcome {
            client_id,
            region_len,
            ring_capacity,
            heartbeat_interval_ms,
            class,
            flags,
            mps,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        WELCOME_LEN + self.mps.map_or(0, |m| m.tail_len())
    }

    pub(super) fn validate(&self) -> Result<()> {
        let layout = self.layout()?;
        if self.region_len != layout.region_len() as u64 {
            return Err(Error::BadValue {
                field: "region_len",
                value: self.region_len,
            });
        }
        if self.heartbeat_interval_ms == 0 || self.heartbeat_interval_ms > MAX_HEARTBEAT_INTERVAL_MS
        {
            return Err(Error::BadValue {
                field: "heartbeat_interval_ms",
                value: u64::from(self.heartbeat_interval_ms),
            });
        }
        flags("welcome flags", self.flags, WELCOME_FLAGS)?;
        if (self.flags & WELCOME_FLAG_MPS != 0) != self.mps.is_some() {
            return Err(Error::BadValue {
                field: "welcome flags (MPS flag without the MPS tail, or the reverse)",
                value: u64::from(self.flags),
            });
        }
        Ok(())
    }

    /// Write the body into `b`, exactly [`body_len`](Self::body_len) bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.client_id.to_le_bytes());
        b[8..16].copy_from_slice(&self.region_len.to_le_bytes());
        b[16..20].copy_from_slice(&self.ring_capacity.to_le_bytes());
        b[20..24].copy_from_slice(&RING_LAYOUT_VERSION.to_le_bytes());
        b[24..28].copy_from_slice(&self.heartbeat_interval_ms.to_le_bytes());
        b[28] = self.class as u8;
        b[29] = self.flags;
        b[30..32].copy_from_slice(&0u16.to_le_bytes());
        if let Some(m) = &self.mps {
            m.encode_tail(&mut b[WELCOME_LEN..]);
        }
    }
}

impl<'a> Reject<'a> {
    /// Decode a Reject body sent under protocol `version` (any: the layout is frozen).
    pub(super) fn decode_body(b: &'a [u8], version: u16) -> Result<Reject<'a>> {
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
        Ok(Reject {
            reason,
            peer_version: version,
            message,
        })
    }

    pub(super) fn body_len(&self) -> usize {
        REJECT_FIXED_LEN + self.message.len()
    }

    pub(super) fn validate(&self) -> Result<()> {
        bounded("reject message", self.message.len(), MAX_REJECT_MESSAGE_LEN)
    }

    /// Write the body into `b`, exactly [`body_len`](Self::body_len) bytes.
    pub(super) fn encode_body(&self, b: &mut [u8]) {
        b[0..2].copy_from_slice(&self.reason.0.to_le_bytes());
        b[2..4].copy_from_slice(&(self.message.len() as u16).to_le_bytes());
        b[REJECT_FIXED_LEN..].copy_from_slice(self.message.as_bytes());
    }
}
