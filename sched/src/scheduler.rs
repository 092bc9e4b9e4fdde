//! The state machine: see the [module docs](crate) for the model. This file
//! holds the [`Scheduler`] and its inputs' handling; `gates.rs` evaluates
//! the gates, `budget.rs` the SLO loop and the budget's division,
//! `snapshot.rs` the stats view, `client.rs` and `gpu.rs` the per-client and
//! per-GPU state.

use std::collections::BTreeMap;

use crate::client::{Client, Verdict};
use crate::config::{SchedConfig, MAX_PARAM_NS, MIN_MARK_EVERY_NS};
use crate::estimate::{GRAPH_FUNC, LATENCY_WINDOW};
use crate::gpu::Gpu;
use crate::input::{Class, ClientId, Input};
use crate::output::Output;

/// Most clients the scheduler tracks. A client registered beyond this is not
/// tracked: its gate is never closed (fail-open).
pub const MAX_CLIENTS: usize = 4096;

/// How a GPU's training budget is divided among its training clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Split {
    /// Each of n clients gets budget / n (the contract's rule).
    Equal,
    /// Each client may have up to the whole budget (not divided): only for
    /// comparisons in the GPU-sharing model (`tandem-gpusim`).
    Whole,
}

/// Policy variants, for comparisons in the GPU-sharing model
/// (`tandem-gpusim`); [`Knobs::default`] is the policy tandemd runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Knobs {
    /// How the budget is divided.
    pub split: Split,
    /// While any inference client of the GPU has estimated work queued, training
    /// gets no budget at all (else: the active budget). Kept: it gave the best
    /// inference p99 in the retired FIFO simulator at the same training
    /// throughput.
    pub block_while_inference_queued: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            split: Split::Equal,
            block_while_inference_queued: true,
        }
    }
}

/// The scheduling policy core: events in, gate changes out, time injected.
/// See the [module docs](super).
#[derive(Clone, Debug)]
pub struct Scheduler {
    pub(crate) cfg: SchedConfig,
    pub(crate) knobs: Knobs,
    pub(crate) clients: BTreeMap<ClientId, Client>,
    pub(crate) gpus: BTreeMap<u64, Gpu>,
    /// High-water mark of the times given to `handle`/`tick`.
    pub(crate) now: u64,
    /// Scratch for quantiles (capacity `LATENCY_WINDOW`, never grows).
    pub(crate) scratch: Vec<u64>,
}

impl Scheduler {
    /// A scheduler with no clients. `cfg` should have passed
    /// [`SchedConfig::validate`]; out-of-range values are clamped to sane ones.
    #[must_use]
    pub fn new(cfg: SchedConfig) -> Self {
        Self::with_knobs(cfg, Knobs::default())
    }

    /// A scheduler running a policy variant (see [`Knobs`]).
    #[must_use]
    pub fn with_knobs(mut cfg: SchedConfig, knobs: Knobs) -> Self {
        cfg.idle_budget_ns = cfg.idle_budget_ns.max(1);
        cfg.min_active_budget_ns = cfg.min_active_budget_ns.max(1);
        cfg.max_active_budget_ns = cfg.max_active_budget_ns.max(cfg.min_active_budget_ns);
        // As validate() requires: idle room is never smaller than active room.
        cfg.idle_budget_ns = cfg.idle_budget_ns.max(cfg.max_active_budget_ns);
        cfg.active_budget_ns = cfg
            .active_budget_ns
            .clamp(cfg.min_active_budget_ns, cfg.max_active_budget_ns);
        cfg.default_kernel_ns = cfg.default_kernel_ns.max(1);
        if cfg.mark_every_ns != 0 {
            cfg.mark_every_ns = cfg.mark_every_ns.clamp(MIN_MARK_EVERY_NS, MAX_PARAM_NS);
        }
        Scheduler {
            cfg,
            knobs,
            clients: BTreeMap::new(),
            gpus: BTreeMap::new(),
            now: 0,
            scratch: Vec::with_capacity(LATENCY_WINDOW),
        }
    }

