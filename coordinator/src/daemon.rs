//! Wiring and lifecycle: sockets, the accept/handshake loop, threads, reload,
//! and a graceful stop.

use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem_proto::wire::{
    self, Control, ControlOp, ControlReply, Message, Reject, RejectReason, MAX_MESSAGE_LEN,
    MESSAGE_TYPE_DEDUP, MESSAGE_TYPE_FOLLOW, PROTOCOL_VERSION,
};
use tandem_proto::Error as ProtoError;
use tracing::{debug, error, info, warn};

use crate::config::{Config, Source};
use crate::dedup::broker::RateLimit;
use crate::dedup::{Broker, Index};
use crate::follow::stats::Placement;
use crate::follow::Regions;
use crate::policy::Who;
use crate::registry::{gpu_key, Registry};
use crate::sock::{self, Epoll, PeerCred, Probe};
use crate::state::format_uuid;
use crate::state::Snapshot;

/// Most connections allowed to sit in the handshake at once.
pub const MAX_PENDING: usize = 1024;
/// Messages handled per client per wake-up (fairness under a flood).
const MAX_MESSAGES_PER_WAKE: usize = 64;

mod dedup_io;
mod follow_io;

const TOKEN_LISTENER: u64 = 0;
const TOKEN_STOP: u64 = 1;
const TOKEN_HUP: u64 = 2;
const FIRST_CONN_TOKEN: u64 = 16;

/// State shared by the daemon's threads.
pub struct Shared {
    registry: Mutex<Registry>,
    /// The dedup index (never locked while holding the registry's lock).
    dedup: Mutex<Index>,
    /// Follow mode's shared regions (never locked while holding another lock).
    follow: Mutex<Regions>,
    config: Mutex<Arc<Config>>,
    /// Start time.
    pub started: Instant,
    /// The main socket.
    pub socket: PathBuf,
    /// The stats socket.
    pub stats_socket: PathBuf,
    /// The configuration file.
    pub config_path: PathBuf,
    /// Set when stopping.
    pub stop: AtomicBool,
    /// tandemd's effective uid.
    pub euid: u32,
}

