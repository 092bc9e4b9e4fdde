//! The drain: each client's ring read into its counters and into the
//! scheduler's inputs, the heartbeat beaten, the scheduler ticked, and its
//! outputs handed to [`crate::grant`].
//!
//! A ring is untrusted memory: a record that does not decode is counted and
//! skipped, garbage in the ring's indices detaches the ring (the client keeps
//! running unscheduled), and a record's timestamp is never taken beyond
//! tandemd's own clock.
//!
//! An inference client's kernel launches also teach its GPU's widths
//! ([`crate::spatial`]), and after each pass the reservation they give is
//! published to the training clients asked to mask their launches.

use std::time::Instant;

use tandem_proto::estimates::kernel_key;
use tandem_proto::{monotonic_ns, EventKind, Record};
use tracing::warn;

use crate::clients::{Client, Gpu, Registry, Ring};
use crate::sched::{Input, Output, Scheduler};
use crate::spatial::GpuWidths;
use crate::state::Totals;

/// What one [`Registry::poll`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Poll {
    /// Records consumed.
    pub records: usize,
    /// When (`CLOCK_MONOTONIC` ns) the scheduler next wants a tick, if ever
    /// before new records arrive.
    pub next_tick_ns: Option<u64>,
    /// Gates this pass opened (their clients launch at once: look again soon).
    pub gates_opened: usize,
}

/// The scheduler input a ring record is, if any. `ts` is the record's
/// timestamp as the caller bounded it. (Public for the GPU-sharing model,
/// `tandem-gpusim`, which feeds the scheduler the same way.)
#[must_use]
pub fn sched_input(client: u64, r: &Record, ts_ns: u64) -> Option<Input> {
    Some(match r.kind().ok()? {
        // Estimates are per kernel *and grid*: the key the shim charges with.
        EventKind::LAUNCH | EventKind::LAUNCH_EX => Input::Launch {
            client,
            func_id: u64::from(kernel_key(
                r.func_id,
                [r.grid_x, u32::from(r.grid_y), u32::from(r.grid_z)],
            )),
            ts_ns,
        },
        EventKind::GRAPH_LAUNCH => Input::GraphLaunch {
            client,
            kernels: u32::try_from(r.bytes).unwrap_or(u32::MAX),
            ts_ns,
        },
        EventKind::SYNC_BEGIN => Input::SyncBegin { client, ts_ns },
        EventKind::SYNC_END => Input::SyncEnd { client, ts_ns },
        EventKind::REQUEST_BEGIN => Input::RequestBegin { client, ts_ns },
        EventKind::REQUEST_END => Input::RequestEnd { client, ts_ns },
        EventKind::MARK => Input::Mark {
            client,
            seq: r.func_id,
            ts_ns,
        },
        EventKind::MARK_DONE => Input::MarkDone {
            client,
            seq: r.func_id,
            ts_ns,
        },
        _ => return None,
    })
}

impl Registry {
    /// Drain every attached ring (feeding the scheduler), beat heartbeats,
    /// update rates, tick the scheduler and apply its gate changes.
    pub fn poll(&mut self, now: Instant) -> Poll {
        let mut total = 0;
        for c in self.clients.values_mut() {
            // The launch counter before the records: see crate::grant.
            if let Some(cb) = c.ring.as_ref().and_then(Ring::control) {
                self.limits.observe(c.id, cb);
            }
            let widths = inference_widths(&mut self.gpus, c);
            total += drain_client(
                c,
                widths,
                &mut self.totals,
                &mut self.sched,
                &mut self.sched_out,
            );
            if let Some(cb) = c.ring.as_ref().and_then(Ring::control) {
                if now.duration_since(c.last_beat) >= c.heartbeat {
                    cb.beat();
                    c.last_beat = now;
                }
            }
            c.stats.tick_rate(now);
        }
        self.publish_reserves();
        let next_tick_ns = self.sched.tick(monotonic_ns(), &mut self.sched_out);
        let gates_opened = self.apply_gates();
        Poll {
            records: total,
            next_tick_ns,
            gates_opened,
        }
    }
}

