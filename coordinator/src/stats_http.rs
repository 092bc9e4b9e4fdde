//! A tiny HTTP/1.1 server for stats: `GET /stats` (JSON), `GET /metrics`
//! (Prometheus text 0.0.4), `GET /healthz` (liveness: "ok"), `GET` or
//! `POST /predict` (a placement prediction, [`crate::predict::http`]: on
//! a worker thread of its own, one at a time, so the model's seconds hold
//! no other request), anything else 404 with a help text. One request per connection (`Connection: close`),
//! requests limited to 8 KiB and 2 s. Event-driven on one thread: an idle
//! or slow client holds only its own connection, never a worker, and past
//! [`connection_cap`] the oldest connection is closed to make room, so a
//! flood of idle connections cannot keep tandemctl or a probe from an answer.
//! The optional TCP listener has no authentication, so it serves only
//! `/metrics` unless `[stats] tcp_serves_stats` says otherwise: `/stats`
//! names executables, uids, cgroups, pods and kernels.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tandem_os::epoll::Epoll;
use tracing::{debug, error, warn};

use crate::shared::Shared;

/// Longest request head accepted.
pub const MAX_REQUEST: usize = 8192;
/// How long a client may take to send its request (and to read the answer).
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
const HELP: &str = "tandemd stats: GET /stats (JSON snapshot), GET /metrics (Prometheus text), GET /healthz (liveness), GET /trace?id=N[&seconds=S] (a client's live trace), GET /predict?gpu=N&trace=PATH or POST /predict?gpu=N with a trace body (a placement prediction)\n";

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// JSON.
    Stats,
    /// Prometheus.
    Metrics,
    /// Liveness: a fixed "ok", computed from nothing.
    Healthz,
    /// A client's live trace (`tandemctl trace`): its query string.
    Trace(String),
    /// A placement prediction (GET with `trace=PATH`, or POST with a body).
    Predict,
    /// 404.
    NotFound,
    /// 405.
    BadMethod,
    /// 400 with a reason.
    Bad(&'static str),
}

/// Parse a request head (everything before the blank line).
#[must_use]
pub fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::Bad("request is not UTF-8");
    };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::Bad("malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Route::Bad("only HTTP/1.x is spoken here");
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if method == "POST" && path == "/predict" {
        return Route::Predict;
    }
    if method != "GET" && method != "HEAD" {
        return Route::BadMethod;
    }
    // Absolute-form targets (http://host/stats) are allowed too.
    let path = path
        .strip_prefix("http://")
        .map_or(path, |rest| rest.find('/').map_or("/", |i| &rest[i..]));
    match path {
        "/stats" => Route::Stats,
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Healthz,
        "/trace" => Route::Trace(query.to_string()),
        "/predict" => Route::Predict,
        _ => Route::NotFound,
    }
}

/// A whole response.
fn response(code: u16, reason: &str, ctype: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    out.into_bytes()
}

const TCP_NO_STATS: &str = "GET /stats is not served over TCP (it names executables, uids, pods and kernels, and TCP has no authentication): use the stats socket, or set [stats] tcp_serves_stats = true\n";

/// Where a request head ends (the blank line), if it is all there.
#[must_use]
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n")
}

const TCP_NO_PREDICT: &str = "/predict is not served over TCP unless [stats] tcp_serves_stats = true (its answers describe the node's jobs)\n";

