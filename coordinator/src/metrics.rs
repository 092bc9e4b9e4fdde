//! Prometheus text exposition (format 0.0.4) of a [`Snapshot`].
//!
//! Per-client series carry `client`, `pid`, `class`, `exe`, and where known
//! the `namespace`, `pod` and `container` of the job, its `slurm_job` and
//! `slurm_user` under Slurm, and the `UUID` of its GPU, named as the DCGM
//! exporter names them so that the two join (`on (UUID)`, `on (namespace,
//! pod)`).

mod exposition;
mod fleet;

use std::fmt::Write;

use crate::dedup::stats::{DedupTotals, GpuDedupStats};
use crate::state::{ClientSnapshot, SchedStats, Snapshot};

pub use exposition::escape_label;
use exposition::{header, labels};

/// Render the snapshot.
#[must_use]
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();
    header(
        &mut out,
        "tandem_clients",
        "gauge",
        "Clients registered now.",
    );
    let _ = writeln!(out, "tandem_clients {}", s.totals.clients);

    type Field = fn(&ClientSnapshot) -> f64;
    let per_client: [(&str, &str, &str, Field); 7] = [
        (
            "tandem_launches_total",
            "counter",
            "Kernel launches (all kinds) seen in the client's ring.",
            |c| c.launches as f64,
        ),
        (
            "tandem_dropped_records_total",
            "counter",
            "Ring records the client dropped (ring full or busy).",
            |c| c.dropped as f64,
        ),
        (
            "tandem_bytes_allocated",
            "gauge",
            "Device bytes allocated and not freed.",
            |c| c.bytes_allocated as f64,
        ),
        (
            "tandem_launch_rate_hz",
            "gauge",
            "Launches per second (1 s EWMA).",
            |c| c.launch_rate_hz,
        ),
        (
            "tandem_gate_wait_seconds_total",
            "counter",
            "Time the client's launches waited on its gate.",
            |c| c.gate_wait_ns as f64 / 1e9,
        ),
        (
            "tandem_marks_placed_total",
            "counter",
            "Completion marks the client placed after its launches.",
            |c| c.marks_placed as f64,
        ),
        (
            "tandem_marks_done_total",
            "counter",
            "Completion marks the client saw complete.",
            |c| c.marks_done as f64,
        ),
    ];
    for (name, ty, help, f) in per_client {
        header(&mut out, name, ty, help);
        for c in &s.clients {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(c), f(c));
        }
    }
    type SchedField = fn(&SchedStats) -> Option<f64>;
    let per_sched: [(&str, &str, &str, SchedField); 9] = [
        (
            "tandem_gate_open",
            "gauge",
            "1 while the client's gate is open (inference gates always are), else 0.",
            |s| Some(f64::from(u8::from(s.gate_open))),
        ),
        (
            "tandem_backlog_seconds",
            "gauge",
            "GPU work the scheduler estimates the client has queued.",
            |s| Some(s.backlog_ns as f64 / 1e9),
        ),
        (
            "tandem_requests_total",
            "counter",
            "Inference requests completed.",
            |s| Some(s.requests as f64),
        ),
        (
            "tandem_request_latency_p50_seconds",
            "gauge",
            "Median inference request latency over the recent window.",
            |s| s.p50_ms.map(|v| v / 1e3),
        ),
        (
            "tandem_request_latency_p99_seconds",
            "gauge",
            "p99 inference request latency over the recent window.",
            |s| s.p99_ms.map(|v| v / 1e3),
        ),
        (
            "tandem_request_latency_p99_target_seconds",
            "gauge",
            "The inference job's p99 target from [[scheduler.slo]] (absent: none).",
            |s| s.slo_p99_target_ms.map(|v| v / 1e3),
        ),
        (
            "tandem_training_share",
            "gauge",
            "Share (0..1) of the recent GPU work on the client's GPU that was training.",
            |s| Some(s.train_share),
        ),
        (
            "tandem_marks_measured_total",
            "counter",
            "Completed marks that measured the client's kernel durations.",
            |s| Some(s.marks_measured as f64),
        ),
        (
            "tandem_mark_interval_seconds",
            "gauge",
            "How often the client is asked to place completion marks (0: none).",
            |s| Some(s.mark_every_ns as f64 / 1e9),
        ),
    ];
    for (name, ty, help, f) in per_sched {
        header(&mut out, name, ty, help);
        for c in &s.clients {
            if let Some(v) = c.sched.as_ref().and_then(f) {
                let _ = writeln!(out, "{name}{{{}}} {v}", labels(c));
            }
        }
    }
    spatial(&mut out, s);
    dedup(&mut out, s);
    follow(&mut out, s);
    fleet::render(&mut out, s);
    header(
        &mut out,
        "tandem_gpu_training_share",
        "gauge",
        "Share (0..1) of the recent estimated GPU work on the GPU that was training.",
    );
    for g in &s.gpus {
        if let Some(v) = g.training_share {
            let _ = writeln!(
                out,
                "tandem_gpu_training_share{{gpu=\"{}\"}} {v}",
                escape_label(&g.uuid)
            );
        }
    }
    header(
        &mut out,
        "tandem_clients_reclaimed_total",
        "counter",
        "Clients whose resources were reclaimed after they went away.",
    );
    let _ = writeln!(
        out,
        "tandem_clients_reclaimed_total {}",
        s.totals.clients_reclaimed
    );
    header(
        &mut out,
        "tandem_rejected_total",
        "counter",
        "Connections refused (malformed, wrong version, timeouts, limits).",
    );
    let _ = writeln!(out, "tandem_rejected_total {}", s.totals.rejected);
    header(
        &mut out,
        "tandem_bad_records_total",
        "counter",
        "Ring records or ring states the coordinator rejected.",
    );
    let _ = writeln!(out, "tandem_bad_records_total {}", s.totals.bad_records);
    header(
        &mut out,
        "tandem_uptime_seconds",
        "gauge",
        "Seconds since tandemd started.",
    );
    let _ = writeln!(out, "tandem_uptime_seconds {}", s.uptime_s);
    if let Some(sh) = &s.sharing {
        header(
            &mut out,
            "tandem_sharing_mode",
            "gauge",
            "1 for the GPU sharing mode in force (time_slicing, time_slicing_over_mps, tandem_over_mps).",
        );
        let _ = writeln!(
            out,
            "tandem_sharing_mode{{mode=\"{}\"}} 1",
            escape_label(&sh.mode)
        );
    }
    out
}

