//! Unit tests: one rule each, in files named for the modules they cover;
//! this file holds the harness they share.

use crate::*;

mod budget;
mod config;
mod gates;
mod learning;
mod local;
mod requests;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
/// Times start well above 0 so "idle since boot" is a long gap.
const T0: u64 = 1_000 * MS;

struct H {
    s: Scheduler,
    out: Vec<Output>,
    /// Every `Output::Limit` emitted so far (the gate tests see only gates).
    limits: Vec<Output>,
    /// Every `Output::Marks` emitted so far.
    marks: Vec<Output>,
    /// Every `Output::Budget` and `Output::Estimate` emitted so far.
    locals: Vec<Output>,
}

impl H {
    fn new(cfg: SchedConfig) -> H {
        H {
            s: Scheduler::new(cfg),
            out: Vec::new(),
            limits: Vec::new(),
            marks: Vec::new(),
            locals: Vec::new(),
        }
    }
    fn default() -> H {
        H::new(SchedConfig::default())
    }
    /// The contract's rule as written: no blocking behind queued inference work.
    fn v1() -> H {
        H::v1_with(SchedConfig::default())
    }
    /// [`H::v1`] with `cfg`.
    fn v1_with(cfg: SchedConfig) -> H {
        H {
            s: Scheduler::with_knobs(
                cfg,
                scheduler::Knobs {
                    block_while_inference_queued: false,
                    ..scheduler::Knobs::default()
                },
            ),
            out: Vec::new(),
            limits: Vec::new(),
            marks: Vec::new(),
            locals: Vec::new(),
        }
    }
    /// The gate changes since the last call; limit changes go to `limits`,
    /// mark intervals to `marks`.
    fn take(&mut self) -> Vec<Output> {
        let mut gates = Vec::new();
        for o in std::mem::take(&mut self.out) {
            match o {
                Output::Gate { .. } => gates.push(o),
                Output::Limit { .. } => self.limits.push(o),
                Output::Marks { .. } => self.marks.push(o),
                Output::Budget { .. } | Output::Estimate { .. } => self.locals.push(o),
            }
        }
        gates
    }
    fn input(&mut self, now: u64, i: Input) -> Vec<Output> {
        self.s.handle(now, i, &mut self.out);
        self.take()
    }
    fn reg(&mut self, now: u64, client: ClientId, class: Class, gpu: u64) -> Vec<Output> {
        self.input(
            now,
            Input::Register {
                client,
                class,
                gpu,
                slo_p99_ns: None,
            },
        )
    }
    fn launch(&mut self, now: u64, client: ClientId, func_id: u64) -> Vec<Output> {
        self.input(
            now,
            Input::Launch {
                client,
                func_id,
                ts_ns: now,
            },
        )
    }
    fn sync(&mut self, begin: u64, end: u64, client: ClientId) -> Vec<Output> {
        let mut o = self.input(
            begin,
            Input::SyncBegin {
                client,
                ts_ns: begin,
            },
        );
        o.extend(self.input(end, Input::SyncEnd { client, ts_ns: end }));
        o
    }
    fn mark(&mut self, now: u64, client: ClientId, seq: u64) -> Vec<Output> {
        self.input(
            now,
            Input::Mark {
                client,
                seq,
                ts_ns: now,
            },
        )
    }
    fn mark_done(&mut self, now: u64, client: ClientId, seq: u64) -> Vec<Output> {
        self.input(
            now,
            Input::MarkDone {
                client,
                seq,
                ts_ns: now,
            },
        )
    }
    fn tick(&mut self, now: u64) -> (Vec<Output>, Option<u64>) {
        let next = self.s.tick(now, &mut self.out);
        (self.take(), next)
    }
    fn client(&self, id: ClientId) -> ClientSnapshot {
        self.s
            .snapshot()
            .clients
            .into_iter()
            .find(|c| c.client == id)
            .expect("client tracked")
    }
    fn gpu(&self, id: u64) -> GpuSnapshot {
        self.s
            .snapshot()
            .gpus
            .into_iter()
            .find(|g| g.gpu == id)
            .expect("gpu tracked")
    }
}

fn gate(client: ClientId, open: bool) -> Output {
    Output::Gate { client, open }
}

/// Launch kernel `f` (never measured: 50 us) on `client` at `now` until its
/// gate closes; returns how many launches that took.
fn fill(h: &mut H, now: u64, client: ClientId) -> u32 {
    for n in 1..10_000 {
        let o = h.launch(now, client, 99);
        if o.contains(&gate(client, false)) {
            return n;
        }
    }
    panic!("gate never closed");
}

/// Complete `n` implicit requests of `lat` ns each on inference client 2,
/// starting at `t`; returns the time after them.
fn requests(h: &mut H, mut t: u64, n: usize, lat: u64) -> u64 {
    for _ in 0..n {
        h.launch(t, 2, 1);
        h.sync(t + US, t + lat, 2);
        t += lat + 10 * MS;
    }
    t
}
