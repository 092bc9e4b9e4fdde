//! A tiny HTTP/1.1 server for stats: `GET /stats` (JSON), `GET /metrics`
//! (Prometheus text 0.0.4), anything else 404 with a help text. One request
//! per connection (`Connection: close`), requests limited to 8 KiB and 2 s.
//! The optional TCP listener has no authentication, so it serves only
//! `/metrics` unless `[stats] tcp_serves_stats` says otherwise: `/stats`
//! names executables, uids, cgroups, pods and kernels.

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tandem_os::poll::{self, Seen};
use tracing::{debug, warn};

use crate::shared::Shared;

/// Longest request head accepted.
pub const MAX_REQUEST: usize = 8192;
/// How long a client may take to send its request (and to read the answer).
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections served at once; more get 503.
pub const MAX_CONCURRENT: usize = 16;

const HELP: &str = "tandemd stats: GET /stats (JSON snapshot) or GET /metrics (Prometheus text)\n";

/// What a request asked for.
#[derive(Debug, PartialEq, Eq)]
pub enum Route {
    /// JSON.
    Stats,
    /// Prometheus.
    Metrics,
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
    if method != "GET" && method != "HEAD" {
        return Route::BadMethod;
    }
    let path = target.split('?').next().unwrap_or("");
    // Absolute-form targets (http://host/stats) are allowed too.
    let path = path
        .strip_prefix("http://")
        .map_or(path, |rest| rest.find('/').map_or("/", |i| &rest[i..]));
    match path {
        "/stats" => Route::Stats,
        "/metrics" => Route::Metrics,
        _ => Route::NotFound,
    }
}

fn respond<S: Write>(s: &mut S, code: u16, reason: &str, ctype: &str, body: &str, head_only: bool) {
    let mut out = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        out.push_str(body);
    }
    let _ = s.write_all(out.as_bytes());
    let _ = s.flush();
}

const TCP_NO_STATS: &str = "GET /stats is not served over TCP (it names executables, uids, pods and kernels, and TCP has no authentication): use stats.sock, or set [stats] tcp_serves_stats = true\n";

/// Read the head of one request (bounded), answer it; `tcp`: it came over
/// the TCP listener.
pub fn handle<S: Read + Write>(s: &mut S, shared: &Shared, tcp: bool) {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() > MAX_REQUEST {
            respond(
                s,
                431,
                "Request Header Fields Too Large",
                "text/plain",
                "request too large\n",
                false,
            );
            return;
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
                respond(
                    s,
                    408,
                    "Request Timeout",
                    "text/plain",
                    "request timeout\n",
                    false,
                );
                return;
            }
            Err(_) => return,
        }
    };
    let head = &buf[..head_end];
    let head_only = head.starts_with(b"HEAD ");
    match route(head) {
        Route::Stats if tcp && !shared.config().stats.tcp_serves_stats => {
            respond(s, 404, "Not Found", "text/plain", TCP_NO_STATS, head_only);
        }
        Route::Stats => {
            let body = serde_json::to_string_pretty(&shared.snapshot()).unwrap_or_default() + "\n";
            respond(s, 200, "OK", "application/json", &body, head_only);
        }
        Route::Metrics => {
            let body = crate::metrics::render(&shared.snapshot());
            respond(
                s,
                200,
                "OK",
                "text/plain; version=0.0.4; charset=utf-8",
                &body,
                head_only,
            );
        }
        Route::NotFound => respond(s, 404, "Not Found", "text/plain", HELP, head_only),
        Route::BadMethod => respond(s, 405, "Method Not Allowed", "text/plain", HELP, false),
        Route::Bad(why) => respond(
            s,
            400,
            "Bad Request",
            "text/plain",
            &format!("{why}\n{HELP}"),
            false,
        ),
    }
}

/// Serve until a byte arrives on `wake` (read end of a pipe).
pub fn serve(shared: Arc<Shared>, unix: UnixListener, tcp: Option<TcpListener>, wake: OwnedFd) {
    let active = Arc::new(AtomicUsize::new(0));
    let _ = unix.set_nonblocking(true);
    if let Some(t) = &tcp {
        let _ = t.set_nonblocking(true);
    }
    loop {
        let mut seen = [Seen::default(); 3];
        let all = [wake.as_fd(), unix.as_fd()];
        let with_tcp;
        let fds: &[BorrowedFd<'_>] = match &tcp {
            Some(t) => {
                with_tcp = [wake.as_fd(), unix.as_fd(), t.as_fd()];
                &with_tcp
            }
            None => &all,
        };
        if let Err(e) = poll::wait(fds, &mut seen[..fds.len()], None) {
            warn!("stats server: {e}");
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if seen[0] != Seen::default() {
            return;
        }
        while let Ok((s, _)) = unix.accept() {
            spawn(&shared, &active, s, false, |s| {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))
            });
        }
        if let Some(t) = &tcp {
            while let Ok((s, _)) = t.accept() {
                spawn(&shared, &active, s, true, |s| {
                    s.set_nonblocking(false)?;
                    s.set_read_timeout(Some(IO_TIMEOUT))?;
                    s.set_write_timeout(Some(IO_TIMEOUT))
                });
            }
        }
    }
}

fn spawn<S, F>(shared: &Arc<Shared>, active: &Arc<AtomicUsize>, mut s: S, tcp: bool, setup: F)
where
    S: Read + Write + Send + 'static,
    F: FnOnce(&S) -> io::Result<()>,
{
    if setup(&s).is_err() {
        return;
    }
    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONCURRENT {
        active.fetch_sub(1, Ordering::AcqRel);
        respond(
            &mut s,
            503,
            "Service Unavailable",
            "text/plain",
            "busy, retry\n",
            false,
        );
        return;
    }
    let shared = Arc::clone(shared);
    let active2 = Arc::clone(active);
    let r = std::thread::Builder::new()
        .name("tandemd-http".into())
        .spawn(move || {
            handle(&mut s, &shared, tcp);
            active2.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = r {
        active.fetch_sub(1, Ordering::AcqRel);
        debug!("stats server: cannot spawn a thread: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route(b"GET /stats HTTP/1.1\r\nHost: x"), Route::Stats);
        assert_eq!(route(b"GET /metrics?x=1 HTTP/1.0"), Route::Metrics);
        assert_eq!(
            route(b"GET http://localhost/metrics HTTP/1.1"),
            Route::Metrics
        );
        assert_eq!(route(b"GET / HTTP/1.1"), Route::NotFound);
        assert_eq!(route(b"POST /stats HTTP/1.1"), Route::BadMethod);
        assert!(matches!(route(b"GET /stats"), Route::Bad(_)));
        assert!(matches!(route(b"GET /stats SPDY/3"), Route::Bad(_)));
        assert!(matches!(route(b"\xff\xfe"), Route::Bad(_)));
        assert!(matches!(route(b""), Route::Bad(_)));
    }
}
