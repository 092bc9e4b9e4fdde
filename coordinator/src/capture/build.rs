//! The `tandem-trace/1` document of one client from a copy of its window.

use std::collections::HashMap;

use tandem_proto::wire::FuncAttrs;
use tandem_proto::{EventKind, Record};
use tandem_trace::{JobClass, Kernel, Op, Trace, FORMAT, MAX_STREAMS};

use super::durations::{fit, is_launch, lower_median, Fitted, Found, Key};
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
    let fitted = fit(records);
    let positions = by_position(records, &units, &unit, &fitted);
    let mut ops = ops_of(
        &records[unit.first..unit.end],
        &unit,
        &fitted,
        &positions,
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

/// For each launch of `unit`, in order: where its key's timings disagree
/// (`Fitted::shared`: several kernels share the function, grid and block,
/// an encoder's and a decoder's weight gradients), the median of the timings of the launches
/// at its position in every unit (request or step) with its key there: the
/// position tells them apart; else `None` (the key's own duration).
fn by_position(
    records: &[Record],
    units: &[Unit],
    unit: &Unit,
    fitted: &Fitted,
) -> Vec<Option<u64>> {
    let launches_of = |u: &Unit| -> Vec<usize> {
        (u.first..u.end)
            .filter(|&i| is_launch(records[i].kind))
            .collect()
    };
    let rep = launches_of(unit);
    let keys: Vec<Key> = rep.iter().map(|&i| Key::of(&records[i])).collect();
    let mut at: Vec<Vec<u64>> = vec![Vec::new(); rep.len()];
    if !fitted.shared.is_empty() {
        for u in units {
            for (k, i) in launches_of(u).into_iter().enumerate().take(rep.len()) {
                if !fitted.shared.contains(&keys[k]) || Key::of(&records[i]) != keys[k] {
                    continue;
                }
                if let Some(&ns) = fitted.timed_at.get(&i) {
                    at[k].push(ns);
                }
            }
        }
    }
    at.into_iter()
        .map(|mut v| {
            v.sort_unstable();
            lower_median(&v)
        })
        .collect()
}

/// The ops of one unit's records (`positions`: [`by_position`]'s).
fn ops_of(
    records: &[Record],
    unit: &Unit,
    fitted: &Fitted,
    positions: &[Option<u64>],
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
                let (ns, found) = match positions.get(nth).copied().flatten() {
                    Some(ns) => (ns, Found::Measured),
                    None => fitted.duration(&key),
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