/// The whole answer to one request `head`; `tcp`: it came over the TCP
/// listener. (`/predict` here has no body and no peer: the server hands
/// its connection to [`crate::predict::http::serve_conn`] instead.)
#[must_use]
pub fn answer(head: &[u8], shared: &Shared, tcp: bool) -> Vec<u8> {
    let head_only = head.starts_with(b"HEAD ");
    match route(head) {
        Route::Predict if tcp && !shared.config().stats.tcp_serves_stats => {
            response(404, "Not Found", "text/plain", TCP_NO_PREDICT, head_only)
        }
        Route::Predict => crate::predict::http::answer_shared(head, &[], shared, None),
        Route::Healthz => response(200, "OK", "text/plain", "ok\n", head_only),
        Route::Stats if tcp && !shared.config().stats.tcp_serves_stats => {
            response(404, "Not Found", "text/plain", TCP_NO_STATS, head_only)
        }
        Route::Trace(_) if tcp && !shared.config().stats.tcp_serves_stats => {
            response(404, "Not Found", "text/plain", TCP_NO_STATS, head_only)
        }
        Route::Trace(query) => {
            match crate::trace_query::parse_query(&query)
                .and_then(|(id, s)| crate::trace_query::trace_json(shared, id, s))
            {
                Ok(body) => response(200, "OK", "application/json", &body, head_only),
                Err(r) => {
                    let reason = match r.status {
                        400 => "Bad Request",
                        404 => "Not Found",
                        _ => "Conflict",
                    };
                    response(
                        r.status,
                        reason,
                        "text/plain",
                        &(r.message + "\n"),
                        head_only,
                    )
                }
            }
        }
        Route::Stats => {
            let body = serde_json::to_string_pretty(&shared.snapshot()).unwrap_or_default() + "\n";
            response(200, "OK", "application/json", &body, head_only)
        }
        Route::Metrics => {
            let body = crate::metrics::render(&shared.snapshot());
            response(
                200,
                "OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
                head_only,
            )
        }
        Route::NotFound => response(404, "Not Found", "text/plain", HELP, head_only),
        Route::BadMethod => response(405, "Method Not Allowed", "text/plain", HELP, false),
        Route::Bad(why) => response(
            400,
            "Bad Request",
            "text/plain",
            &format!("{why}\n{HELP}"),
            false,
        ),
    }
}

/// Read the head of one request from a blocking connection (bounded),
/// answer it; `tcp`: it came over the TCP listener. The server itself is
/// event-driven ([`serve`]) and answers the same way ([`answer`]).
pub fn handle<S: Read + Write>(s: &mut S, shared: &Shared, tcp: bool) {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let out = loop {
        if let Some(i) = head_end(&buf) {
            break answer(&buf[..i], shared, tcp);
        }
        if buf.len() > MAX_REQUEST {
            break response(
                431,
                "Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
                false,
            );
        }
        match s.read(&mut chunk) {
            Ok(0) => return, // closed before a full request
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break response(
                    408,
                    "Request Timeout",
                    "text/plain",
                    "request timeout\n",
                    false,
                );
            }
            Err(_) => return,
        }
    };
    let _ = s.write_all(&out);
    let _ = s.flush();
}

/// Connections the stats server keeps open at most (see [`connection_cap`]).
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections the stats server keeps open at once: [`MAX_CONNECTIONS`], or
/// a quarter of the soft `RLIMIT_NOFILE` if that is less (the rest is for
/// jobs), at least 16. Past it, the connection that has waited longest is
/// closed with a 503 that says so, so idle connections can never lock the
/// server: a new client is always answered.
#[must_use]
pub fn connection_cap() -> usize {
    let soft = tandem_os::rlimit::nofile().map_or(1024, |l| l.soft);
    usize::try_from(soft / 4)
        .unwrap_or(usize::MAX)
        .clamp(16, MAX_CONNECTIONS)
}

const TOKEN_WAKE: u64 = 0;
const TOKEN_UNIX: u64 = 1;
const TOKEN_TCP: u64 = 2;
const FIRST_CONN: u64 = 16;

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Unix(s) => s.as_fd(),
            Stream::Tcp(s) => s.as_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Conn {
    s: Stream,
    tcp: bool,
    /// The request head so far.
    buf: Vec<u8>,
    /// The answer, once there is one, and how much of it went out.
    out: Option<(Vec<u8>, usize)>,
    /// When it is closed: [`IO_TIMEOUT`] after it was accepted (to send its
    /// request) or after its answer was ready (to read it).
    deadline: Instant,
}

/// The event-driven stats server: one thread, non-blocking connections,
/// each with its own deadline; nothing a client does (or fails to do)
/// holds anything but its own connection.
struct Server {
    shared: Arc<Shared>,
    epoll: Epoll,
    unix: UnixListener,
    tcp: Option<TcpListener>,
    /// By token: the smallest is the connection accepted first.
    conns: BTreeMap<u64, Conn>,
    next: u64,
    cap: usize,
}