    /// The configuration in force (after clamping).
    #[must_use]
    pub fn config(&self) -> &SchedConfig {
        &self.cfg
    }

    /// Replace the configuration (a reload). Learned estimates and statistics
    /// are kept; each GPU's adaptive active budget restarts from the new
    /// `active_budget_ns`. Mark intervals that change are emitted, and gates
    /// are re-evaluated at once.
    pub fn reconfigure(&mut self, cfg: SchedConfig, out: &mut Vec<Output>) {
        let fresh = Scheduler::with_knobs(cfg, self.knobs);
        self.cfg = fresh.cfg;
        for g in self.gpus.values_mut() {
            g.active_budget_ns = self.cfg.active_budget_ns;
        }
        let (enabled, every) = (self.cfg.enabled, self.cfg.mark_every_ns);
        for (&id, c) in &mut self.clients {
            c.update_marks(id, enabled, every, out);
        }
        let now = self.now;
        self.eval_all(now, out);
    }

    /// Feed one input observed at `now_ns` (the coordinator's monotonic clock;
    /// earlier than a time already seen counts as that time). Gate changes are
    /// appended to `out`.
    pub fn handle(&mut self, now_ns: u64, input: Input, out: &mut Vec<Output>) {
        let now = self.advance(now_ns);
        match input {
            Input::Register {
                client,
                class,
                gpu,
                slo_p99_ns,
            } => {
                self.register(now, client, class, gpu, slo_p99_ns, out);
                self.eval_unknown_gpu(gpu, now, out);
            }
            Input::SetClass { client, class } => {
                let Some(c) = self.clients.get_mut(&client) else {
                    return;
                };
                if c.class != class {
                    c.class = class;
                    c.req_begin = None;
                    c.verdict = Verdict::None;
                    c.since_eval = 0;
                }
                c.update_marks(client, self.cfg.enabled, self.cfg.mark_every_ns, out);
                let gpu = c.gpu;
                self.eval_gpu(gpu, now, out);
                self.eval_unknown_gpu(gpu, now, out);
            }
            Input::Depart { client } => {
                let Some(c) = self.clients.remove(&client) else {
                    return;
                };
                self.leave_gpu(client, c.gpu);
                self.eval_gpu(c.gpu, now, out);
                self.eval_unknown_gpu(c.gpu, now, out);
            }
            Input::Launch {
                client,
                func_id,
                ts_ns,
            } => self.launch(now, client, func_id, 1, ts_ns, out),
            Input::GraphLaunch {
                client,
                kernels,
                ts_ns,
            } => self.launch(now, client, GRAPH_FUNC, kernels.max(1), ts_ns, out),
            Input::SyncBegin { client, ts_ns } => {
                let Some(c) = self.clients.get_mut(&client) else {
                    return;
                };
                let ts = ts_ns.min(now).max(c.last_ts);
                c.last_ts = ts;
                c.last_activity = Some(ts);
                c.sync_outstanding = true;
                let gpu = c.gpu;
                self.eval_gpu(gpu, now, out);
            }
            Input::SyncEnd { client, ts_ns } => self.sync_end(now, client, ts_ns, out),
            Input::RequestBegin { client, ts_ns } => {
                let Some(c) = self.clients.get_mut(&client) else {
                    return;
                };
                let ts = ts_ns.min(now).max(c.last_ts);
                c.last_ts = ts;
                c.explicit = true;
                if c.req_begin.is_none() {
                    c.req_begin = Some(ts);
                }
                let gpu = c.gpu;
                self.eval_gpu(gpu, now, out);
            }
            Input::RequestEnd { client, ts_ns } => {
                let Some(c) = self.clients.get_mut(&client) else {
                    return;
                };
                let ts = ts_ns.min(now).max(c.last_ts);
                c.last_ts = ts;
                c.explicit = true;
                if let Some(b) = c.req_begin.take() {
                    self.finish_request(client, ts.saturating_sub(b), ts);
                }
                let gpu = self.clients.get(&client).map_or(0, |c| c.gpu);
                self.eval_gpu(gpu, now, out);
            }
            Input::Mark { client, seq, ts_ns } => {
                let Some(c) = self.clients.get_mut(&client) else {
                    return;
                };
                let ts = ts_ns.min(now).max(c.last_ts);
                c.last_ts = ts;
                c.kernels.seal(seq);
                let gpu = c.gpu;
                self.eval_gpu(gpu, now, out);
            }
            Input::MarkDone { client, seq, ts_ns } => self.mark_done(now, client, seq, ts_ns, out),
        }
    }

