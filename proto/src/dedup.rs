//! The weight-deduplication conversation between a shim and tandemd: one
//! fixed-layout [`Dedup`] message (wire type 8) whose [`DedupOp`] says which
//! step it is.
//!
//! ```text
//! Dedup  0 op u16   2 status u16   4 reserved u32 (0)   8 granule u64
//!        16 shared_id u64   24 len u64   32 hash[16]   48 elapsed_ns u64
//! ```
//!
//! A *granule* is one 2 MiB piece of a job's VMM-backed allocation, named by
//! its device address in that job (`granule`). A *shared id* names one
//! canonical read-only copy that tandemd holds an fd for (never 0).
//!
//! ```text
//! shim A                          tandemd                          shim B
//! CANDIDATE(g_a, hash)   ->  index[group, gpu, hash] = A's g_a
//!                                                     <-  CANDIDATE(g_b, hash)
//!                        <-  PUBLISH(g_a, S, hash)
//! (A maps g_a read-only,
//!  re-hashes, exports fd)
//! PUBLISHED(g_a, S) + fd ->  holds fd of S; holders {A}
//!                            OFFER(g_b, S, hash) + fd  ->
//!                                         (B imports, compares byte for byte,
//!                                          remaps g_b to S read-only)
//!                                                     <-  RESULT(g_b, S, MERGED)
//!                            holders {A, B}
//! WITHDRAW(g_a, S, FREED|COW|CHANGED) -> holders {B}; fd closed when none left
//! ```
//!
//! A PUBLISHED OK that comes after tandemd gave the publish up (its
//! deadline, `[dedup] timeout_ms`) is answered with FORGET(g_a, S): the
//! copy was never kept, and the publisher takes its granule back.
//!
//! The coordinator trusts none of it: a PUBLISHED or RESULT is checked against
//! what it asked for, and the byte comparison happens in the process whose
//! memory is about to be replaced (B), so a lying peer can only hurt itself.

use crate::bytes::{get_u16, get_u64};
use crate::error::{Error, Result};

/// Body length of a [`Dedup`] message.
pub const DEDUP_LEN: usize = 56;

/// Largest granule a message may describe (1 GiB): a sanity bound, not a policy.
pub const MAX_GRANULE_LEN: u64 = 1 << 30;

/// Which step of the conversation a [`Dedup`] message is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum DedupOp {
    /// Shim -> tandemd: granule `granule` has had content `hash` (stable, see
    /// the shim's rules) and may be merged. `len` is its size.
    Candidate = 1,
    /// Shim -> tandemd: granule `granule` is no longer a candidate, or (with a
    /// non-zero `shared_id`) no longer maps that shared copy. `status` is a
    /// [`WithdrawReason`].
    Withdraw = 2,
    /// tandemd -> shim: make granule `granule` (content `hash`) the canonical
    /// copy `shared_id`: map it read-only, check the hash again, export it.
    Publish = 3,
    /// Shim -> tandemd: answer to [`DedupOp::Publish`]; `status` is a
    /// [`DedupStatus`]; on [`DedupStatus::OK`] the shareable fd rides along.
    Published = 4,
    /// tandemd -> shim: shared copy `shared_id` (fd attached) has the content
    /// `hash` that granule `granule` had; compare and merge if identical.
    Offer = 5,
    /// Shim -> tandemd: outcome of an [`DedupOp::Offer`] (`status`), with the
    /// time the merge took in `elapsed_ns`.
    Result = 6,
    /// tandemd -> shim: the PUBLISHED OK for granule `granule` as
    /// `shared_id` came after tandemd gave the publish up: that copy does
    /// not exist, and the granule, frozen read-only and exported for it, is
    /// the job's own private memory again (and may be a candidate again). An
    /// older shim ignores it.
    Forget = 7,
}

impl DedupOp {
    /// Checked decode of a wire value.
    #[must_use]
    pub const fn from_u16(v: u16) -> Option<DedupOp> {
        match v {
            1 => Some(DedupOp::Candidate),
            2 => Some(DedupOp::Withdraw),
            3 => Some(DedupOp::Publish),
            4 => Some(DedupOp::Published),
            5 => Some(DedupOp::Offer),
            6 => Some(DedupOp::Result),
            7 => Some(DedupOp::Forget),
            _ => None,
        }
    }

