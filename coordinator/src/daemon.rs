//! Wiring and lifecycle: sockets, the event loop, threads, reload, and a
//! graceful stop. The connections themselves (accept, handshake, registered
//! clients' messages, control requests) are `conns`; the dedup and follow
//! conversations' plumbing `dedup_io` and `follow_io`. The state the threads
//! share is [`crate::shared`].

use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tandem_proto::wire::MAX_MESSAGE_LEN;
use tracing::{debug, error, info, warn};

use crate::config::{Config, Source};
use crate::dedup::broker::RateLimit;
use crate::dedup::Broker;
use crate::shared::Shared;
use crate::sock::{self, Epoll, PeerCred, Probe};

/// Most connections allowed to sit in the handshake at once.
pub const MAX_PENDING: usize = 1024;
/// Messages handled per client per wake-up (fairness under a flood).
const MAX_MESSAGES_PER_WAKE: usize = 64;

mod conns;
mod dedup_io;
mod follow_io;
mod outbox;

const TOKEN_LISTENER: u64 = 0;
const TOKEN_STOP: u64 = 1;
const TOKEN_HUP: u64 = 2;
const FIRST_CONN_TOKEN: u64 = 16;

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
    /// Messages its socket did not take yet ([`outbox`]).
    outbox: outbox::Outbox,
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
    /// Where the TCP listener (`[stats] tcp_listen`) is bound, if there is one.
    metrics_addr: Option<std::net::SocketAddr>,
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
    /// Closed to accept (and refuse) a connection when out of descriptors.
    spare_fd: Option<OwnedFd>,
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
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let tmp_dir = tandem_proto::paths::tmp_socket_dir(euid);
        let in_tmp = socket.parent() == Some(tmp_dir.as_path());
        if in_tmp {
            // /tmp/tandem-<uid>: made private, and refused unless it is.
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o700).create(&tmp_dir);
            sock::check_private_dir(&tmp_dir, euid).map_err(StartError)?;
        }
        sock::ensure_parent(&socket).map_err(|e| {
            StartError(format!(
                "cannot create the socket directory for {}: {e}",
                socket.display()
            ))
        })?;
        match sock::probe(&socket) {
            Ok(Probe::Live) => {
                return Err(StartError(format!(
                    "another tandemd is already running on {} (it accepted a connection): stop it first, or give this one a socket of its own with --socket (e.g. {}: its stats socket follows the name, {})",
                    socket.display(),
                    socket.with_file_name("b.sock").display(),
                    tandem_proto::paths::stats_socket(&socket.with_file_name("b.sock")).display()
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
        // A stats socket left by a daemon that died is removed; one that
        // something answers on (another daemon's socket of that name) is
        // left alone, and this daemon does not start.
        match sock::probe_stream(&stats_socket) {
            Ok(Probe::Absent) => {}
            Ok(Probe::Stale) => {
                info!("removing stale socket {}", stats_socket.display());
                std::fs::remove_file(&stats_socket).map_err(|e| {
                    StartError(format!(
                        "cannot remove stale socket {}: {e}",
                        stats_socket.display()
                    ))
                })?;
            }
            Ok(Probe::Live) => {
                return Err(StartError(format!(
                    "{} (the stats socket of {}) is in use by another process: give this tandemd another --socket name",
                    stats_socket.display(),
                    socket.display()
                )))
            }
            Err(e) => {
                return Err(StartError(format!(
                    "cannot use stats socket path {}: {e}",
                    stats_socket.display()
                )))
            }
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
        let metrics_addr = tcp.as_ref().and_then(|t| t.local_addr().ok());
        // After both sockets are ours: a second tandemd never gets here.
        let mps = crate::mps::Mps::start(
            &opts.config.mps,
            socket.parent().unwrap_or_else(|| Path::new("/")),
        );
        let socket_ids = [&socket, &stats_socket]
            .iter()
            .filter_map(|p| file_id(p).map(|id| (p.to_path_buf(), id)))
            .collect();

        let io_err = |what: &str, e: io::Error| StartError(format!("{what}: {e}"));
        let epoll = Epoll::new().map_err(|e| io_err("epoll_create1", e.into()))?;
        let (stop_r, stop_w) = sock::pipe().map_err(|e| io_err("pipe", e.into()))?;
        let (hup_r, hup_w) = sock::pipe().map_err(|e| io_err("pipe", e.into()))?;
        let (stats_wake_r, stats_wake_w) = sock::pipe().map_err(|e| io_err("pipe", e.into()))?;
        epoll
            .add(listener.as_fd(), TOKEN_LISTENER)
            .map_err(|e| io_err("epoll_ctl", e.into()))?;
        epoll
            .add(stop_r.as_fd(), TOKEN_STOP)
            .map_err(|e| io_err("epoll_ctl", e.into()))?;
        epoll
            .add(hup_r.as_fd(), TOKEN_HUP)
            .map_err(|e| io_err("epoll_ctl", e.into()))?;
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

        let shared = Arc::new(Shared::new(
            opts.config,
            opts.config_path,
            socket,
            stats_socket,
            euid,
            mps,
        ));
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
            metrics_addr,
            set_log_level: opts.set_log_level,
            buf: vec![0u8; MAX_MESSAGE_LEN],
            out: vec![0u8; MAX_MESSAGE_LEN],
            last_status_clients: None,
            pending_full_warned: false,
            client_tokens: HashMap::new(),
            broker: Broker::new(),
            follow_log: RateLimit::default(),
            spare_fd: sock::spare_fd(),
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
        let metrics = self.metrics_addr.map_or_else(
            || "off ([stats] tcp_listen is empty)".to_string(),
            |a| format!("http://{a}/metrics and /healthz"),
        );
        // The journal names the pid on every line already.
        let pid = if crate::logging::under_journald() {
            String::new()
        } else {
            format!(" (pid {})", std::process::id())
        };
        info!(
            "tandemd {} listening{pid}: clients and control on {}, stats on {}, TCP {metrics}",
            env!("CARGO_PKG_VERSION"),
            self.shared.socket.display(),
            self.shared.stats_socket.display(),
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
                .chain(self.boards_wait())
                .chain(self.outboxes_wait())
                .chain(crate::logging::flush_throttled())
                .min();
            events.clear();
            if let Err(e) = self.epoll.wait(&mut events, timeout) {
                break Err(e.into());
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
            self.flush_outboxes();
            self.send_owed_boards();
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
        self.shared.mps().stop();
        info!("tandemd stopped");
    }

    fn update_status(&mut self) {
        let n = self.shared.registry().clients.len();
        if self.last_status_clients != Some(n) {
            self.last_status_clients = Some(n);
            let _ = crate::notify::notify(&format!("STATUS={n} clients"));
        }
    }

    /// Re-read the configuration; a bad or missing file keeps the old one.
    pub fn reload(&mut self, why: &str) -> Result<String, String> {
        let path = self.shared.config_path.clone();
        match Config::load(&path) {
            Ok((_, Source::MissingFile)) if !path.as_os_str().is_empty() => {
                self.shared.registry().totals.reload_failures += 1;
                let msg = format!(
                    "{} does not exist (deleted or moved?); the running configuration is kept: restore the file and reload again",
                    path.display()
                );
                error!("{msg} ({why})");
                Err(msg)
            }
            Ok((cfg, src)) => {
                let old = self.shared.config();
                if old.stats.tcp_listen != cfg.stats.tcp_listen {
                    warn!("stats.tcp_listen changed; it takes effect when tandemd restarts");
                }
                if old.mps.needs_restart(&cfg.mps) {
                    warn!(
                        "[mps] enabled, control_binary, pipe_dir or log_dir changed; they take \
                         effect when tandemd restarts (the training_* values apply to jobs that \
                         register from now on)"
                    );
                }
                if let Some(f) = &self.set_log_level {
                    if old.log_level != cfg.log_level && std::env::var_os("TANDEM_LOG").is_none() {
                        f(cfg.level());
                    }
                }
                self.shared
                    .registry()
                    .reapply_policy(&cfg, self.shared.euid);
                self.send_owed_boards();
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
                    Source::File | Source::MissingFile => {
                        format!("configuration reloaded from {}", path.display())
                    }
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

    fn close(&mut self, token: u64) -> Option<Conn> {
        let c = self.conns.remove(&token)?;
        self.epoll.delete(c.fd.as_fd());
        if let ConnState::Client { id } = c.state {
            self.client_tokens.remove(&id);
        }
        Some(c)
    }

    /// Sends what the clients' sockets did not take before, as they drain.
    fn flush_outboxes(&mut self) {
        for c in self.conns.values_mut() {
            if c.outbox.len() > 0 {
                c.outbox.flush(c.fd.as_fd());
            }
        }
    }

    /// How long the event loop may sleep while messages are held.
    fn outboxes_wait(&self) -> Option<Duration> {
        self.conns
            .values()
            .any(|c| c.outbox.len() > 0)
            .then_some(outbox::RETRY_EVERY)
    }

    /// Remove registered client `id` everywhere (registry, dedup index,
    /// follow regions).
    fn reclaim(&mut self, id: u64, why: &str) {
        self.shared.registry().reclaim(id, why);
        self.dedup_leave(id);
        self.follow_leave(id);
    }
}

/// Send one datagram to registered client `client` (non-blocking), or hold
/// it behind what its socket has not taken yet ([`outbox`]): `false` if it
/// is gone, its socket failed, or too much is held (logged at debug, naming
/// `what` was sent).
fn send_to(
    conns: &mut HashMap<u64, Conn>,
    tokens: &HashMap<u64, u64>,
    client: u64,
    bytes: &[u8],
    fd: Option<std::os::fd::BorrowedFd<'_>>,
    what: &str,
) -> bool {
    let Some(c) = tokens.get(&client).and_then(|t| conns.get_mut(t)) else {
        return false;
    };
    match c.outbox.send(c.fd.as_fd(), bytes, fd) {
        outbox::Sent::Now | outbox::Sent::Held => true,
        outbox::Sent::Lost(e) => {
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
