//! The clients and GPUs of the table as `GET /stats` shows them.

use std::time::Instant;

use super::{gpu_key, Client, Registry};
use crate::dedup::stats::ClientDedup;
use crate::follow::stats::ClientFollow;
use crate::sched;
use crate::state::{
    format_uuid, ClientSnapshot, ClientSpatial, GpuSnapshot, SchedStats, Totals, TOP_KERNELS,
};

impl Registry {
    /// Client and GPU snapshots plus totals.
    #[must_use]
    pub fn snapshot(&self, now: Instant) -> (Vec<GpuSnapshot>, Vec<ClientSnapshot>, Totals) {
        let sched = self.sched.snapshot_at(tandem_proto::monotonic_ns());
        let clients: Vec<ClientSnapshot> = self
            .clients
            .values()
            .map(|c| {
                let mut s = client_snapshot(c, now);
                s.sched = sched_stats(&sched, c.id);
                s
            })
            .collect();
        let gpus = self
            .gpus
            .iter()
            .map(|(uuid, g)| {
                let on: Vec<&Client> = self
                    .clients
                    .values()
                    .filter(|c| c.gpu == Some(*uuid))
                    .collect();
                let slot = self.board.as_ref().and_then(|nb| {
                    let b = nb.board()?;
                    b.slot(b.find(gpu_key(uuid))?)
                });
                GpuSnapshot {
                    board_requests_open: slot.map(|s| s.open()),
                    board_announcements: slot.map(|s| s.seq()),
                    sms: g.shape.map(|s| s.sms),
                    spatial_reserve_sms: g.widths.as_ref().and_then(|w| w.reserve_sms()),
                    spatial_widths: g.widths.as_ref().map_or(0, |w| w.seen() as u64),
                    uuid: format_uuid(uuid),
                    name: g.name.clone(),
                    clients: on.iter().map(|c| c.id).collect(),
                    launches: g.retired_launches + on.iter().map(|c| c.stats.launches).sum::<u64>(),
                    training_share: sched
                        .gpus
                        .iter()
                        .find(|s| s.gpu == gpu_key(uuid))
                        .map(|s| s.training_share),
                    inference_active: sched
                        .gpus
                        .iter()
                        .find(|s| s.gpu == gpu_key(uuid))
                        .map(|s| s.inference_active),
                    dedup: Default::default(),
                }
            })
            .collect();
        let mut totals = self.totals.clone();
        totals.clients = self.clients.len() as u64;
        totals.launches = self.retired_launches + clients.iter().map(|c| c.launches).sum::<u64>();
        // Each client's drop count is its own claim (its ring header): any
        // u64, so the total saturates rather than overflow.
        totals.dropped = clients
            .iter()
            .fold(self.retired_dropped, |t, c| t.saturating_add(c.dropped));
        (gpus, clients, totals)
    }
}

/// The scheduler's statistics of client `id` in the stats' shape.
pub(super) fn sched_stats(s: &sched::SchedSnapshot, id: u64) -> Option<SchedStats> {
    let c = s.clients.iter().find(|c| c.client == id)?;
    let ms = |ns: u64| ns as f64 / 1e6;
    Some(SchedStats {
        backlog_ns: c.backlog_ns,
        gate_open: c.gate_open,
        requests: c.requests,
        p50_ms: c.p50_ns.map(ms),
        p99_ms: c.p99_ns.map(ms),
        slo_p99_target_ms: c.slo_p99_ns.map(ms),
        train_share: c.train_share,
        launch_allowance: match c.allowance {
            sched::Allowance::Unlimited => None,
            sched::Allowance::Launches(n) => Some(n),
        },
        marks_measured: c.marks_measured,
        mark_every_ns: c.mark_every_ns,
        local_idle_ns: c.budget.map(|b| b.idle_ns),
        local_active_ns: c.budget.map(|b| b.active_ns),
        latency_buckets: c.latency_histogram.cumulative().to_vec(),
        latency_sum_ns: c.latency_histogram.sum_ns,
    })
}

pub(super) fn client_snapshot(c: &Client, now: Instant) -> ClientSnapshot {
    ClientSnapshot {
        id: c.id,
        pid: c.who.pid,
        uid: c.who.uid,
        exe: c.exe.clone(),
        cgroup: c.cgroup.clone(),
        ancestors: c.who.ancestors.clone(),
        class: c.decision.class.name().into(),
        class_claimed: c.claimed.name().into(),
        class_reason: c.decision.reason.clone(),
        gpu: c.gpu.as_ref().map(format_uuid),
        connected_s: now.duration_since(c.connected).as_secs_f64(),
        launches: c.stats.launches,
        launches_ex: c.stats.launches_ex,
        graph_launches: c.stats.graph_launches,
        graph_kernels: c.stats.graph_kernels,
        launch_rate_hz: c.stats.rate_hz(),
        records: c.stats.records,
        dropped: c.dropped,
        bad_records: c.stats.bad_records,
        ring_detached: c.ring.is_none(),
        bytes_allocated: c.stats.bytes_allocated,
        allocs: c.stats.allocs,
        frees: c.stats.frees,
        copies: c.stats.copies,
        h2d_bytes: c.stats.h2d_bytes,
        syncs: c.stats.syncs,
        gate_wait_ns: c.gate_wait_ns,
        gate_waits: c.gate_waits,
        gate_timeouts: c.gate_timeouts,
        marks_placed: c.marks_placed,
        marks_done: c.marks_done,
        inflight_ns: c.local.inflight_ns,
        local_waits: c.local.local_waits,
        local_wait_ns: c.local.local_wait_ns,
        top_kernels: c.stats.top_kernels(TOP_KERNELS),
        sched: None,
        dedup: ClientDedup {
            share_weights: c.trust_group.is_some(),
            trust_group: c.trust_group.clone(),
            shared_bytes: 0,
            candidate_granules: 0,
            private_bytes: c.stats.bytes_allocated,
        },
        follow: ClientFollow {
            granted: c.follow_group.is_some(),
            group: c.follow_group.clone(),
            shared_bytes: 0,
            mapped_bytes: 0,
        },
        pod: c.who.container.snapshot(),
        slurm: c.who.slurm.clone(),
        mps_priority: c.mps.map(|m| m.priority),
        spatial: (c.spatial.reserve_permille != 0).then(|| {
            let state = tandem_proto::spatial::SpatialState::decode(c.local.spatial_state);
            ClientSpatial {
                reserve: c.spatial_now as f64 / 1000.0,
                reserve_max: c.spatial.reserve_permille as f64 / 1000.0,
                min_kernel_ns: c.spatial.min_ns,
                standing_kernel_ns: c.spatial_standing_now,
                state: state.name().into(),
                descriptor_version: match state {
                    tandem_proto::spatial::SpatialState::UnknownDescriptor(v)
                    | tandem_proto::spatial::SpatialState::Unmatched(v) => Some(v),
                    _ => None,
                },
                masked_launches: c.local.masked_launches,
            }
        }),
    }
}
