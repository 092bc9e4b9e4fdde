//! The `tandem-trace/1` document of one client from a copy of its window.

use std::collections::{HashMap, HashSet};

use tandem_proto::wire::FuncAttrs;
use tandem_proto::{EventKind, Record};
use tandem_trace::{JobClass, Kernel, Op, Trace, FORMAT, MAX_STREAMS};

use super::durations::{fit_at, Fitted, Found, Timings};
use super::key::{is_launch, Key};
use super::unit::{median_unit, requests, steps, Unit};

/// What the trace describes, besides its records.
#[derive(Clone, Debug)]
pub struct Source {
    /// The client's id.
    pub client: u64,
    /// The job's name in the trace (its executable's file name).
    pub job: String,
    /// Inference (requests) or training (steps).
    pub class: JobClass,
    /// The GPU's name, when the client reported one.
    pub device: String,
    /// The look back, seconds (for the notes and errors).
    pub seconds: u64,
    /// `[scheduler] request_idle_gap_ns`: the quiet that begins a request.
    pub idle_gap_ns: u64,
}

/// Not enough in the window for a trace: what is missing (one line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing(pub String);

/// Builds the trace of `src` from `records` (its window since the look
/// back, oldest first); `func` gives a function's name, and its attributes
/// where the shim sent them, when it sent a name.
///
/// A kernel whose function's attributes are known gets `regs_per_thread`,
/// `smem_per_block` (static plus the launch's dynamic) and `blocks_per_sm`
/// 0, for the model to derive by the occupancy rules of the device it
/// models (the trace format's rule); one whose attributes are not (an
/// unnamed function, a graph launch, a shim that sent none) keeps
/// `blocks_per_sm` 1 and only the launch's dynamic shared memory.
///
/// # Errors
/// [`Missing`] when the window holds no launch, no complete request or no
/// whole step.
pub fn build(
    src: &Source,
    records: &[Record],
    func: impl Fn(u64) -> Option<(String, Option<FuncAttrs>)>,
) -> Result<Trace, Missing> {
    let (id, secs) = (src.client, src.seconds);
    if !records.iter().any(|r| is_launch(r.kind)) {
        return Err(Missing(format!(
            "client {id} has reported no kernel launch in the last {secs} s"
        )));
    }
    let (units, what) = match src.class {
        JobClass::Inference => (requests(records, src.idle_gap_ns), "request"),
        JobClass::Training => (
            steps(records)
                .map_err(|e| Missing(format!("client {id}: {e} in the last {secs} s")))?,
            "step",
        ),
    };
    let Some(unit) = median_unit(&units) else {
        return Err(Missing(format!(
            "client {id} has reported no complete request in the last {secs} s"
        )));
    };
    let timings = Timings::of(records);
    let positions = positions(records, &units, &timings.shared);
    let fitted = fit_at(records, &timings, &positions);
    let mut ops = ops_of(
        &records[unit.first..unit.end],
        &unit,
        &fitted,
        &timings.shared,
        &func,
    );
    let mut notes = format!(
        "captured live by tandemd from client {id}'s ring: the median-duration {what} of {} whole {what}s in the last {secs} s ({:.3} ms)",
        units.len(),
        unit.duration_ns() as f64 / 1e6
    );
    let counts = ops.counts;
    notes.push_str(&format!(
        "; kernel durations: {} measured from completion marks and syncs, {} estimated as their function's mean, {} unmeasured (1 ns)",
        counts[0], counts[1], counts[2]
    ));
    let untimed = fitted.untimed_positions();
    if untimed > 0 {
        notes.push_str(&format!(
            "; kernels timed in no {what} of the window, at positions whose function, grid and block other kernels of different duration share: {untimed} (their durations are the least certain; a longer look back, --seconds, times more of them)"
        ));
    }
    if src.class == JobClass::Inference && !matches!(ops.ops.last(), Some(Op::Sync { .. })) {
        ops.ops.push(Op::Sync {
            host_gap_ns: unit.end_ns.saturating_sub(ops.last_ns),
        });
        notes.push_str("; the request ended without a sync: one was added at its end");
    }
    notes.push_str("; device-to-host copies are not reported by the shim and are absent");
    let trace = Trace {
        format: FORMAT.to_string(),
        job: src.job.clone(),
        class: src.class,
        source: "measured".to_string(),
        device: src.device.clone(),
        notes,
        ops: ops.ops,
    };
    trace.check().map_err(|e| {
        Missing(format!(
            "client {id}: the captured {what} is not a valid trace: {e}"
        ))
    })?;
    Ok(trace)
}

