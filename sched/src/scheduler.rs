//! The state machine: see the [module docs](super) for the model.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::config::{SchedConfig, MAX_PARAM_NS, MIN_MARK_EVERY_NS};
use super::estimate::{quantile, KernelTable, LatencyWindow, GRAPH_FUNC, LATENCY_WINDOW};
use super::{
    Allowance, Class, ClientId, ClientSnapshot, GpuSnapshot, Input, LocalBudget, Output,
    SchedSnapshot,
};

/// Most clients the scheduler tracks. A client registered beyond this is not
/// tracked: its gate is never closed (fail-open).
pub const MAX_CLIENTS: usize = 4096;
/// Completed requests between two SLO evaluations of one client; each
/// evaluation takes the p99 of exactly these requests.
pub const SLO_EVAL_EVERY: usize = 100;
/// An open request older than this is dropped (not counted), so a lost
/// `RequestEnd` or `SyncEnd` cannot hold training back for ever.
pub const MAX_REQUEST_NS: u64 = 10_000_000_000;
/// Period of the windows over which shares of GPU work are counted (the share
/// covers the current and the previous window).
pub const SHARE_WINDOW_NS: u64 = 1_000_000_000;

/// The work of a pair of share windows (the current one from
/// `window_start`, the one before) that still counts at `now`: both within
/// the first window, the current one alone (it has become the previous)
/// within the second, none after. Windows roll only on events, so a
/// snapshot ages them itself.
fn recent(window_start: u64, now: u64, cur: u64, prev: u64) -> u64 {
    let age = now.saturating_sub(window_start);
    if age >= 2 * SHARE_WINDOW_NS {
        0
    } else if age >= SHARE_WINDOW_NS {
        cur
    } else {
        cur.saturating_add(prev)
    }
}
/// How long a training client whose GPU is not known yet (group 0) is gated
/// as if inference shared its GPU, while any inference client is registered:
/// its device report normally follows within one reader pass of its first
/// launch; one that never comes stops costing after this.
pub const UNKNOWN_GPU_GRACE_NS: u64 = 1_000_000_000;

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    None,
    Above,
    Within,
    Below,
}

#[derive(Clone, Debug)]
struct Client {
    class: Class,
    gpu: u64,
    /// When it registered (first `Register`).
    since: u64,
    slo_p99_ns: Option<u64>,
    gate_open: bool,
    /// Launch allowance as last emitted.
    allowance: Allowance,
    /// Local in-flight bound as last emitted (`None`: none, as a fresh
    /// control block holds).
    budget: Option<LocalBudget>,
    /// Last launch (inference activity: active until `request_hold_ns`
    /// after it).
    last_launch: Option<u64>,
    /// Estimated time at which all work launched so far has drained.
    busy_until: u64,
    /// Last timestamp seen from this client (its records are in order).
    last_ts: u64,
    /// Last launch or sync (the idle-gap rule).
    last_activity: Option<u64>,
    /// Last drain point (SyncEnd, or a MarkDone that covered launches).
    last_drain: u64,
    kernels: KernelTable,
    /// The mark interval last emitted (`Output::Marks`; a fresh control
    /// block holds 0).
    mark_every_ns: u64,
    /// MarkDone inputs that measured something.
    marks_measured: u64,
    /// Explicit request boundaries seen: no implicit detection from then on.
    explicit: bool,
    /// Begin of the open request.
    req_begin: Option<u64>,
    sync_outstanding: bool,
    hold_until: u64,
    latencies: LatencyWindow,
    histogram: crate::LatencyHistogram,
    requests_done: u64,
    since_eval: usize,
    verdict: Verdict,
    work_cur: u64,
    work_prev: u64,
}

