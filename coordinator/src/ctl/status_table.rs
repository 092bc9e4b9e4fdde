//! The status table `tandemctl status`, `top` and `run` print: one row per
//! client, each GPU's sharing line, and the human forms of bytes and UUIDs.

use crate::state::{ClientSnapshot, GpuSnapshot, Snapshot};

/// Human-readable bytes.
#[must_use]
pub fn human_bytes(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b}B")
    } else {
        format!("{v:.1}{}", U[i])
    }
}

/// A GPU's UUID in the short form `nvidia-smi -L` output is searched by:
/// `GPU-` and the first 8 hex digits (the full UUID is on the GPU's line
/// under the table). tandem's fake driver's UUID is the bytes of
/// "tandem-fakecuda", so it shows as GPU-74616e64 ("tand").
#[must_use]
pub fn short_uuid(uuid: &str) -> String {
    let hex = uuid.strip_prefix("GPU-").unwrap_or(uuid);
    format!("GPU-{}", hex.chars().take(8).collect::<String>())
}

/// Kernels the client ran: each launch call runs one, and a graph launch
/// runs every kernel node of the graph (so a job with graphs runs more
/// kernels than it makes launch calls).
#[must_use]
pub fn kernels(c: &ClientSnapshot) -> u64 {
    c.launches
        .saturating_sub(c.graph_launches)
        .saturating_add(c.graph_kernels)
}

/// One table row.
#[must_use]
pub fn row(c: &ClientSnapshot) -> String {
    let gpu = c.gpu.as_deref().map_or("-".to_string(), short_uuid);
    let shared = if c.dedup.share_weights {
        human_bytes(c.dedup.shared_bytes)
    } else {
        "-".to_string()
    };
    format!(
        "{:>5} {:>8} {:<9} {:<12} {:>10} {:>8.1} {:>8} {:>9} {:>9} {:>8} {}",
        c.id,
        c.pid,
        c.class,
        gpu,
        kernels(c),
        c.launch_rate_hz,
        c.dropped,
        human_bytes(c.bytes_allocated),
        shared,
        format!("{:.3}s", c.gate_wait_ns as f64 / 1e9),
        c.exe
    )
}

/// How GPU `g` is shared now, for a GPU with jobs on it: its jobs by class,
/// whether inference is active (the scheduler's view) and how many requests
/// the GPU board counts open (the training shims' view), training's share
/// of the recent work and the worst inference p99 measured.
#[must_use]
pub fn sharing_line(g: &GpuSnapshot, clients: &[ClientSnapshot]) -> Option<String> {
    let on: Vec<&ClientSnapshot> = clients
        .iter()
        .filter(|c| c.gpu.as_deref() == Some(g.uuid.as_str()))
        .collect();
    if on.is_empty() {
        return None;
    }
    let n = |class: &str| on.iter().filter(|c| c.class == class).count();
    let mut parts = vec![format!(
        "{} inference, {} training",
        n("inference"),
        n("training")
    )];
    if let Some(a) = g.inference_active {
        parts.push(
            if a {
                "inference active"
            } else {
                "inference idle"
            }
            .to_string(),
        );
    }
    if let Some(o) = g.board_requests_open {
        parts.push(format!("board: {o} open (inference requests and syncs)"));
    }
    if let Some(t) = g.training_share {
        parts.push(format!(
            "training {:.0}% of GPU work in the last 2 s",
            t * 100.0
        ));
    }
    let p99 = on
        .iter()
        .filter(|c| c.class == "inference")
        .filter_map(|c| c.sched.as_ref()?.p99_ms)
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    if let Some(p) = p99 {
        parts.push(format!("inference p99 {p:.1} ms"));
    }
    Some(format!("{} ({}): {}", g.uuid, g.name, parts.join("; ")))
}

