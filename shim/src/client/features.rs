//! What the session tells the features built on it: weight dedup and follow
//! mode.
//!
//! They stand above the client (they speak through [`Session`]), so the
//! client names none of them. It calls through one slot instead, which the
//! crate root fills at start-up with their functions ([`install`]); until then,
//! and in a build that installs nothing, every call does nothing (the session
//! works unchanged, with no dedup or follow mode).

use std::os::fd::OwnedFd;
use std::sync::OnceLock;
use std::time::Duration;

use tandem_proto::dedup::Dedup;
use tandem_proto::follow::Follow;

use super::session::Session;

/// The calls the client makes into the features above it, all from the
/// watcher thread (`session_lost` from it too: the session just retired).
pub struct Features {
    /// A new session was published after a reconnection.
    pub session_started: fn(&Session),
    /// The coordinator went away (the session is already unpublished).
    pub session_lost: fn(),
    /// Periodic work between the coordinator's messages.
    pub tick: fn(&Session),
    /// How long the watcher may sleep before the next `tick` is due, given
    /// how long it would sleep otherwise.
    pub poll_slice: fn(&Session, Duration) -> Duration,
    /// A Dedup message from the coordinator, with its descriptor if any.
    pub on_dedup: fn(&Session, Dedup, Option<OwnedFd>),
    /// A Follow message from the coordinator, with its descriptor if any.
    pub on_follow: fn(Follow, Option<OwnedFd>),
}

/// No feature: what the client calls before [`install`].
static NONE: Features = Features {
    session_started: |_| {},
    session_lost: || {},
    tick: |_| {},
    poll_slice: |_, slice| slice,
    on_dedup: |_, _, _| {},
    on_follow: |_, _| {},
};

static INSTALLED: OnceLock<&'static Features> = OnceLock::new();

/// Fills the slot (the crate root, at start-up; once: a second call is ignored).
pub fn install(features: &'static Features) {
    let _ = INSTALLED.set(features);
}

/// The installed features (one Acquire load), or [`NONE`].
pub(crate) fn get() -> &'static Features {
    INSTALLED.get().copied().unwrap_or(&NONE)
}
