//! tandemd's `/predict` on the stats socket: a scheduler extender's or a
//! Slurm plugin's question, answered with `tandem-sim predict --json`.
//!
//! ```text
//! GET  /predict?gpu=N&trace=PATH[&class=C][&rate=R][&seconds=S][&why=1][&steepness=1][&p99_target=X][&kept_target=X]
//! POST /predict?gpu=N[&...]        (body: the candidate's tandem-trace/1 document)
//! ```
//!
//! `gpu` is the GPU's index in `GET /stats` (as `tandemctl status` lists
//! them) or its UUID. `trace=PATH` is read by tandemd only for a peer on
//! the unix socket that owns the file (or is root), checked on the opened
//! file, and never for a peer in a container (its root and its paths are
//! not the node's); over TCP (served only with `[stats] tcp_serves_stats`) the trace
//! must come as the body. Bodies and files are at most [`MAX_TRACE`] bytes.
//!
//! Answers: 200 with the model's JSON; otherwise one line of text: 400 (a
//! bad query or no candidate), 403 (a trace file the peer may not read),
//! 404 (no such GPU), 409 (the GPU has no jobs, or a job's trace has not
//! enough data yet), 413 (too large), 422 (the model refused a trace: the
//! line names the field), 503
//! (another prediction is running: one at a time), 504 (the model ran past
//! [`SIM_TIMEOUT`]), 500 (the model failed otherwise).

use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    device_of, find_gpu, run_sim, sim_path, traces_for_gpu, DaemonTraces, LiveTraces, SimJob,
    SimOpts,
};
use crate::shared::Shared;
use crate::state::Snapshot;

/// Largest candidate trace accepted (a body or a file), bytes.
pub const MAX_TRACE: usize = 16 << 20;

/// How long the model may run for one answer.
pub const SIM_TIMEOUT: Duration = Duration::from_secs(60);

/// One `/predict` request.
#[derive(Debug)]
pub struct Request<'a> {
    /// `GET`, `HEAD` or `POST`.
    pub method: &'a str,
    /// The request target (`/predict?gpu=0&...`).
    pub target: &'a str,
    /// The body (POST).
    pub body: &'a [u8],
    /// The peer's uid on the unix socket (`None`: TCP, or unknown).
    pub peer_uid: Option<u32>,
}

/// An answer: status, reason, content type, body.
pub type Answer = (u16, &'static str, &'static str, String);

fn text(code: u16, reason: &'static str, msg: &str) -> Answer {
    (code, reason, "text/plain", format!("{msg}\n"))
}

/// Percent-decoding of a query value (`+` is a space).
fn decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let h = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(h, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The query's parameters.
///
/// # Errors
/// An unknown parameter, a value that does not decode or parse.
fn query(target: &str) -> Result<Vec<(String, String)>, String> {
    let Some((_, q)) = target.split_once('?') else {
        return Ok(Vec::new());
    };
    q.split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            let v = decode(v).ok_or_else(|| format!("query parameter {k}: bad percent-encoding"))?;
            match k {
                "gpu" | "trace" | "class" | "rate" | "seconds" | "why" | "steepness"
                | "p99_target" | "kept_target" => Ok((k.to_string(), v)),
                other => Err(format!(
                    "unknown query parameter {other:?}: gpu, trace, class, rate, seconds, why, steepness, p99_target, kept_target"
                )),
            }
        })
        .collect()
}

fn number(q: &[(String, String)], k: &str) -> Result<Option<f64>, String> {
    q.iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| {
            v.parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| format!("{k}={v}: give a number above 0"))
        })
        .transpose()
}

