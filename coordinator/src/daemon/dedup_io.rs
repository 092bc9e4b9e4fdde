//! The daemon's dedup plumbing: registered clients' Dedup messages into the
//! index (through the [`Broker`](crate::dedup::Broker), which holds the
//! shared copies' fds), PUBLISH / OFFER out over their sockets, joins,
//! departures and deadlines.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Duration;

use tandem_proto::dedup::Dedup;
use tandem_proto::monotonic_ns;
use tracing::debug;

use super::{send_to, Daemon};
use crate::clients::gpu_key;
use crate::dedup::Refusal;

impl Daemon {
    /// A client just registered: it joins the index if it may share.
    pub(super) fn dedup_join(&mut self, id: u64) {
        let group = self
            .shared
            .registry()
            .clients
            .get(&id)
            .and_then(|c| c.trust_group.clone());
        if let Some(g) = group {
            self.shared.dedup().join(id, &g);
        }
    }

    /// A Dedup message from registered client `id`.
    pub(super) fn dedup_message(&mut self, id: u64, m: &Dedup, fd: Option<OwnedFd>) {
        let now = monotonic_ns();
        let (conns, tokens) = (&mut self.conns, &self.client_tokens);
        let mut send =
            |c: u64, b: &[u8], f: Option<BorrowedFd<'_>>| send_to(conns, tokens, c, b, f, "dedup");
        let joined = self.shared.dedup().is_joined(id);
        if joined {
            let mut ix = self.shared.dedup();
            self.broker.message(&mut ix, now, id, m, fd, &mut send);
        } else {
            drop(fd);
            let gpu = self.client_gpu(id);
            let mut ix = self.shared.dedup();
            self.broker
                .refuse(&mut ix, now, id, gpu, Refusal::NotSharing);
        }
    }

    /// A datagram of the Dedup type from `id` that did not decode.
    pub(super) fn dedup_malformed(&mut self, id: u64, e: &tandem_proto::Error) {
        debug!(client = id, "malformed dedup message: {e}");
        let gpu = self.client_gpu(id);
        let mut ix = self.shared.dedup();
        self.broker
            .refuse(&mut ix, monotonic_ns(), id, gpu, Refusal::Malformed);
    }

    /// Client `id` sent its Device.
    pub(super) fn dedup_gpu(&mut self, id: u64, gpu: u64) {
        let (conns, tokens) = (&mut self.conns, &self.client_tokens);
        let mut send =
            |c: u64, b: &[u8], f: Option<BorrowedFd<'_>>| send_to(conns, tokens, c, b, f, "dedup");
        let mut ix = self.shared.dedup();
        self.broker.gpu(&mut ix, monotonic_ns(), id, gpu, &mut send);
    }

    /// Client `id` is gone.
    pub(super) fn dedup_leave(&mut self, id: u64) {
        let (conns, tokens) = (&mut self.conns, &self.client_tokens);
        let mut send =
            |c: u64, b: &[u8], f: Option<BorrowedFd<'_>>| send_to(conns, tokens, c, b, f, "dedup");
        let mut ix = self.shared.dedup();
        self.broker.leave(&mut ix, monotonic_ns(), id, &mut send);
    }

    /// Give up what is past its deadline.
    pub(super) fn dedup_tick(&mut self) {
        let now = monotonic_ns();
        let (conns, tokens) = (&mut self.conns, &self.client_tokens);
        let mut send =
            |c: u64, b: &[u8], f: Option<BorrowedFd<'_>>| send_to(conns, tokens, c, b, f, "dedup");
        let mut ix = self.shared.dedup();
        if ix.next_deadline().is_some_and(|d| d <= now) {
            self.broker.tick(&mut ix, now, &mut send);
        }
    }

    /// How long the event loop may sleep before the next dedup deadline.
    pub(super) fn dedup_wait(&self) -> Option<Duration> {
        let d = self.shared.dedup().next_deadline()?;
        Some(Duration::from_nanos(d.saturating_sub(monotonic_ns())) + Duration::from_millis(1))
    }

    /// The GPU key of registered client `id`, if its Device arrived.
    fn client_gpu(&self, id: u64) -> Option<u64> {
        self.shared
            .registry()
            .clients
            .get(&id)
            .and_then(|c| c.gpu.as_ref().map(gpu_key))
    }
}