    /// Lower-case name, for logs.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            DedupOp::Candidate => "candidate",
            DedupOp::Withdraw => "withdraw",
            DedupOp::Publish => "publish",
            DedupOp::Published => "published",
            DedupOp::Offer => "offer",
            DedupOp::Result => "result",
            DedupOp::Forget => "forget",
        }
    }

    /// Whether the shim sends this op (else tandemd does).
    #[must_use]
    pub const fn from_shim(self) -> bool {
        matches!(
            self,
            DedupOp::Candidate | DedupOp::Withdraw | DedupOp::Published | DedupOp::Result
        )
    }
}

/// Outcome codes of [`DedupOp::Published`] and [`DedupOp::Result`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DedupStatus(pub u16);

impl DedupStatus {
    /// Published: the fd is attached. Result: merged, the granule now maps the shared copy.
    pub const OK: DedupStatus = DedupStatus(0);
    /// The bytes differ (a hash collision, or the content changed in between).
    pub const MISMATCH: DedupStatus = DedupStatus(1);
    /// The granule is gone or no longer has that content.
    pub const GONE: DedupStatus = DedupStatus(2);
    /// A driver call failed (export, import, map); nothing changed.
    pub const DRIVER_ERROR: DedupStatus = DedupStatus(3);
    /// The shim declined (busy, not opted in, shutting down); nothing changed.
    pub const DECLINED: DedupStatus = DedupStatus(4);
    /// Highest known value.
    const MAX: u16 = 4;

    /// Lower-case name, for logs and stats.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self.0 {
            0 => "ok",
            1 => "mismatch",
            2 => "gone",
            3 => "driver_error",
            4 => "declined",
            _ => "unknown",
        }
    }
}

/// Why a granule left the index ([`DedupOp::Withdraw`]'s `status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WithdrawReason(pub u16);

impl WithdrawReason {
    /// The job freed the allocation.
    pub const FREED: WithdrawReason = WithdrawReason(1);
    /// The content changed since the candidate was sent.
    pub const CHANGED: WithdrawReason = WithdrawReason(2);
    /// A driver-visible write (memcpy, memset) broke the sharing: the job now
    /// has a private copy (copy-on-write).
    pub const COPY_ON_WRITE: WithdrawReason = WithdrawReason(3);
    /// Highest known value.
    const MAX: u16 = 3;

    /// Lower-case name, for logs and stats.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self.0 {
            1 => "freed",
            2 => "changed",
            3 => "copy_on_write",
            _ => "unknown",
        }
    }
}

/// One step of the dedup conversation (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dedup {
    /// Which step.
    pub op: DedupOp,
    /// [`DedupStatus`] (Published, Result) or [`WithdrawReason`] (Withdraw); 0 otherwise.
    pub status: u16,
    /// The granule's device address in the shim's process.
    pub granule: u64,
    /// The shared copy concerned; 0 where none (Candidate, a Withdraw of an unmerged granule).
    pub shared_id: u64,
    /// Granule size in bytes (non-zero, at most [`MAX_GRANULE_LEN`]).
    pub len: u64,
    /// Content hash (the shim's 128-bit hash; only a hint, never proof).
    pub hash: [u8; 16],
    /// Result: how long the merge took in the shim; 0 otherwise.
    pub elapsed_ns: u64,
}

impl Dedup {
    /// A message with every optional field zero.
    #[must_use]
    pub const fn new(op: DedupOp, granule: u64, len: u64) -> Dedup {
        Dedup {
            op,
            status: 0,
            granule,
            shared_id: 0,
            len,
            hash: [0; 16],
            elapsed_ns: 0,
        }
    }

    /// Checks the fields that depend on `op`; the same rules bind encoder and decoder.
    pub fn validate(&self) -> Result<()> {
        if self.len == 0 || self.len > MAX_GRANULE_LEN {
            return Err(Error::BadValue {
                field: "dedup len",
                value: self.len,
            });
        }
        let status_max = match self.op {
            DedupOp::Published | DedupOp::Result => DedupStatus::MAX,
            DedupOp::Withdraw => WithdrawReason::MAX,
            _ => 0,
        };
        let status_min = u16::from(self.op == DedupOp::Withdraw);
        if self.status < status_min || self.status > status_max {
            return Err(Error::BadValue {
                field: "dedup status",
                value: u64::from(self.status),
            });
        }
        let needs_shared = matches!(
            self.op,
            DedupOp::Publish
                | DedupOp::Published
                | DedupOp::Offer
                | DedupOp::Result
                | DedupOp::Forget
        );
        if needs_shared && self.shared_id == 0 {
            return Err(Error::BadValue {
                field: "dedup shared_id",
                value: 0,
            });
        }
        if self.op == DedupOp::Candidate && self.shared_id != 0 {
            return Err(Error::BadValue {
                field: "dedup shared_id",
                value: self.shared_id,
            });
        }
        Ok(())
    }

