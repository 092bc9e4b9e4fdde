//! Follow mode (COLTI-style model sharing): a job *shares* a named region of
//! device memory (a training job's live weights, laid out by the job in one
//! buffer), and another job of the same trust group on the same GPU *maps* it
//! read-only, so the follower's outputs track the sharer's training. One
//! fixed-layout [`Follow`] message (wire type 9) whose [`FollowOp`] says which
//! step it is.
//!
//! ```text
//! Follow 0 op u16   2 status u16   4 name_len u16   6 reserved u16 (0)
//!        8 request u64   16 len u64   24 layout[16]   40 name[56] (zero-padded)
//! ```
//!
//! ```text
//! sharer (TANDEM_FOLLOW=on)        tandemd                     follower (TANDEM_FOLLOW=on)
//! SHARE(r1, name, len, layout) + fd ->  regions[group, gpu, name] = (fd, len, layout)
//!                              <- SHARED(r1, OK)
//!                                            <- MAP(r2, name, len, layout)
//!                                  MAPPED(r2, OK, len) + dup(fd) ->
//!                                               (follower imports, maps read-only)
//!                                            <- UNMAP(name)          (stats only)
//! UNSHARE(name)                 -> region gone; the fd closed; followers keep
//!                                  what they mapped (frozen at its last state)
//!
//! (tandemd restarts; the new one knows nothing; both shims register again)
//! SHARE(r3, name, len, layout) + fd ->  the sharer offers its regions again
//!                                            <- HELD(name, len, layout)  (no answer:
//!                                               it still maps it; stats only)
//! ```
//!
//! A follower registering with a new tandemd (a restart) reports each mapping
//! it still holds with HELD, so that tandemd's accounting (the follower's
//! mapped bytes, the region's followers) is right again; nothing is mapped or
//! lent, and no answer comes. A tandemd older than HELD counts it as a
//! malformed message and keeps the client connected: the compatible failure
//! mode (only the accounting stays wrong, as before HELD existed).
//!
//! Both jobs say `TANDEM_FOLLOW=on` (Hello flag [`crate::wire::HELLO_FLAG_FOLLOW`]);
//! only then does tandemd set [`crate::wire::WELCOME_FLAG_FOLLOW`], and only
//! after seeing it does a shim send a Follow message. `request` pairs a SHARE or
//! MAP with its answer. `layout` is an opaque tag the jobs compute from what
//! the region holds (e.g. a hash of parameter names, shapes and dtypes); a MAP
//! succeeds only when `len` and `layout` both equal the shared region's.
//!
//! tandemd trusts none of it: names and lengths are validated here, the sharer
//! and follower must be in one trust group (identity from the kernel, never
//! from the Hello), and the follower can only ever map the memory read-only.

use crate::bytes::{get_u16, get_u64};
use crate::error::{Error, Result};

/// Body length of a [`Follow`] message.
pub const FOLLOW_LEN: usize = 96;

/// Longest region name, bytes.
pub const MAX_NAME_LEN: usize = 56;

/// Largest region a message may describe (1 TiB): a sanity bound, not a policy.
pub const MAX_REGION_LEN: u64 = 1 << 40;

/// Which step of the conversation a [`Follow`] message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum FollowOp {
    /// Shim -> tandemd, the region's shareable fd attached: offer region
    /// `name` (`len` bytes, content described by `layout`) to followers.
    Share = 1,
    /// tandemd -> shim: answer to [`FollowOp::Share`]; `status` is a [`FollowStatus`].
    Shared = 2,
    /// Shim -> tandemd: region `name` is no longer offered (freed, or exiting).
    Unshare = 3,
    /// Shim -> tandemd: map region `name`, which must be `len` bytes with `layout`.
    Map = 4,
    /// tandemd -> shim: answer to [`FollowOp::Map`]; on [`FollowStatus::OK`]
    /// the region's fd is attached and `len`/`layout` are the region's.
    Mapped = 5,
    /// Shim -> tandemd: this follower released its mapping of `name`.
    Unmap = 6,
    /// Shim -> tandemd, after it registers with a new tandemd (a restart): this
    /// follower still maps region `name` (`len` bytes with `layout`), mapped
    /// from an earlier tandemd, so the accounting is right again. Request and
    /// status 0, no fd, and no answer. An older tandemd counts it as malformed
    /// and keeps the client connected.
    Held = 7,
}

