//! What one step of the index produces: [`Action`]s for the daemon, or a
//! [`Refusal`] saying why a message changed nothing.

use tandem_proto::dedup::{Dedup, DedupOp};

use super::entries::GRANULE_LEN;

/// What the daemon must do, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Keep the fd that came with the message just handled as `shared_id`.
    AdoptFd {
        /// The shared copy.
        shared_id: u64,
    },
    /// Send `msg` (a PUBLISH) to `client`.
    SendPublish {
        /// Addressee.
        client: u64,
        /// The message.
        msg: Dedup,
    },
    /// Send `msg` (an OFFER) to `client` with the fd of `msg.shared_id`.
    SendOffer {
        /// Addressee.
        client: u64,
        /// The message.
        msg: Dedup,
    },
    /// Send `msg` (a FORGET) to `client`: nothing waits for it.
    SendForget {
        /// Addressee.
        client: u64,
        /// The message.
        msg: Dedup,
    },
    /// Close the fd of `shared_id` (it is never named again).
    CloseShared {
        /// The shared copy.
        shared_id: u64,
    },
}

/// How a [`Refusal`] is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefusalKind {
    /// `protocol_errors`: the message contradicts the state.
    Protocol,
    /// `candidates_ignored`: a valid candidate tandemd will not track.
    Ignored,
    /// `late_replies`: an answer after its request was given up.
    Late,
}

/// Why a message changed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The client was not given the share flag.
    NotSharing,
    /// A message only tandemd sends.
    WrongDirection(DedupOp),
    /// An fd came with a message other than PUBLISHED.
    FdAttached(DedupOp),
    /// A datagram of the Dedup type that did not decode.
    Malformed,
    /// A CANDIDATE whose len is not the granule size.
    WrongLen(u64),
    /// A CANDIDATE for a granule already tracked.
    AlreadyTracked(u64),
    /// A shared id tandemd never allocated.
    UnknownShared(u64),
    /// An answer to something tandemd did not ask of this client.
    NotAsked {
        /// The op.
        op: DedupOp,
        /// Its granule.
        granule: u64,
        /// Its shared id.
        shared: u64,
    },
    /// A WITHDRAW of a granule tandemd does not know.
    UnknownGranule(u64),
    /// A WITHDRAW without a shared id of a granule that maps a shared copy.
    HeldWithoutShared(u64),
    /// The client's Device (GPU) is not known yet.
    NoDevice,
    /// This granule's content failed a byte comparison before.
    RefusedContent(u64),
    /// The client has `max_entries_per_client` entries.
    Limit,
    /// An answer after its PUBLISH or OFFER was given up.
    Late {
        /// The op.
        op: DedupOp,
        /// Its shared id.
        shared: u64,
    },
}

impl Refusal {
    /// Which counter it goes to.
    #[must_use]
    pub fn kind(&self) -> RefusalKind {
        match self {
            Refusal::NoDevice | Refusal::RefusedContent(_) | Refusal::Limit => RefusalKind::Ignored,
            Refusal::Late { .. } => RefusalKind::Late,
            _ => RefusalKind::Protocol,
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Refusal::NotSharing => {
                f.write_str("dedup message from a client not given the share flag")
            }
            Refusal::WrongDirection(op) => write!(f, "{} is sent by tandemd, not to it", op.name()),
            Refusal::FdAttached(op) => write!(f, "a file descriptor came with {}", op.name()),
            Refusal::Malformed => f.write_str("malformed dedup message"),
            Refusal::WrongLen(l) => {
                write!(f, "candidate of {l} bytes (granules are {GRANULE_LEN})")
            }
            Refusal::AlreadyTracked(g) => write!(f, "candidate {g:#x} is already tracked"),
            Refusal::UnknownShared(s) => write!(f, "shared id {s} was never allocated"),
            Refusal::NotAsked {
                op,
                granule,
                shared,
            } => {
                write!(
                    f,
                    "{} for granule {granule:#x}, shared {shared}: not asked",
                    op.name()
                )
            }
            Refusal::UnknownGranule(g) => write!(f, "withdraw of unknown granule {g:#x}"),
            Refusal::HeldWithoutShared(g) => {
                write!(f, "withdraw of merged granule {g:#x} without its shared id")
            }
            Refusal::NoDevice => f.write_str("candidate before the Device message"),
            Refusal::RefusedContent(g) => {
                write!(f, "granule {g:#x} failed a comparison for this hash")
            }
            Refusal::Limit => f.write_str("per-client candidate limit reached"),
            Refusal::Late { op, shared } => write!(f, "late {} for shared {shared}", op.name()),
        }
    }
}