/// Serve until a byte arrives on `wake` (read end of a pipe).
pub fn serve(shared: Arc<Shared>, unix: UnixListener, tcp: Option<TcpListener>, wake: OwnedFd) {
    let epoll = match Epoll::new() {
        Ok(e) => e,
        Err(e) => {
            error!("stats server: {e}; GET /stats and /metrics are not served");
            return;
        }
    };
    let _ = unix.set_nonblocking(true);
    let mut ok = epoll.add(wake.as_fd(), TOKEN_WAKE).is_ok();
    ok &= epoll.add(unix.as_fd(), TOKEN_UNIX).is_ok();
    if let Some(t) = &tcp {
        let _ = t.set_nonblocking(true);
        ok &= epoll.add(t.as_fd(), TOKEN_TCP).is_ok();
    }
    if !ok {
        error!("stats server: epoll_ctl failed; GET /stats and /metrics are not served");
        return;
    }
    let mut server = Server {
        shared,
        epoll,
        unix,
        tcp,
        conns: BTreeMap::new(),
        next: FIRST_CONN,
        cap: connection_cap(),
    };
    let mut events = Vec::with_capacity(tandem_os::epoll::MAX_EVENTS);
    loop {
        let timeout = server
            .conns
            .values()
            .map(|c| c.deadline)
            .min()
            .map(|d| d.saturating_duration_since(Instant::now()) + Duration::from_millis(1));
        events.clear();
        if let Err(e) = server.epoll.wait(&mut events, timeout) {
            warn!("stats server: {e}");
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        for ev in &events {
            match ev.token {
                TOKEN_WAKE => return,
                TOKEN_UNIX => server.accept(false),
                TOKEN_TCP => server.accept(true),
                t => server.io(t),
            }
        }
        server.expire();
    }
}

impl Server {
    fn accept(&mut self, tcp: bool) {
        loop {
            let got = match (&self.tcp, tcp) {
                (Some(t), true) => t.accept().map(|(s, _)| Stream::Tcp(s)),
                _ => self.unix.accept().map(|(s, _)| Stream::Unix(s)),
            };
            match got {
                Ok(s) => self.add(s, tcp),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let out_of_fds = matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE));
                    crate::logging::warn_throttled(
                        "stats accept failed",
                        &format!("stats server: accept failed: {e}"),
                    );
                    // The listener stays readable: free a descriptor (the
                    // connection that waited longest) or pause a little,
                    // rather than spin.
                    if !(out_of_fds && self.evict_oldest()) {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    return;
                }
            }
        }
    }

    fn add(&mut self, s: Stream, tcp: bool) {
        let nonblocking = match &s {
            Stream::Unix(u) => u.set_nonblocking(true),
            Stream::Tcp(t) => t.set_nonblocking(true),
        };
        if nonblocking.is_err() {
            return;
        }
        if self.conns.len() >= self.cap {
            self.evict_oldest();
        }
        let token = self.next;
        self.next += 1;
        if self.epoll.add(s.fd(), token).is_err() {
            return;
        }
        self.conns.insert(
            token,
            Conn {
                s,
                tcp,
                buf: Vec::new(),
                out: None,
                deadline: Instant::now() + IO_TIMEOUT,
            },
        );
        // The request is usually there already: answer it at once.
        self.io(token);
    }

    /// Close the connection accepted first, telling it why; `false` if
    /// there is none.
    fn evict_oldest(&mut self) -> bool {
        let Some((_, mut c)) = self.conns.pop_first() else {
            return false;
        };
        debug!(
            "stats server: at its cap of {} connections; closing the oldest",
            self.cap
        );
        let body = format!(
            "tandemd's stats server is at its limit of {} open connections; this one waited longest and was closed: retry\n",
            self.cap
        );
        refuse(&mut c.s, 503, "Service Unavailable", &body);
        true
    }

    /// Read what a connection sent, answer once its request head is in,
    /// and send what the socket takes.
    fn io(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(&token) else {
            return;
        };
        let mut chunk = [0u8; 1024];
        while c.out.is_none() {
            match c.s.read(&mut chunk) {
                Ok(0) => {
                    // Closed before a whole request: nothing to answer.
                    self.close(token);
                    return;
                }
                Ok(n) => {
                    c.buf.extend_from_slice(&chunk[..n]);
                    if let Some(end) = head_end(&c.buf) {
                        let tcp_refused = c.tcp && !self.shared.config().stats.tcp_serves_stats;
                        if route(&c.buf[..end]) == Route::Predict && !tcp_refused {
                            // Its own thread: the model takes seconds.
                            let c = self.conns.remove(&token).expect("the connection");
                            self.epoll.delete(c.s.fd());
                            let shared = self.shared.clone();
                            match c.s {
                                Stream::Unix(u) => {
                                    let peer = tandem_os::socket::peer_cred(u.as_fd()).ok();
                                    let _ = u.set_nonblocking(false);
                                    let _ = u.set_read_timeout(Some(IO_TIMEOUT));
                                    let _ = u.set_write_timeout(Some(IO_TIMEOUT));
                                    // A container's root is not the node's,
                                    // nor are its paths (contract 5): no
                                    // file is read for it.
                                    let uid = peer
                                        .filter(|p| !crate::containers::pid_contained(p.pid))
                                        .map(|p| p.uid);
                                    crate::predict::http::serve_conn(u, c.buf, end, shared, uid);
                                }
                                Stream::Tcp(t) => {
                                    let _ = t.set_nonblocking(false);
                                    let _ = t.set_read_timeout(Some(IO_TIMEOUT));
                                    let _ = t.set_write_timeout(Some(IO_TIMEOUT));
                                    crate::predict::http::serve_conn(t, c.buf, end, shared, None);
                                }
                            }
                            return;
                        }
                    }
                    let answer = match head_end(&c.buf) {
                        Some(end) => answer(&c.buf[..end], &self.shared, c.tcp),
                        None if c.buf.len() > MAX_REQUEST => response(
                            431,
                            "Request Header Fields Too Large",
                            "text/plain",
                            "request too large\n",
                            false,
                        ),
                        None => continue,
                    };
                    c.out = Some((answer, 0));
                    c.buf = Vec::new();
                    c.deadline = Instant::now() + IO_TIMEOUT;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => {
                    self.close(token);
                    return;
                }
            }
        }
        let Some((out, sent)) = c.out.as_mut() else {
            return;
        };
        while *sent < out.len() {
            match c.s.write(&out[*sent..]) {
                Ok(0) => break,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // The rest when the peer has read some: wait for room,
                    // and no longer for input.
                    if self.epoll.watch_write(c.s.fd(), token).is_err() {
                        self.close(token);
                    }
                    return;
                }
                Err(_) => break,
            }
        }
        self.close(token);
    }

    fn close(&mut self, token: u64) {
        if let Some(mut c) = self.conns.remove(&token) {
            self.epoll.delete(c.s.fd());
            drain(&mut c.s);
        }
    }

    /// Answer 408 to connections whose request did not arrive in time, and
    /// drop those that did not read their answer in time.
    fn expire(&mut self) {
        let now = Instant::now();
        let late: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(&t, _)| t)
            .collect();
        for t in late {
            if let Some(mut c) = self.conns.remove(&t) {
                self.epoll.delete(c.s.fd());
                if c.out.is_none() {
                    refuse(&mut c.s, 408, "Request Timeout", "request timeout\n");
                }
            }
        }
    }
}