impl Client {
    fn new(class: Class, gpu: u64, slo_p99_ns: Option<u64>, since: u64) -> Client {
        Client {
            class,
            gpu,
            since,
            slo_p99_ns,
            gate_open: true,
            allowance: Allowance::Unlimited,
            budget: None,
            last_launch: None,
            busy_until: 0,
            last_ts: 0,
            last_activity: None,
            last_drain: 0,
            kernels: KernelTable::default(),
            mark_every_ns: 0,
            marks_measured: 0,
            explicit: false,
            req_begin: None,
            sync_outstanding: false,
            hold_until: 0,
            latencies: LatencyWindow::default(),
            histogram: crate::LatencyHistogram::default(),
            requests_done: 0,
            since_eval: 0,
            verdict: Verdict::None,
            work_cur: 0,
            work_prev: 0,
        }
    }

    fn backlog(&self, now: u64) -> u64 {
        self.busy_until.saturating_sub(now)
    }

    /// Drop an open request that can no longer end normally.
    fn expire(&mut self, now: u64, cfg: &SchedConfig) {
        let Some(b) = self.req_begin else { return };
        let too_old = now.saturating_sub(b) >= MAX_REQUEST_NS;
        let abandoned = !self.explicit
            && !self.sync_outstanding
            && self
                .last_activity
                .is_some_and(|la| now.saturating_sub(la) >= cfg.request_idle_gap_ns);
        if too_old || abandoned {
            self.req_begin = None;
        }
    }

    /// When [`Client::expire`] would drop the open request (if nothing happens).
    fn expiry_time(&self, cfg: &SchedConfig) -> Option<u64> {
        let b = self.req_begin?;
        let cap = b.saturating_add(MAX_REQUEST_NS);
        if !self.explicit && !self.sync_outstanding {
            let la = self.last_activity.unwrap_or(b);
            Some(cap.min(la.saturating_add(cfg.request_idle_gap_ns)))
        } else {
            Some(cap)
        }
    }

    /// An inference client keeps its GPU "active" while a request is open,
    /// during the hold after one ended or after its last launch, and while
    /// its own estimated work is queued.
    fn inference_active(&self, now: u64, cfg: &SchedConfig) -> bool {
        self.class == Class::Inference
            && (self.req_begin.is_some()
                || now < self.hold_until
                || now < self.launch_hold_until(cfg)
                || self.busy_until > now)
    }

    /// The end of the hold after the last launch (0: no launch yet).
    fn launch_hold_until(&self, cfg: &SchedConfig) -> u64 {
        self.last_launch
            .map_or(0, |t| t.saturating_add(cfg.request_hold_ns))
    }

    /// Emit the mark interval this client should have (training clients:
    /// `every`; inference clients and everyone while disabled: 0) if it
    /// differs from the one last emitted.
    fn update_marks(&mut self, id: ClientId, enabled: bool, every: u64, out: &mut Vec<Output>) {
        let want = if enabled && self.class == Class::Training {
            every
        } else {
            0
        };
        if want != self.mark_every_ns {
            self.mark_every_ns = want;
            out.push(Output::Marks {
                client: id,
                every_ns: want,
            });
        }
    }

    /// When [`Client::inference_active`] turns false if nothing happens.
    fn active_until(&self, cfg: &SchedConfig) -> u64 {
        let req = self.expiry_time(cfg).unwrap_or(0);
        req.max(self.hold_until)
            .max(self.busy_until)
            .max(self.launch_hold_until(cfg))
    }
}

#[derive(Clone, Debug)]
struct Gpu {
    /// Clients on this GPU, ascending ids.
    members: Vec<ClientId>,
    active_budget_ns: u64,
    inference_active: bool,
    n_training: u32,
    window_start: u64,
    work_cur: u64,
    work_prev: u64,
    train_cur: u64,
    train_prev: u64,
}

/// The scheduling policy core: events in, gate changes out, time injected.
/// See the [module docs](super).
#[derive(Clone, Debug)]
pub struct Scheduler {
    cfg: SchedConfig,
    knobs: Knobs,
    clients: BTreeMap<ClientId, Client>,
    gpus: BTreeMap<u64, Gpu>,
    /// High-water mark of the times given to `handle`/`tick`.
    now: u64,
    /// Scratch for quantiles (capacity `LATENCY_WINDOW`, never grows).
    scratch: Vec<u64>,
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

