//! The daemon's side of the index: owns the fds of the shared copies, runs
//! the index's [`Action`]s (PUBLISH and OFFER sent over the clients'
//! sockets, an OFFER with its copy's fd), and logs refusals at debug level,
//! rate-limited (a misbehaving client cannot flood the log).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tandem_proto::dedup::Dedup;
use tandem_proto::wire::Message;
use tracing::debug;

use super::index::Index;
use super::outcome::{Action, Refusal};

/// Sends one datagram (with at most one fd) to a registered client;
/// `false`: not delivered (gone, socket full, unknown).
pub type SendFn<'a> = dyn FnMut(u64, &[u8], Option<BorrowedFd<'_>>) -> bool + 'a;

/// Refusal log lines per window.
pub const LOG_BURST: u32 = 20;
/// The log window, ns.
pub const LOG_WINDOW_NS: u64 = 10_000_000_000;

/// At most [`LOG_BURST`] lines per [`LOG_WINDOW_NS`] (time injected).
#[derive(Debug, Default)]
pub struct RateLimit {
    window_start: u64,
    used: u32,
    suppressed: u64,
}

impl RateLimit {
    /// Whether one more line may be written at `now`, and how many were
    /// suppressed in the window that just ended (to say so once).
    pub fn allow(&mut self, now: u64) -> (bool, u64) {
        let mut ended = 0;
        if now.saturating_sub(self.window_start) >= LOG_WINDOW_NS || self.window_start == 0 {
            ended = std::mem::take(&mut self.suppressed);
            self.window_start = now.max(1);
            self.used = 0;
        }
        if self.used < LOG_BURST {
            self.used += 1;
            (true, ended)
        } else {
            self.suppressed += 1;
            (false, ended)
        }
    }
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Broker {
    fds: HashMap<u64, OwnedFd>,
    actions: Vec<Action>,
    buf: Vec<u8>,
    log: RateLimit,
}

impl Broker {
    /// A broker holding no fd.
    #[must_use]
    pub fn new() -> Self {
        Broker::default()
    }

    /// Shared copies whose fd tandemd holds.
    #[must_use]
    pub fn shared_fds(&self) -> usize {
        self.fds.len()
    }

    /// A Dedup message from `client`, with the fd that came with it.
    pub fn message(
        &mut self,
        index: &mut Index,
        now: u64,
        client: u64,
        m: &Dedup,
        fd: Option<OwnedFd>,
        send: &mut SendFn<'_>,
    ) {
        if let Err(r) = index.handle(now, client, m, fd.is_some(), &mut self.actions) {
            self.log_refusal(now, client, &r);
        }
        self.run(index, now, fd, send);
    }

    /// A Dedup datagram that did not decode, or a Dedup message from a
    /// client without the share flag (`gpu`: its GPU key, if known).
    pub fn refuse(
        &mut self,
        index: &mut Index,
        now: u64,
        client: u64,
        gpu: Option<u64>,
        r: Refusal,
    ) {
        index.count_protocol_error(client, gpu);
        self.log_refusal(now, client, &r);
    }

    /// The client's GPU became known (or changed).
    pub fn gpu(
        &mut self,
        index: &mut Index,
        now: u64,
        client: u64,
        gpu: u64,
        send: &mut SendFn<'_>,
    ) {
        index.set_gpu(now, client, gpu, &mut self.actions);
        self.run(index, now, None, send);
    }

    /// The client is gone.
    pub fn leave(&mut self, index: &mut Index, now: u64, client: u64, send: &mut SendFn<'_>) {
        index.leave(now, client, &mut self.actions);
        self.run(index, now, None, send);
    }

    /// Deadlines.
    pub fn tick(&mut self, index: &mut Index, now: u64, send: &mut SendFn<'_>) {
        index.tick(now, &mut self.actions);
        self.run(index, now, None, send);
    }

    fn log_refusal(&mut self, now: u64, client: u64, r: &Refusal) {
        let (allowed, suppressed) = self.log.allow(now);
        if suppressed > 0 {
            debug!("{suppressed} more dedup refusals were not logged");
        }
        if allowed {
            debug!(client, kind = ?r.kind(), "dedup message ignored: {r}");
        }
    }

    /// Carry out the pending actions in order (an undelivered message adds
    /// the index's reaction at the end). `fd` is what came with the message
    /// just handled: kept if the index adopts it, else closed here.
    fn run(&mut self, index: &mut Index, now: u64, mut fd: Option<OwnedFd>, send: &mut SendFn<'_>) {
        let mut i = 0;
        while i < self.actions.len() {
            let a = self.actions[i];
            i += 1;
            match a {
                Action::AdoptFd { shared_id } => {
                    if let Some(f) = fd.take() {
                        self.fds.insert(shared_id, f);
                    }
                }
                Action::CloseShared { shared_id } => {
                    self.fds.remove(&shared_id);
                }
                Action::SendPublish { client, msg } => {
                    if !self.send(client, &msg, None, send) {
                        index.undelivered(now, client, &msg, &mut self.actions);
                    }
                }
                Action::SendForget { client, msg } => {
                    // Lost with a full socket: the granule stays frozen in
                    // that job until it frees or writes it (as before FORGET).
                    let _ = self.send(client, &msg, None, send);
                }
                Action::SendOffer { client, msg } => {
                    let f = self.fds.get(&msg.shared_id).map(|f| f.as_fd());
                    let sent = match f {
                        Some(f) => {
                            let n = encode(&mut self.buf, &msg);
                            n.is_some_and(|n| send(client, &self.buf[..n], Some(f)))
                        }
                        None => false,
                    };
                    if !sent {
                        index.undelivered(now, client, &msg, &mut self.actions);
                    }
                }
            }
        }
        self.actions.clear();
    }

    fn send(
        &mut self,
        client: u64,
        msg: &Dedup,
        fd: Option<BorrowedFd<'_>>,
        send: &mut SendFn<'_>,
    ) -> bool {
        match encode(&mut self.buf, msg) {
            Some(n) => send(client, &self.buf[..n], fd),
            None => false,
        }
    }
}

fn encode(buf: &mut Vec<u8>, msg: &Dedup) -> Option<usize> {
    let m = Message::Dedup(*msg);
    buf.resize(m.encoded_len(), 0);
    m.encode(buf).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_log_is_rate_limited_per_window() {
        let mut r = RateLimit::default();
        let t0 = 5;
        for _ in 0..LOG_BURST {
            assert_eq!(r.allow(t0), (true, 0));
        }
        assert_eq!(r.allow(t0 + 1), (false, 0));
        assert_eq!(r.allow(t0 + 2), (false, 0));
        // The next window allows again and reports what was suppressed, once.
        assert_eq!(r.allow(t0 + LOG_WINDOW_NS), (true, 2));
        assert_eq!(r.allow(t0 + LOG_WINDOW_NS + 1), (true, 0));
    }
}
