//! The daemon's connections: accepting them (with the peer's credentials),
//! the handshake (Hello or Control first, within a deadline), registered
//! clients' messages, control requests, and refusals.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use tandem_proto::wire::{
    self, Control, ControlOp, ControlReply, Message, Reject, RejectReason, MAX_MESSAGE_LEN,
    MESSAGE_TYPE_DEDUP, MESSAGE_TYPE_FOLLOW, PROTOCOL_VERSION,
};
use tandem_proto::Error as ProtoError;
use tracing::{debug, info, warn};

use super::{truncate_utf8, Conn, ConnState, Daemon, MAX_MESSAGES_PER_WAKE, MAX_PENDING};
use crate::admission::Who;
use crate::clients::gpu_key;
use crate::logging::warn_throttled;
use crate::sock::{self, PeerCred};

// Causes of the warnings any local user can provoke, each rate-limited on
// its own (crate::logging::Throttle).
const ACCEPT_FAILED: &str = "accept failed";
const SILENT_PEER: &str = "silent peer";
const GARBAGE_PEER: &str = "garbage peer";
const REFUSED_CLIENT: &str = "refused client";
const VERSION_MISMATCH: &str = "protocol version mismatch";
const CONTROL_DENIED: &str = "control request refused";

/// How often a board that could not be sent is tried again.
const BOARD_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

impl Daemon {
    pub(super) fn accept_all(&mut self) {
        if self.spare_fd.is_none() {
            // Lost: another thread took the descriptor freed for it (a
            // memfd, a stats connection). Taken back as soon as one is free.
            self.spare_fd = sock::spare_fd();
        }
        loop {
            let Some(listener) = self.listener.as_ref() else {
                return;
            };
            let fd = match sock::accept(listener.as_fd()) {
                Ok(Some(fd)) => fd,
                Ok(None) => return,
                Err(e) if sock::out_of_fds(Some(e.errno())) && self.spare_fd.is_some() => {
                    // Out of descriptors: the spare one makes room to take
                    // the connection and tell it why, rather than leave it
                    // waiting (and the listener readable: a busy loop).
                    let why = sock::client_limit_message();
                    self.spare_fd = None;
                    let extra = self
                        .listener
                        .as_ref()
                        .and_then(|l| sock::accept(l.as_fd()).ok().flatten());
                    if let Some(fd) = extra {
                        warn_throttled(
                            ACCEPT_FAILED,
                            &format!("accept failed: {e}; refusing the connection: {why}"),
                        );
                        self.refuse_fd(&fd, RejectReason::TOO_MANY_CLIENTS, &why);
                        // The refused connection's descriptor, shut down,
                        // is the next spare: closing it and opening another
                        // left a moment in which another thread could take
                        // the slot, and with no spare every later job went
                        // unanswered (seen on a loaded CI machine).
                        self.spare_fd = Some(sock::shut_down(fd));
                        continue;
                    }
                    // accept4 says EMFILE before it looks for a connection:
                    // none was waiting.
                    self.spare_fd = sock::spare_fd();
                    return;
                }
                Err(e) => {
                    // Log and retry on the next wake-up.
                    warn_throttled(ACCEPT_FAILED, &format!("accept failed: {e}"));
                    return;
                }
            };
            let pending = self
                .conns
                .values()
                .filter(|c| matches!(c.state, ConnState::Pending { .. }))
                .count();
            if pending >= MAX_PENDING {
                if !self.pending_full_warned {
                    self.pending_full_warned = true;
                    warn!("{MAX_PENDING} connections are in the handshake; refusing more until they finish or time out");
                }
                self.shared.registry().totals.rejected += 1;
                continue; // fd dropped: closed
            }
            self.pending_full_warned = false;
            let cred = match sock::peer_cred(fd.as_fd()) {
                Ok(c) => c,
                Err(e) => {
                    warn!("SO_PEERCRED failed on a new connection: {e}; closing it");
                    continue;
                }
            };
            let token = self.next_token;
            self.next_token += 1;
            if let Err(e) = self.epoll.add(fd.as_fd(), token) {
                warn!(pid = cred.pid, "epoll_ctl failed for a new connection: {e}");
                continue;
            }
            let timeout =
                Duration::from_millis(u64::from(self.shared.config().handshake_timeout_ms));
            debug!(pid = cred.pid, uid = cred.uid, "connection");
            self.conns.insert(
                token,
                Conn {
                    fd,
                    cred,
                    state: ConnState::Pending {
                        deadline: Instant::now() + timeout,
                    },
                    outbox: super::outbox::Outbox::default(),
                },
            );
        }
    }