/// The `tandem_dedup_*` families: per client, per GPU (`gpu="none"`: what
/// could not be put on a GPU), and daemon-wide.
fn dedup(out: &mut String, s: &Snapshot) {
    type ClientField = fn(&ClientSnapshot) -> f64;
    let per_client: [(&str, &str, ClientField); 3] = [
        (
            "tandem_dedup_client_shared_bytes",
            "Device bytes of the client that map a shared (deduplicated) copy.",
            |c| c.dedup.shared_bytes as f64,
        ),
        (
            "tandem_dedup_client_private_bytes",
            "Device bytes allocated by the client that are not shared.",
            |c| c.dedup.private_bytes as f64,
        ),
        (
            "tandem_dedup_client_candidate_granules",
            "Granules of the client waiting to be merged (pending, publishing, offered).",
            |c| c.dedup.candidate_granules as f64,
        ),
    ];
    for (name, help, f) in per_client {
        header(out, name, "gauge", help);
        for c in s.clients.iter().filter(|c| c.dedup.share_weights) {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(c), f(c));
        }
    }
    type GpuField = fn(&GpuDedupStats) -> Option<f64>;
    type TotalField = fn(&DedupTotals) -> u64;
    let gauges: [(&str, &str, GpuField); 6] = [
        (
            "tandem_dedup_saved_bytes",
            "Device bytes saved by sharing: sum over shared copies of (holders - 1) * size.",
            |g| Some(g.dedup_saved_bytes as f64),
        ),
        (
            "tandem_dedup_shared_bytes",
            "Bytes in the shared copies tandemd holds.",
            |g| Some(g.dedup_shared_bytes as f64),
        ),
        (
            "tandem_dedup_shared_copies",
            "Shared copies tandemd holds.",
            |g| Some(g.dedup_shared_copies as f64),
        ),
        (
            "tandem_dedup_merge_latency_p50_seconds",
            "Median time from offer to merge, last 1024 merges.",
            |g| g.dedup_merge_latency_ms.p50.map(|v| v / 1e3),
        ),
        (
            "tandem_dedup_merge_latency_p99_seconds",
            "p99 time from offer to merge, last 1024 merges.",
            |g| g.dedup_merge_latency_ms.p99.map(|v| v / 1e3),
        ),
        (
            "tandem_dedup_merge_latency_max_seconds",
            "Longest time from offer to merge, last 1024 merges.",
            |g| g.dedup_merge_latency_ms.max.map(|v| v / 1e3),
        ),
    ];
    for (name, help, f) in gauges {
        header(out, name, "gauge", help);
        for g in &s.gpus {
            if let Some(v) = f(&g.dedup) {
                let _ = writeln!(out, "{name}{{gpu=\"{}\"}} {v}", escape_label(&g.uuid));
            }
        }
    }
    let counters: [(&str, &str, GpuField, TotalField); 8] = [
        ("tandem_dedup_merges_total", "Granules merged into a shared copy.", |g| Some(g.dedup_merges as f64), |t| t.merges),
        ("tandem_dedup_cow_breaks_total", "Merged granules that got a private copy again (a write).", |g| Some(g.dedup_cow_breaks as f64), |t| t.cow_breaks),
        ("tandem_dedup_mismatches_total", "Offers whose byte comparison found different content.", |g| Some(g.dedup_mismatches as f64), |t| t.mismatches),
        ("tandem_dedup_publish_failures_total", "Requests to publish a shared copy that failed or timed out.", |g| Some(g.dedup_publish_failures as f64), |t| t.publish_failures),
        ("tandem_dedup_offer_failures_total", "Offers of a shared copy that failed, were declined or timed out.", |g| Some(g.dedup_offer_failures as f64), |t| t.offer_failures),
        ("tandem_dedup_protocol_errors_total", "Dedup messages that contradicted tandemd's state (ignored); gpu=\"none\": client without a GPU or without the share flag.", |g| Some(g.dedup_protocol_errors as f64), |t| t.protocol_errors),
        ("tandem_dedup_late_replies_total", "Dedup answers that came after their request was given up.", |g| Some(g.dedup_late_replies as f64), |t| t.late_replies),
        ("tandem_dedup_candidates_ignored_total", "Candidates not tracked (no GPU yet, per-client limit, content refused before).", |g| Some(g.dedup_candidates_ignored as f64), |t| t.candidates_ignored),
    ];
    for (name, help, f, total) in counters {
        header(out, name, "counter", help);
        let mut on_gpus = 0.0;
        for g in &s.gpus {
            let v = f(&g.dedup).unwrap_or(0.0);
            on_gpus += v;
            let _ = writeln!(out, "{name}{{gpu=\"{}\"}} {v}", escape_label(&g.uuid));
        }
        let none = total(&s.dedup) as f64 - on_gpus;
        if none > 0.0 {
            let _ = writeln!(out, "{name}{{gpu=\"none\"}} {none}");
        }
    }
    header(
        out,
        "tandem_dedup_sharing_clients",
        "gauge",
        "Clients registered with weight sharing on.",
    );
    let _ = writeln!(
        out,
        "tandem_dedup_sharing_clients {}",
        s.dedup.sharing_clients
    );
}

