//! Prometheus text exposition (format 0.0.4) of a [`Snapshot`].

use std::fmt::Write;

use crate::state::{ClientSnapshot, Snapshot};

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
