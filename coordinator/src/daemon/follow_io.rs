//! The daemon's follow-mode plumbing: registered clients' Follow messages
//! into the [`Regions`](crate::follow::Regions) registry (which keeps the
//! regions' fds), the answers out over their sockets (MAPPED OK with the
//! region's fd), departures, and the log.
//!
//! Lock order: what the registry knows about the client is read first, and
//! its lock released, before the regions are locked; nothing else is locked
//! while they are.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use tandem_proto::follow::{Follow, FollowOp, FollowStatus, FOLLOW_LEN};
use tandem_proto::monotonic_ns;
use tandem_proto::wire::{Message, HEADER_LEN};
use tracing::{debug, info};

use super::{send_to, Daemon};
use crate::clients::gpu_key;
use crate::follow::{Gone, RegionKey};

/// What the registry says about a client sending a Follow message.
#[derive(Debug, Default)]
struct Caller {
    pid: u32,
    /// Its follow group, when granted.
    group: Option<String>,
    /// Its GPU key, once its Device arrived.
    gpu: Option<u64>,
    /// The device ordinal it reported.
    ordinal: Option<u32>,
}

/// The GPU ordinal for the log.
fn ordinal(o: Option<u32>) -> String {
    o.map_or_else(|| "unknown".to_string(), |o| o.to_string())
}

fn log_gone(g: &Gone, why: &str) {
    info!(
        name = %g.key.name_str(),
        group = %g.key.group,
        owner = g.owner,
        bytes = g.len,
        followers = g.followers,
        "follow region gone ({why}); followers keep what they mapped"
    );
}

impl Daemon {
    /// A Follow message from registered client `id` that shims send (SHARE,
    /// UNSHARE, MAP, UNMAP, HELD), with the fd that came with it.
    pub(super) fn follow_message(&mut self, id: u64, m: &Follow, fd: Option<OwnedFd>) {
        // Only a SHARE carries an fd: any other (a HELD's too) is closed
        // here, unused.
        let fd = fd.filter(|_| m.op == FollowOp::Share);
        let c = self.follow_caller(id);
        let group = c.group.as_deref();
        let now = monotonic_ns();
        let shared = Arc::clone(&self.shared);
        let mut regions = shared.follow();
        match m.op {
            FollowOp::Share => {
                let key = c
                    .gpu
                    .zip(group)
                    .map(|(gpu, g)| RegionKey::new(g, gpu, m.name()));
                let replacing = key
                    .as_ref()
                    .and_then(|k| regions.region(k))
                    .is_some_and(|r| r.owner == id);
                let a = regions.share(now, id, c.pid, group, c.gpu, m, fd);
                drop(regions);
                if a.status == FollowStatus::OK.0 {
                    info!(
                        name = %m.name_str(),
                        group = group.unwrap_or("-"),
                        gpu = %ordinal(c.ordinal),
                        bytes = m.len,
                        client = id,
                        pid = c.pid,
                        replaced = replacing,
                        "follow region shared"
                    );
                } else {
                    self.follow_refused(now, id, &a);
                }
                self.follow_send(id, &a, None);
            }
            FollowOp::Map => {
                let (a, region_fd) = regions.map(id, group, c.gpu, m);
                let sent = self.follow_send(id, &a, region_fd);
                if a.status != FollowStatus::OK.0 {
                    drop(regions);
                    self.follow_refused(now, id, &a);
                } else if sent {
                    drop(regions);
                    info!(
                        name = %m.name_str(),
                        group = group.unwrap_or("-"),
                        bytes = m.len,
                        client = id,
                        pid = c.pid,
                        "follow region mapped"
                    );
                } else if let (Some(g), Some(gpu)) = (group, c.gpu) {
                    // The follower never got the fd: it maps nothing.
                    regions.undelivered_map(id, g, gpu, &a);
                }
            }
            FollowOp::Unshare => {
                let gone = regions.unshare(id, m);
                drop(regions);
                if gone.is_empty() {
                    let why = format!("UNSHARE of {:?}, which it does not share", m.name_str());
                    self.follow_log_refusal(now, id, &why);
                }
                for g in &gone {
                    log_gone(g, "unshared");
                }
            }
            FollowOp::Unmap => {
                let mapped = regions.unmap(id, m);
                drop(regions);
                debug!(client = id, name = %m.name_str(), mapped, "follow region unmapped");
            }
            FollowOp::Held => {
                // Nobody waits for an answer: a refusal is counted and logged.
                let held = regions.held(id, group, c.gpu, m);
                drop(regions);
                match held {
                    Ok(linked) => debug!(
                        client = id,
                        name = %m.name_str(),
                        bytes = m.len,
                        linked,
                        "follow mapping held from an earlier tandemd"
                    ),
                    Err(st) => {
                        let why = format!("HELD of {:?} refused: {}", m.name_str(), st.name());
                        self.follow_log_refusal(now, id, &why);
                    }
                }
            }
            FollowOp::Shared | FollowOp::Mapped => {
                drop(regions);
                let why = format!("{} is sent only by tandemd", m.op.name());
                self.follow_malformed(id, &why);
            }
        }
    }

    /// A Follow datagram from `id` that did not decode, or an op only
    /// tandemd sends: counted, logged (rate-limited), never a disconnect.
    pub(super) fn follow_malformed(&mut self, id: u64, why: &str) {
        self.shared.follow().malformed();
        self.follow_log_refusal(
            monotonic_ns(),
            id,
            &format!("malformed follow message: {why}"),
        );
    }

    /// Client `id` is gone: its regions go (their fds closed).
    pub(super) fn follow_leave(&mut self, id: u64) {
        let gone = self.shared.follow().leave(id);
        for g in &gone {
            log_gone(g, "its owner left");
        }
    }

    /// Send one answer (non-blocking); `false` if it was not delivered.
    fn follow_send(
        &mut self,
        id: u64,
        a: &Follow,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
    ) -> bool {
        let mut buf = [0u8; HEADER_LEN + FOLLOW_LEN];
        match Message::Follow(*a).encode(&mut buf) {
            Ok(n) => send_to(
                &mut self.conns,
                &self.client_tokens,
                id,
                &buf[..n],
                fd,
                "follow",
            ),
            Err(e) => {
                debug!(client = id, "could not encode a follow answer: {e}");
                false
            }
        }
    }

    fn follow_refused(&mut self, now: u64, id: u64, a: &Follow) {
        let why = format!(
            "{} of {:?} refused: {}",
            if a.op == FollowOp::Shared {
                "SHARE"
            } else {
                "MAP"
            },
            a.name_str(),
            FollowStatus(a.status).name()
        );
        self.follow_log_refusal(now, id, &why);
    }

    /// A debug line, at most [`crate::dedup::broker::LOG_BURST`] per window.
    fn follow_log_refusal(&mut self, now: u64, id: u64, why: &str) {
        let (allowed, suppressed) = self.follow_log.allow(now);
        if suppressed > 0 {
            debug!("{suppressed} more follow refusals were not logged");
        }
        if allowed {
            debug!(client = id, "follow: {why}");
        }
    }

    /// What the registry knows about client `id` (its lock released on return).
    fn follow_caller(&self, id: u64) -> Caller {
        let reg = self.shared.registry();
        reg.clients
            .get(&id)
            .map_or_else(Caller::default, |c| Caller {
                pid: c.who.pid,
                group: c.follow_group.clone(),
                gpu: c.gpu.as_ref().map(gpu_key),
                ordinal: c.gpu_ordinal,
            })
    }
}
