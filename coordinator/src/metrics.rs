//! Prometheus text exposition (format 0.0.4) of a [`Snapshot`].

use std::fmt::Write;

use crate::state::{ClientSnapshot, SchedStats, Snapshot};

/// Escape a label value (`\`, `"`, newline).
#[must_use]
pub fn escape_label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn labels(c: &ClientSnapshot) -> String {
    format!(
        "client=\"{}\",pid=\"{}\",class=\"{}\",exe=\"{}\"",
        c.id,
        c.pid,
        escape_label(&c.class),
        escape_label(&c.exe)
    )
}

fn header(out: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {ty}");
}

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
    let per_client: [(&str, &str, &str, Field); 5] = [
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
    ];
    for (name, ty, help, f) in per_client {
        header(&mut out, name, ty, help);
        for c in &s.clients {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(c), f(c));
        }
    }
    type SchedField = fn(&SchedStats) -> Option<f64>;
    let per_sched: [(&str, &str, &str, SchedField); 7] = [
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
    ];
    for (name, ty, help, f) in per_sched {
        header(&mut out, name, ty, help);
        for c in &s.clients {
            if let Some(v) = c.sched.as_ref().and_then(f) {
                let _ = writeln!(out, "{name}{{{}}} {v}", labels(c));
            }
        }
    }
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
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_escaping() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