    /// Re-evaluate every gate at `now_ns`. Returns when the scheduler next
    /// wants a tick (the earliest time a closed gate could reopen), or `None`
    /// when no gate is closed.
    pub fn tick(&mut self, now_ns: u64, out: &mut Vec<Output>) -> Option<u64> {
        let now = self.advance(now_ns);
        self.eval_all(now, out);
        self.next_tick()
    }

    /// The current estimate of one launch of `func_id` by `client` (ns), or
    /// `None` for an unknown client.
    #[must_use]
    pub fn kernel_estimate(&self, client: ClientId, func_id: u64) -> Option<u64> {
        self.clients
            .get(&client)
            .map(|c| c.kernels.estimate(func_id, self.cfg.default_kernel_ns))
    }

    // ---- internals ----

    pub(crate) fn advance(&mut self, now_ns: u64) -> u64 {
        self.now = self.now.max(now_ns);
        self.now
    }

    pub(crate) fn register(
        &mut self,
        now: u64,
        id: ClientId,
        class: Class,
        gpu: u64,
        slo_p99_ns: Option<u64>,
        out: &mut Vec<Output>,
    ) {
        let (enabled, every) = (self.cfg.enabled, self.cfg.mark_every_ns);
        if let Some(c) = self.clients.get_mut(&id) {
            let old_gpu = c.gpu;
            if c.class != class {
                c.req_begin = None;
                c.verdict = Verdict::None;
            }
            c.class = class;
            c.gpu = gpu;
            c.slo_p99_ns = slo_p99_ns;
            c.update_marks(id, enabled, every, out);
            if old_gpu != gpu {
                self.leave_gpu(id, old_gpu);
                self.join_gpu(id, gpu, now);
                self.eval_gpu(old_gpu, now, out);
            }
        } else {
            if self.clients.len() >= MAX_CLIENTS {
                return;
            }
            let mut c = Client::new(class, gpu, slo_p99_ns, now);
            c.update_marks(id, enabled, every, out);
            self.clients.insert(id, c);
            self.join_gpu(id, gpu, now);
        }
        self.eval_gpu(gpu, now, out);
    }

    pub(crate) fn join_gpu(&mut self, id: ClientId, gpu: u64, now: u64) {
        let active_budget_ns = self.cfg.active_budget_ns;
        let g = self.gpus.entry(gpu).or_insert_with(|| Gpu {
            members: Vec::new(),
            active_budget_ns,
            inference_active: false,
            n_training: 0,
            window_start: now,
            work_cur: 0,
            work_prev: 0,
            train_cur: 0,
            train_prev: 0,
        });
        if let Err(pos) = g.members.binary_search(&id) {
            g.members.insert(pos, id);
        }
    }

    pub(crate) fn leave_gpu(&mut self, id: ClientId, gpu: u64) {
        if let Some(g) = self.gpus.get_mut(&gpu) {
            if let Ok(pos) = g.members.binary_search(&id) {
                g.members.remove(pos);
            }
            if g.members.is_empty() {
                self.gpus.remove(&gpu);
            }
        }
    }

