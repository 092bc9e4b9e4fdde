//! tandemd's `/predict` end to end (issue 25): a job replays a training
//! step through the shim on the fake driver, tandemd captures it, and a
//! `POST /predict` with a candidate's trace is answered with the model's
//! prediction (the real `tandem-sim`, run by tandemd) for that GPU.
//!
//! Ignored until live capture is in this tree: it needs the `replay` host
//! and tandemd's capture (the `trace` branch), and `DaemonTraces` wired to
//! it (`coordinator/src/predict/mod.rs` gives the body). It passed on a
//! trial merge of that branch (2026-11-26, 61 s with tandem-sim's build).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use tandem_e2e::coord::{tandem_sim, Tandemd, TestDir};

mod replay_trace;
use replay_trace::start_replay;

/// A training step of 400 us kernels on every SM (the replay host's line
/// form; a GEMM tile's registers and shared memory, which the shim sends
/// with its name, so one block fills an SM), and an inference request of
/// one 200 us kernel.
const STEP: &str = "kernel gemm_step 400000 regs=232 smem=49152\nK 0 132 1 1 256 1 1 0 0 20000\nK 0 132 1 1 256 1 1 0 0 20000\nK 0 132 1 1 256 1 1 0 0 20000\nK 0 132 1 1 256 1 1 0 0 20000\nS 1000\n";
const REQUEST: &str = r#"{"format": "tandem-trace/1", "job": "server", "class": "inference", "source": "measured", "ops": [
  {"op": "kernel", "name": "infer", "grid": [16, 1, 1], "block": [256, 1, 1], "blocks_per_sm": 1, "duration_ns": 200000, "host_gap_ns": 30000},
  {"op": "sync", "host_gap_ns": 2000}]}"#;

/// One request on the stats socket: (status, body).
fn ask(stats: &Path, method: &str, target: &str, body: &str) -> (u16, String) {
    let mut s = UnixStream::connect(stats).expect("the stats socket");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    write!(
        s,
        "{method} {target} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok());
    (status.expect("a status"), body.to_string())
}

#[test]
fn predict_answers_from_the_live_trace_of_the_gpus_job() {
    let dir = TestDir::new("predict");
    let mut d = Tandemd::spawn_with_env(
        &dir,
        tandem_e2e::coord::default_config(),
        &[("TANDEM_SIM", tandem_sim())],
    );
    d.wait_ready();
    let stats = d.stats_socket().to_path_buf();
    // No job yet: no GPU either.
    let (code, body) = ask(&stats, "POST", "/predict?gpu=0", REQUEST);
    assert_eq!(code, 404, "{body}");
    let (host, id) = start_replay(&dir, &d, "step", STEP, "training", &["--seconds", "30"]);
    // Until its capture holds whole steps, 409 naming the client. Before
    // that, for as long as tandemd has not read the Device message the
    // job sends after its registration (READY comes after the Welcome),
    // 404 with no GPU 0 (CI, 2026-11-27: 12 ms apart in tandemd's log).
    let start = Instant::now();
    let (code, body) = loop {
        let (code, body) = ask(
            &stats,
            "POST",
            "/predict?gpu=0&class=inference&rate=100&why=1",
            REQUEST,
        );
        let no_gpu_yet = code == 404 && body.contains("no client has reported one yet");
        if !(code == 409 || no_gpu_yet) || start.elapsed() > Duration::from_secs(20) {
            break (code, body);
        }
        if code == 409 {
            assert!(body.contains(&format!("client {id} (replay)")), "{body}");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(code, 200, "{body}\n{}", d.log());
    let p: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(p["kind"], "prediction");
    assert!(
        p["model_version"].as_str().unwrap().starts_with("gpusim-"),
        "{p}"
    );
    assert_eq!(p["jobs"][0]["label"], format!("client {id} (replay)"));
    assert_eq!(p["jobs"][0]["class"], "training");
    assert_eq!(p["jobs"][1]["label"], "candidate");
    let verdict = p["verdict"].as_str().expect("a verdict");
    assert!(
        ["fits", "fits only over MPS", "does not fit"].contains(&verdict),
        "{verdict}"
    );
    // Under MPS the request waits for the trainer's kernel, by name.
    let mps = p["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == "mps")
        .expect("mps");
    assert_eq!(mps["why"][0]["kernel"], "gemm_step", "{mps}");
    // A trace file the asking user owns (this test's), by path.
    let cand = dir.path().join("cand.json");
    std::fs::write(&cand, REQUEST).unwrap();
    let (code, body) = ask(
        &stats,
        "GET",
        &format!("/predict?gpu=0&rate=100&trace={}", cand.display()),
        "",
    );
    assert_eq!(code, 200, "{body}");
    // A newer format is refused with its version named.
    let (code, body) = ask(
        &stats,
        "POST",
        "/predict?gpu=0",
        &REQUEST.replace("tandem-trace/1", "tandem-trace/2"),
    );
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body.trim(),
        "candidate: trace format tandem-trace/2 is newer than this tandem-sim reads (tandem-trace/1): update tandem-sim"
    );
    drop(host); // killed
}