impl FollowOp {
    /// Checked decode of a wire value.
    #[must_use]
    pub const fn from_u16(v: u16) -> Option<FollowOp> {
        match v {
            1 => Some(FollowOp::Share),
            2 => Some(FollowOp::Shared),
            3 => Some(FollowOp::Unshare),
            4 => Some(FollowOp::Map),
            5 => Some(FollowOp::Mapped),
            6 => Some(FollowOp::Unmap),
            7 => Some(FollowOp::Held),
            _ => None,
        }
    }

    /// Lower-case name, for logs.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            FollowOp::Share => "share",
            FollowOp::Shared => "shared",
            FollowOp::Unshare => "unshare",
            FollowOp::Map => "map",
            FollowOp::Mapped => "mapped",
            FollowOp::Unmap => "unmap",
            FollowOp::Held => "held",
        }
    }

    /// Whether the shim sends this op (else tandemd does).
    #[must_use]
    pub const fn from_shim(self) -> bool {
        !matches!(self, FollowOp::Shared | FollowOp::Mapped)
    }

    /// Whether this op carries a status (the two answers).
    #[must_use]
    pub const fn is_answer(self) -> bool {
        matches!(self, FollowOp::Shared | FollowOp::Mapped)
    }
}

/// Outcome codes of [`FollowOp::Shared`] and [`FollowOp::Mapped`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FollowStatus(pub u16);

impl FollowStatus {
    /// Shared: followers may map it now. Mapped: the fd is attached.
    pub const OK: FollowStatus = FollowStatus(0);
    /// Mapped: no region of that name in the follower's trust group on its GPU.
    pub const NOT_FOUND: FollowStatus = FollowStatus(1);
    /// Mapped: the region exists, but its `len` or `layout` differ from the request's.
    pub const MISMATCH: FollowStatus = FollowStatus(2);
    /// Follow mode is off in tandemd's configuration, or this client may not use it.
    pub const NOT_PERMITTED: FollowStatus = FollowStatus(3);
    /// Shared: another live job already shares a region of that name in the group and GPU.
    pub const NAME_TAKEN: FollowStatus = FollowStatus(4);
    /// Shared: the client already shares as many regions as tandemd allows.
    pub const LIMIT: FollowStatus = FollowStatus(5);
    /// tandemd does not know this client's GPU yet (its device report has not
    /// arrived): ask again shortly.
    pub const NOT_READY: FollowStatus = FollowStatus(6);
    /// Shared: no fd came with the SHARE, or it was unusable.
    pub const NO_FD: FollowStatus = FollowStatus(7);
    /// Highest known value.
    const MAX: u16 = 7;

    /// Lower-case name, for logs and stats.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self.0 {
            0 => "ok",
            1 => "not_found",
            2 => "mismatch",
            3 => "not_permitted",
            4 => "name_taken",
            5 => "limit",
            6 => "not_ready",
            7 => "no_fd",
            _ => "unknown",
        }
    }
}

/// Return codes of the C API (`tandem_follow_*` in `include/tandem.h`): one
/// table, from which the header's `TANDEM_FOLLOW_*` defines, the shim's
/// return values and `tandem_follow_strerror` all come.
pub mod api {
    use core::ffi::CStr;

    /// Done: shared, mapped or freed.
    pub const OK: i32 = 0;
    /// `TANDEM_FOLLOW=on` is not set in this process.
    pub const DISABLED: i32 = -1;
    /// No coordinator is registered, or it does not speak follow mode.
    pub const NO_COORDINATOR: i32 = -2;
    /// No region of that name is shared in this trust group on this GPU.
    pub const NOT_FOUND: i32 = -3;
    /// The region exists but its size or layout tag differ.
    pub const MISMATCH: i32 = -4;
    /// tandemd's configuration does not allow it.
    pub const NOT_PERMITTED: i32 = -5;
    /// Another job already shares a region of that name.
    pub const NAME_TAKEN: i32 = -6;
    /// This job already shares as many regions as tandemd allows.
    pub const LIMIT: i32 = -7;
    /// tandemd did not answer in time.
    pub const TIMEOUT: i32 = -8;
    /// A driver call failed (see the TANDEM_LOG=debug line).
    pub const DRIVER: i32 = -9;
    /// A bad argument: name, size, null pointer, unknown address, or no current context.
    pub const INVALID: i32 = -10;

