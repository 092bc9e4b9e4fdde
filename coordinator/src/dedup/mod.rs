//! Weight deduplication, tandemd's side (issue 5): the content index of
//! every sharing client's stable 2 MiB granules, per trust group and GPU,
//! and the canonical shared copies tandemd holds an fd for.
//!
//! * [`groups`] — `[dedup]` in tandemd.toml, trust groups, who may share.
//! * [`index`] — the pure state machine (events in, [`Action`]s out, time
//!   injected; no fds, no IO); [`conversation`] holds its steps,
//!   [`entries`] its records and [`outcome`] what a step produces.
//! * [`broker`] — the daemon's side: keeps the fds, sends PUBLISH / OFFER,
//!   feeds the index, logs refusals (rate-limited).
//! * [`stats`] — counters, merge latency, and the JSON shapes; [`report`]
//!   fills them in from the index for `GET /stats`.
//!
//! The conversation itself is documented in [`tandem_proto::dedup`].

pub mod broker;
pub mod conversation;
pub mod entries;
pub mod groups;
pub mod index;
pub mod outcome;
pub mod report;
pub mod stats;

#[cfg(test)]
mod audit;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use broker::Broker;
pub use groups::{DedupConfig, TrustGroup};
pub use index::{Index, IndexConfig, GRANULE_LEN};
pub use outcome::{Action, Refusal, RefusalKind};
