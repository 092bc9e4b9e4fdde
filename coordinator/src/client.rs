//! The client side of tandemd's sockets, for tandemctl and tests: control
//! requests on the main socket and HTTP GETs on the stats socket.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use tandem_proto::wire::{self, ClientClass, Control, ControlOp, Message, MAX_MESSAGE_LEN};

use crate::sock;
use crate::state::Snapshot;

/// How long tandemctl waits for tandemd.
pub const TIMEOUT: Duration = Duration::from_secs(3);

/// Largest HTTP response tandemctl accepts (a snapshot of many clients).
pub const MAX_RESPONSE: usize = 64 << 20;

/// Send one control request and wait (bounded by `timeout`) for the reply.
/// Returns `(status, message)`; status 0 is success, else a RejectReason value.
pub fn control(
    socket: &Path,
    op: ControlOp,
    client_id: u64,
    class: ClientClass,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let fd = sock::connect_seqpacket(socket, timeout).map_err(|e| {
        format!(
            "cannot reach tandemd at {}: {e} (is it running? set TANDEM_SOCKET if it listens elsewhere)",
            socket.display()
        )
    })?;
    let mut buf = vec![0u8; MAX_MESSAGE_LEN];
    let msg = Message::Control(Control {
        op,
        client_id,
        class,
    });
    let n = msg.encode(&mut buf).map_err(|e| e.to_string())?;
    wire::send(fd.as_fd(), &buf[..n], None).map_err(|e| format!("sending the request: {e}"))?;
    let got = wire::recv(fd.as_fd(), &mut buf).map_err(|e| {
        if matches!(e.errno(), Some(libc::EAGAIN)) {
            "tandemd did not answer in time".to_string()
        } else {
            format!("reading the reply: {e}")
        }
    })?;
    if got.len == 0 {
        return Err("tandemd closed the connection without answering".into());
    }
    match Message::decode(&buf[..got.len]) {
        Ok(Message::ControlReply(r)) => Ok((r.status, r.message.to_string())),
        Ok(Message::Reject(r)) => Ok((r.reason.0, r.to_string())),
        Ok(m) => Err(format!("unexpected {} message from tandemd", m.type_name())),
        Err(e) => Err(format!("bad reply from tandemd: {e}")),
    }
}

/// A parsed HTTP response.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// `Content-Type`, if any.
    pub content_type: Option<String>,
    /// Body.
    pub body: String,
}

/// `GET target` on a unix stream socket (tandemd's stats.sock).
pub fn http_get(stats_socket: &Path, target: &str, timeout: Duration) -> Result<Response, String> {
    let mut s = UnixStream::connect(stats_socket).map_err(|e| {
        format!(
            "cannot reach tandemd's stats socket {}: {e} (is tandemd running? set TANDEM_SOCKET if it listens elsewhere)",
            stats_socket.display()
        )
    })?;
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| format!("sending the request: {e}"))?;
    let mut raw = Vec::new();
    let read = s.take(MAX_RESPONSE as u64).read_to_end(&mut raw);
    match (read, parse_response(&raw)) {
        (Ok(_), parsed) => parsed,
        // A server that refuses may close before reading the request; the
        // reset then comes after its answer, which is what to show.
        (Err(_), Ok(r)) => Ok(r),
        (Err(e), Err(_)) => Err(format!("reading the response: {e}")),
    }
}

/// Parse a complete `Connection: close` response.
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or("malformed HTTP response (no header end)")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("malformed HTTP status line {status_line:?}"))?;
    let content_type = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-type")
            .then(|| v.trim().to_string())
    });
    Ok(Response {
        status,
        content_type,
        body: body.to_string(),
    })
}

/// Fetch and parse `GET /stats`.
pub fn snapshot(stats_socket: &Path, timeout: Duration) -> Result<Snapshot, String> {
    let r = http_get(stats_socket, "/stats", timeout)?;
    if r.status != 200 {
        return Err(format!(
            "GET /stats answered {}: {}",
            r.status,
            r.body.trim()
        ));
    }
    serde_json::from_str(&r.body).map_err(|e| format!("GET /stats returned bad JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// A server that answers without reading the request and closes: the
    /// close resets the connection, after the answer.
    #[test]
    fn a_refusal_sent_before_a_reset_is_shown_not_the_reset() {
        let dir = std::env::temp_dir().join(format!("tandem-client-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("stats.sock");
        let l = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            // Wait until the request is in our receive queue, unread.
            std::thread::sleep(Duration::from_millis(200));
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nfull\n")
                .unwrap();
        });
        let r = http_get(&path, "/stats", Duration::from_secs(5));
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let r = r.expect("the answer, not the reset");
        assert_eq!((r.status, r.body.as_str()), (503, "full\n"));
    }
}
