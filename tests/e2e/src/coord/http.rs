//! HTTP/1.1 over the stats socket, and the `/stats` document's helpers and contract.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// One HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// Status code.
    pub status: u16,
    /// Header (name, value) pairs as received.
    pub headers: Vec<(String, String)>,
    /// Body (chunked transfer encoding decoded).
    pub body: String,
}

impl HttpResponse {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn decode_chunked(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let nl = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line without CRLF")?;
        let size_txt = std::str::from_utf8(&b[..nl]).map_err(|e| e.to_string())?;
        let size_txt = size_txt.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_txt, 16)
            .map_err(|e| format!("bad chunk size {size_txt:?}: {e}"))?;
        b = &b[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// `GET <path>` over the unix socket `sock` (HTTP/1.1, `Connection: close`),
/// bounded by a 10 s socket timeout.
pub fn http_get(sock: &Path, path: &str) -> Result<HttpResponse, String> {
    let mut s =
        UnixStream::connect(sock).map_err(|e| format!("connect {}: {e}", sock.display()))?;
    let t = Some(Duration::from_secs(10));
    s.set_read_timeout(t).map_err(|e| e.to_string())?;
    s.set_write_timeout(t).map_err(|e| e.to_string())?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: tandem-e2e\r\nAccept: */*\r\n\
         Connection: close\r\n\r\n"
    )
    .map_err(|e| format!("write request: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .map_err(|e| format!("read response: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            format!(
                "no end of headers in response: {:?}",
                String::from_utf8_lossy(&raw)
            )
        })?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut body = raw[split + 4..].to_vec();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for l in lines {
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| format!("bad header line {l:?}"))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    let resp = HttpResponse {
        status,
        headers,
        body: String::new(),
    };
    if resp
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
    {
        body = decode_chunked(&body)?;
    } else if let Some(len) = resp.header("content-length") {
        let len: usize = len
            .parse()
            .map_err(|e| format!("bad Content-Length {len:?}: {e}"))?;
        if body.len() != len {
            return Err(format!(
                "Content-Length {len} but {} body bytes",
                body.len()
            ));
        }
    }
    let body = String::from_utf8(body).map_err(|e| format!("body is not UTF-8: {e}"))?;
    Ok(HttpResponse { body, ..resp })
}

/// `GET /stats` parsed as JSON.
pub fn fetch_stats(stats_sock: &Path) -> Result<Value, String> {
    let r = http_get(stats_sock, "/stats")?;
    if r.status != 200 {
        return Err(format!("/stats answered {}: {}", r.status, r.body));
    }
    serde_json::from_str(&r.body).map_err(|e| format!("/stats is not JSON ({e}): {}", r.body))
}

/// `stats["clients"]`; panics naming the document if it is not an array.
#[track_caller]
pub fn clients(stats: &Value) -> &[Value] {
    stats["clients"]
        .as_array()
        .unwrap_or_else(|| panic!("stats has no \"clients\" array: {stats}"))
}

/// The client whose `pid` is `pid`, if listed.
pub fn client_by_pid(stats: &Value, pid: u32) -> Option<&Value> {
    stats["clients"]
        .as_array()?
        .iter()
        .find(|c| c["pid"].as_u64() == Some(u64::from(pid)))
}

/// The client whose `id` is `id`, if listed.
pub fn client_by_id(stats: &Value, id: u64) -> Option<&Value> {
    stats["clients"]
        .as_array()?
        .iter()
        .find(|c| c["id"].as_u64() == Some(id))
}

/// `v[key]` as an unsigned integer; panics naming the key and the object.
#[track_caller]
pub fn num(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("\"{key}\" is not an unsigned integer in {v}"))
}

/// `stats["totals"][key]`.
#[track_caller]
pub fn total(stats: &Value, key: &str) -> u64 {
    num(&stats["totals"], key)
}

/// The top-level fields of the `/stats` JSON snapshot (the contract).
pub const STATS_KEYS: &[&str] = &[
    "version",
    "protocol",
    "pid",
    "uptime_s",
    "socket",
    "config_path",
    "gpus",
    "clients",
    "totals",
    "dedup",
];

/// The weight-deduplication fields of each GPU in `/stats` (`gpus[i]`).
pub const GPU_DEDUP_KEYS: &[&str] = &[
    "dedup_saved_bytes",
    "dedup_shared_bytes",
    "dedup_shared_copies",
    "dedup_merges",
    "dedup_cow_breaks",
    "dedup_mismatches",
    "dedup_publish_failures",
    "dedup_protocol_errors",
    "dedup_merge_latency_ms",
];

/// The fields of each client's `dedup` object in `/stats`.
pub const CLIENT_DEDUP_KEYS: &[&str] = &[
    "share_weights",
    "trust_group",
    "shared_bytes",
    "candidate_granules",
    "private_bytes",
];
