//! The families an operator of a fleet watches: request latency as a
//! histogram (any quantile, any window, any set of jobs), clients by class,
//! whether inference is active per GPU, launches per GPU, the build, and
//! refusals for a protocol version from another release (rolling upgrades).

use std::fmt::Write;

use tandem_proto::wire::PROTOCOL_VERSION;

use super::exposition::{escape_label, header, labels};
use crate::sched::LATENCY_BUCKETS_NS;
use crate::state::Snapshot;

/// Append the fleet families of `s` to `out`.
pub(super) fn render(out: &mut String, s: &Snapshot) {
    header(
        out,
        "tandem_request_latency_seconds",
        "histogram",
        "Inference request latency (arrival to result) since the client registered.",
    );
    for c in &s.clients {
        let Some(sc) = c.sched.as_ref() else { continue };
        if sc.latency_buckets.len() != LATENCY_BUCKETS_NS.len() + 1 {
            continue;
        }
        let l = labels(c);
        for (i, n) in sc.latency_buckets.iter().enumerate() {
            let le = LATENCY_BUCKETS_NS
                .get(i)
                .map_or_else(|| "+Inf".to_string(), |ns| format!("{}", *ns as f64 / 1e9));
            let _ = writeln!(
                out,
                "tandem_request_latency_seconds_bucket{{{l},le=\"{le}\"}} {n}"
            );
        }
        let count = sc.latency_buckets.last().copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "tandem_request_latency_seconds_sum{{{l}}} {}",
            sc.latency_sum_ns as f64 / 1e9
        );
        let _ = writeln!(out, "tandem_request_latency_seconds_count{{{l}}} {count}");
    }
    header(
        out,
        "tandem_clients_by_class",
        "gauge",
        "Clients registered now, by the class granted.",
    );
    for class in ["inference", "training"] {
        let n = s.clients.iter().filter(|c| c.class == class).count();
        let _ = writeln!(out, "tandem_clients_by_class{{class=\"{class}\"}} {n}");
    }
    header(
        out,
        "tandem_gpu_inference_active",
        "gauge",
        "1 while an inference request is active on the GPU (the scheduler's view), else 0.",
    );
    for g in &s.gpus {
        if let Some(a) = g.inference_active {
            let _ = writeln!(
                out,
                "tandem_gpu_inference_active{{gpu=\"{}\",UUID=\"{}\"}} {}",
                escape_label(&g.uuid),
                escape_label(&g.uuid),
                u8::from(a)
            );
        }
    }
    header(
        out,
        "tandem_gpu_board_requests_open",
        "gauge",
        "Explicit inference requests and inference syncs waiting, open on the GPU's board (what training shims react to without tandemd).",
    );
    for g in &s.gpus {
        if let Some(n) = g.board_requests_open {
            let _ = writeln!(
                out,
                "tandem_gpu_board_requests_open{{gpu=\"{}\",UUID=\"{}\"}} {n}",
                escape_label(&g.uuid),
                escape_label(&g.uuid),
            );
        }
    }
    header(
        out,
        "tandem_gpu_launches_total",
        "counter",
        "Kernel launches on the GPU by every client seen on it.",
    );
    for g in &s.gpus {
        let _ = writeln!(
            out,
            "tandem_gpu_launches_total{{gpu=\"{}\",UUID=\"{}\"}} {}",
            escape_label(&g.uuid),
            escape_label(&g.uuid),
            g.launches
        );
    }
    header(
        out,
        "tandem_build_info",
        "gauge",
        "1, labelled with tandemd's version and the wire protocol it speaks.",
    );
    let _ = writeln!(
        out,
        "tandem_build_info{{version=\"{}\",protocol=\"{PROTOCOL_VERSION}\"}} 1",
        escape_label(&s.version)
    );
    header(
        out,
        "tandem_version_mismatch_total",
        "counter",
        "Connections refused because the shim speaks another protocol version (a job started with another release's libtandem.so: it runs without tandem until restarted).",
    );
    for (peer, n) in &s.totals.version_mismatches {
        let _ = writeln!(
            out,
            "tandem_version_mismatch_total{{peer_protocol=\"{}\"}} {n}",
            escape_label(peer)
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::state::Snapshot;

    #[test]
    fn pod_labels_histogram_and_upgrade_families() {
        let n = crate::sched::LATENCY_BUCKETS_NS.len() + 1;
        let mut buckets = vec![0u64; n];
        // Two requests: one of 3 ms (bucket le=0.005), one of 40 ms (le=0.05).
        for (i, b) in buckets.iter_mut().enumerate() {
            *b = u64::from(i >= 2) + u64::from(i >= 5);
        }
        let buckets = serde_json::to_string(&buckets).unwrap();
        let s: Snapshot = serde_json::from_str(&format!(
            r#"{{
            "version": "9.9", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s",
            "config_path": "c",
            "gpus": [{{"uuid": "GPU-1", "name": "H100", "clients": [1], "launches": 7,
                      "inference_active": true, "board_requests_open": 2}}],
            "clients": [{{
                "id": 1, "pid": 11, "uid": 0, "exe": "/usr/bin/python3", "cgroup": "/k",
                "class": "inference", "class_claimed": "auto", "class_reason": "r",
                "gpu": "GPU-1", "connected_s": 1.0, "launches": 7, "launches_ex": 0,
                "graph_launches": 0, "graph_kernels": 0, "launch_rate_hz": 0.0, "records": 0,
                "dropped": 0, "bad_records": 0, "ring_detached": false, "bytes_allocated": 0,
                "allocs": 0, "frees": 0, "copies": 0, "h2d_bytes": 0, "syncs": 0,
                "gate_wait_ns": 0, "gate_waits": 0, "gate_timeouts": 0, "top_kernels": [],
                "sched": {{"backlog_ns": 0, "gate_open": true, "requests": 2, "p50_ms": null,
                          "p99_ms": null, "slo_p99_target_ms": null, "train_share": 0.0,
                          "latency_buckets": {buckets}, "latency_sum_ns": 43000000}},
                "pod": {{"uid": "u-1", "namespace": "serving", "name": "llm-0",
                        "container": "server", "container_id": "abc", "runtime": "containerd"}},
                "slurm": {{"job": 6, "step": "0", "user": "alice", "uid": 1000}}
            }}],
            "totals": {{"clients": 1, "launches": 7, "dropped": 0, "clients_reclaimed": 0,
                       "rejected": 1, "clients_registered": 1, "handshake_timeouts": 0,
                       "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0,
                       "version_mismatches": {{"0": 1}}}}
        }}"#
        ))
        .unwrap();
        let text = super::super::render(&s);
        let l = "client=\"1\",pid=\"11\",class=\"inference\",exe=\"/usr/bin/python3\",namespace=\"serving\",pod=\"llm-0\",container=\"server\",slurm_job=\"6\",slurm_user=\"alice\",UUID=\"GPU-1\"";
        for want in [
            format!("tandem_launches_total{{{l}}} 7"),
            format!("tandem_request_latency_seconds_bucket{{{l},le=\"0.0025\"}} 0"),
            format!("tandem_request_latency_seconds_bucket{{{l},le=\"0.005\"}} 1"),
            format!("tandem_request_latency_seconds_bucket{{{l},le=\"0.05\"}} 2"),
            format!("tandem_request_latency_seconds_bucket{{{l},le=\"+Inf\"}} 2"),
            format!("tandem_request_latency_seconds_sum{{{l}}} 0.043"),
            format!("tandem_request_latency_seconds_count{{{l}}} 2"),
            "tandem_clients_by_class{class=\"inference\"} 1".to_string(),
            "tandem_clients_by_class{class=\"training\"} 0".to_string(),
            "tandem_gpu_inference_active{gpu=\"GPU-1\",UUID=\"GPU-1\"} 1".to_string(),
            "tandem_gpu_board_requests_open{gpu=\"GPU-1\",UUID=\"GPU-1\"} 2".to_string(),
            "tandem_gpu_launches_total{gpu=\"GPU-1\",UUID=\"GPU-1\"} 7".to_string(),
            "tandem_build_info{version=\"9.9\",protocol=\"1\"} 1".to_string(),
            "tandem_version_mismatch_total{peer_protocol=\"0\"} 1".to_string(),
        ] {
            assert!(text.lines().any(|x| x == want), "missing {want}\n{text}");
        }
        assert!(text.contains("# TYPE tandem_request_latency_seconds histogram\n"));
    }
}