    /// Decodes a body of exactly [`DEDUP_LEN`] bytes.
    pub fn decode(b: &[u8]) -> Result<Dedup> {
        if b.len() != DEDUP_LEN {
            return Err(Error::LengthMismatch {
                what: "Dedup",
                declared: DEDUP_LEN,
                actual: b.len(),
            });
        }
        let u16_at = |at: usize| get_u16(b, at);
        let u64_at = |at: usize| get_u64(b, at);
        let raw_op = u16_at(0);
        let op = DedupOp::from_u16(raw_op).ok_or(Error::BadValue {
            field: "dedup op",
            value: u64::from(raw_op),
        })?;
        let reserved = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if reserved != 0 {
            return Err(Error::BadValue {
                field: "dedup reserved",
                value: u64::from(reserved),
            });
        }
        let mut hash = [0u8; 16];
        hash.copy_from_slice(&b[32..48]);
        let d = Dedup {
            op,
            status: u16_at(2),
            granule: u64_at(8),
            shared_id: u64_at(16),
            len: u64_at(24),
            hash,
            elapsed_ns: u64_at(48),
        };
        d.validate()?;
        Ok(d)
    }

    /// Encodes the body into `b` (exactly [`DEDUP_LEN`] bytes).
    pub fn encode_body(&self, b: &mut [u8]) -> Result<()> {
        self.validate()?;
        if b.len() != DEDUP_LEN {
            return Err(Error::BufferTooSmall {
                need: DEDUP_LEN,
                have: b.len(),
            });
        }
        b[0..2].copy_from_slice(&(self.op as u16).to_le_bytes());
        b[2..4].copy_from_slice(&self.status.to_le_bytes());
        b[4..8].copy_from_slice(&0u32.to_le_bytes());
        b[8..16].copy_from_slice(&self.granule.to_le_bytes());
        b[16..24].copy_from_slice(&self.shared_id.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..48].copy_from_slice(&self.hash);
        b[48..56].copy_from_slice(&self.elapsed_ns.to_le_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(op: DedupOp) -> Dedup {
        let mut d = Dedup::new(op, 0x7f00_0020_0000, 2 << 20);
        d.hash = *b"0123456789abcdef";
        if !matches!(op, DedupOp::Candidate) {
            d.shared_id = 9;
        }
        if op == DedupOp::Withdraw {
            d.status = WithdrawReason::COPY_ON_WRITE.0;
        }
        if op == DedupOp::Result {
            d.status = DedupStatus::MISMATCH.0;
            d.elapsed_ns = 1234;
        }
        d
    }

    #[test]
    fn every_op_round_trips() {
        for raw in 1..=7 {
            let op = DedupOp::from_u16(raw).unwrap();
            let d = sample(op);
            let mut b = [0u8; DEDUP_LEN];
            d.encode_body(&mut b).unwrap();
            assert_eq!(Dedup::decode(&b).unwrap(), d, "{}", op.name());
        }
        assert_eq!(DedupOp::from_u16(0), None);
        assert_eq!(DedupOp::from_u16(8), None);
        assert!(!DedupOp::Forget.from_shim());
    }

    #[test]
    fn bad_fields_are_named() {
        let mut b = [0u8; DEDUP_LEN];
        sample(DedupOp::Offer).encode_body(&mut b).unwrap();
        let field = |b: &[u8]| match Dedup::decode(b) {
            Err(Error::BadValue { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let mut z = b;
        z[16..24].fill(0);
        assert_eq!(field(&z), "dedup shared_id");
        let mut z = b;
        z[24..32].fill(0);
        assert_eq!(field(&z), "dedup len");
        let mut z = b;
        z[4] = 1;
        assert_eq!(field(&z), "dedup reserved");
        let mut z = b;
        z[2] = 1; // Offer carries no status
        assert_eq!(field(&z), "dedup status");
        let mut z = b;
        z[0] = 99;
        assert_eq!(field(&z), "dedup op");
        assert!(matches!(
            Dedup::decode(&b[..40]),
            Err(Error::LengthMismatch { .. })
        ));
        let mut w = sample(DedupOp::Withdraw);
        w.status = 0;
        assert!(w.encode_body(&mut [0u8; DEDUP_LEN]).is_err());
        let mut c = sample(DedupOp::Candidate);
        c.shared_id = 3;
        assert!(c.encode_body(&mut [0u8; DEDUP_LEN]).is_err());
    }
}