/// Reads a trace file for `peer_uid`: only one it owns (or any, for root),
/// checked on the opened file so a swapped link cannot pass. The path is
/// first opened `O_PATH` (which neither reads, waits nor acts on what is
/// there) and read only once it is known to be a regular file the peer may
/// have: opening a FIFO for reading waits for a writer, and opening a
/// device (a watchdog, a tape) acts on it, as root.
fn read_for(path: &str, peer_uid: Option<u32>) -> Result<String, Answer> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let Some(uid) = peer_uid else {
        return Err(text(
            400,
            "Bad Request",
            "trace=PATH is read only for a peer on tandemd's unix stats socket, on the node, not in a container (a container's paths and root are not the node's): POST the trace as the body",
        ));
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .map_err(|e| {
            text(
                400,
                "Bad Request",
                &format!("{path}: cannot read the trace: {e}"),
            )
        })?;
    let meta = f
        .metadata()
        .map_err(|e| text(400, "Bad Request", &format!("{path}: {e}")))?;
    if uid != 0 && meta.uid() != uid {
        return Err(text(
            403,
            "Forbidden",
            &format!("{path}: tandemd reads only trace files the asking user (uid {uid}) owns: POST the trace as the body"),
        ));
    }
    if !meta.is_file() || meta.len() > MAX_TRACE as u64 {
        return Err(text(
            413,
            "Payload Too Large",
            &format!("{path}: not a regular file of at most {MAX_TRACE} bytes"),
        ));
    }
    // The very file checked above (not whatever the path names now).
    let f = std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map_err(|e| text(400, "Bad Request", &format!("{path}: {e}")))?;
    let mut s = String::new();
    f.take(MAX_TRACE as u64 + 1)
        .read_to_string(&mut s)
        .map_err(|e| text(400, "Bad Request", &format!("{path}: {e}")))?;
    Ok(s)
}

/// Requests that carry a body: at most this long, after the head.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// A prediction is running (at most one at a time).
static PREDICTING: AtomicBool = AtomicBool::new(false);

/// A whole `Connection: close` response.
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

/// The answer to `/predict` from tandemd's state: its `head`, the `body`
/// after it, the peer's uid on the unix socket.
#[must_use]
pub fn answer_shared(head: &[u8], body: &[u8], shared: &Shared, peer_uid: Option<u32>) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let mut parts = text.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let req = Request {
        method,
        target,
        body,
        peer_uid,
    };
    let (code, reason, ctype, body) = answer(
        &req,
        &shared.snapshot(),
        &DaemonTraces { shared },
        &sim_path(),
        SIM_TIMEOUT,
    );
    response(code, reason, ctype, &body, method == "HEAD")
}

/// `Content-Length` of a request head (0 when absent; `None` when bad).
fn content_length(head: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(head).ok()?;
    for line in text.split("\r\n").skip(1) {
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                return v.trim().parse().ok();
            }
        }
    }
    Some(0)
}

/// The rest of a request's body after `buf[..head_len]` and its blank
/// line, bounded by [`MAX_TRACE`] and [`BODY_TIMEOUT`]; then the answer.
fn read_and_answer<S: Read>(
    s: &mut S,
    mut buf: Vec<u8>,
    head_len: usize,
    shared: &Shared,
    peer: Option<u32>,
) -> Vec<u8> {
    let Some(len) = content_length(&buf[..head_len]) else {
        return response(
            400,
            "Bad Request",
            "text/plain",
            "bad Content-Length\n",
            false,
        );
    };
    if len > MAX_TRACE {
        let msg = format!("the trace is {len} bytes: at most {MAX_TRACE} are accepted\n");
        return response(413, "Payload Too Large", "text/plain", &msg, false);
    }
    let start = head_len + 4;
    let deadline = Instant::now() + BODY_TIMEOUT;
    let late = || {
        response(
            408,
            "Request Timeout",
            "text/plain",
            "request timeout\n",
            false,
        )
    };
    let mut chunk = [0u8; 16 * 1024];
    while buf.len() < start + len {
        if Instant::now() >= deadline {
            return late();
        }
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return late(),
        }
    }
    let body = &buf[start.min(buf.len())..(start + len).min(buf.len())];
    answer_shared(&buf[..head_len], body, shared, peer)
}

/// Serves one `/predict` connection on a thread of its own (the stats
/// server's thread goes on): its body, the model, the answer. `s` is
/// blocking, with read and write timeouts; `buf` holds what was read so
/// far, the head's first `head_len` bytes. One at a time: another request
/// meanwhile gets a 503 at once.
pub fn serve_conn<S: Read + Write + Send + 'static>(
    mut s: S,
    buf: Vec<u8>,
    head_len: usize,
    shared: Arc<Shared>,
    peer: Option<u32>,
) {
    if PREDICTING.swap(true, Ordering::AcqRel) {
        let msg = "a prediction is already running (one at a time): retry\n";
        let _ = s.write_all(&response(
            503,
            "Service Unavailable",
            "text/plain",
            msg,
            false,
        ));
        return;
    }
    let worker = std::thread::Builder::new()
        .name("tandemd-predict".into())
        .spawn(move || {
            let out = read_and_answer(&mut s, buf, head_len, &shared, peer);
            let _ = s.write_all(&out);
            PREDICTING.store(false, Ordering::Release);
        });
    if let Err(e) = worker {
        PREDICTING.store(false, Ordering::Release);
        tracing::warn!("stats server: cannot start a prediction thread: {e}");
    }
}

