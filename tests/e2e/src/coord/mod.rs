//! Harness for the coordinator system tests and benchmarks: builds and finds
//! `tandemd` / `tandemctl`, runs a `tandemd` on a private socket directory,
//! talks HTTP to its stats socket, runs host processes concurrently, checks
//! Prometheus text, and speaks the raw wire protocol as a (possibly hostile)
//! peer.
//!
//! Everything spawned here is killed (`SIGKILL`) and reaped when its guard is
//! dropped, so a failing test leaves no process behind. Waits are bounded
//! polls ([`poll`]) with generous deadlines; nothing here measures time.

mod bins;
mod dir;
mod fake;
mod http;
mod peer;
mod process;
mod prometheus;
mod tandemd;
mod wait;

pub use bins::*;
pub use dir::*;
pub use fake::*;
pub use http::*;
pub use peer::*;
pub use process::*;
pub use prometheus::*;
pub use tandemd::*;
pub use wait::*;