    pub(crate) fn launch(
        &mut self,
        now: u64,
        id: ClientId,
        func: u64,
        count: u32,
        ts_ns: u64,
        out: &mut Vec<Output>,
    ) {
        let cfg = &self.cfg;
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        let ts = ts_ns.min(now).max(c.last_ts);
        c.last_ts = ts;
        if c.class == Class::Inference && !c.explicit && c.req_begin.is_none() {
            let idle = c
                .last_activity
                .is_none_or(|la| ts.saturating_sub(la) >= cfg.request_idle_gap_ns);
            if idle {
                c.req_begin = Some(ts);
            }
        }
        c.last_activity = Some(ts);
        c.last_launch = Some(ts);
        let est = c.kernels.launch(ts, func, count, cfg.default_kernel_ns);
        c.busy_until = c.busy_until.max(ts).saturating_add(est);
        c.work_cur = c.work_cur.saturating_add(est);
        let (gpu, class) = (c.gpu, c.class);
        if let Some(g) = self.gpus.get_mut(&gpu) {
            g.work_cur = g.work_cur.saturating_add(est);
            if class == Class::Training {
                g.train_cur = g.train_cur.saturating_add(est);
            }
        }
        self.eval_gpu(gpu, now, out);
    }

    pub(crate) fn sync_end(&mut self, now: u64, id: ClientId, ts_ns: u64, out: &mut Vec<Output>) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        let ts = ts_ns.min(now).max(c.last_ts);
        c.last_ts = ts;
        c.last_activity = Some(ts);
        c.sync_outstanding = false;
        // Everything launched so far had drained by `ts`: the launches of the
        // sealed segments and of the open one are one measurement.
        let measured = c
            .kernels
            .first_pending()
            .map(|first| ts.saturating_sub(first.max(c.last_drain)))
            .filter(|&m| m > 0);
        c.kernels.drain(measured);
        publish_estimates(id, c, out);
        c.last_drain = ts;
        c.busy_until = c.busy_until.min(ts);
        let ended = if c.class == Class::Inference && !c.explicit {
            c.req_begin.take().map(|b| ts.saturating_sub(b))
        } else {
            None
        };
        if let Some(lat) = ended {
            self.finish_request(id, lat, ts);
        }
        let gpu = self.clients.get(&id).map_or(0, |c| c.gpu);
        self.eval_gpu(gpu, now, out);
    }

    /// Mark `seq` of `id` completed by `ts_ns`: the sealed segments up to it
    /// are measured (from the later of their first launch and the last drain
    /// point), and the backlog becomes what is still pending, at the current
    /// estimates, from `ts_ns` on: up or down. A mark that covers no sealed
    /// segment changes nothing.
    pub(crate) fn mark_done(
        &mut self,
        now: u64,
        id: ClientId,
        seq: u64,
        ts_ns: u64,
        out: &mut Vec<Output>,
    ) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        if let Some(first) = c.kernels.covered_first(seq) {
            let ts = ts_ns.min(now).max(c.last_ts);
            c.last_ts = ts;
            let measured = Some(ts.saturating_sub(first.max(c.last_drain))).filter(|&m| m > 0);
            if c.kernels.drain_through(seq, measured) {
                c.marks_measured += 1;
            }
            publish_estimates(id, c, out);
            c.last_drain = ts;
            c.busy_until = ts.saturating_add(c.kernels.queued_ns());
        }
        let gpu = c.gpu;
        self.eval_gpu(gpu, now, out);
    }
}

/// Emit the estimates `c`'s last measurement set or moved (as
/// [`Output::Estimate`]s).
fn publish_estimates(id: ClientId, c: &mut Client, out: &mut Vec<Output>) {
    out.extend(c.kernels.drain_changed().map(|(key, ns)| Output::Estimate {
        client: id,
        key,
        ns,
    }));
}
