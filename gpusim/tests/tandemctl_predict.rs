//! `tandemctl predict` end to end with the real `tandem-sim` binary: a fake
//! tandemd stats socket serves `/stats` and `/trace`, tandemctl's predict
//! gathers the GPU's live traces and the candidate and runs this crate's
//! `tandem-sim predict` on them.

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tandem_coordinator::ctl::predict::{predict, Args};
use tandem_gpusim::params::MODEL_VERSION;

/// A training step: forty 300 us kernels on every SM, 20 us apart, one sync.
fn training_trace() -> String {
    let kernels: Vec<String> = (0..40)
        .map(|i| format!(r#"{{"op": "kernel", "name": "step_{i}", "grid": [132, 1, 1], "block": [256, 1, 1], "blocks_per_sm": 1, "duration_ns": 300000, "host_gap_ns": 20000}}"#))
        .collect();
    format!(
        r#"{{"format": "tandem-trace/1", "job": "trainer", "class": "training", "source": "measured", "ops": [{}, {{"op": "sync", "host_gap_ns": 1000}}]}}"#,
        kernels.join(", ")
    )
}

const INFERENCE: &str = r#"{"format": "tandem-trace/1", "job": "server", "class": "inference", "source": "measured", "ops": [
  {"op": "kernel", "name": "infer", "grid": [16, 1, 1], "block": [256, 1, 1], "blocks_per_sm": 1, "duration_ns": 200000, "host_gap_ns": 30000},
  {"op": "sync", "host_gap_ns": 2000}]}"#;

fn snapshot() -> String {
    serde_json::json!({
        "version": "0", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s", "config_path": "c",
        "gpus": [{"uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3", "clients": [1], "launches": 0}],
        "clients": [{
            "id": 1, "pid": 101, "uid": 0, "exe": "/usr/bin/trainer", "cgroup": "/",
            "class": "training", "class_claimed": "auto", "class_reason": "r", "gpu": "GPU-aaaa",
            "connected_s": 10.0, "launches": 0, "launches_ex": 0, "graph_launches": 0,
            "graph_kernels": 0, "launch_rate_hz": 0.0, "records": 0, "dropped": 0,
            "bad_records": 0, "ring_detached": false, "bytes_allocated": 0, "allocs": 0,
            "frees": 0, "copies": 0, "h2d_bytes": 0, "syncs": 0, "gate_wait_ns": 0,
            "gate_waits": 0, "gate_timeouts": 0, "top_kernels": []
        }],
        "totals": {"clients": 1, "launches": 0, "dropped": 0, "clients_reclaimed": 0,
                   "rejected": 0, "clients_registered": 1, "handshake_timeouts": 0,
                   "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0}
    })
    .to_string()
}

struct Fake {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fake {
    fn start() -> Fake {
        let dir = std::env::temp_dir().join(format!("gpusim-ctl-predict-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let l = UnixListener::bind(tandem_proto::paths::stats_socket(&dir.join("tandemd.sock")))
            .unwrap();
        l.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut b) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).to_string();
                let (code, body) = match head.split(' ').nth(1).unwrap_or("") {
                    "/stats" => (200, snapshot()),
                    "/trace?id=1" => (200, training_trace()),
                    _ => (404, "no such client\n".to_string()),
                };
                let _ = write!(
                    c,
                    "HTTP/1.1 {code} X\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Fake {
            dir,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn args(add: &Path) -> Args {
    Args {
        gpu: "0".into(),
        add: add.display().to_string(),
        class: Some("inference".into()),
        rate: Some(200.0),
        seconds: None,
        p99_target: None,
        kept_target: None,
        json: true,
        why: true,
        steepness: true,
    }
}

#[test]
fn tandemctl_predict_runs_the_model_on_the_live_traces() {
    let f = Fake::start();
    let sim = Path::new(env!("CARGO_BIN_EXE_tandem-sim"));
    let cand = f.dir.join("cand.json");
    std::fs::write(&cand, INFERENCE).unwrap();
    let out = predict(&f.dir.join("tandemd.sock"), &args(&cand), sim).unwrap();
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(p["kind"], "prediction");
    assert_eq!(p["model_version"], MODEL_VERSION);
    assert_eq!(p["device"], "h100");
    let labels: Vec<&str> = p["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["client 1 (trainer)", cand.to_str().unwrap()]);
    assert_eq!(p["jobs"][1]["rate_rps"], 200.0);
    assert_eq!(p["modes"].as_array().unwrap().len(), 6);
    let verdict = p["verdict"].as_str().unwrap();
    assert!(
        ["fits", "fits only over MPS", "does not fit"].contains(&verdict),
        "{verdict}"
    );
    // The inference job waits, under MPS, for the trainer's kernels.
    let mps = p["modes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == "mps")
        .unwrap();
    let why = mps["why"].as_array().unwrap();
    assert!(!why.is_empty(), "{mps}");
    assert_eq!(why[0]["by_job"], "client 1 (trainer)");
    assert!(why[0]["kernel"].as_str().unwrap().starts_with("step_"));
    // --steepness: the candidate's p99 ratio with its kernels 2% longer,
    // the trainer none.
    let jobs = mps["jobs"].as_array().unwrap();
    assert!(
        jobs[1]["predicted_p99_ratio_if_kernels_2pct_longer"]
            .as_f64()
            .unwrap()
            >= 1.0
    );
    assert!(jobs[0]
        .get("predicted_p99_ratio_if_kernels_2pct_longer")
        .is_none());

    // A newer trace format, refused by the model with its version named.
    std::fs::write(&cand, INFERENCE.replace("tandem-trace/1", "tandem-trace/2")).unwrap();
    let e = predict(&f.dir.join("tandemd.sock"), &args(&cand), sim).unwrap_err();
    assert_eq!(
        e,
        format!(
            "{}: trace format tandem-trace/2 is newer than this tandem-sim reads (tandem-trace/1): update tandem-sim",
            cand.display()
        )
    );
}