/// What became of the SM reservation tandemd asked of client `c` (`None`:
/// not asked): armed with the launches it masked, or why it runs unmasked.
#[must_use]
pub fn spatial_line(c: &ClientSnapshot) -> Option<String> {
    let s = c.spatial.as_ref()?;
    let state = match (s.state.as_str(), s.descriptor_version) {
        ("armed", _) => format!("armed, {} launches masked", s.masked_launches),
        ("idle", _) => "not tried yet (no launch while inference was active)".to_string(),
        (why, Some(v)) => format!("runs unmasked: {why} (version {v:#04x})"),
        (why, None) => format!("runs unmasked: {why}"),
    };
    // Below its cap: sized by the widths of inference's kernels.
    let sized = if s.reserve < s.reserve_max {
        format!(
            " (as wide as inference's kernels; at most {:.0}%)",
            s.reserve_max * 100.0
        )
    } else {
        String::new()
    };
    Some(format!(
        "spatial: client {} (pid {}) leaves {:.0}% of its GPU's TPCs{sized} to inference while \
         it is active: {state}",
        c.id,
        c.pid,
        s.reserve * 100.0
    ))
}

/// The header line of [`table`].
pub const HEADER: &str =
    "   ID      PID CLASS     GPU             KERNELS LAUNCH/s  DROPPED       MEM    SHARED     WAIT EXE";

/// What the columns of [`HEADER`] mean (`tandemctl status --help`).
pub const COLUMNS: &str =
    "Columns: ID the client id (for set-class); PID its process; CLASS the class \
it was granted; GPU its GPU's UUID, short (the GPU line below the table has it whole); KERNELS \
kernels it ran (a graph launch runs every kernel in the graph, so this is more than its launch \
calls when it uses CUDA graphs); LAUNCH/s launch calls per second (1 s average); DROPPED launch \
records its ring had no room for; MEM device memory it holds now; SHARED of that, weights shared \
with other jobs; WAIT time its launches waited for tandem's gate; EXE its executable.
Each GPU in use has a line: its jobs by class, whether inference is active, inference requests \
and syncs open on its board, training's share of the GPU work of the last 2 s, the worst inference p99. A training \
job asked for the SM reservation ([scheduler] spatial) has a line saying whether its shim armed \
it and how many launches it masked, or why it runs unmasked.";

/// The status table.
#[must_use]
pub fn table(s: &Snapshot) -> String {
    let mut out = format!("{HEADER}\n");
    for c in &s.clients {
        out.push_str(&row(c));
        out.push('\n');
    }
    for line in s.gpus.iter().filter_map(|g| sharing_line(g, &s.clients)) {
        out.push_str(&line);
        out.push('\n');
    }
    for line in s.clients.iter().filter_map(spatial_line) {
        out.push_str(&line);
        out.push('\n');
    }
    for g in s.gpus.iter().filter(|g| g.dedup.dedup_saved_bytes > 0) {
        out.push_str(&format!(
            "{} ({}): {} saved by weight sharing ({} shared copies, {} merges)\n",
            g.uuid,
            g.name,
            human_bytes(g.dedup.dedup_saved_bytes),
            g.dedup.dedup_shared_copies,
            g.dedup.dedup_merges
        ));
    }
    for r in &s.follow.regions {
        let gpu = match (r.gpu_ordinal, &r.gpu) {
            (Some(o), _) => format!("GPU {o}"),
            (None, Some(uuid)) => uuid.clone(),
            (None, None) => "unknown GPU".to_string(),
        };
        out.push_str(&format!(
            "follow: {} ({}, {gpu}): {} shared by client {} (pid {}), {} follower{}\n",
            r.name,
            r.group,
            human_bytes(r.bytes),
            r.owner,
            r.owner_pid,
            r.followers,
            if r.followers == 1 { "" } else { "s" }
        ));
    }
    out.push_str(&format!(
        "{} clients, {} launches, {} dropped, {} reclaimed, {} rejected; tandemd pid {}, up {:.0}s\n",
        s.totals.clients,
        s.totals.launches,
        s.totals.dropped,
        s.totals.clients_reclaimed,
        s.totals.rejected,
        s.pid,
        s.uptime_s
    ));
    if let Some(sh) = &s.sharing {
        out.push_str(&format!("sharing: {}\n", sh.describe));
    }
    out
}