/// The `tandem_follow_*` families: daemon-wide, per refusal reason, and per
/// client granted follow mode.
fn follow(out: &mut String, s: &Snapshot) {
    let f = &s.follow;
    let gauges: [(&str, &str, u64); 3] = [
        (
            "tandem_follow_regions",
            "Regions shared for followers now (follow mode).",
            f.regions.len() as u64,
        ),
        (
            "tandem_follow_shared_bytes",
            "Bytes of the regions shared for followers.",
            f.shared_bytes,
        ),
        (
            "tandem_follow_mapped_bytes",
            "Bytes followers map read-only: device memory follow mode saves, since a follower holds no copy.",
            f.mapped_bytes,
        ),
    ];
    for (name, help, v) in gauges {
        header(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    }
    header(
        out,
        "tandem_follow_maps_total",
        "counter",
        "Maps of shared regions granted to followers.",
    );
    let _ = writeln!(out, "tandem_follow_maps_total {}", f.maps);
    header(
        out,
        "tandem_follow_held_total",
        "counter",
        "Mappings followers reported again to this tandemd after a restart (HELD; not maps).",
    );
    let _ = writeln!(out, "tandem_follow_held_total {}", f.held);
    header(
        out,
        "tandem_follow_refusals_total",
        "counter",
        "Follow messages refused, by answer status; malformed and unowned_unshare: ignored.",
    );
    for (status, n) in &f.refusals {
        let _ = writeln!(
            out,
            "tandem_follow_refusals_total{{status=\"{}\"}} {n}",
            escape_label(status)
        );
    }
    type ClientField = fn(&ClientSnapshot) -> u64;
    let per_client: [(&str, &str, ClientField); 2] = [
        (
            "tandem_follow_client_shared_bytes",
            "Bytes of the regions the client shares for followers.",
            |c| c.follow.shared_bytes,
        ),
        (
            "tandem_follow_client_mapped_bytes",
            "Bytes of shared regions the client maps read-only.",
            |c| c.follow.mapped_bytes,
        ),
    ];
    for (name, help, v) in per_client {
        header(out, name, "gauge", help);
        for c in s.clients.iter().filter(|c| c.follow.granted) {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(c), v(c));
        }
    }
}