struct Ops {
    ops: Vec<Op>,
    /// When the last op was issued (or the last sync returned).
    last_ns: u64,
    /// Kernels whose duration was measured, a function mean, unknown.
    counts: [usize; 3],
}

/// The launches of `units` whose key several kernels share (`shared`: the
/// fit then learns them per position): record index -> the launch's
/// ordinal in its unit. The position tells them apart (an encoder's and a
/// decoder's weight gradients).
fn positions(records: &[Record], units: &[Unit], shared: &HashSet<Key>) -> HashMap<usize, u32> {
    let mut out = HashMap::new();
    if shared.is_empty() {
        return out;
    }
    for u in units {
        let launches = (u.first..u.end).filter(|&i| is_launch(records[i].kind));
        for (k, i) in launches.enumerate() {
            if shared.contains(&Key::of(&records[i])) {
                out.insert(i, u32::try_from(k).unwrap_or(u32::MAX));
            }
        }
    }
    out
}

/// The ops of one unit's records (`shared`: the keys fitted per position).
fn ops_of(
    records: &[Record],
    unit: &Unit,
    fitted: &Fitted,
    shared: &HashSet<Key>,
    func: &impl Fn(u64) -> Option<(String, Option<FuncAttrs>)>,
) -> Ops {
    let mut nth = 0;
    let mut streams: HashMap<u64, u32> = HashMap::new();
    let mut stream_of = |s: u64| {
        let n = streams.len() as u32;
        *streams.entry(s).or_insert(n.min(MAX_STREAMS - 1))
    };
    let mut out = Ops {
        ops: Vec::new(),
        last_ns: unit.begin_ns,
        counts: [0; 3],
    };
    for r in records {
        let gap = r.ts_ns.saturating_sub(out.last_ns);
        match EventKind::from_raw(r.kind) {
            Some(k) if k.is_launch() => {
                let key = Key::of(r);
                let (ns, found) = if shared.contains(&key) {
                    fitted.duration_at(&key, nth)
                } else {
                    fitted.duration(&key)
                };
                nth += 1;
                out.counts[match found {
                    Found::Measured => 0,
                    Found::FunctionMean => 1,
                    Found::Unknown => 2,
                }] += 1;
                let graph = k == EventKind::GRAPH_LAUNCH;
                let (fname, attrs) = if graph {
                    (format!("graph-{:016x}", r.func_id), None)
                } else {
                    func(r.func_id).unwrap_or_else(|| (format!("fn-{:016x}", r.func_id), None))
                };
                let a = attrs.unwrap_or_default();
                out.ops.push(Op::Kernel(Kernel {
                    name: fname,
                    grid: key.grid.map(|g| g.max(1)),
                    block: key.block.map(|b| u32::from(b.max(1))),
                    blocks_per_sm: if attrs.is_some() { 0 } else { 1 },
                    duration_ns: ns.max(1),
                    sm_share: 1.0,
                    regs_per_thread: a.regs_per_thread,
                    smem_per_block: a.static_smem_bytes.saturating_add(r.shared_mem_bytes),
                    dram_bytes: 0,
                    graph: 0,
                    stream: stream_of(r.stream),
                    host_gap_ns: gap,
                }));
                out.last_ns = r.ts_ns;
            }
            Some(EventKind::COPY_H2D) => {
                out.ops.push(Op::CopyH2d {
                    bytes: r.bytes,
                    stream: stream_of(r.stream),
                    host_gap_ns: gap,
                });
                out.last_ns = r.ts_ns;
            }
            Some(EventKind::SYNC_BEGIN) => {
                out.ops.push(Op::Sync { host_gap_ns: gap });
                out.last_ns = r.ts_ns;
            }
            // The wait is not the job's CPU time: the next gap counts from
            // the sync's return.
            Some(EventKind::SYNC_END) => out.last_ns = r.ts_ns,
            _ => {}
        }
    }
    out
}
