//! The scheduler's state of one client: its class and GPU, its estimated
//! backlog (`busy_until`), its kernel estimates, its open request and the
//! latencies of its finished ones, and what was last emitted for it.

use crate::config::SchedConfig;
use crate::estimate::{KernelTable, LatencyWindow};
use crate::input::{Class, ClientId};
use crate::output::{Allowance, LocalBudget, Output};

/// An open request older than this is dropped (not counted), so a lost
/// `RequestEnd` or `SyncEnd` cannot hold training back for ever.
pub const MAX_REQUEST_NS: u64 = 10_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    None,
    Above,
    Within,
    Below,
}

#[derive(Clone, Debug)]
pub(crate) struct Client {
    pub(crate) class: Class,
    pub(crate) gpu: u64,
    /// When it registered (first `Register`).
    pub(crate) since: u64,
    pub(crate) slo_p99_ns: Option<u64>,
    pub(crate) gate_open: bool,
    /// Launch allowance as last emitted.
    pub(crate) allowance: Allowance,
    /// Local in-flight bound as last emitted (`None`: none, as a fresh
    /// control block holds).
    pub(crate) budget: Option<LocalBudget>,
    /// Last launch (inference activity: active until `request_hold_ns`
    /// after it).
    pub(crate) last_launch: Option<u64>,
    /// Estimated time at which all work launched so far has drained.
    pub(crate) busy_until: u64,
    /// Last timestamp seen from this client (its records are in order).
    pub(crate) last_ts: u64,
    /// Last launch or sync (the idle-gap rule).
    pub(crate) last_activity: Option<u64>,
    /// Last drain point (SyncEnd, or a MarkDone that covered launches).
    pub(crate) last_drain: u64,
    pub(crate) kernels: KernelTable,
    /// The mark interval last emitted (`Output::Marks`; a fresh control
    /// block holds 0).
    pub(crate) mark_every_ns: u64,
    /// MarkDone inputs that measured something.
    pub(crate) marks_measured: u64,
    /// Explicit request boundaries seen: no implicit detection from then on.
    pub(crate) explicit: bool,
    /// Begin of the open request.
    pub(crate) req_begin: Option<u64>,
    pub(crate) sync_outstanding: bool,
    pub(crate) hold_until: u64,
    pub(crate) latencies: LatencyWindow,
    pub(crate) histogram: crate::histogram::LatencyHistogram,
    pub(crate) requests_done: u64,
    pub(crate) since_eval: usize,
    pub(crate) verdict: Verdict,
    pub(crate) work_cur: u64,
    pub(crate) work_prev: u64,
}

impl Client {
    pub(crate) fn new(class: Class, gpu: u64, slo_p99_ns: Option<u64>, since: u64) -> Client {
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
            histogram: crate::histogram::LatencyHistogram::default(),
            requests_done: 0,
            since_eval: 0,
            verdict: Verdict::None,
            work_cur: 0,
            work_prev: 0,
        }
    }

    pub(crate) fn backlog(&self, now: u64) -> u64 {
        self.busy_until.saturating_sub(now)
    }

    /// Drop an open request that can no longer end normally.
    pub(crate) fn expire(&mut self, now: u64, cfg: &SchedConfig) {
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
    pub(crate) fn expiry_time(&self, cfg: &SchedConfig) -> Option<u64> {
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
    pub(crate) fn inference_active(&self, now: u64, cfg: &SchedConfig) -> bool {
        self.class == Class::Inference
            && (self.req_begin.is_some()
                || now < self.hold_until
                || now < self.launch_hold_until(cfg)
                || self.busy_until > now)
    }

    /// The end of the hold after the last launch (0: no launch yet).
    pub(crate) fn launch_hold_until(&self, cfg: &SchedConfig) -> u64 {
        self.last_launch
            .map_or(0, |t| t.saturating_add(cfg.request_hold_ns))
    }

    /// Emit the mark interval this client should have (training clients:
    /// `every`; inference clients and everyone while disabled: 0) if it
    /// differs from the one last emitted.
    pub(crate) fn update_marks(
        &mut self,
        id: ClientId,
        enabled: bool,
        every: u64,
        out: &mut Vec<Output>,
    ) {
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
    pub(crate) fn active_until(&self, cfg: &SchedConfig) -> u64 {
        let req = self.expiry_time(cfg).unwrap_or(0);
        req.max(self.hold_until)
            .max(self.busy_until)
            .max(self.launch_hold_until(cfg))
    }
}
