//! `tandemd`, the per-node tandem coordinator, as a library (the binaries in
//! `src/bin/` are thin), and `tandemctl`'s implementation in [`ctl`].
//!
//! * [`config`] — `tandemd.toml`, defaults, validation, clear errors.
//! * [`daemon`] — sockets, the accept/handshake loop, reload, lifecycle.
//! * [`registry`] — registered clients, their rings, reclaim.
//! * [`policy`] — who may claim which class.
//! * [`mps`] — which sharing mode is in force (time slicing, or over MPS).
//! * [`sched`] — when training may launch: the pure scheduling policy core.
//! * [`dedup`] — weight deduplication: trust groups, the content index, the
//!   shared copies' fds.
//! * [`follow`] — follow mode: the registry of shared regions and their fds.
//! * [`reader`] — the ring-reader thread (adaptive polling, heartbeats).
//! * [`state`] — per-client and per-GPU statistics; the stats snapshot.
//! * [`stats_http`] and [`metrics`] — `GET /stats` (JSON) and `GET /metrics` (Prometheus).
//! * [`control`] — who may run control operations.
//! * [`client`] — the client side of both sockets (tandemctl, tests).
//! * [`notify`] — `sd_notify`.
//! * [`sock`] — unix sockets and epoll over libc.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod autoclass;
pub mod client;
pub mod config;
pub mod control;
pub mod ctl;
pub mod daemon;
pub mod dedup;
pub mod follow;
pub mod limits;
pub mod logging;
pub mod metrics;
pub mod mps;
pub mod notify;
pub mod policy;
pub mod reader;
pub mod registry;
pub use tandem_sched as sched;
pub mod sock;
pub mod state;
pub mod stats_http;