    pub(super) fn expire_pending(&mut self) {
        let now = Instant::now();
        let expired: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, ConnState::Pending { deadline } if deadline <= now))
            .map(|(&t, _)| t)
            .collect();
        for t in expired {
            // A first message may be queued whose readiness this wake-up
            // has not reached yet (epoll gives 64 events a wait; a flood of
            // connections, or tandemd short of CPU, leaves the rest for the
            // next): read it before calling the peer silent.
            self.first_message(t);
            if !matches!(self.conns.get(&t), Some(c) if matches!(c.state, ConnState::Pending { .. }))
            {
                continue;
            }
            let ms = self.shared.config().handshake_timeout_ms;
            if let Some(c) = self.conns.get(&t) {
                warn_throttled(
                    SILENT_PEER,
                    &format!(
                        "peer pid {} (uid {}) sent no Hello or Control within {ms} ms; closing the connection",
                        c.cred.pid, c.cred.uid
                    ),
                );
            }
            self.shared.registry().totals.handshake_timeouts += 1;
            self.refuse(
                t,
                RejectReason::MALFORMED,
                &format!("no message within {ms} ms"),
            );
        }
    }

    /// A Reject with `message` (cut to the wire's limit) encoded into
    /// `self.out`: its length, or None if it does not encode.
    fn encode_reject(&mut self, reason: RejectReason, message: &str) -> Option<usize> {
        let mut msg = message.to_string();
        truncate_utf8(&mut msg, wire::MAX_REJECT_MESSAGE_LEN);
        Message::Reject(Reject {
            reason,
            peer_version: PROTOCOL_VERSION,
            message: &msg,
        })
        .encode(&mut self.out)
        .ok()
    }

    /// Send a Reject to a connection not yet registered (best effort) and
    /// count it; the caller closes it.
    fn refuse_fd(&mut self, fd: &std::os::fd::OwnedFd, reason: RejectReason, message: &str) {
        if let Some(n) = self.encode_reject(reason, message) {
            let _ = wire::send(fd.as_fd(), &self.out[..n], None);
        }
        // What the peer sent already is read away: a close with unread
        // input would make its read fail ("Connection reset by peer")
        // instead of showing the Reject.
        for _ in 0..4 {
            if !matches!(wire::recv(fd.as_fd(), &mut self.buf), Ok(g) if g.len > 0) {
                break;
            }
        }
        self.shared.registry().totals.rejected += 1;
    }

    /// Send a Reject (non-blocking, best effort), count it, and close.
    pub(super) fn refuse(&mut self, token: u64, reason: RejectReason, message: &str) {
        if let Some(c) = self.close(token) {
            if let Some(n) = self.encode_reject(reason, message) {
                let _ = wire::send(c.fd.as_fd(), &self.out[..n], None);
            }
            if let ConnState::Client { id } = c.state {
                self.reclaim(id, "refused after a bad message");
            }
        }
        self.shared.registry().totals.rejected += 1;
    }

    pub(super) fn conn_event(&mut self, token: u64, hangup: bool) {
        let Some(c) = self.conns.get(&token) else {
            return;
        };
        match c.state {
            ConnState::Pending { .. } => self.first_message(token),
            ConnState::Client { id } => self.client_messages(token, id, hangup),
        }
    }

    /// Sends client `id` the GPU board (its shim asked in its Hello). A
    /// failure costs the client only the board: it keeps its registration,
    /// and the board is owed to it, sent again by [`Self::send_owed_boards`]
    /// (a full socket: the shim's watcher is not reading yet). Whether the
    /// board sent is writable; `None` if none was.
    fn send_board(&mut self, token: u64, id: u64) -> Option<bool> {
        let (fd, flags) = self.shared.registry().board_for(id)?;
        let sent = Message::Board(wire::BoardMsg { flags })
            .encode(&mut self.out)
            .map_err(|e| e.to_string())
            .and_then(|n| {
                let c = self.conns.get(&token).ok_or("connection gone")?;
                wire::send(c.fd.as_fd(), &self.out[..n], Some(fd.as_fd()))
                    .map_err(|e| e.to_string())
            });
        match sent {
            Ok(()) => Some(flags & wire::BOARD_FLAG_WRITABLE != 0),
            Err(e) => {
                debug!(
                    client = id,
                    "could not send the GPU board: {e}; trying again later"
                );
                self.shared.registry().board_unsent(id);
                None
            }
        }
    }

    /// How soon the loop must turn again to retry owed boards: a client
    /// whose board could not be sent may send nothing that would wake it.
    pub(super) fn boards_wait(&self) -> Option<std::time::Duration> {
        self.shared.registry().owes_boards().then_some(BOARD_RETRY)
    }

    /// Sends a writable board to each client granted the inference class
    /// since it got a read-only one: its shim then announces its requests
    /// without reconnecting; and a board again to each client whose board
    /// could not be sent. Called where a class can turn to inference (an
    /// operator's `set-class`, a reload) and on every turn of the loop (no
    /// work when nothing is owed); registration hands out the board that
    /// fits already, and detection only ever makes a job training.
    pub(super) fn send_owed_boards(&mut self) {
        let owed = self.shared.registry().take_owed_boards();
        for id in owed {
            if let Some(&token) = self.client_tokens.get(&id) {
                // A failure is owed again (logged at debug, as each retry).
                if let Some(writable) = self.send_board(token, id) {
                    info!(client = id, writable, "sent it the GPU board it was owed");
                }
            }
        }
    }

    fn first_message(&mut self, token: u64) {
        let Some(c) = self.conns.get(&token) else {
            return;
        };
        let cred = c.cred;
        let pid = cred.pid;
        let got = wire::recv(c.fd.as_fd(), &mut self.buf);
        let got = match got {
            Err(e) if e.errno() == Some(libc::EAGAIN) => return,
            Err(ProtoError::BadAncillary { what }) => {
                warn_throttled(
                    GARBAGE_PEER,
                    &format!("peer pid {pid}: bad first message: {what}; refusing it"),
                );
                self.refuse(
                    token,
                    RejectReason::MALFORMED,
                    &format!("bad message: {what} (messages are at most {MAX_MESSAGE_LEN} bytes, no attached fds)"),
                );
                return;
            }
            Err(e) => {
                debug!(pid, "connection failed before its first message: {e}");
                self.close(token);
                return;
            }
            Ok(g) => g,
        };
        if got.len == 0 {
            debug!(pid, "peer hung up before its first message");
            self.close(token);
            return;
        }
        if got.fd.is_some() {
            warn_throttled(
                GARBAGE_PEER,
                &format!(
                    "peer pid {pid} attached a file descriptor to its first message; refusing it"
                ),
            );
            self.refuse(
                token,
                RejectReason::MALFORMED,
                "no file descriptors may be attached",
            );
            return;
        }
        let buf = std::mem::take(&mut self.buf);
        match Message::decode(&buf[..got.len]) {
            Ok(Message::Hello(h)) => {
                let cfg = self.shared.config();
                let who = Who::from_proc(cred, &cfg.kubernetes.pod_info_dir, self.shared.euid);
                let offer = self.shared.mps().offer(&cfg.mps);
                let result = self.shared.registry().register(
                    &cfg,
                    self.shared.euid,
                    who,
                    &h,
                    offer.as_ref(),
                );
                match result {
                    Ok((welcome, memfd)) => {
                        let id = welcome.client_id;
                        let sent = Message::Welcome(welcome)
                            .encode(&mut self.out)
                            .map_err(|e| e.to_string())
                            .and_then(|n| {
                                let c = self.conns.get(&token).ok_or("connection gone")?;
                                wire::send(c.fd.as_fd(), &self.out[..n], Some(memfd.as_fd()))
                                    .map_err(|e| e.to_string())
                            });
                        drop(memfd); // the client has its own copy now
                        match sent {
                            Ok(()) => {
                                if let Some(c) = self.conns.get_mut(&token) {
                                    c.state = ConnState::Client { id };
                                    self.client_tokens.insert(id, token);
                                }
                                if h.flags & wire::HELLO_FLAG_BOARD != 0 {
                                    let _ = self.send_board(token, id);
                                }
                                self.dedup_join(id);
                            }
                            Err(e) => {
                                warn!(
                                    pid,
                                    client = id,
                                    "could not send Welcome: {e}; dropping the client"
                                );
                                self.reclaim(id, "Welcome not delivered");
                                self.close(token);
                            }
                        }
                    }
                    Err((reason, msg)) => {
                        warn_throttled(REFUSED_CLIENT, &format!("refusing peer pid {pid}: {msg}"));
                        self.refuse(token, reason, &msg);
                    }
                }
            }
            Ok(Message::Control(ctl)) => self.control(token, cred, ctl),
            Ok(other) => {
                let t = other.type_name();
                warn_throttled(
                    GARBAGE_PEER,
                    &format!("peer pid {pid} opened with a {t} message; expected Hello or Control; refusing it"),
                );
                self.refuse(
                    token,
                    RejectReason::MALFORMED,
                    &format!("the first message must be Hello or Control, not {t}"),
                );
            }
            Err(e @ ProtoError::VersionMismatch { theirs, .. }) => {
                // A rolling upgrade: the job's libtandem.so and this tandemd
                // are from different releases. The job runs on unscheduled
                // (the shim fails open) until it restarts with the library
                // installed beside this tandemd.
                warn_throttled(
                    VERSION_MISMATCH,
                    &format!("peer pid {pid} speaks tandem protocol v{theirs}, this tandemd v{PROTOCOL_VERSION}: the job runs without tandem until it restarts with the libtandem.so of this release (restart it, or finish the rollout); {e}"),
                );
                *self
                    .shared
                    .registry()
                    .totals
                    .version_mismatches
                    .entry(theirs.to_string())
                    .or_default() += 1;
                self.refuse(token, RejectReason::VERSION_MISMATCH, &e.to_string());
            }
            Err(e) => {
                warn_throttled(
                    GARBAGE_PEER,
                    &format!("peer pid {pid} sent a malformed first message: {e}; refusing it"),
                );
                self.refuse(token, RejectReason::MALFORMED, &e.to_string());
            }
        }
        self.buf = buf;
    }

    fn client_messages(&mut self, token: u64, id: u64, hangup: bool) {
        let mut buf = std::mem::take(&mut self.buf);
        let mut gone: Option<String> = None;
        let mut bad: Option<String> = None;
        // A peer that closed with our messages unread in its receive queue
        // resets the connection, and `recvmsg` on a SOCK_SEQPACKET socket
        // reports that (once) ahead of the messages still queued: those are
        // read before the peer is taken as gone (its Device message, sent
        // right before it exited, was lost so).
        let mut reset: Option<String> = None;
        for _ in 0..MAX_MESSAGES_PER_WAKE {
            let Some(c) = self.conns.get(&token) else {
                break;
            };
            match wire::recv(c.fd.as_fd(), &mut buf) {
                Err(e) if e.errno() == Some(libc::ECONNRESET) && reset.is_none() => {
                    reset = Some(format!("socket error: {e}"));
                }
                Err(e) if e.errno() == Some(libc::EAGAIN) => {
                    if hangup || reset.is_some() {
                        gone = reset.take().or_else(|| Some("socket hung up".into()));
                    }
                    break;
                }
                Err(ProtoError::BadAncillary { what }) => {
                    bad = Some(format!("bad message: {what}"));
                    break;
                }
                Err(e) => {
                    gone = Some(format!("socket error: {e}"));
                    break;
                }
                Ok(g) if g.len == 0 => {
                    gone = reset.take().or_else(|| Some("hung up".into()));
                    break;
                }
                Ok(g) => match Message::decode(&buf[..g.len]) {
                    // Dedup messages are checked against the index's state;
                    // what does not fit is counted, never a disconnect.
                    Ok(Message::Dedup(m)) => self.dedup_message(id, &m, g.fd),
                    Err(e) if wire::message_type(&buf[..g.len]) == Some(MESSAGE_TYPE_DEDUP) => {
                        self.dedup_malformed(id, &e);
                    }
                    // Follow messages likewise: refusals are answers, and
                    // what does not decode is counted, never a disconnect.
                    Ok(Message::Follow(m)) if m.op.from_shim() => {
                        self.follow_message(id, &m, g.fd);
                    }
                    Ok(Message::Follow(m)) => {
                        let why = format!("{} is sent only by tandemd", m.op.name());
                        self.follow_malformed(id, &why);
                    }
                    Err(e) if wire::message_type(&buf[..g.len]) == Some(MESSAGE_TYPE_FOLLOW) => {
                        self.follow_malformed(id, &e.to_string());
                    }
                    _ if g.fd.is_some() => {
                        bad = Some("a file descriptor was attached".into());
                        break;
                    }
                    Ok(Message::FuncName(f)) => {
                        self.shared
                            .registry()
                            .func_name(id, f.func_id, f.name, f.attrs);
                    }
                    Ok(Message::Device(d)) => {
                        // A GPU the table had no room for is not the
                        // client's: the dedup index does not take it either.
                        let taken = self.shared.registry().device(id, &d);
                        if taken {
                            self.dedup_gpu(id, gpu_key(&d.uuid));
                        }
                    }
                    Ok(m) => {
                        bad = Some(format!(
                            "unexpected {} message after registration",
                            m.type_name()
                        ));
                        break;
                    }
                    Err(e) => {
                        bad = Some(e.to_string());
                        break;
                    }
                },
            }
        }
        self.buf = buf;
        if let Some(why) = bad {
            let pid = self.conns.get(&token).map_or(0, |c| c.cred.pid);
            warn_throttled(
                GARBAGE_PEER,
                &format!("client {id} (pid {pid}) sent a bad message: {why}; disconnecting it"),
            );
            self.refuse(token, RejectReason::MALFORMED, &why);
        } else if let Some(why) = gone {
            self.close(token);
            self.reclaim(id, &why);
        }
    }

    fn control(&mut self, token: u64, cred: PeerCred, ctl: Control) {
        let cfg = self.shared.config();
        let pid = cred.pid;
        let who = Who::from_proc(cred, &cfg.kubernetes.pod_info_dir, self.shared.euid);
        let contained = who.contained();
        let (status, message) = if !crate::control::permitted(
            &cfg,
            self.shared.euid,
            cred.uid,
            contained,
        ) {
            let whom = who.describe();
            warn_throttled(
                CONTROL_DENIED,
                &format!(
                    "control request {} from pid {pid} ({whom}) refused: {}",
                    ctl.op.name(),
                    if contained {
                        "it runs in a container"
                    } else {
                        "not root, not tandemd's user, not in admins"
                    }
                ),
            );
            self.shared.registry().totals.control_denied += 1;
            let remedy = if contained {
                "processes in containers never may (a container's root is not the node's); run tandemctl on the node, or in tandemd's own pod (kubectl exec)".to_string()
            } else {
                format!(
                    "run it as root or as tandemd's user, or add the uid to `admins` in {}",
                    self.shared.config_path.display()
                )
            };
            (
                RejectReason::CONTROL_DENIED.0,
                format!("{whom} may not {}: {remedy}", ctl.op.name()),
            )
        } else {
            info!(
                pid,
                uid = cred.uid,
                op = ctl.op.name(),
                client = ctl.client_id,
                "control request"
            );
            let r = match ctl.op {
                ControlOp::Reload => self
                    .reload(&format!("tandemctl reload by uid {}", cred.uid))
                    .map_err(|m| (RejectReason::CONFIG_NOT_APPLIED, m)),
                ControlOp::SetClass => {
                    let r = self.shared.registry().set_class(
                        &cfg,
                        self.shared.euid,
                        ctl.client_id,
                        ctl.class,
                        cred.uid,
                    );
                    self.send_owed_boards();
                    r.map_err(|m| (RejectReason::NO_SUCH_CLIENT, m))
                }
            };
            match r {
                Ok(m) => (ControlReply::OK, m),
                Err((reason, m)) => (reason.0, m),
            }
        };
        let mut message = message;
        truncate_utf8(&mut message, wire::MAX_CONTROL_MESSAGE_LEN);
        if let Some(c) = self.close(token) {
            let m = Message::ControlReply(ControlReply {
                status,
                message: &message,
            });
            if let Ok(n) = m.encode(&mut self.out) {
                let _ = wire::send(c.fd.as_fd(), &self.out[..n], None);
            }
        }
    }
}