    /// When the scheduler next wants a tick, as [`Scheduler::tick`] returns
    /// it; also valid right after [`Scheduler::handle`]. `None`: nothing
    /// changes with time alone.
    #[must_use]
    pub fn next_tick(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut want = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for (gid, g) in &self.gpus {
            let members = || g.members.iter().filter_map(|id| self.clients.get(id));
            if members().all(|c| c.gate_open) {
                continue;
            }
            let budget = self.effective_budget(*gid, g, self.now);
            if budget > 0 {
                for c in members().filter(|c| !c.gate_open) {
                    // backlog(t) < budget  <=>  t > busy_until - budget
                    want(c.busy_until.saturating_sub(budget).saturating_add(1));
                }
            }
            if g.inference_active {
                // The budget grows back to the idle one when the last
                // inference client turns inactive.
                if let Some(t) = members()
                    .filter(|c| c.class == Class::Inference)
                    .map(|c| c.active_until(&self.cfg))
                    .max()
                {
                    want(t);
                }
            }
            if self.knobs.block_while_inference_queued {
                if let Some(t) = members()
                    .filter(|c| c.class == Class::Inference && c.busy_until > self.now)
                    .map(|c| c.busy_until)
                    .max()
                {
                    want(t);
                }
            }
        }
        next.map(|t| t.max(self.now.saturating_add(1)))
    }

    /// The current estimate of one launch of `func_id` by `client` (ns), or
    /// `None` for an unknown client.
    #[must_use]
    pub fn kernel_estimate(&self, client: ClientId, func_id: u64) -> Option<u64> {
        self.clients
            .get(&client)
            .map(|c| c.kernels.estimate(func_id, self.cfg.default_kernel_ns))
    }

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

    // ---- internals ----

    fn advance(&mut self, now_ns: u64) -> u64 {
        self.now = self.now.max(now_ns);
        self.now
    }