/// Scheduler v3's SM reservation, per client asked for it: whether its shim
/// armed it, the launches it masked (the shim's counts), and the share of
/// the GPU it is asked to leave now (sized by inference's kernel widths).
fn spatial(out: &mut String, s: &Snapshot) {
    type SpatialField = fn(&crate::state::ClientSpatial) -> f64;
    let fams: [(&str, &str, &str, SpatialField); 3] = [
        (
            "tandem_spatial_armed",
            "gauge",
            "1 while the client's shim has the SM reservation armed; 0 when it runs unmasked \
             (not tried yet, or the driver does not offer it).",
            |sp| f64::from(u8::from(sp.state == "armed")),
        ),
        (
            "tandem_spatial_masked_launches_total",
            "counter",
            "Launches the client's shim masked off the SMs left to inference.",
            |sp| sp.masked_launches as f64,
        ),
        (
            "tandem_spatial_reserve_ratio",
            "gauge",
            "Share (0..1) of its GPU's TPCs the client is asked to leave to inference while \
             inference is active, as wide as inference's kernels there, at most \
             [scheduler] spatial_reserve.",
            |sp| sp.reserve,
        ),
    ];
    for (name, ty, help, f) in fams {
        header(out, name, ty, help);
        for c in &s.clients {
            if let Some(sp) = &c.spatial {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(c), f(sp));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(sharing: &str) -> Snapshot {
        serde_json::from_str(&format!(
            r#"{{
            "version": "0", "protocol": 1, "pid": 1, "uptime_s": 1.0, "socket": "s",
            "config_path": "c", "gpus": [], "clients": [], {sharing}
            "totals": {{"clients": 0, "launches": 0, "dropped": 0, "clients_reclaimed": 0,
                       "rejected": 0, "clients_registered": 0, "handshake_timeouts": 0,
                       "bad_records": 0, "control_denied": 0, "reloads": 0, "reload_failures": 0}}
            }}"#
        ))
        .unwrap()
    }

    #[test]
    fn sharing_mode_is_one_series_for_the_mode_in_force() {
        let s = snapshot(
            r#""sharing": {"mode": "time_slicing_over_mps", "mps_pipe_dir": "/m", "describe": "d"},"#,
        );
        let text = render(&s);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("tandem_sharing_mode"))
            .collect();
        assert_eq!(
            lines,
            [
                "# HELP tandem_sharing_mode 1 for the GPU sharing mode in force (time_slicing, time_slicing_over_mps, tandem_over_mps).",
                "# TYPE tandem_sharing_mode gauge",
                "tandem_sharing_mode{mode=\"time_slicing_over_mps\"} 1",
            ],
            "{text}"
        );
        let mut plain = snapshot("");
        plain.sharing = Some(crate::mps::SharingSnapshot::of(None));
        let text = render(&plain);
        assert!(
            text.contains("\ntandem_sharing_mode{mode=\"time_slicing\"} 1\n"),
            "{text}"
        );
        // An older daemon's snapshot (no `sharing`): no made-up series.
        assert!(!render(&snapshot("")).contains("tandem_sharing_mode"));
    }

    #[test]
    fn follow_families_carry_the_snapshot_and_every_refusal() {
        let mut s = snapshot(
            r#""follow": {"enabled": true, "shared_bytes": 4194304, "mapped_bytes": 8388608,
                "shares": 1, "maps": 3, "held": 2, "refusals": {"mismatch": 2, "not_found": 0},
                "regions": [{"name": "w", "group": "uid:0", "gpu": null, "owner": 1,
                             "owner_pid": 10, "bytes": 4194304, "followers": 2, "maps": 3}]},"#,
        );
        let client = |id: u64, granted: bool, mapped: u64| {
            crate::state::test_client(
                id,
                serde_json::json!({"follow": {"granted": granted, "group": null,
                    "shared_bytes": 0, "mapped_bytes": mapped}}),
            )
        };
        s.clients = vec![client(1, true, 8388608), client(2, false, 0)];
        let text = render(&s);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tandem_follow"))
            .collect();
        assert_eq!(
            lines,
            [
                "tandem_follow_regions 1",
                "tandem_follow_shared_bytes 4194304",
                "tandem_follow_mapped_bytes 8388608",
                "tandem_follow_maps_total 3",
                "tandem_follow_held_total 2",
                "tandem_follow_refusals_total{status=\"mismatch\"} 2",
                "tandem_follow_refusals_total{status=\"not_found\"} 0",
                "tandem_follow_client_shared_bytes{client=\"1\",pid=\"11\",class=\"training\",exe=\"/x\"} 0",
                "tandem_follow_client_mapped_bytes{client=\"1\",pid=\"11\",class=\"training\",exe=\"/x\"} 8388608",
            ],
            "{text}"
        );
        for fam in [
            "tandem_follow_regions",
            "tandem_follow_maps_total",
            "tandem_follow_held_total",
            "tandem_follow_refusals_total",
            "tandem_follow_client_mapped_bytes",
        ] {
            assert!(text.contains(&format!("# HELP {fam} ")), "{fam}: {text}");
        }
        assert!(text.contains("# TYPE tandem_follow_maps_total counter\n"));
        assert!(text.contains("# TYPE tandem_follow_held_total counter\n"));
        assert!(text.contains("# TYPE tandem_follow_mapped_bytes gauge\n"));
    }

    #[test]
    fn the_sm_reservation_is_exposed_only_for_clients_asked_for_it() {
        let mut s = snapshot("");
        let client = |id: u64, spatial: serde_json::Value| {
            crate::state::test_client(id, serde_json::json!({"spatial": spatial}))
        };
        s.clients = vec![
            client(
                1,
                serde_json::json!({"reserve": 0.061, "min_kernel_ns": 100000, "state": "armed",
                    "descriptor_version": null, "masked_launches": 147}),
            ),
            client(
                2,
                serde_json::json!({"reserve": 0.25, "min_kernel_ns": 100000,
                    "state": "no_callback_table", "descriptor_version": null,
                    "masked_launches": 0}),
            ),
            client(3, serde_json::Value::Null),
        ];
        let text = render(&s);
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tandem_spatial"))
            .collect();
        assert_eq!(
            lines,
            [
                "tandem_spatial_armed{client=\"1\",pid=\"11\",class=\"training\",exe=\"/x\"} 1",
                "tandem_spatial_armed{client=\"2\",pid=\"12\",class=\"training\",exe=\"/x\"} 0",
                "tandem_spatial_masked_launches_total{client=\"1\",pid=\"11\",class=\"training\",exe=\"/x\"} 147",
                "tandem_spatial_masked_launches_total{client=\"2\",pid=\"12\",class=\"training\",exe=\"/x\"} 0",
                "tandem_spatial_reserve_ratio{client=\"1\",pid=\"11\",class=\"training\",exe=\"/x\"} 0.061",
                "tandem_spatial_reserve_ratio{client=\"2\",pid=\"12\",class=\"training\",exe=\"/x\"} 0.25",
            ],
            "{text}"
        );
        assert!(text.contains("# TYPE tandem_spatial_masked_launches_total counter\n"));
    }

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
