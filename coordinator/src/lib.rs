//! `tandemd`, the per-node tandem coordinator, as a library (the binaries in
//! `src/bin/` are thin), and `tandemctl`'s implementation in [`ctl`].
//!
//! The launch path through tandemd, one module per stage (see
//! `docs/ARCHITECTURE.md`):
//!
//! * [`clients`] — the client table: registration, identity, class, reclaim.
//! * [`admission`] — who may claim which class (inference or training).
//! * [`drain`] — each client's ring read into the scheduler's inputs.
//! * [`sched`] — when training may launch: the pure scheduling policy
//!   (the `tandem-sched` crate).
//! * [`grant`] — the scheduler's outputs written into the control blocks
//!   (gates, launch limits, mark intervals, local in-flight budgets) and the
//!   estimate tables.
//! * [`board`] — the node's GPU board, through which inference shims tell
//!   training shims they are active (tandemd creates it and hands it out).
//!
//! Around it:
//!
//! * [`config`] — `tandemd.toml`, defaults, validation, clear errors.
//! * [`daemon`] — sockets, the accept/handshake loop, reload, lifecycle.
//! * [`shared`] — the state the daemon's threads share; the stats snapshot.
//! * [`reader`] — the ring-reader thread (adaptive polling, heartbeats).
//! * [`mps`] — which sharing mode is in force; tandem over MPS (`[mps]`: the
//!   MPS control daemon tandemd owns, and how clients join it).
//! * [`dedup`] — weight deduplication: trust groups, the content index, the
//!   shared copies' fds.
//! * [`follow`] — follow mode: the registry of shared regions and their fds.
//! * [`state`] — per-client and per-GPU statistics; the stats snapshot's shape.
//! * [`stats_http`] and [`metrics`] — `GET /stats` (JSON) and `GET /metrics` (Prometheus).
//! * [`control`] — who may run control operations.
//! * [`containers`] — identity in containers: pod, container, contained root.
//! * [`client`] — the client side of both sockets (tandemctl, tests).
//! * [`notify`] — `sd_notify`.
//! * [`sock`] — unix sockets and epoll over libc.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod admission;
pub mod autoclass;
pub mod board;
pub mod capture;
pub mod client;
pub mod clients;
pub mod config;
pub mod containers;
pub mod control;
pub mod ctl;
pub mod daemon;
pub mod dedup;
pub mod drain;
pub mod follow;
pub mod grant;
pub mod logging;
pub mod metrics;
pub mod mps;
pub mod notify;
pub mod predict;
pub mod reader;
pub use tandem_sched as sched;
pub mod shared;
pub mod slurm;
pub mod sock;
pub mod spatial;
pub mod state;
pub mod stats_http;
pub mod trace_query;