impl Shared {
    /// Lock the registry (a poisoned lock is still used: the data stays consistent
    /// enough for statistics, and the daemon must not die of it).
    pub fn registry(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the dedup index (poisoning ignored, as for the registry). Never
    /// taken while the registry's lock is held.
    pub fn dedup(&self) -> MutexGuard<'_, Index> {
        self.dedup.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the registry of follow-mode regions (poisoning ignored, as for
    /// the registry). Never taken while another lock is held, and no other
    /// lock is taken while it is held.
    pub fn follow(&self) -> MutexGuard<'_, Regions> {
        self.follow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn set_config(&self, c: Config) {
        *self.config.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(c);
    }

    /// The stats snapshot (GET /stats).
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let reg = self.registry();
        let (mut gpus, mut clients, totals) = reg.snapshot(now);
        let departed = reg.departed.iter().cloned().collect();
        let gpu_keys: Vec<u64> = reg.gpus.keys().map(gpu_key).collect();
        let placement = Placement {
            gpus: reg
                .gpus
                .keys()
                .map(|u| (gpu_key(u), format_uuid(u)))
                .collect(),
            devices: reg
                .clients
                .values()
                .filter_map(|c| Some((c.id, (gpu_key(&c.gpu?), c.gpu_ordinal?))))
                .collect(),
        };
        drop(reg);
        let cfg = self.config();
        let dedup = crate::dedup::stats::annotate(
            &self.dedup(),
            cfg.dedup.enabled,
            &gpu_keys,
            &mut gpus,
            &mut clients,
        );
        let follow = crate::follow::stats::annotate(
            &self.follow(),
            cfg.follow.enabled,
            &placement,
            &mut clients,
        );
        Snapshot {
            version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            // One stat() per snapshot: MPS may start or stop while tandemd runs.
            sharing: Some(crate::mps::SharingSnapshot::current()),
            socket: self.socket.display().to_string(),
            config_path: self.config_path.display().to_string(),
            gpus,
            clients,
            totals,
            departed,
            dedup,
            follow,
        }
    }
}

/// How to start.
pub struct Options {
    /// The configuration file (reloads re-read it).
    pub config_path: PathBuf,
    /// The configuration already loaded from it.
    pub config: Config,
    /// The main socket path.
    pub socket: PathBuf,
    /// Install SIGTERM/SIGINT/SIGHUP handlers (the binary; not in-process tests).
    pub handle_signals: bool,
    /// Called with the new level when a reload changes `log_level`.
    pub set_log_level: Option<Box<dyn Fn(tracing::Level) + Send>>,
}

/// Why tandemd could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

/// Stops a running daemon from another thread.
#[derive(Clone)]
pub struct StopHandle(Arc<OwnedFd>);

impl StopHandle {
    /// Ask the daemon to stop (returns at once).
    pub fn stop(&self) {
        sock::poke(self.0.as_fd());
    }
}

enum ConnState {
    Pending { deadline: Instant },
    Client { id: u64 },
}

struct Conn {
    fd: OwnedFd,
    cred: PeerCred,
    state: ConnState,
}

/// A bound daemon, ready to [`run`](Daemon::run).
pub struct Daemon {
    shared: Arc<Shared>,
    epoll: Epoll,
    listener: Option<OwnedFd>,
    stop_r: OwnedFd,
    stop_w: Arc<OwnedFd>,
    hup_r: OwnedFd,
    _hup_w: OwnedFd,
    stats_wake_w: OwnedFd,
    conns: HashMap<u64, Conn>,
    next_token: u64,
    threads: Vec<JoinHandle<()>>,
    socket_ids: Vec<(PathBuf, (u64, u64))>,
    set_log_level: Option<Box<dyn Fn(tracing::Level) + Send>>,
    buf: Vec<u8>,
    out: Vec<u8>,
    last_status_clients: Option<usize>,
    pending_full_warned: bool,
    /// Registered clients' connection tokens.
    client_tokens: HashMap<u64, u64>,
    /// The shared copies' fds; runs the dedup index's actions.
    broker: Broker,
    /// Bounds the debug lines about refused or malformed Follow messages.
    follow_log: RateLimit,
}

fn file_id(p: &Path) -> Option<(u64, u64)> {
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

impl Daemon {
    /// Check the socket path, bind both sockets, start the reader and stats threads.
    pub fn bind(opts: Options) -> Result<Daemon, StartError> {
        let socket = opts.socket.clone();
        let stats_socket = tandem_proto::paths::stats_socket(&socket);
        sock::sockaddr(&socket).map_err(|e| StartError(e.to_string()))?;
        sock::sockaddr(&stats_socket).map_err(|e| StartError(e.to_string()))?;
        sock::ensure_parent(&socket).map_err(|e| {
            StartError(format!(
                "cannot create the socket directory for {}: {e}",
                socket.display()
            ))
        })?;
        match sock::probe(&socket) {
            Ok(Probe::Live) => {
                return Err(StartError(format!(
                    "another tandemd is already running on {} (it accepted a connection); stop it first, or start this one with --socket PATH",
                    socket.display()
                )))
            }
            Ok(Probe::Stale) => {
                info!("removing stale socket {}", socket.display());
                std::fs::remove_file(&socket).map_err(|e| {
                    StartError(format!("cannot remove stale socket {}: {e}", socket.display()))
                })?;
            }
            Ok(Probe::Absent) => {}
            Err(e) => {
                return Err(StartError(format!(
                    "cannot use socket path {}: {e}",
                    socket.display()
                )))
            }
        }
        // No live daemon owns the directory's stats socket either.
        if std::fs::symlink_metadata(&stats_socket).is_ok() {
            let _ = std::fs::remove_file(&stats_socket);
        }
        let listener = sock::listen_seqpacket(&socket)
            .map_err(|e| StartError(format!("cannot listen on {}: {e}", socket.display())))?;
        let unix = UnixListener::bind(&stats_socket).map_err(|e| {
            StartError(format!(
                "cannot listen on stats socket {}: {e}",
                stats_socket.display()
            ))
        })?;
        sock::chmod_0666(&stats_socket)
            .map_err(|e| StartError(format!("cannot chmod {}: {e}", stats_socket.display())))?;
        let tcp = match opts.config.stats_tcp() {
            Some(addr) => Some(TcpListener::bind(addr).map_err(|e| {
                StartError(format!("cannot listen on stats.tcp_listen {addr}: {e}"))
            })?),
            None => None,
        };
        let socket_ids = [&socket, &stats_socket]
            .iter()
            .filter_map(|p| file_id(p).map(|id| (p.to_path_buf(), id)))
            .collect();

        let io_err = |what: &str, e: io::Error| StartError(format!("{what}: {e}"));
        let epoll = Epoll::new().map_err(|e| io_err("epoll_create1", e))?;
        let (stop_r, stop_w) = sock::pipe().map_err(|e| io_err("pipe", e))?;
        let (hup_r, hup_w) = sock::pipe().map_err(|e| io_err("pipe", e))?;
        let (stats_wake_r, stats_wake_w) = sock::pipe().map_err(|e| io_err("pipe", e))?;
        epoll
            .add(listener.as_raw_fd(), TOKEN_LISTENER)
            .map_err(|e| io_err("epoll_ctl", e))?;
        epoll
            .add(stop_r.as_raw_fd(), TOKEN_STOP)
            .map_err(|e| io_err("epoll_ctl", e))?;
        epoll
            .add(hup_r.as_raw_fd(), TOKEN_HUP)
            .map_err(|e| io_err("epoll_ctl", e))?;
        if opts.handle_signals {
            for (sig, w) in [
                (signal_hook::consts::SIGTERM, &stop_w),
                (signal_hook::consts::SIGINT, &stop_w),
                (signal_hook::consts::SIGHUP, &hup_w),
            ] {
                let fd = w.try_clone().map_err(|e| io_err("dup", e))?;
                signal_hook::low_level::pipe::register(sig, fd)
                    .map_err(|e| io_err("installing a signal handler", e))?;
            }
        }

        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::new(opts.config.scheduler.clone())),
            dedup: Mutex::new(Index::new(opts.config.dedup.index_config())),
            follow: Mutex::new(Regions::new(opts.config.follow.limits())),
            config: Mutex::new(Arc::new(opts.config)),
            started: Instant::now(),
            socket,
            stats_socket,
            config_path: opts.config_path,
            stop: AtomicBool::new(false),
            euid,
        });
        let mut threads = Vec::new();
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("tandemd-reader".into())
                .spawn(move || crate::reader::run(s))
                .map_err(|e| io_err("spawning the ring reader", e))?,
        );
        let s = Arc::clone(&shared);
        threads.push(
            std::thread::Builder::new()
                .name("tandemd-stats".into())
                .spawn(move || crate::stats_http::serve(s, unix, tcp, stats_wake_r))
                .map_err(|e| io_err("spawning the stats server", e))?,
        );
        Ok(Daemon {
            shared,
            epoll,
            listener: Some(listener),
            stop_r,
            stop_w: Arc::new(stop_w),
            hup_r,
            _hup_w: hup_w,
            stats_wake_w,
            conns: HashMap::new(),
            next_token: FIRST_CONN_TOKEN,
            threads,
            socket_ids,
            set_log_level: opts.set_log_level,
            buf: vec![0u8; MAX_MESSAGE_LEN],
            out: vec![0u8; MAX_MESSAGE_LEN],
            last_status_clients: None,
            pending_full_warned: false,
            client_tokens: HashMap::new(),
            broker: Broker::new(),
            follow_log: RateLimit::default(),
        })
    }

    /// A handle that stops [`run`](Daemon::run) from another thread.
    #[must_use]
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(Arc::clone(&self.stop_w))
    }

    /// The shared state (stats, registry).
    #[must_use]
    pub fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Serve until stopped (SIGTERM/SIGINT or a [`StopHandle`]), then clean up.
    pub fn run(mut self) -> io::Result<()> {
        info!(
            socket = %self.shared.socket.display(),
            stats = %self.shared.stats_socket.display(),
            pid = std::process::id(),
            "tandemd listening"
        );
        let _ = crate::notify::notify("READY=1\nSTATUS=0 clients");
        let mut events = Vec::with_capacity(64);
        let result = loop {
            let timeout = self
                .conns
                .values()
                .filter_map(|c| match c.state {
                    ConnState::Pending { deadline } => Some(deadline),
                    ConnState::Client { .. } => None,
                })
                .min()
                .map(|d| d.saturating_duration_since(Instant::now()) + Duration::from_millis(1))
                .into_iter()
                .chain(self.dedup_wait())
                .min();
            events.clear();
            if let Err(e) = self.epoll.wait(&mut events, timeout) {
                break Err(e);
            }
            let mut stop = false;
            for ev in events.drain(..) {
                match ev.token {
                    TOKEN_LISTENER => self.accept_all(),
                    TOKEN_STOP => {
                        sock::drain_pipe(self.stop_r.as_fd());
                        stop = true;
                    }
                    TOKEN_HUP => {
                        sock::drain_pipe(self.hup_r.as_fd());
                        let _ = self.reload("SIGHUP");
                    }
                    t => self.conn_event(t, ev.hangup),
                }
            }
            self.expire_pending();
            self.dedup_tick();
            self.update_status();
            if stop {
                break Ok(());
            }
        };
        self.shutdown();
        result
    }

    fn shutdown(&mut self) {
        info!("tandemd stopping");
        let _ = crate::notify::notify("STOPPING=1");
        self.shared.stop.store(true, Ordering::Release);
        self.listener = None;
        for (path, id) in &self.socket_ids {
            // Remove only our own socket files (not a successor's).
            if file_id(path) == Some(*id) {
                let _ = std::fs::remove_file(path);
            }
        }
        sock::poke(self.stats_wake_w.as_fd());
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let ids: Vec<u64> = self
            .conns
            .values()
            .filter_map(|c| match c.state {
                ConnState::Client { id } => Some(id),
                ConnState::Pending { .. } => None,
            })
            .collect();
        // Nothing more is sent: a publish the departures would start is
        // undelivered (and so dropped) at once.
        self.client_tokens.clear();
        for id in ids {
            self.reclaim(id, "tandemd stopping");
        }
        self.conns.clear();
        info!("tandemd stopped");
    }

    fn update_status(&mut self) {
        let n = self.shared.registry().clients.len();
        if self.last_status_clients != Some(n) {
            self.last_status_clients = Some(n);
            let _ = crate::notify::notify(&format!("STATUS={n} clients"));
        }
    }

    /// Re-read the configuration; a bad file keeps the old one.
    pub fn reload(&mut self, why: &str) -> Result<String, String> {
        let path = self.shared.config_path.clone();
        match Config::load(&path) {
            Ok((cfg, src)) => {
                let old = self.shared.config();
                if old.stats.tcp_listen != cfg.stats.tcp_listen {
                    warn!("stats.tcp_listen changed; it takes effect when tandemd restarts");
                }
                if let Some(f) = &self.set_log_level {
                    if old.log_level != cfg.log_level && std::env::var_os("TANDEM_LOG").is_none() {
                        f(cfg.level());
                    }
                }
                self.shared
                    .registry()
                    .reapply_policy(&cfg, self.shared.euid);
                // Sharing and trust groups of registered clients stay as they are.
                self.shared.dedup().set_config(cfg.dedup.index_config());
                // Later Follow messages see it; shared regions stay.
                self.shared.follow().set_limits(cfg.follow.limits());
                self.shared.set_config(cfg);
                self.shared.registry().totals.reloads += 1;
                let msg = match src {
                    _ if path.as_os_str().is_empty() => {
                        "no configuration file (--no-config): built-in defaults kept".to_string()
                    }
                    Source::File => format!("configuration reloaded from {}", path.display()),
                    Source::MissingFile => format!(
                        "{} does not exist; configuration reset to the defaults",
                        path.display()
                    ),
                };
                info!("{msg} ({why})");
                Ok(msg)
            }
            Err(e) => {
                self.shared.registry().totals.reload_failures += 1;
                error!("{e}; keeping the running configuration ({why})");
                Err(format!("{e}; the running configuration is kept"))
            }
        }
    }

    fn accept_all(&mut self) {
        let Some(listener) = self.listener.as_ref() else {
            return;
        };
        loop {
            let fd = match sock::accept(listener.as_fd()) {
                Ok(Some(fd)) => fd,
                Ok(None) => return,
                Err(e) => {
                    // EMFILE and friends: log and retry on the next wake-up.
                    warn!("accept failed: {e}");
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
            if let Err(e) = self.epoll.add(fd.as_raw_fd(), token) {
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
                },
            );
        }
    }

    fn expire_pending(&mut self) {
        let now = Instant::now();
        let expired: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| matches!(c.state, ConnState::Pending { deadline } if deadline <= now))
            .map(|(&t, _)| t)
            .collect();
        for t in expired {
            let ms = self.shared.config().handshake_timeout_ms;
            if let Some(c) = self.conns.get(&t) {
                warn!(
                    pid = c.cred.pid,
                    uid = c.cred.uid,
                    "peer pid {} sent no Hello or Control within {ms} ms; closing the connection",
                    c.cred.pid
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

    fn close(&mut self, token: u64) -> Option<Conn> {
        let c = self.conns.remove(&token)?;
        self.epoll.delete(c.fd.as_raw_fd());
        if let ConnState::Client { id } = c.state {
            self.client_tokens.remove(&id);
        }
        Some(c)
    }

    /// Remove registered client `id` everywhere (registry, dedup index,
    /// follow regions).
    fn reclaim(&mut self, id: u64, why: &str) {
        self.shared.registry().reclaim(id, why);
        self.dedup_leave(id);
        self.follow_leave(id);
    }

    /// Send a Reject (non-blocking, best effort), count it, and close.
    fn refuse(&mut self, token: u64, reason: RejectReason, message: &str) {
        let mut msg = message.to_string();
        truncate_utf8(&mut msg, wire::MAX_REJECT_MESSAGE_LEN);
        let m = Message::Reject(Reject {
            reason,
            peer_version: PROTOCOL_VERSION,
            message: &msg,
        });
        if let Some(c) = self.close(token) {
            if let Ok(n) = m.encode(&mut self.out) {
                let _ = wire::send(c.fd.as_fd(), &self.out[..n], None);
            }
            if let ConnState::Client { id } = c.state {
                self.reclaim(id, "refused after a bad message");
            }
        }
        self.shared.registry().totals.rejected += 1;
    }

    fn conn_event(&mut self, token: u64, hangup: bool) {
        let Some(c) = self.conns.get(&token) else {
            return;
        };
        match c.state {
            ConnState::Pending { .. } => self.first_message(token),
            ConnState::Client { id } => self.client_messages(token, id, hangup),
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
                warn!(
                    pid,
                    "peer pid {pid}: bad first message: {what}; refusing it"
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
            warn!(
                pid,
                "peer pid {pid} attached a file descriptor to its first message; refusing it"
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
                let who = Who::from_proc(cred);
                let cfg = self.shared.config();
                let result = self
                    .shared
                    .registry()
                    .register(&cfg, self.shared.euid, who, &h);
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
                        warn!(pid, "refusing peer pid {pid}: {msg}");
                        self.refuse(token, reason, &msg);
                    }
                }
            }
            Ok(Message::Control(ctl)) => self.control(token, cred, ctl),
            Ok(other) => {
                let t = other.type_name();
                warn!(pid, "peer pid {pid} opened with a {t} message; expected Hello or Control; refusing it");
                self.refuse(
                    token,
                    RejectReason::MALFORMED,
                    &format!("the first message must be Hello or Control, not {t}"),
                );
            }
            Err(e @ ProtoError::VersionMismatch { .. }) => {
                warn!(pid, "peer pid {pid}: {e}; refusing it");
                self.refuse(token, RejectReason::VERSION_MISMATCH, &e.to_string());
            }
            Err(e) => {
                warn!(
                    pid,
                    "peer pid {pid} sent a malformed first message: {e}; refusing it"
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
        for _ in 0..MAX_MESSAGES_PER_WAKE {
            let Some(c) = self.conns.get(&token) else {
                break;
            };
            match wire::recv(c.fd.as_fd(), &mut buf) {
                Err(e) if e.errno() == Some(libc::EAGAIN) => {
                    if hangup {
                        gone = Some("socket hung up".into());
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
                    gone = Some("hung up".into());
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
                        self.shared.registry().func_name(id, f.func_id, f.name);
                    }
                    Ok(Message::Device(d)) => {
                        self.shared.registry().device(id, &d);
                        self.dedup_gpu(id, gpu_key(&d.uuid));
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
            warn!(
                client = id,
                pid, "client pid {pid} sent a bad message: {why}; disconnecting it"
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
        let (status, message) = if !crate::control::permitted(&cfg, self.shared.euid, cred.uid) {
            warn!(
                pid,
                uid = cred.uid,
                "control request {} from uid {} refused: not root, not tandemd's user, not in admins",
                ctl.op.name(),
                cred.uid
            );
            self.shared.registry().totals.control_denied += 1;
            (
                RejectReason::NOT_PERMITTED.0,
                format!(
                    "uid {} may not {}: run it as root or as tandemd's user, or add the uid to `admins` in {}",
                    cred.uid,
                    ctl.op.name(),
                    self.shared.config_path.display()
                ),
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
                    .map_err(|m| (RejectReason::INTERNAL, m)),
                ControlOp::SetClass => self
                    .shared
                    .registry()
                    .set_class(&cfg, self.shared.euid, ctl.client_id, ctl.class, cred.uid)
                    .map_err(|m| (RejectReason::MALFORMED, m)),
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

/// Send one datagram to registered client `client` (non-blocking): `false`
/// if it is gone or its socket would block or failed (logged at debug,
/// naming `what` was sent).
fn send_to(
    conns: &HashMap<u64, Conn>,
    tokens: &HashMap<u64, u64>,
    client: u64,
    bytes: &[u8],
    fd: Option<std::os::fd::BorrowedFd<'_>>,
    what: &str,
) -> bool {
    let Some(c) = tokens.get(&client).and_then(|t| conns.get(t)) else {
        return false;
    };
    match wire::send(c.fd.as_fd(), bytes, fd) {
        Ok(()) => true,
        Err(e) => {
            debug!(client, "could not send a {what} message: {e}");
            false
        }
    }
}

fn truncate_utf8(s: &mut String, max: usize) {
    if s.len() > max {
        let mut n = max;
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        s.truncate(n);
    }
}