impl Registry {
    /// Each training client asked to mask its launches gets its GPU's
    /// reservation as learnt, where one is (else it keeps the configured
    /// share), and its standing threshold while an inference client is on
    /// its GPU (else 0: the mask only while inference is active); written
    /// only when either changes.
    fn publish_reserves(&mut self) {
        if self
            .clients
            .values()
            .all(|c| c.spatial.reserve_permille == 0)
        {
            return;
        }
        let mut inference_gpus = std::mem::take(&mut self.inference_gpus);
        inference_gpus.clear();
        inference_gpus.extend(
            self.clients
                .values()
                .filter(|c| c.decision.class == tandem_proto::wire::ClientClass::Inference)
                .filter_map(|c| c.gpu),
        );
        for c in self.clients.values_mut() {
            if c.spatial.reserve_permille == 0 {
                continue;
            }
            let learnt = c
                .gpu
                .and_then(|u| self.gpus.get(&u))
                .and_then(|g| g.widths.as_ref())
                .and_then(GpuWidths::permille);
            let now = learnt.map_or(c.spatial.reserve_permille, |p| {
                p.min(c.spatial.reserve_permille)
            });
            let standing = if c.gpu.is_some_and(|g| inference_gpus.contains(&g)) {
                c.spatial.standing_ns
            } else {
                0
            };
            if (now, standing) == (c.spatial_now, c.spatial_standing_now) {
                continue;
            }
            if let Some(cb) = c.ring.as_ref().and_then(Ring::control) {
                cb.set_spatial(tandem_proto::spatial::Spatial {
                    reserve_permille: now,
                    standing_ns: standing,
                    ..c.spatial
                });
                c.spatial_now = now;
                c.spatial_standing_now = standing;
            }
        }
        self.inference_gpus = inference_gpus;
    }
}

/// The widths an inference client's launches teach: its GPU's, where the
/// GPU's shape is known.
fn inference_widths<'a>(
    gpus: &'a mut std::collections::BTreeMap<[u8; 16], Gpu>,
    c: &Client,
) -> Option<&'a mut GpuWidths> {
    if c.decision.class != tandem_proto::wire::ClientClass::Inference {
        return None;
    }
    gpus.get_mut(&c.gpu?)?.widths.as_mut()
}

/// Drain one client's ring into its stats, the scheduler (gate changes are
/// left in `out`) and, for an inference client, its GPU's `widths`; on
/// garbage, warn once, count, and detach the ring.
pub(crate) fn drain_client(
    c: &mut Client,
    mut widths: Option<&mut GpuWidths>,
    totals: &mut Totals,
    sched: &mut Scheduler,
    out: &mut Vec<Output>,
) -> usize {
    let Some(ring) = c.ring.as_mut() else {
        return 0;
    };
    let stats = &mut c.stats;
    let window = &mut c.capture;
    let id = c.id;
    let mut unknown: Option<u16> = None;
    let mut bad = 0u64;
    let mut now = monotonic_ns();
    let res = ring.drain(|r| {
        if let Err(raw) = stats.apply(r) {
            bad += 1;
            unknown.get_or_insert(raw);
            return;
        }
        window.push(r);
        if let Some(w) = widths.as_deref_mut() {
            // A width needs the function's registers and shared memory, from
            // its FuncName, which the shim sends before the launch's record
            // but on the socket, which may be read after the ring: a launch
            // of a function not named yet teaches nothing (without them its
            // width would come out too narrow). One the shim could not name
            // never gets a FuncName, nor does one past a full name table:
            // those count without.
            match stats.func(r.func_id) {
                Some((_, attrs)) => w.observe(id, r, attrs),
                None if r.func_id & tandem_proto::FUNC_ID_UNNAMED != 0 || stats.names_full() => {
                    w.observe(id, r, None);
                }
                None => {}
            }
        }
        // The timestamp is the client's claim: never later than our clock
        // (re-read once if the record was pushed after we last read it), so
        // one client cannot push the scheduler's time ahead.
        if r.ts_ns > now {
            now = monotonic_ns();
        }
        if let Some(input) = sched_input(id, r, r.ts_ns.min(now)) {
            sched.handle(now, input, out);
        }
    });
    totals.bad_records += bad;
    if let (Some(raw), false) = (unknown, c.warned_kind) {
        c.warned_kind = true;
        warn!(
            client = c.id,
            pid = c.who.pid,
            "client wrote a record of unknown kind {raw} into its ring; such records are counted in bad_records and skipped (warned once)"
        );
    }
    match res {
        Ok(n) => {
            let s = ring.stats();
            c.dropped = s.dropped_full.saturating_add(s.dropped_busy);
            if let Some(cb) = ring.control() {
                let k = cb.client_counters();
                c.gate_waits = k.gate_waits;
                c.gate_timeouts = k.gate_timeouts;
                c.gate_wait_ns = k.gate_wait_ns;
                c.marks_placed = k.marks_placed;
                c.marks_done = k.marks_done;
                c.local = k;
            }
            n
        }
        Err(e) => {
            c.stats.bad_records += 1;
            totals.bad_records += 1;
            warn!(
                client = c.id,
                pid = c.who.pid,
                exe = %c.exe,
                "garbage in the client's ring: {e}; ring detached, the client keeps running unscheduled"
            );
            c.ring = None;
            0
        }
    }
}
