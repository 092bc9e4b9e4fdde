//! The pieces of Prometheus text every family is written with: a label
//! value's escaping, a client's labels, and a family's HELP and TYPE lines.

use std::fmt::Write;

use crate::state::ClientSnapshot;

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

pub(super) fn labels(c: &ClientSnapshot) -> String {
    let mut l = format!(
        "client=\"{}\",pid=\"{}\",class=\"{}\",exe=\"{}\"",
        c.id,
        c.pid,
        escape_label(&c.class),
        escape_label(&c.exe)
    );
    let pod = c.pod.as_ref();
    let container = pod.and_then(|p| {
        p.container.clone().or_else(|| {
            p.container_id
                .as_ref()
                .map(|id| id[..id.len().min(12)].to_string())
        })
    });
    for (name, value) in [
        ("namespace", pod.and_then(|p| p.namespace.clone())),
        (
            "pod",
            pod.and_then(|p| p.name.clone().or_else(|| p.uid.clone())),
        ),
        ("container", container),
        ("slurm_job", c.slurm.as_ref().map(|j| j.job.to_string())),
        ("slurm_user", c.slurm.as_ref().map(|j| j.user.clone())),
        ("UUID", c.gpu.clone()),
    ] {
        if let Some(v) = value {
            let _ = write!(l, ",{name}=\"{}\"", escape_label(&v));
        }
    }
    l
}

pub(super) fn header(out: &mut String, name: &str, ty: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {ty}");
}