    /// (C name suffix, value, text) of every code.
    pub const CODES: &[(&str, i32, &CStr)] = &[
        ("OK", OK, c"ok"),
        (
            "DISABLED",
            DISABLED,
            c"follow mode is off in this process (set TANDEM_FOLLOW=on)",
        ),
        (
            "NO_COORDINATOR",
            NO_COORDINATOR,
            c"no coordinator with follow mode is registered (is tandemd running, and new enough?)",
        ),
        (
            "NOT_FOUND",
            NOT_FOUND,
            c"no region of that name is shared in this trust group on this GPU",
        ),
        (
            "MISMATCH",
            MISMATCH,
            c"the shared region's size or layout tag differ from the request's (another model?)",
        ),
        (
            "NOT_PERMITTED",
            NOT_PERMITTED,
            c"tandemd's configuration does not allow follow mode for this job",
        ),
        (
            "NAME_TAKEN",
            NAME_TAKEN,
            c"another job already shares a region of that name",
        ),
        (
            "LIMIT",
            LIMIT,
            c"this job already shares as many regions as tandemd allows",
        ),
        ("TIMEOUT", TIMEOUT, c"tandemd did not answer in time"),
        (
            "DRIVER",
            DRIVER,
            c"a CUDA driver call failed (TANDEM_LOG=debug says which)",
        ),
        (
            "INVALID",
            INVALID,
            c"invalid argument (name, size, pointer, address) or no current CUDA context",
        ),
    ];

    /// The text of `code`, or of [`INVALID`] for a value no call returns.
    #[must_use]
    pub fn text(code: i32) -> &'static CStr {
        CODES
            .iter()
            .find(|c| c.1 == code)
            .map_or(c"unknown tandem_follow code", |c| c.2)
    }

    /// The C API code an answer's status turns into (`None`: ask again).
    #[must_use]
    pub const fn from_status(s: super::FollowStatus) -> Option<i32> {
        match s.0 {
            0 => Some(OK),
            1 => Some(NOT_FOUND),
            2 => Some(MISMATCH),
            3 => Some(NOT_PERMITTED),
            4 => Some(NAME_TAKEN),
            5 => Some(LIMIT),
            6 => None,
            _ => Some(DRIVER),
        }
    }
}

/// Whether `name` is a valid region name: 1 to [`MAX_NAME_LEN`] bytes of
/// printable ASCII other than space (so it is safe in logs and stats).
#[must_use]
pub fn valid_name(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && name.iter().all(|b| b.is_ascii_graphic())
}

/// One step of the follow conversation (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Follow {
    /// Which step.
    pub op: FollowOp,
    /// [`FollowStatus`] on Shared and Mapped; 0 otherwise.
    pub status: u16,
    /// Pairs a Share or Map with its answer (chosen by the shim; echoed).
    pub request: u64,
    /// Region size in bytes (1 to [`MAX_REGION_LEN`]).
    pub len: u64,
    /// Opaque description of the region's content layout (see the module docs).
    pub layout: [u8; 16],
    name: [u8; MAX_NAME_LEN],
    name_len: u8,
}

impl Follow {
    /// A message for region `name` with status 0 and a zero layout; `None`
    /// if the name is not [`valid_name`].
    #[must_use]
    pub fn new(op: FollowOp, request: u64, name: &[u8], len: u64) -> Option<Follow> {
        if !valid_name(name) {
            return None;
        }
        let mut n = [0u8; MAX_NAME_LEN];
        n[..name.len()].copy_from_slice(name);
        Some(Follow {
            op,
            status: 0,
            request,
            len,
            layout: [0; 16],
            name: n,
            // valid_name bounds it by MAX_NAME_LEN (56).
            name_len: name.len() as u8,
        })
    }

