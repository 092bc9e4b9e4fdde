//! Follow mode, tandemd's side (issue 5): a job *shares* a named region of
//! its device memory (the region's shareable fd comes with the SHARE), and a
//! job of the same trust group on the same GPU *maps* it read-only (tandemd
//! answers MAPPED with a dup of that fd), so the follower's outputs track the
//! sharer's training.
//!
//! * [`config`] — `[follow]` in tandemd.toml, the Welcome flag.
//! * [`regions`] — the registry of shared regions: a pure state machine
//!   (messages in, answers out, time injected) that holds the regions' fds.
//! * [`stats`] — the JSON shapes in `GET /stats`; [`report`] fills them in
//!   from the registry of regions.
//!
//! The conversation itself is documented in [`tandem_proto::follow`].

pub mod config;
pub mod regions;
pub mod report;
pub mod stats;

#[cfg(test)]
mod tests;

pub use config::{FollowConfig, FollowLimits};
pub use regions::{Gone, Region, RegionKey, Regions};