    fn register(
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

    fn join_gpu(&mut self, id: ClientId, gpu: u64, now: u64) {
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

    fn leave_gpu(&mut self, id: ClientId, gpu: u64) {
        if let Some(g) = self.gpus.get_mut(&gpu) {
            if let Ok(pos) = g.members.binary_search(&id) {
                g.members.remove(pos);
            }
            if g.members.is_empty() {
                self.gpus.remove(&gpu);
            }
        }
    }

    fn launch(
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

    fn sync_end(&mut self, now: u64, id: ClientId, ts_ns: u64, out: &mut Vec<Output>) {
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
    fn mark_done(&mut self, now: u64, id: ClientId, seq: u64, ts_ns: u64, out: &mut Vec<Output>) {
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

    /// A request of `id` completed at `end` after `lat` ns: statistics, hold,
    /// and the SLO loop.
    fn finish_request(&mut self, id: ClientId, lat: u64, end: u64) {
        let hold = self.cfg.request_hold_ns;
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        c.latencies.push(lat);
        c.histogram.record(lat);
        c.requests_done += 1;
        c.hold_until = c.hold_until.max(end.saturating_add(hold));
        let Some(target) = c.slo_p99_ns else { return };
        if c.class != Class::Inference {
            return;
        }
        c.since_eval += 1;
        if c.since_eval < SLO_EVAL_EVERY {
            return;
        }
        c.since_eval = 0;
        c.latencies.last_into(SLO_EVAL_EVERY, &mut self.scratch);
        let Some(p99) = quantile(&mut self.scratch, 0.99) else {
            return;
        };
        c.verdict = if p99 > target {
            Verdict::Above
        } else if (p99 as u128) * 10 < (target as u128) * 8 {
            Verdict::Below
        } else {
            Verdict::Within
        };
        let (verdict, gpu) = (c.verdict, c.gpu);
        let (lo, hi) = (self.cfg.min_active_budget_ns, self.cfg.max_active_budget_ns);
        let others_above = self.gpus.get(&gpu).is_some_and(|g| {
            g.members.iter().any(|m| {
                *m != id
                    && self
                        .clients
                        .get(m)
                        .is_some_and(|o| o.class == Class::Inference && o.verdict == Verdict::Above)
            })
        });
        if let Some(g) = self.gpus.get_mut(&gpu) {
            match verdict {
                Verdict::Above => {
                    g.active_budget_ns = (g.active_budget_ns / 10 * 7).max(lo);
                }
                Verdict::Below if !others_above => {
                    g.active_budget_ns = (g.active_budget_ns + (hi - lo) / 10).min(hi);
                }
                _ => {}
            }
        }
    }

    /// The budget each training client of `gid` gets now.
    fn client_budget(&self, _gid: u64, g: &Gpu) -> u64 {
        let total = if g.inference_active {
            g.active_budget_ns
        } else {
            self.cfg.idle_budget_ns
        };
        // At least 1 ns: a share that rounds down to 0 (a budget smaller than
        // the number of training clients) would keep a client with no backlog
        // closed for good. Only the block rule in effective_budget gives 0.
        match self.knobs.split {
            Split::Equal => (total / u64::from(g.n_training.max(1))).max(1),
            Split::Whole => total,
        }
    }

    /// [`Scheduler::client_budget`], or 0 while the variant that blocks
    /// training behind queued inference work applies.
    fn effective_budget(&self, gid: u64, g: &Gpu, now: u64) -> u64 {
        if self.knobs.block_while_inference_queued
            && g.members.iter().any(|id| {
                self.clients
                    .get(id)
                    .is_some_and(|c| c.class == Class::Inference && c.busy_until > now)
            })
        {
            0
        } else {
            self.client_budget(gid, g)
        }
    }

    fn eval_all(&mut self, now: u64, out: &mut Vec<Output>) {
        let mut cursor = self.gpus.keys().next().copied();
        while let Some(gid) = cursor {
            self.eval_gpu(gid, now, out);
            cursor = self
                .gpus
                .range((Bound::Excluded(gid), Bound::Unbounded))
                .next()
                .map(|(k, _)| *k);
        }
    }

    /// Recompute `gid`'s state at `now` and emit every gate change.
    /// The unknown GPU's training clients are held while inference runs on
    /// any GPU: after a change of the inference clients on `changed`,
    /// re-evaluate that group too.
    fn eval_unknown_gpu(&mut self, changed: u64, now: u64, out: &mut Vec<Output>) {
        if changed != 0 {
            self.eval_gpu(0, now, out);
        }
    }

    fn eval_gpu(&mut self, gid: u64, now: u64, out: &mut Vec<Output>) {
        let Some(g) = self.gpus.get_mut(&gid) else {
            return;
        };
        // Share windows.
        if now.saturating_sub(g.window_start) >= SHARE_WINDOW_NS {
            let two = now.saturating_sub(g.window_start) >= 2 * SHARE_WINDOW_NS;
            g.work_prev = if two { 0 } else { g.work_cur };
            g.train_prev = if two { 0 } else { g.train_cur };
            g.work_cur = 0;
            g.train_cur = 0;
            g.window_start = now;
            for id in &g.members {
                if let Some(c) = self.clients.get_mut(id) {
                    c.work_prev = if two { 0 } else { c.work_cur };
                    c.work_cur = 0;
                }
            }
        }
        let mut active = false;
        let mut n = 0u32;
        let mut n_inference = 0u32;
        for id in &g.members {
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            c.expire(now, &self.cfg);
            match c.class {
                Class::Training => n += 1,
                Class::Inference => {
                    n_inference += 1;
                    active |= c.inference_active(now, &self.cfg);
                }
            }
        }
        g.inference_active = active;
        g.n_training = n;
        let g = &self.gpus[&gid];
        let budget = self.effective_budget(gid, g, now);
        // The budget protects inference that may arrive; on a GPU with no
        // inference client there is nothing to protect, and a budget computed
        // from estimates (never corrected for a job that does not sync) would
        // only throttle training below what the GPU can do.
        let unguarded = n_inference == 0;
        // Except on the unknown GPU while inference runs anywhere: a training
        // job whose device report tandemd has not read yet may share a GPU
        // with it, and must not queue unbounded work there meanwhile.
        let inference_somewhere =
            gid == 0 && unguarded && self.clients.values().any(|c| c.class == Class::Inference);
        let default_ns = self.cfg.default_kernel_ns;
        let active_total = g.active_budget_ns;
        for id in &g.members {
            let Some(c) = self.clients.get_mut(id) else {
                continue;
            };
            let unknown_yet =
                inference_somewhere && now.saturating_sub(c.since) < UNKNOWN_GPU_GRACE_NS;
            let held_open =
                !self.cfg.enabled || (unguarded && !unknown_yet) || c.class == Class::Inference;
            let allowance = if held_open {
                Allowance::Unlimited
            } else {
                match allowance_for(budget, c.backlog(now), c.kernels.mean_launch_ns(default_ns)) {
                    // Unmeasured estimates are a guess: one launch at a time.
                    Allowance::Launches(n) if !c.kernels.measured() => {
                        Allowance::Launches(n.min(1))
                    }
                    a => a,
                }
            };
            let open = held_open || c.backlog(now) < budget;
            debug_assert_eq!(open, allowance != Allowance::Launches(0));
            // The shim sees its work complete only through completion marks:
            // without them no local bound (it could only wait out its bound).
            let local = (!held_open && self.cfg.mark_every_ns != 0).then(|| {
                local_budget(
                    &self.cfg,
                    active_total,
                    n.max(1),
                    c.kernels.measured(),
                    c.kernels.mean_launch_ns(default_ns),
                )
            });
            if budget_changed(c.budget, local) {
                c.budget = local;
                out.push(Output::Budget {
                    client: *id,
                    budget: local,
                });
            }
            // The limit first: a gate that opens finds its allowance in place.
            if allowance != c.allowance {
                c.allowance = allowance;
                out.push(Output::Limit {
                    client: *id,
                    beyond: allowance,
                });
            }
            if open != c.gate_open {
                c.gate_open = open;
                out.push(Output::Gate { client: *id, open });
            }
        }
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

/// Whether `new` differs from the bound last emitted enough to emit it:
/// any budget or hold change, or the default estimate moving by an eighth.
fn budget_changed(old: Option<LocalBudget>, new: Option<LocalBudget>) -> bool {
    match (old, new) {
        (Some(o), Some(n)) => {
            o.idle_ns != n.idle_ns
                || o.active_ns != n.active_ns
                || o.hold_ns != n.hold_ns
                || o.default_est_ns.abs_diff(n.default_est_ns) >= o.default_est_ns / 8
        }
        (o, n) => o != n,
    }
}

/// The local in-flight bound of one of `n` training clients on a GPU whose
/// active budget is `active_total_ns` (the SLO loop's), with launches
/// estimated at `mean_ns` on average (`measured`: a drain point has measured
/// some). Each gets its share of the idle and of the active budget (at least
/// 1 ns: then one launch at a time); until a measurement, one launch at a
/// time in both (a guess may not grant a burst).
#[must_use]
pub fn local_budget(
    cfg: &SchedConfig,
    active_total_ns: u64,
    n: u32,
    measured: bool,
    mean_ns: u64,
) -> LocalBudget {
    let share = |total: u64| (total / u64::from(n.max(1))).max(1);
    let (idle_ns, active_ns) = if measured {
        (share(cfg.idle_budget_ns), share(active_total_ns))
    } else {
        (1, 1)
    };
    LocalBudget {
        idle_ns,
        active_ns,
        default_est_ns: mean_ns,
        hold_ns: cfg.request_hold_ns,
    }
}

/// The launch allowance of a gated training client with `backlog_ns` of work
/// queued under a budget of `budget_ns`, one launch estimated at `mean_ns`:
/// `ceil((budget - backlog) / mean)`, so 0 exactly when the backlog has
/// reached the budget (the gate is closed), and the launches allowed add up
/// to less than one mean launch beyond the budget.
#[must_use]
pub fn allowance_for(budget_ns: u64, backlog_ns: u64, mean_ns: u64) -> Allowance {
    Allowance::Launches(
        budget_ns
            .saturating_sub(backlog_ns)
            .div_ceil(mean_ns.max(1)),
    )
}