/// Answers one `/predict` request from `snap` and `traces`, running the
/// model at `sim` for at most `timeout`.
#[must_use]
pub fn answer(
    req: &Request<'_>,
    snap: &Snapshot,
    traces: &dyn LiveTraces,
    sim: &Path,
    timeout: Duration,
) -> Answer {
    let bad = |m: &str| text(400, "Bad Request", m);
    let q = match query(req.target) {
        Ok(q) => q,
        Err(e) => return bad(&e),
    };
    let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let Some(gpu) = get("gpu") else {
        return bad("give the GPU: /predict?gpu=N (its index in GET /stats) or gpu=UUID");
    };
    let seconds = match get("seconds").map(|v| {
        v.parse::<u64>()
            .ok()
            .filter(|&s| s >= 1)
            .ok_or_else(|| format!("seconds={v}: a whole number of seconds, 1 or more"))
    }) {
        None => None,
        Some(Ok(s)) => Some(s),
        Some(Err(e)) => return bad(&e),
    };
    let (rate, p99, kept) = match (
        number(&q, "rate"),
        number(&q, "p99_target"),
        number(&q, "kept_target"),
    ) {
        (Ok(a), Ok(b), Ok(c)) => (a, b, c),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => return bad(&e),
    };
    let class = get("class").map(str::to_string);
    if let Some(c) = &class {
        if c != "inference" && c != "training" {
            return bad(&format!("class={c}: inference or training"));
        }
    }
    let trace = match (req.method, get("trace")) {
        ("POST", None) if !req.body.is_empty() => match std::str::from_utf8(req.body) {
            Ok(s) => s.to_string(),
            Err(_) => return bad("the body is not UTF-8: POST a tandem-trace/1 JSON document"),
        },
        ("POST", Some(_)) => return bad("give the candidate once: the body or trace=PATH"),
        (_, Some(path)) => match read_for(path, req.peer_uid) {
            Ok(s) => s,
            Err(a) => return a,
        },
        _ => {
            return bad(
                "give the candidate: POST its tandem-trace/1 document as the body, or GET with trace=PATH",
            )
        }
    };
    let g = match find_gpu(snap, gpu) {
        Ok(g) => g,
        Err(e) => return text(404, "Not Found", &e),
    };
    let jobs = match traces_for_gpu(traces, snap, g, seconds) {
        Ok(j) => j,
        Err(e) => return text(409, "Conflict", &e),
    };
    let candidate = SimJob {
        label: "candidate".into(),
        class,
        trace,
        slo_p99_ms: None,
        rate,
    };
    let opts = SimOpts {
        device: device_of(&g.name).into(),
        json: true,
        why: get("why").is_some_and(|v| v != "0" && v != "false"),
        steepness: get("steepness").is_some_and(|v| v != "0" && v != "false"),
        p99_target: p99,
        kept_target: kept,
        threads: None,
    };
    match run_sim(sim, &jobs, &candidate, &opts, timeout) {
        Ok(json) => (200, "OK", "application/json", json),
        Err(e) if e.starts_with("the model ran past") => text(504, "Gateway Timeout", &e),
        Err(e) if e.starts_with("cannot run the model") || e.starts_with("the model failed") => {
            text(500, "Internal Server Error", &e)
        }
        Err(e) => text(422, "Unprocessable Entity", &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predict::TraceError;
    use std::path::PathBuf;

    fn snap() -> Snapshot {
        let client = |id: u64, class: &str, gpu: &str| {
            crate::state::test_client_json(
                id,
                serde_json::json!({"pid": 100 + id, "exe": "/bin/job", "class": class, "gpu": gpu}),
            )
        };
        serde_json::from_value(serde_json::json!({
            "version": "0", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s",
            "config_path": "c",
            "gpus": [
                {"uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "clients": [1], "launches": 0},
                {"uuid": "GPU-bbbb", "name": "NVIDIA H100 80GB HBM3", "clients": [], "launches": 0}
            ],
            "clients": [client(1, "training", "GPU-aaaa")],
            "totals": {"clients": 1, "launches": 0, "dropped": 0, "clients_reclaimed": 0,
                       "rejected": 0, "clients_registered": 1, "handshake_timeouts": 0,
                       "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0}
        }))
        .unwrap()
    }

    /// Serves client 1's trace, or refuses as tandemd does when a job has
    /// reported too little.
    struct Fake(bool);

    impl LiveTraces for Fake {
        fn trace(&self, id: u64, _: Option<u64>) -> Result<String, TraceError> {
            if self.0 {
                Ok(format!("{{\"job\": \"live_{id}\"}}"))
            } else {
                Err(TraceError::NotYet(
                    "client 1 has reported no complete request in the last 10 s".into(),
                ))
            }
        }
    }

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("tandemd-predict-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// A fake tandem-sim running `script` (after `#!/bin/sh`).
    fn sim(d: &Dir, script: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let p = d.0.join("tandem-sim");
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn ask(
        method: &str,
        target: &str,
        body: &str,
        peer: Option<u32>,
        traces: bool,
        sim: &Path,
    ) -> Answer {
        let req = Request {
            method,
            target,
            body: body.as_bytes(),
            peer_uid: peer,
        };
        answer(&req, &snap(), &Fake(traces), sim, Duration::from_secs(20))
    }

    #[test]
    fn a_posted_trace_goes_to_the_model_beside_the_gpus_live_jobs() {
        let d = dir("post");
        // The fake model answers JSON naming its arguments and the files' jobs.
        let s = sim(
            &d,
            "printf '{\"args\": \"%s\", \"jobs\": \"' \"$*\"; for a in \"$@\"; do case $a in *.json) grep -o 'live_1\\|posted' \"$a\" | tr -d '\\n'; echo -n ' ';; esac; done; echo '\"}'",
        );
        let (code, _, ctype, body) = ask(
            "POST",
            "/predict?gpu=0&why=1&steepness=1&rate=40&class=inference",
            "{\"job\": \"posted\"}",
            None,
            true,
            &s,
        );
        assert_eq!((code, ctype), (200, "application/json"), "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let args = v["args"].as_str().unwrap();
        assert!(args.starts_with("predict --device h100 --job "), "{args}");
        assert!(
            args.contains("--class training --label client 1 (job) --add "),
            "{args}"
        );
        assert!(
            args.contains(
                "candidate.json --class inference --label candidate --rate 40 --json --why --steepness"
            ),
            "{args}"
        );
        assert_eq!(v["jobs"], "live_1 posted ");
    }

    #[test]
    fn errors_have_their_own_status_and_one_line() {
        let d = dir("errors");
        let ok = sim(&d, "echo '{}'");
        let t = "{\"job\": \"x\"}";
        let cases = [
            (
                ask("POST", "/predict", t, None, true, &ok),
                400,
                "give the GPU",
            ),
            (
                ask("POST", "/predict?gpu=0&color=red", t, None, true, &ok),
                400,
                "unknown query parameter \"color\"",
            ),
            (
                ask("POST", "/predict?gpu=0&class=auto", t, None, true, &ok),
                400,
                "class=auto: inference or training",
            ),
            (
                ask("POST", "/predict?gpu=0&rate=-3", t, None, true, &ok),
                400,
                "rate=-3: give a number above 0",
            ),
            (
                ask("POST", "/predict?gpu=0&seconds=2.5", t, None, true, &ok),
                400,
                "seconds=2.5: a whole number of seconds",
            ),
            (
                ask("GET", "/predict?gpu=0", "", None, true, &ok),
                400,
                "give the candidate",
            ),
            (
                ask("POST", "/predict?gpu=9", t, None, true, &ok),
                404,
                "no GPU 9: tandemd sees 0: GPU-aaaa",
            ),
            (
                ask("POST", "/predict?gpu=GPU-bbbb", t, None, true, &ok),
                409,
                "GPU GPU-bbbb (NVIDIA H100 80GB HBM3) has no jobs",
            ),
            (
                ask("POST", "/predict?gpu=0", t, None, false, &ok),
                409,
                "client 1",
            ),
            (
                ask(
                    "GET",
                    "/predict?gpu=0&trace=/etc/hostname",
                    "",
                    None,
                    true,
                    &ok,
                ),
                400,
                "trace=PATH is read only for a peer on tandemd's unix stats socket",
            ),
        ];
        for ((code, _, ctype, body), want_code, want) in cases {
            assert_eq!((code, ctype), (want_code, "text/plain"), "{body}");
            assert!(body.contains(want), "want {want:?}: {body}");
            assert_eq!(body.lines().count(), 1, "{body}");
        }
        // The model's refusal names the job, not our temporary file.
        let refuse = sim(&d, "echo \"tandem-sim predict: $5: ops[0].duration_ns: expected a non-negative integer\" >&2; exit 2");
        let (code, _, _, body) = ask("POST", "/predict?gpu=0", t, None, true, &refuse);
        assert_eq!(
            (code, body.as_str()),
            (
                422,
                "client 1 (job): ops[0].duration_ns: expected a non-negative integer\n"
            )
        );
        let req = Request {
            method: "POST",
            target: "/predict?gpu=0",
            body: t.as_bytes(),
            peer_uid: None,
        };
        let slow = sim(&d, "sleep 30");
        let (code, _, _, body) = answer(
            &req,
            &snap(),
            &Fake(true),
            &slow,
            Duration::from_millis(300),
        );
        assert_eq!(code, 504, "{body}");
        assert!(body.contains("ran past"), "{body}");
    }

    /// tandemd (root) looks at what a path is and whose it is before it
    /// opens it: a FIFO opened for reading waits for a writer (the one
    /// prediction slot, held for good), and opening a device can act on it.
    #[test]
    fn a_trace_path_that_is_no_file_of_the_peer_is_never_opened() {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let d = dir("fifo");
        let fifo = d.0.join("trace.fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        assert_eq!(rc, 0, "mkfifo: {}", std::io::Error::last_os_error());
        let owner = std::fs::metadata(&fifo).unwrap().uid();
        // Its owner, root, and someone else: each refused, none by opening it.
        for (peer, want) in [(owner, 413), (0, 413), (owner + 4242, 403)] {
            let path = fifo.to_str().unwrap().to_string();
            let reader = std::thread::spawn(move || read_for(&path, Some(peer)).map(|_| ()));
            // A writer that does not wait (O_NONBLOCK) opens a FIFO only
            // while a reader has it open: only if read_for opened it.
            let mut opened = false;
            while !reader.is_finished() {
                let w = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo);
                if w.is_ok() {
                    opened = true;
                    break;
                }
                std::thread::yield_now();
            }
            let got = reader.join().unwrap().expect_err("a FIFO is no trace");
            assert!(!opened, "peer {peer}: read_for opened the FIFO ({got:?})");
            assert_eq!(got.0, want, "peer {peer}: {}", got.3);
        }
    }

    #[test]
    fn a_trace_file_is_read_only_for_its_owner_or_root() {
        use std::os::unix::fs::MetadataExt;
        let d = dir("owner");
        let ok = sim(&d, "echo '{\"answered\": true}'");
        let f = d.0.join("mine.json");
        std::fs::write(&f, "{\"job\": \"x\"}").unwrap();
        let owner = std::fs::metadata(&f).unwrap().uid();
        let target = format!("/predict?gpu=0&trace={}", f.display());
        let (code, _, _, body) = ask("GET", &target, "", Some(owner), true, &ok);
        assert_eq!(code, 200, "{body}");
        let other = if owner == 4242 { 4343 } else { 4242 };
        let (code, _, _, body) = ask("GET", &target, "", Some(other), true, &ok);
        assert_eq!(code, 403, "{body}");
        assert!(body.contains("owns: POST the trace as the body"), "{body}");
        let (code, _, _, body) = ask("GET", &target, "", Some(0), true, &ok);
        assert_eq!(code, 200, "root reads any: {body}");
        // Percent-encoded paths decode.
        let enc = target
            .replace('/', "%2F")
            .replacen("%2Fpredict", "/predict", 1);
        let (code, _, _, body) = ask("GET", &enc, "", Some(owner), true, &ok);
        assert_eq!(code, 200, "{enc}: {body}");
    }
}
