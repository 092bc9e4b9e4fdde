//! What the scheduler shows of itself (`GET /stats`, tandemctl): per-client
//! and per-GPU snapshots, with work shares aged to the time asked for.

use crate::estimate::{quantile, LATENCY_WINDOW};
use crate::gpu::recent;
use crate::histogram::LatencyHistogram;
use crate::input::{Class, ClientId};
use crate::output::{Allowance, LocalBudget};
use crate::scheduler::Scheduler;

/// The scheduler's state for the stats.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedSnapshot {
    /// `[scheduler] enabled`.
    pub enabled: bool,
    /// The latest time the scheduler has seen (backlogs are as of this time).
    pub now_ns: u64,
    /// Every tracked client, ascending ids.
    pub clients: Vec<ClientSnapshot>,
    /// Every GPU with a client, ascending ids.
    pub gpus: Vec<GpuSnapshot>,
}

/// One client in a [`SchedSnapshot`].
#[derive(Clone, Debug, PartialEq)]
pub struct ClientSnapshot {
    /// Its id.
    pub client: ClientId,
    /// Class.
    pub class: Class,
    /// GPU group.
    pub gpu: u64,
    /// Estimated queued GPU work, ns.
    pub backlog_ns: u64,
    /// Gate state as last emitted.
    pub gate_open: bool,
    /// Requests completed.
    pub requests: u64,
    /// A request is open now.
    pub request_active: bool,
    /// Median latency over the last [`LATENCY_WINDOW`] requests, ns.
    pub p50_ns: Option<u64>,
    /// p99 latency over the last [`LATENCY_WINDOW`] requests, ns.
    pub p99_ns: Option<u64>,
    /// The SLO target, ns.
    pub slo_p99_ns: Option<u64>,
    /// This client's share (0..1) of the estimated GPU work launched on its
    /// GPU over the last one to two [`SHARE_WINDOW_NS`](crate::SHARE_WINDOW_NS).
    pub work_share: f64,
    /// The share of that work that was training (all training clients of the
    /// GPU together): what inference shared its GPU with.
    pub train_share: f64,
    /// Distinct kernels with an estimate.
    pub kernels_known: usize,
    /// The launch allowance as last emitted.
    pub allowance: Allowance,
    /// The recent mean estimate of one launch, ns (what an allowance is
    /// counted in).
    pub mean_launch_ns: u64,
    /// A drain point (a sync or a completion mark) has measured some of the
    /// client's launches (until then its estimates are the default and its
    /// allowance is at most 1).
    pub measured: bool,
    /// Completed marks ([`Input::MarkDone`](crate::Input::MarkDone)) that measured something.
    pub marks_measured: u64,
    /// The mark interval asked of the client, ns, as last emitted
    /// ([`Output::Marks`](crate::Output::Marks); 0: none).
    pub mark_every_ns: u64,
    /// Its local in-flight bound as last emitted ([`Output::Budget`](crate::Output::Budget); `None`:
    /// none).
    pub budget: Option<LocalBudget>,
    /// Its completed requests' latencies since it registered.
    pub latency_histogram: LatencyHistogram,
}

/// One GPU in a [`SchedSnapshot`].
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSnapshot {
    /// GPU group (hash of the device uuid; 0 unknown).
    pub gpu: u64,
    /// An inference request (or its hold, or inference work) is active.
    pub inference_active: bool,
    /// The adaptive active budget, ns.
    pub active_budget_ns: u64,
    /// Training clients on it.
    pub training_clients: u32,
    /// What each training client may have queued now, ns.
    pub training_budget_ns: u64,
    /// Share (0..1) of the recent estimated GPU work that was training.
    pub training_share: f64,
}

impl Scheduler {
    /// Per-client and per-GPU state, as of the latest time seen.
    #[must_use]
    pub fn snapshot(&self) -> SchedSnapshot {
        self.snapshot_at(self.now)
    }

    /// [`Scheduler::snapshot`] as of `now_ns` (or the latest time seen, if
    /// later): the work shares cover the share windows that `now_ns` falls
    /// in, so work older than two windows no longer counts even when no
    /// event has come since to roll them.
    #[must_use]
    pub fn snapshot_at(&self, now_ns: u64) -> SchedSnapshot {
        let now = self.now.max(now_ns);
        let mut clients = Vec::with_capacity(self.clients.len());
        for (&id, c) in &self.clients {
            let g = self.gpus.get(&c.gpu);
            let (gpu_work, gpu_train) = g.map_or((0, 0), |g| {
                (
                    recent(g.window_start, now, g.work_cur, g.work_prev),
                    recent(g.window_start, now, g.train_cur, g.train_prev),
                )
            });
            let work = g.map_or(c.work_cur + c.work_prev, |g| {
                recent(g.window_start, now, c.work_cur, c.work_prev)
            });
            let share = |num: u64| {
                if gpu_work == 0 {
                    0.0
                } else {
                    num as f64 / gpu_work as f64
                }
            };
            let mut lat = Vec::with_capacity(LATENCY_WINDOW);
            c.latencies.last_into(LATENCY_WINDOW, &mut lat);
            clients.push(ClientSnapshot {
                client: id,
                class: c.class,
                gpu: c.gpu,
                backlog_ns: c.backlog(now),
                gate_open: c.gate_open,
                requests: c.requests_done,
                request_active: c.req_begin.is_some(),
                p50_ns: quantile(&mut lat, 0.5),
                p99_ns: quantile(&mut lat, 0.99),
                slo_p99_ns: c.slo_p99_ns,
                work_share: share(work),
                train_share: share(gpu_train),
                kernels_known: c.kernels.len(),
                allowance: c.allowance,
                mean_launch_ns: c.kernels.mean_launch_ns(self.cfg.default_kernel_ns),
                measured: c.kernels.measured(),
                marks_measured: c.marks_measured,
                mark_every_ns: c.mark_every_ns,
                budget: c.budget,
                latency_histogram: c.histogram.clone(),
            });
        }
        let gpus = self
            .gpus
            .iter()
            .map(|(&gid, g)| GpuSnapshot {
                gpu: gid,
                inference_active: g.inference_active,
                active_budget_ns: g.active_budget_ns,
                training_clients: g.n_training,
                training_budget_ns: self.effective_budget(gid, g, now),
                training_share: {
                    let work = recent(g.window_start, now, g.work_cur, g.work_prev);
                    let train = recent(g.window_start, now, g.train_cur, g.train_prev);
                    if work == 0 {
                        0.0
                    } else {
                        train as f64 / work as f64
                    }
                },
            })
            .collect();
        SchedSnapshot {
            enabled: self.cfg.enabled,
            now_ns: now,
            clients,
            gpus,
        }
    }
}