    /// The region's name (printable ASCII, see [`valid_name`]).
    #[must_use]
    pub fn name(&self) -> &[u8] {
        &self.name[..usize::from(self.name_len)]
    }

    /// The name as text (it is ASCII by construction).
    #[must_use]
    pub fn name_str(&self) -> &str {
        core::str::from_utf8(self.name()).unwrap_or("?")
    }

    /// The answer to this Share or Map: the same request, name, len and
    /// layout, with `status`.
    #[must_use]
    pub fn answer(&self, status: FollowStatus) -> Follow {
        let op = match self.op {
            FollowOp::Share => FollowOp::Shared,
            _ => FollowOp::Mapped,
        };
        Follow {
            op,
            status: status.0,
            ..*self
        }
    }

    /// Checks the fields that depend on `op`; the same rules bind encoder and decoder.
    pub fn validate(&self) -> Result<()> {
        if self.len == 0 || self.len > MAX_REGION_LEN {
            return Err(Error::BadValue {
                field: "follow len",
                value: self.len,
            });
        }
        let status_max = if self.op.is_answer() {
            FollowStatus::MAX
        } else {
            0
        };
        if self.status > status_max {
            return Err(Error::BadValue {
                field: "follow status",
                value: u64::from(self.status),
            });
        }
        if !valid_name(self.name()) {
            return Err(Error::BadValue {
                field: "follow name",
                value: u64::from(self.name_len),
            });
        }
        Ok(())
    }

    /// Decodes a body of exactly [`FOLLOW_LEN`] bytes.
    pub fn decode(b: &[u8]) -> Result<Follow> {
        if b.len() != FOLLOW_LEN {
            return Err(Error::LengthMismatch {
                what: "Follow",
                declared: FOLLOW_LEN,
                actual: b.len(),
            });
        }
        let u16_at = |at: usize| get_u16(b, at);
        let u64_at = |at: usize| get_u64(b, at);
        let raw_op = u16_at(0);
        let op = FollowOp::from_u16(raw_op).ok_or(Error::BadValue {
            field: "follow op",
            value: u64::from(raw_op),
        })?;
        let reserved = u16_at(6);
        if reserved != 0 {
            return Err(Error::BadValue {
                field: "follow reserved",
                value: u64::from(reserved),
            });
        }
        let name_len = u16_at(4);
        if usize::from(name_len) > MAX_NAME_LEN {
            return Err(Error::BadValue {
                field: "follow name",
                value: u64::from(name_len),
            });
        }
        let mut name = [0u8; MAX_NAME_LEN];
        name.copy_from_slice(&b[40..96]);
        if name[usize::from(name_len)..].iter().any(|&c| c != 0) {
            return Err(Error::BadValue {
                field: "follow name padding",
                value: u64::from(name_len),
            });
        }
        let mut layout = [0u8; 16];
        layout.copy_from_slice(&b[24..40]);
        let f = Follow {
            op,
            status: u16_at(2),
            request: u64_at(8),
            len: u64_at(16),
            layout,
            name,
            // Checked against MAX_NAME_LEN above.
            name_len: name_len as u8,
        };
        f.validate()?;
        Ok(f)
    }

    /// Encodes the body into `b` (exactly [`FOLLOW_LEN`] bytes).
    pub fn encode_body(&self, b: &mut [u8]) -> Result<()> {
        self.validate()?;
        if b.len() != FOLLOW_LEN {
            return Err(Error::BufferTooSmall {
                need: FOLLOW_LEN,
                have: b.len(),
            });
        }
        b[0..2].copy_from_slice(&(self.op as u16).to_le_bytes());
        b[2..4].copy_from_slice(&self.status.to_le_bytes());
        b[4..6].copy_from_slice(&u16::from(self.name_len).to_le_bytes());
        b[6..8].copy_from_slice(&0u16.to_le_bytes());
        b[8..16].copy_from_slice(&self.request.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..40].copy_from_slice(&self.layout);
        b[40..96].copy_from_slice(&self.name);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