/// Best effort on a non-blocking connection: a short answer, then what the
/// peer sent is read away, so that closing does not reset the connection
/// under the answer (a close with unread input makes the peer's read fail
/// with "Connection reset by peer" instead of showing it).
fn refuse(s: &mut Stream, code: u16, reason: &str, body: &str) {
    let _ = s.write_all(&response(code, reason, "text/plain", body, false));
    drain(s);
}

fn drain(s: &mut Stream) {
    let mut sink = [0u8; 4096];
    for _ in 0..16 {
        match s.read(&mut sink) {
            Ok(n) if n > 0 => {}
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Held by the tests that ask for predictions: the server answers one
    /// prediction at a time in the whole process (a 503 to any other), so
    /// two such tests running at once fail each other.
    static ONE_PREDICTION: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// A daemon's shared state with default configuration, its sockets in
    /// `dir` (the stats socket at `stats`).
    fn shared_in(dir: &std::path::Path, stats: &std::path::Path) -> Arc<Shared> {
        Arc::new(Shared::new(
            crate::config::Config::default(),
            std::path::PathBuf::from("/nonexistent/tandemd.toml"),
            dir.join("tandemd.sock"),
            stats.to_path_buf(),
            0,
            crate::mps::Mps::off(),
        ))
    }

    /// The event-driven server hands `/predict` to a thread of its own,
    /// which reads the posted body (bounded) and answers.
    #[test]
    fn the_server_answers_predict_on_its_own_thread() {
        let _one = ONE_PREDICTION.lock().unwrap_or_else(|p| p.into_inner());
        let dir = std::env::temp_dir().join(format!("tandem-stats-predict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.sock");
        let shared = shared_in(&dir, &path);
        let listener = UnixListener::bind(&path).unwrap();
        let (wake_w, wake_r) = UnixStream::pair().unwrap();
        let server =
            std::thread::spawn(move || serve(shared, listener, None, OwnedFd::from(wake_r)));
        let post = |head: &str, body: &str| {
            let mut s = UnixStream::connect(&path).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(head.as_bytes()).unwrap();
            // The body comes later than the head, in two pieces.
            std::thread::sleep(Duration::from_millis(50));
            let (a, b) = body.split_at(body.len() / 2);
            let _ = s.write_all(a.as_bytes());
            let _ = s.write_all(b.as_bytes());
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            crate::client::parse_response(&out).unwrap()
        };
        let body = "{\"job\": \"x\"}";
        let r = post(
            &format!(
                "POST /predict?gpu=0 HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
                body.len()
            ),
            body,
        );
        // No client has reported a GPU: the body was read, the GPU looked up.
        assert_eq!(r.status, 404, "{}", r.body);
        assert!(
            r.body.starts_with("no GPU 0: tandemd sees no GPU"),
            "{}",
            r.body
        );
        let r = post(
            "POST /predict?gpu=0 HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n",
            "",
        );
        assert_eq!(r.status, 413, "{}", r.body);
        let r = post("POST /predict?gpu=0 HTTP/1.1\r\n\r\n", "");
        assert_eq!(r.status, 400, "no body: {}", r.body);
        // The server still answers everything else.
        let r = post("GET /healthz HTTP/1.1\r\n\r\n", "");
        assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
        (&wake_w).write_all(b"x").unwrap();
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A peer in a container (here: another pid namespace) is not the
    /// node's root, and its paths are not the node's: tandemd does not read
    /// a trace=PATH for it, though SO_PEERCRED says uid 0.
    #[test]
    fn a_contained_peer_gets_no_file_read_for_it() {
        let _one = ONE_PREDICTION.lock().unwrap_or_else(|p| p.into_inner());
        use std::process::{Command, Stdio};
        let runs = |args: &[&str]| {
            Command::new("unshare")
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 || !runs(&["-p", "-f", "curl", "--version"]) {
            eprintln!("skipped: needs root, `unshare -p -f` and curl");
            return;
        }
        let dir =
            std::env::temp_dir().join(format!("tandem-stats-contained-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.sock");
        let shared = shared_in(&dir, &path);
        // Root's file: the host's root may have it read, a container's not.
        let trace = dir.join("root.json");
        std::fs::write(&trace, "{}").unwrap();
        let listener = UnixListener::bind(&path).unwrap();
        let (wake_w, wake_r) = UnixStream::pair().unwrap();
        let server =
            std::thread::spawn(move || serve(shared, listener, None, OwnedFd::from(wake_r)));
        let url = format!("http://tandemd/predict?gpu=0&trace={}", trace.display());
        let ask = |contained: bool| {
            let unshare = ["-p", "-f", "--"];
            let curl = [
                "curl",
                "-s",
                "-i",
                "--unix-socket",
                path.to_str().unwrap(),
                &url,
            ];
            let out = if contained {
                Command::new("unshare").args(unshare).args(curl).output()
            } else {
                Command::new(curl[0]).args(&curl[1..]).output()
            }
            .unwrap();
            crate::client::parse_response(&out.stdout).unwrap()
        };
        // On the node: the file is read, then the GPU looked up (there is none).
        let r = ask(false);
        assert_eq!(r.status, 404, "{}", r.body);
        let r = ask(true);
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains("not in a container"), "{}", r.body);
        (&wake_w).write_all(b"x").unwrap();
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /trace?id=3&seconds=5 HTTP/1.1"),
            Route::Trace("id=3&seconds=5".into())
        );
        assert_eq!(route(b"GET /trace HTTP/1.1"), Route::Trace(String::new()));
        assert_eq!(route(b"GET /stats HTTP/1.1\r\nHost: x"), Route::Stats);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), Route::Metrics);
        assert_eq!(
            route(b"GET http://localhost/metrics HTTP/1.1"),
            Route::Metrics
        );
        assert_eq!(route(b"GET /healthz HTTP/1.1"), Route::Healthz);
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b"POST /stats HTTP/1.1"), Route::BadMethod);
        assert_eq!(route(b"POST /predict?gpu=0 HTTP/1.1"), Route::Predict);
        assert_eq!(
            route(b"GET /predict?gpu=0&trace=/t HTTP/1.1"),
            Route::Predict
        );
        assert_eq!(route(b"PUT /predict HTTP/1.1"), Route::BadMethod);
        assert!(matches!(route(b"GET /stats"), Route::Bad(_)));
        assert!(matches!(route(b"GET /stats SPDY/3"), Route::Bad(_)));
        assert!(matches!(route(b"\xff\xfe"), Route::Bad(_)));
        assert!(matches!(route(b""), Route::Bad(_)));
    }
}
