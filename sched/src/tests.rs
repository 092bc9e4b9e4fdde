//! Unit tests: one rule each.

use super::*;

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

// ---- configuration ----

#[test]
fn defaults_are_the_documented_ones_and_valid() {
    let c = SchedConfig::default();
    assert!(c.enabled);
    assert_eq!(c.idle_budget_ns, 4 * MS);
    assert_eq!(c.active_budget_ns, 500 * US);
    assert_eq!(
        (c.min_active_budget_ns, c.max_active_budget_ns),
        (100 * US, 4 * MS)
    );
    assert_eq!(c.request_idle_gap_ns, 2 * MS);
    assert_eq!(c.request_hold_ns, MS);
    assert_eq!(c.default_kernel_ns, 50 * US);
    assert_eq!(c.mark_every_ns, 500 * US);
    assert_eq!(c.validate(), Ok(()));
}

#[test]
fn validate_names_the_bad_field() {
    let bad = |f: fn(&mut SchedConfig)| {
        let mut c = SchedConfig::default();
        f(&mut c);
        c.validate().unwrap_err()
    };
    assert_eq!(bad(|c| c.idle_budget_ns = 0).field, "idle_budget_ns");
    assert_eq!(bad(|c| c.default_kernel_ns = 0).field, "default_kernel_ns");
    assert_eq!(
        bad(|c| c.request_idle_gap_ns = MAX_PARAM_NS + 1).field,
        "request_idle_gap_ns"
    );
    assert_eq!(
        bad(|c| c.active_budget_ns = 50 * US).field,
        "active_budget_ns"
    );
    let e = bad(|c| c.min_active_budget_ns = 5 * MS);
    assert_eq!(e.field, "min_active_budget_ns");
    assert!(
        e.to_string()
            .starts_with("scheduler.min_active_budget_ns: "),
        "{e}"
    );
    // A hold of 0 is allowed (no hold).
    let c = SchedConfig {
        request_hold_ns: 0,
        ..SchedConfig::default()
    };
    assert_eq!(c.validate(), Ok(()));
    let small_idle = SchedConfig {
        idle_budget_ns: 1,
        ..SchedConfig::default()
    };
    assert_eq!(
        small_idle.validate().unwrap_err().field,
        "idle_budget_ns",
        "idle room smaller than the largest active room"
    );
    // Marks: 0 (none) or MIN_MARK_EVERY_NS..=MAX_PARAM_NS.
    for ok in [0, MIN_MARK_EVERY_NS, MAX_PARAM_NS] {
        let c = SchedConfig {
            mark_every_ns: ok,
            ..SchedConfig::default()
        };
        assert_eq!(c.validate(), Ok(()), "{ok}");
    }
    for no in [1, MIN_MARK_EVERY_NS - 1, MAX_PARAM_NS + 1] {
        let c = SchedConfig {
            mark_every_ns: no,
            ..SchedConfig::default()
        };
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "mark_every_ns", "{no}");
        assert!(e.problem.contains("use 0"), "{e}");
    }
}

#[test]
fn config_embeds_as_a_toml_table_with_defaults_and_rejects_unknown_keys() {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        scheduler: SchedConfig,
    }
    let f: File = toml::from_str("[scheduler]\nidle_budget_ns = 1000000\n").unwrap();
    assert_eq!(f.scheduler.idle_budget_ns, MS);
    assert_eq!(f.scheduler.active_budget_ns, 500 * US);
    let f: File = toml::from_str("").unwrap();
    assert_eq!(f.scheduler, SchedConfig::default());
    let e = toml::from_str::<File>("[scheduler]\nidle_budget = 1\n")
        .err()
        .expect("unknown key rejected");
    assert!(e.to_string().contains("idle_budget"), "{e}");
}

// ---- backlog and learning ----

#[test]
fn backlog_adds_estimates_after_the_later_of_now_and_busy_until() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 7);
    // Three launches at once: 3 x 50 us queued.
    h.launch(T0, 1, 10);
    h.launch(T0, 1, 10);
    h.launch(T0, 1, 10);
    assert_eq!(h.client(1).backlog_ns, 150 * US);
    // 100 us later: 50 us left; a launch adds after busy_until.
    h.launch(T0 + 100 * US, 1, 10);
    assert_eq!(h.client(1).backlog_ns, 100 * US);
    // After it drained, a launch starts from now.
    h.launch(T0 + MS, 1, 10);
    assert_eq!(h.client(1).backlog_ns, 50 * US);
    // A sync that ended earlier than predicted clamps busy_until.
    h.launch(T0 + MS + 10 * US, 1, 10);
    h.sync(T0 + MS + 20 * US, T0 + MS + 30 * US, 1);
    assert_eq!(h.client(1).backlog_ns, 0);
}

#[test]
fn sync_end_teaches_kernel_durations() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    // 4 launches of kernel 5 took 2 ms from the first launch to the drain.
    for i in 0..4 {
        h.launch(T0 + i * US, 1, 5);
    }
    h.sync(T0 + 5 * US, T0 + 2 * MS, 1);
    assert_eq!(h.s.kernel_estimate(1, 5), Some(500 * US));
    // Unknown kernels still use the default.
    assert_eq!(h.s.kernel_estimate(1, 6), Some(50 * US));
    // The next interval starts at the first launch after the drain, not at the
    // drain: a CPU pause before it is not counted.
    let t = T0 + 10 * MS;
    h.launch(t, 1, 5);
    h.launch(t, 1, 6);
    // 500 us + 50 us estimated took 1.1 ms: both doubled, EWMA for 5 (3/4 old).
    h.sync(t + US, t + 1_100 * US, 1);
    assert_eq!(
        h.s.kernel_estimate(1, 5),
        Some((3 * 500 * US + 1000 * US) / 4)
    );
    assert_eq!(h.s.kernel_estimate(1, 6), Some(100 * US));
}

#[test]
fn graph_launches_count_their_kernels() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.input(
        T0,
        Input::GraphLaunch {
            client: 1,
            kernels: 10,
            ts_ns: T0,
        },
    );
    assert_eq!(h.client(1).backlog_ns, 500 * US);
    h.sync(T0 + US, T0 + 3 * MS, 1);
    assert_eq!(h.s.kernel_estimate(1, GRAPH_FUNC), Some(300 * US));
    // An unknown kernel count counts as one.
    h.input(
        T0 + 10 * MS,
        Input::GraphLaunch {
            client: 1,
            kernels: 0,
            ts_ns: T0 + 10 * MS,
        },
    );
    assert_eq!(h.client(1).backlog_ns, 300 * US);
}

// ---- requests ----

#[test]
fn an_idle_gap_begins_a_request_and_the_next_sync_ends_it() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.launch(T0, 1, 1);
    assert!(h.client(1).request_active);
    h.launch(T0 + 10 * US, 1, 2);
    h.sync(T0 + 20 * US, T0 + 700 * US, 1);
    let c = h.client(1);
    assert!(!c.request_active);
    assert_eq!(c.requests, 1);
    assert_eq!(c.p50_ns, Some(700 * US));
    // A launch 1 ms after the sync (< 2 ms gap) is no new request...
    h.launch(T0 + 1_700 * US, 1, 1);
    assert!(!h.client(1).request_active);
    h.sync(T0 + 1_710 * US, T0 + 1_800 * US, 1);
    assert_eq!(h.client(1).requests, 1);
    // ... one 2 ms after the last activity is.
    h.launch(T0 + 3_800 * US, 1, 1);
    assert!(h.client(1).request_active);
    h.sync(T0 + 3_810 * US, T0 + 4_000 * US, 1);
    let c = h.client(1);
    assert_eq!(c.requests, 2);
    assert_eq!(c.p99_ns, Some(700 * US));
    assert_eq!(c.p50_ns, Some(200 * US));
}

#[test]
fn a_sync_counts_as_activity_for_the_gap() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.launch(T0, 1, 1);
    h.sync(T0 + US, T0 + 100 * US, 1);
    // A long sync with no launches (e.g. of a copy) keeps the client busy.
    h.sync(T0 + 1_500 * US, T0 + 3 * MS, 1);
    h.launch(T0 + 4 * MS, 1, 1);
    assert!(!h.client(1).request_active, "1 ms after a sync is not idle");
}

#[test]
fn explicit_boundaries_define_requests_and_turn_off_detection() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.input(
        T0,
        Input::RequestBegin {
            client: 1,
            ts_ns: T0,
        },
    );
    assert!(h.client(1).request_active);
    h.launch(T0 + 100 * US, 1, 1);
    // Syncs inside an explicit request do not end it.
    h.sync(T0 + 200 * US, T0 + 300 * US, 1);
    assert!(h.client(1).request_active);
    h.launch(T0 + 400 * US, 1, 1);
    h.sync(T0 + 500 * US, T0 + 600 * US, 1);
    h.input(
        T0 + 900 * US,
        Input::RequestEnd {
            client: 1,
            ts_ns: T0 + 900 * US,
        },
    );
    let c = h.client(1);
    assert_eq!(
        (c.requests, c.p50_ns, c.request_active),
        (1, Some(900 * US), false)
    );
    // A launch after a long gap no longer begins a request by itself.
    h.launch(T0 + 100 * MS, 1, 1);
    assert!(!h.client(1).request_active);
}

#[test]
fn an_abandoned_request_is_dropped_uncounted() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 0);
    h.reg(T0, 2, Class::Training, 0);
    h.launch(T0, 1, 1);
    assert!(h.gpu(0).inference_active);
    // No sync ever comes; after the idle gap the request is gone.
    h.tick(T0 + 2 * MS);
    let c = h.client(1);
    assert!(!c.request_active);
    assert_eq!(c.requests, 0);
    assert!(!h.gpu(0).inference_active);
    // With a sync outstanding it stays open (the GPU may still be working)...
    h.launch(T0 + 10 * MS, 1, 1);
    h.input(
        T0 + 10 * MS,
        Input::SyncBegin {
            client: 1,
            ts_ns: T0 + 10 * MS,
        },
    );
    h.tick(T0 + 100 * MS);
    assert!(h.client(1).request_active);
    // ... but not for ever.
    h.tick(T0 + 10 * MS + MAX_REQUEST_NS);
    assert!(!h.client(1).request_active);
}

// ---- gates ----

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

#[test]
fn training_alone_on_a_gpu_is_never_gated() {
    // No inference client on the GPU: nothing to protect, whatever the backlog
    // estimate says (a job that never syncs never corrects its estimates).
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    for _ in 0..1000 {
        assert!(h.launch(T0, 1, 99).is_empty(), "training alone was gated");
    }
    assert!(h.client(1).gate_open);
    assert!(
        h.client(1).backlog_ns > 4 * MS,
        "the backlog is still estimated"
    );
    // An inference client arriving on that GPU brings the budget back at once.
    assert_eq!(h.reg(T0, 2, Class::Inference, 0), vec![gate(1, false)]);
}

#[test]
fn one_training_client_keeps_the_idle_budget_queued_and_reopens_on_tick() {
    let mut h = H::default();
    // An idle inference client on the GPU: the idle budget applies.
    h.reg(T0, 9, Class::Inference, 0);
    assert!(
        h.reg(T0, 1, Class::Training, 0).is_empty(),
        "new gates start open"
    );
    // 4 ms / 50 us = 80 launches fill the idle budget.
    assert_eq!(fill(&mut h, T0, 1), 80);
    assert!(!h.client(1).gate_open);
    // The gate reopens once the backlog is under 4 ms: 1 ns later.
    let (o, next) = h.tick(T0);
    assert!(o.is_empty());
    assert_eq!(next, Some(T0 + 1));
    let (o, next) = h.tick(T0 + 1);
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(next, None, "no gate closed, no tick wanted");
}

#[test]
fn an_active_request_shrinks_the_budget_and_its_end_restores_it() {
    // The hold this test's times were written for (the default is 1 ms).
    let mut h = H::v1_with(SchedConfig {
        request_hold_ns: 200 * US,
        ..SchedConfig::default()
    });
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    // 1 ms of training queued: under the idle budget.
    for _ in 0..20 {
        assert!(h.launch(T0, 1, 99).is_empty());
    }
    // An inference request begins: 1 ms >= 500 us, training's gate closes.
    assert_eq!(h.launch(T0, 2, 5), vec![gate(1, false)]);
    assert!(h.gpu(0).inference_active);
    assert_eq!(h.gpu(0).training_budget_ns, 500 * US);
    // The gate opens when the backlog falls under 500 us: at T0 + 500 us + 1.
    let (o, next) = h.tick(T0 + 400 * US);
    assert!(o.is_empty());
    assert_eq!(next, Some(T0 + 500 * US + 1));
    let (o, _) = h.tick(T0 + 500 * US + 1);
    assert_eq!(o, vec![gate(1, true)]);
    // Training refills to the active budget only.
    let t = T0 + 500 * US + 1;
    assert_eq!(h.launch(t, 1, 99), vec![gate(1, false)]);
    // The request ends; during the hold the budget stays small.
    // 550 - 100 = 450 us of backlog is under 500: open again; refill.
    let o = h.sync(t + US, t + 100 * US, 2);
    assert_eq!(o, vec![gate(1, true)]);
    assert!(h.gpu(0).inference_active);
    let t2 = t + 100 * US;
    assert_eq!(fill(&mut h, t2, 1), 2);
    // The backlog falls under the active budget 50 us later: that is the tick.
    let (_, next) = h.tick(t2);
    assert_eq!(next, Some(t2 + 50 * US));
    let (o, _) = h.tick(t2 + 50 * US);
    assert_eq!(o, vec![gate(1, true)]);
    fill(&mut h, t2 + 50 * US, 1);
    // Whatever tick comes first, by the end of the hold (200 us after the
    // sync) the idle budget applies again.
    let (_, next) = h.tick(t2 + 50 * US);
    assert!(next.is_some_and(|n| n <= t2 + 200 * US));
    let (o, _) = h.tick(t2 + 200 * US);
    assert_eq!(o, vec![gate(1, true)]);
    assert!(!h.gpu(0).inference_active);
}

#[test]
fn training_waits_while_inference_work_is_queued() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    // Nothing of training's queued, but inference's 2 x 50 us are: training
    // waits for them, whatever its budget.
    assert_eq!(h.launch(T0, 2, 1), vec![gate(1, false)]);
    h.launch(T0 + 10 * US, 2, 1);
    assert_eq!(h.gpu(0).training_budget_ns, 0);
    let (o, next) = h.tick(T0 + 50 * US);
    assert!(o.is_empty());
    assert_eq!(next, Some(T0 + 100 * US));
    // Inference's work has (by estimate) drained; the request is still open
    // (no sync yet): the active budget applies.
    let (o, _) = h.tick(T0 + 100 * US);
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(h.gpu(0).training_budget_ns, 500 * US);
    assert!(h.gpu(0).inference_active);
}

#[test]
fn several_training_clients_split_the_budget() {
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Training, 0);
    assert_eq!(h.gpu(0).training_budget_ns, 2 * MS);
    assert_eq!(fill(&mut h, T0, 1), 40);
    assert_eq!(fill(&mut h, T0, 2), 40);
    // A third client shrinks both shares at once (1.33 ms each).
    let o = h.reg(T0, 3, Class::Training, 0);
    assert!(o.is_empty(), "already closed: no change to report: {o:?}");
    assert_eq!(h.gpu(0).training_budget_ns, 4 * MS / 3);
    // Client 3's own backlog is 0: open; client 1 reopens when under 1.33 ms.
    let (_, next) = h.tick(T0);
    assert_eq!(next, Some(T0 + 2 * MS - 4 * MS / 3 + 1));
    // The departure of two of them gives the last the whole budget.
    assert!(h.input(T0, Input::Depart { client: 3 }).is_empty());
    let o = h.input(T0, Input::Depart { client: 2 });
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(h.gpu(0).training_budget_ns, 4 * MS);
}

#[test]
fn gpus_are_independent() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0xA);
    h.reg(T0, 2, Class::Training, 0xB);
    h.reg(T0, 3, Class::Inference, 0xA);
    h.reg(T0, 4, Class::Inference, 0xB);
    for _ in 0..20 {
        h.launch(T0, 1, 99);
        h.launch(T0, 2, 99);
    }
    // Inference on A closes A's training gate only; B keeps its whole budget.
    assert_eq!(h.launch(T0, 3, 1), vec![gate(1, false)]);
    assert!(!h.gpu(0xB).inference_active);
    assert_eq!(h.gpu(0xB).training_budget_ns, 4 * MS);
    assert_eq!(fill(&mut h, T0, 2), 60);
}

#[test]
fn inference_gates_stay_open_and_set_class_moves_clients() {
    let mut h = H::v1();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Training, 0);
    fill(&mut h, T0, 1);
    // Promoted to inference: the gate opens at once, and the other training
    // client now has the budget alone.
    let o = h.input(
        T0,
        Input::SetClass {
            client: 1,
            class: Class::Inference,
        },
    );
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(h.gpu(0).training_clients, 1);
    // Its queued work is inference work: the GPU is active.
    assert!(h.gpu(0).inference_active);
    for _ in 0..100 {
        assert!(h.launch(T0, 1, 99).is_empty(), "inference is never gated");
    }
    // Demoted back: its 7 ms backlog closes its gate.
    let o = h.input(
        T0,
        Input::SetClass {
            client: 1,
            class: Class::Training,
        },
    );
    assert_eq!(o, vec![gate(1, false)]);
}

#[test]
fn depart_reopens_the_others_and_emits_nothing_for_the_departed() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Training, 0);
    h.reg(T0, 3, Class::Inference, 0);
    fill(&mut h, T0, 1);
    fill(&mut h, T0, 2);
    h.launch(T0, 3, 1);
    // The last inference client leaves: nothing left to protect, both reopen.
    let o = h.input(T0, Input::Depart { client: 3 });
    assert_eq!(o, vec![gate(1, true), gate(2, true)]);
    // Client 2 leaves: client 1 is already open, nothing to report.
    assert!(h.input(T0, Input::Depart { client: 2 }).is_empty());
    assert!(h.s.snapshot().clients.iter().all(|c| c.client == 1));
    // Inputs for departed or unknown clients are ignored.
    assert!(h.launch(T0, 2, 1).is_empty());
    assert!(h.input(T0, Input::Depart { client: 42 }).is_empty());
}

#[test]
fn disabled_never_closes_a_gate_but_still_measures() {
    let mut h = H::new(SchedConfig {
        enabled: false,
        ..SchedConfig::default()
    });
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    h.launch(T0, 2, 1);
    for _ in 0..1000 {
        assert!(h.launch(T0, 1, 99).is_empty());
    }
    assert_eq!(h.client(1).backlog_ns, 50 * MS);
    h.sync(T0 + US, T0 + 300 * US, 2);
    assert_eq!(h.client(2).requests, 1);
    assert_eq!(h.tick(T0 + MS).1, None);
}

#[test]
fn clients_beyond_the_bound_are_not_tracked_and_never_gated() {
    let mut h = H::default();
    for id in 0..MAX_CLIENTS as u64 {
        h.reg(T0, id, Class::Inference, id % 64);
    }
    h.reg(T0, u64::MAX, Class::Training, 0);
    for _ in 0..1000 {
        assert!(h.launch(T0, u64::MAX, 1).is_empty());
    }
    assert_eq!(h.s.snapshot().clients.len(), MAX_CLIENTS);
}

// ---- SLO ----

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

fn slo_harness(target: u64) -> H {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.input(
        T0,
        Input::Register {
            client: 2,
            class: Class::Inference,
            gpu: 0,
            slo_p99_ns: Some(target),
        },
    );
    h
}

#[test]
fn slo_above_target_shrinks_the_active_budget_down_to_its_floor() {
    let mut h = slo_harness(MS);
    let mut t = T0;
    // 99 requests do not trigger an evaluation yet.
    t = requests(&mut h, t, SLO_EVAL_EVERY - 1, 2 * MS);
    assert_eq!(h.gpu(0).active_budget_ns, 500 * US);
    t = requests(&mut h, t, 1, 2 * MS);
    assert_eq!(h.gpu(0).active_budget_ns, 350 * US);
    for _ in 0..10 {
        t = requests(&mut h, t, SLO_EVAL_EVERY, 2 * MS);
    }
    assert_eq!(h.gpu(0).active_budget_ns, 100 * US);
    let c = h.client(2);
    assert_eq!((c.slo_p99_ns, c.p99_ns), (Some(MS), Some(2 * MS)));
}

#[test]
fn slo_well_below_target_grows_the_active_budget_up_to_its_ceiling() {
    let mut h = slo_harness(10 * MS);
    let mut t = T0;
    t = requests(&mut h, t, SLO_EVAL_EVERY, MS);
    // + 10 % of (4 ms - 100 us).
    assert_eq!(h.gpu(0).active_budget_ns, 500 * US + 390 * US);
    for _ in 0..20 {
        t = requests(&mut h, t, SLO_EVAL_EVERY, MS);
    }
    assert_eq!(h.gpu(0).active_budget_ns, 4 * MS);
    // Between 0.8 x target and the target: unchanged.
    let before = h.gpu(0).active_budget_ns;
    requests(&mut h, t, SLO_EVAL_EVERY, 9 * MS);
    assert_eq!(h.gpu(0).active_budget_ns, before);
}

#[test]
fn reconfigure_keeps_estimates_and_reevaluates() {
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    fill(&mut h, T0, 1);
    let mut out = Vec::new();
    h.s.reconfigure(
        SchedConfig {
            idle_budget_ns: 8 * MS,
            ..SchedConfig::default()
        },
        &mut out,
    );
    // The limit first (one launch: no sync has measured the client yet),
    // then the gate.
    let limit = Output::Limit {
        client: 1,
        beyond: Allowance::Launches(1),
    };
    assert_eq!(out, vec![limit, gate(1, true)]);
    h.s.reconfigure(
        SchedConfig {
            enabled: false,
            ..SchedConfig::default()
        },
        &mut out,
    );
    assert_eq!(h.s.config().idle_budget_ns, 4 * MS);
}

#[test]
fn shares_count_estimated_work_per_gpu() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    for _ in 0..3 {
        h.launch(T0, 1, 99);
    }
    h.launch(T0, 2, 1);
    let c1 = h.client(1);
    assert!((c1.work_share - 0.75).abs() < 1e-9, "{c1:?}");
    let c2 = h.client(2);
    assert!((c2.train_share - 0.75).abs() < 1e-9, "{c2:?}");
    assert!((h.gpu(0).training_share - 0.75).abs() < 1e-9);
}

/// The shares are of recent work: with no event since, a snapshot two share
/// windows later counts none of it (the training that ran before a job
/// turned inference is not "recent work" forever).
#[test]
fn shares_forget_work_older_than_two_windows_without_an_event() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    for _ in 0..3 {
        h.launch(T0, 1, 99);
    }
    let at = |t: u64| h.s.snapshot_at(t).gpus[0].training_share;
    assert!((at(T0) - 1.0).abs() < 1e-9);
    assert!(
        (at(T0 + SHARE_WINDOW_NS) - 1.0).abs() < 1e-9,
        "one window on: still recent"
    );
    assert_eq!(
        at(T0 + 2 * SHARE_WINDOW_NS),
        0.0,
        "two windows on: none recent"
    );
    assert_eq!(
        h.s.snapshot_at(T0 + 2 * SHARE_WINDOW_NS).clients[0].work_share,
        0.0
    );
}

// ---- launch limits ----

fn limit(client: ClientId, beyond: Allowance) -> Output {
    Output::Limit { client, beyond }
}

#[test]
fn allowance_is_the_room_in_mean_launches_rounded_up() {
    assert_eq!(allowance_for(4 * MS, 0, 50 * US), Allowance::Launches(80));
    assert_eq!(allowance_for(4 * MS, 1, 50 * US), Allowance::Launches(80));
    assert_eq!(
        allowance_for(4 * MS, 50 * US + 1, 50 * US),
        Allowance::Launches(79)
    );
    // Under one launch of room still allows one (the gate is open) ...
    assert_eq!(
        allowance_for(4 * MS, 4 * MS - 1, 5 * MS),
        Allowance::Launches(1)
    );
    // ... none at or over the budget (the gate is closed).
    assert_eq!(
        allowance_for(4 * MS, 4 * MS, 50 * US),
        Allowance::Launches(0)
    );
    assert_eq!(allowance_for(0, 0, 50 * US), Allowance::Launches(0));
    assert_eq!(allowance_for(4 * MS, 9 * MS, 0), Allowance::Launches(0));
}

#[test]
fn training_beside_inference_gets_an_allowance_that_shrinks_as_it_launches() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    assert!(
        h.limits.is_empty(),
        "alone on its GPU: unlimited, nothing emitted"
    );
    h.reg(T0, 9, Class::Inference, 0);
    // Nothing measured yet: one launch at a time.
    assert_eq!(h.limits, vec![limit(1, Allowance::Launches(1))]);
    assert_eq!(h.client(9).allowance, Allowance::Unlimited);
    assert!(h.launch(T0, 1, 99).is_empty());
    assert_eq!(h.client(1).allowance, Allowance::Launches(1));
    // A sync measures it at 50 us: the idle budget, 4 ms, is 80 launches.
    h.sync(T0, T0 + 50 * US, 1);
    assert_eq!(h.limits.last(), Some(&limit(1, Allowance::Launches(80))));
    let t = T0 + 50 * US;
    h.limits.clear();
    h.launch(t, 1, 99);
    assert_eq!(h.limits, vec![limit(1, Allowance::Launches(79))]);
    // Filling the budget takes the allowance to 0 exactly as the gate closes.
    assert_eq!(fill(&mut h, t, 1), 79);
    assert_eq!(h.client(1).allowance, Allowance::Launches(0));
    assert_eq!(h.limits.last(), Some(&limit(1, Allowance::Launches(0))));
    // Reopening grants again, limit before gate.
    h.limits.clear();
    h.s.tick(t + 1, &mut h.out);
    assert_eq!(
        std::mem::take(&mut h.out),
        vec![limit(1, Allowance::Launches(1)), gate(1, true)]
    );
}

#[test]
fn queued_inference_work_takes_the_allowance_to_zero_and_departure_lifts_it() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    h.limits.clear();
    assert_eq!(h.launch(T0, 2, 1), vec![gate(1, false)]);
    assert_eq!(h.limits, vec![limit(1, Allowance::Launches(0))]);
    // The inference job leaves: nothing to protect, no limit.
    h.limits.clear();
    assert_eq!(
        h.input(T0 + US, Input::Depart { client: 2 }),
        vec![gate(1, true)]
    );
    assert_eq!(h.limits, vec![limit(1, Allowance::Unlimited)]);
}

#[test]
fn the_allowance_counts_in_the_clients_mean_launch_and_a_graph_is_one_launch() {
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    // One launch, measured by a sync at 1 ms: the mean is 1 ms at once (not
    // an average with the 50 us default it was launched with).
    h.launch(T0, 1, 7);
    h.sync(T0, T0 + MS, 1);
    assert_eq!(h.client(1).mean_launch_ns, MS);
    let t = T0 + 2 * MS;
    h.launch(t, 1, 7);
    // Backlog 1 ms: 3 ms of room is 3 launches.
    let c = h.client(1);
    assert_eq!(c.backlog_ns, MS);
    assert_eq!(c.mean_launch_ns, MS);
    assert_eq!(c.allowance, Allowance::Launches(3));
    // A graph of 8 of the default kernels is one launch of 400 us.
    h.input(
        t,
        Input::GraphLaunch {
            client: 1,
            kernels: 8,
            ts_ns: t,
        },
    );
    let c = h.client(1);
    let mean = (7 * MS + 400 * US) / 8;
    assert_eq!(c.mean_launch_ns, mean);
    assert_eq!(c.backlog_ns, 1_400 * US);
    // 2.6 ms of room at 925 us a launch: 2.8, rounded up.
    assert_eq!(c.allowance, Allowance::Launches(3));
    assert_eq!(c.allowance, allowance_for(4 * MS, c.backlog_ns, mean));
}

#[test]
fn disabled_and_inference_are_never_limited() {
    let mut h = H::new(SchedConfig {
        enabled: false,
        ..SchedConfig::default()
    });
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    for _ in 0..200 {
        h.launch(T0, 1, 99);
        h.launch(T0, 9, 98);
    }
    assert!(h.limits.is_empty(), "{:?}", h.limits);
    // Training set to inference while limited: the limit is lifted.
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    h.limits.clear();
    h.input(
        T0,
        Input::SetClass {
            client: 1,
            class: Class::Inference,
        },
    );
    assert_eq!(h.limits, vec![limit(1, Allowance::Unlimited)]);
}

// ---- SLO targets from the configuration ----

#[test]
fn slo_rules_first_match_wins_and_every_named_criterion_must_match() {
    #[derive(serde::Deserialize)]
    struct File {
        scheduler: SchedConfig,
    }
    let f: File = toml::from_str(
        r#"
        [[scheduler.slo]]
        p99_ms = 20.0
        executables = ["/opt/serve"]
        uids = [1000, 1001]

        [[scheduler.slo]]
        p99_ms = 50.5
        cgroups = ["/serving.slice"]

        [[scheduler.slo]]
        p99_ms = 200.0
        "#,
    )
    .unwrap();
    let c = f.scheduler;
    assert_eq!(c.validate(), Ok(()));
    let rule = |uid, exe, cg| c.slo_for(uid, exe, cg).map(|m| (m.rule, m.p99_ns));
    // Both criteria of the first entry.
    assert_eq!(rule(1001, Some("/opt/serve"), None), Some((0, 20 * MS)));
    // Only one of them: falls through to the cgroup entry, then the default.
    assert_eq!(
        rule(7, Some("/opt/serve"), Some("/serving.slice/a.scope")),
        Some((1, 50_500_000))
    );
    assert_eq!(
        rule(1000, Some("/opt/other"), Some("/serving.sliced")),
        Some((2, 200 * MS))
    );
    // Unknown exe and cgroup never match a criterion that names them.
    assert_eq!(rule(1000, None, None), Some((2, 200 * MS)));
    // No entries: no target.
    assert_eq!(
        SchedConfig::default().slo_for(0, Some("/x"), Some("/")),
        None
    );
}

#[test]
fn slo_errors_name_the_entry_and_the_key() {
    let with = |r: SloRule| SchedConfig {
        slo: vec![
            SloRule {
                p99_ms: 10.0,
                uids: vec![],
                executables: vec![],
                cgroups: vec![],
            },
            r,
        ],
        ..SchedConfig::default()
    };
    let ok = SloRule {
        p99_ms: 10.0,
        uids: vec![3],
        executables: vec!["/bin/x".into()],
        cgroups: vec!["/a".into()],
    };
    assert_eq!(with(ok.clone()).validate(), Ok(()));
    for (r, field) in [
        (
            SloRule {
                p99_ms: 0.0,
                ..ok.clone()
            },
            "slo[1].p99_ms",
        ),
        (
            SloRule {
                p99_ms: f64::NAN,
                ..ok.clone()
            },
            "slo[1].p99_ms",
        ),
        (
            SloRule {
                p99_ms: MAX_SLO_P99_MS * 2.0,
                ..ok.clone()
            },
            "slo[1].p99_ms",
        ),
        (
            SloRule {
                executables: vec!["server".into()],
                ..ok.clone()
            },
            "slo[1].executables",
        ),
        (
            SloRule {
                cgroups: vec!["serving.slice".into()],
                ..ok.clone()
            },
            "slo[1].cgroups",
        ),
    ] {
        let e = with(r).validate().unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(
            e.to_string().starts_with(&format!("scheduler.{field}: ")),
            "{e}"
        );
    }
    // Unknown keys in an entry are rejected by name.
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct File {
        scheduler: SchedConfig,
    }
    let e =
        toml::from_str::<File>("[[scheduler.slo]]\np99_ms = 1.0\nusers = [\"a\"]\n").unwrap_err();
    assert!(e.to_string().contains("users"), "{e}");
}

#[test]
fn an_slo_target_reaches_the_adaptation_and_the_snapshot() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.input(
        T0,
        Input::Register {
            client: 2,
            class: Class::Inference,
            gpu: 0,
            slo_p99_ns: Some(2 * MS),
        },
    );
    assert_eq!(h.client(2).slo_p99_ns, Some(2 * MS));
    // Requests of 10 ms against a 2 ms target: the active budget shrinks.
    let before = h.gpu(0).active_budget_ns;
    requests(&mut h, T0 + MS, SLO_EVAL_EVERY, 10 * MS);
    assert!(h.gpu(0).active_budget_ns < before);
    // A reload without the target: registered again with none.
    h.input(
        T0 + 10_000 * MS,
        Input::Register {
            client: 2,
            class: Class::Inference,
            gpu: 0,
            slo_p99_ns: None,
        },
    );
    assert_eq!(h.client(2).slo_p99_ns, None);
}

// ---- completion marks ----

fn marks(client: ClientId, every_ns: u64) -> Output {
    Output::Marks { client, every_ns }
}

/// Inference client 1 and training client 3 on GPU 1.
fn marking_pair() -> H {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 1);
    h.reg(T0, 3, Class::Training, 1);
    h
}

#[test]
fn a_completed_mark_corrects_the_backlog_upwards_and_leaves_later_launches_pending() {
    let mut h = marking_pair();
    // Four launches guessed at 50 us each, a mark after the second.
    h.launch(T0, 3, 7);
    h.launch(T0 + 10 * US, 3, 7);
    h.mark(T0 + 10 * US, 3, 1);
    h.launch(T0 + 20 * US, 3, 7);
    h.launch(T0 + 30 * US, 3, 7);
    // By the guess everything was done 200 us in; the mark completes only
    // at 5 ms: the first two launches took 2.5 ms each, and the two still
    // queued are 5 ms of work.
    let o = h.mark_done(T0 + 5 * MS, 3, 1);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(2_500 * US));
    let c = h.client(3);
    assert_eq!(c.backlog_ns, 5 * MS);
    assert_eq!(c.marks_measured, 1);
    assert!(c.measured);
    assert_eq!(o, vec![gate(3, false)], "5 ms is over the 4 ms idle budget");
    // A sync at 6 ms drains the two launches the mark left pending: they
    // are measured from the mark's completion (1 ms, 500 us each).
    h.sync(T0 + 6 * MS, T0 + 6 * MS, 3);
    assert_eq!(
        h.s.kernel_estimate(3, 7),
        Some((3 * 2_500 * US + 500 * US) / 4)
    );
    assert_eq!(h.client(3).marks_measured, 1, "a sync is not a mark");
}

#[test]
fn a_completed_mark_corrects_the_backlog_downwards() {
    let mut h = marking_pair();
    // A sync teaches 1 ms per launch.
    h.launch(T0, 3, 7);
    h.sync(T0 + MS, T0 + MS, 3);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(MS));
    let t = T0 + 2 * MS;
    for i in 0..4 {
        h.launch(t + i * 10 * US, 3, 7);
        if i == 1 {
            h.mark(t + 10 * US, 3, 1);
        }
    }
    assert_eq!(h.client(3).backlog_ns, 4 * MS - 30 * US);
    // The first two were done 200 us in: 100 us each (EWMA from 1 ms), and
    // the backlog is the two left at the new estimate, from then.
    h.mark_done(t + 200 * US, 3, 1);
    let est = (3 * MS + 100 * US) / 4;
    assert_eq!(h.s.kernel_estimate(3, 7), Some(est));
    assert_eq!(h.client(3).backlog_ns, 2 * est);
}

#[test]
fn a_mark_done_that_covers_no_sealed_segment_changes_nothing() {
    let mut h = marking_pair();
    h.launch(T0, 3, 7);
    h.launch(T0 + 10 * US, 3, 7);
    let before = h.client(3);
    // No mark was ever placed: an unknown (or stale) seq.
    assert_eq!(h.mark_done(T0 + 10 * US, 3, 1), vec![]);
    assert_eq!(h.client(3), before);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(50 * US));
    // A mark, then a completion of an older seq than it.
    h.mark(T0 + 10 * US, 3, 5);
    h.mark_done(T0 + 10 * US, 3, 4);
    assert_eq!(h.client(3), before);
    // A sync drained the sealed segment: the late completion of its mark
    // covers nothing either.
    h.sync(T0 + MS, T0 + MS, 3);
    let after_sync = h.client(3);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(500 * US));
    h.mark_done(T0 + MS, 3, 5);
    assert_eq!(h.client(3), after_sync);
    assert_eq!(after_sync.marks_measured, 0);
    // Marks of an unknown client are ignored.
    assert_eq!(h.mark(T0 + MS, 42, 1), vec![]);
    assert_eq!(h.mark_done(T0 + MS, 42, 1), vec![]);
}

#[test]
fn a_lost_mark_done_is_covered_by_the_next() {
    let mut h = marking_pair();
    h.launch(T0, 3, 7);
    h.mark(T0, 3, 1);
    h.launch(T0 + 10 * US, 3, 8);
    h.mark(T0 + 10 * US, 3, 2);
    h.launch(T0 + 20 * US, 3, 9);
    // MARK_DONE 1 was lost; 2 says both segments were done by 400 us: one
    // measurement, split by the estimates (equal: 200 us each).
    h.mark_done(T0 + 400 * US, 3, 2);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(200 * US));
    assert_eq!(h.s.kernel_estimate(3, 8), Some(200 * US));
    assert_eq!(h.s.kernel_estimate(3, 9), Some(50 * US), "still pending");
    let c = h.client(3);
    assert_eq!(c.marks_measured, 1);
    assert_eq!(c.backlog_ns, 50 * US);
}

#[test]
fn marks_are_asked_of_training_clients_only_and_only_changes_are_emitted() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 1);
    assert_eq!(h.marks, vec![], "inference: 0, as a fresh block holds");
    h.reg(T0, 3, Class::Training, 1);
    assert_eq!(h.marks, vec![marks(3, 500 * US)]);
    assert_eq!(h.client(3).mark_every_ns, 500 * US);
    // Registered again (a Device), same class: nothing new.
    h.reg(T0, 3, Class::Training, 2);
    h.input(
        T0,
        Input::SetClass {
            client: 3,
            class: Class::Training,
        },
    );
    assert_eq!(h.marks.len(), 1);
    // Class changes flip it.
    for (class, want) in [(Class::Training, 500 * US), (Class::Inference, 0)] {
        h.input(T0, Input::SetClass { client: 1, class });
        assert_eq!(h.marks.last(), Some(&marks(1, want)));
    }
    assert_eq!(h.marks.len(), 3);
    // Reconfiguration: a new interval, none, and disabled.
    let mut out = Vec::new();
    let every = |ns| SchedConfig {
        mark_every_ns: ns,
        ..SchedConfig::default()
    };
    h.s.reconfigure(every(MS), &mut out);
    h.s.reconfigure(every(MS), &mut out);
    h.s.reconfigure(every(0), &mut out);
    h.s.reconfigure(every(500 * US), &mut out);
    h.s.reconfigure(
        SchedConfig {
            enabled: false,
            ..SchedConfig::default()
        },
        &mut out,
    );
    let emitted: Vec<Output> = out
        .into_iter()
        .filter(|o| matches!(o, Output::Marks { .. }))
        .collect();
    assert_eq!(
        emitted,
        vec![marks(3, MS), marks(3, 0), marks(3, 500 * US), marks(3, 0)]
    );
    // Disabled from the start: a training client is asked for none.
    let mut d = H::new(SchedConfig {
        enabled: false,
        ..SchedConfig::default()
    });
    d.reg(T0, 3, Class::Training, 1);
    assert_eq!(d.marks, vec![]);
    // Nothing is emitted for a departing client.
    h.input(T0, Input::Depart { client: 3 });
    assert_eq!(h.marks.len(), 3);
}

#[test]
fn a_training_client_of_unknown_gpu_is_held_while_inference_runs_anywhere() {
    let mut h = H::default();
    // Inference on a known GPU; a trainer registers before its device report.
    h.reg(T0, 1, Class::Inference, 7);
    h.reg(T0, 2, Class::Training, 0);
    // Unmeasured and possibly beside that inference: one launch at a time.
    assert_eq!(h.client(2).allowance, Allowance::Launches(1));
    h.launch(T0 + 10 * US, 2, 5);
    assert_eq!(h.client(2).allowance, Allowance::Launches(1));
    // Its device report: another GPU, with no inference on it: unlimited.
    h.reg(T0 + 20 * US, 2, Class::Training, 9);
    assert_eq!(h.client(2).allowance, Allowance::Unlimited);
    // Its device report never comes: the hold ends after the grace period.
    let t = T0 + 30 * US;
    h.reg(t, 3, Class::Training, 0);
    assert_eq!(h.client(3).allowance, Allowance::Launches(1));
    h.launch(t + UNKNOWN_GPU_GRACE_NS - US, 3, 5);
    assert_eq!(h.client(3).allowance, Allowance::Launches(1));
    h.launch(t + UNKNOWN_GPU_GRACE_NS, 3, 5);
    assert_eq!(h.client(3).allowance, Allowance::Unlimited);
}

#[test]
fn a_training_client_of_unknown_gpu_is_free_when_no_inference_runs() {
    let mut h = H::default();
    h.reg(T0, 2, Class::Training, 0);
    assert_eq!(h.client(2).allowance, Allowance::Unlimited);
    // Inference arrives (on some GPU): the unknown-GPU trainer is held.
    h.reg(T0 + MS, 1, Class::Inference, 7);
    assert_eq!(h.client(2).allowance, Allowance::Launches(1));
    // It leaves again: nothing to protect, released at once (no launch needed).
    h.input(T0 + 2 * MS, Input::Depart { client: 1 });
    assert_eq!(h.client(2).allowance, Allowance::Unlimited);
}

// ---- scheduler v2: local bounds, estimates, activity hold ----

fn budgets_of(h: &H, client: ClientId) -> Vec<Option<LocalBudget>> {
    h.locals
        .iter()
        .filter_map(|o| match *o {
            Output::Budget { client: c, budget } if c == client => Some(budget),
            _ => None,
        })
        .collect()
}

fn estimates_of(h: &H, client: ClientId) -> Vec<(u64, u64)> {
    h.locals
        .iter()
        .filter_map(|o| match *o {
            Output::Estimate { client: c, key, ns } if c == client => Some((key, ns)),
            _ => None,
        })
        .collect()
}

#[test]
fn training_beside_inference_gets_a_local_bound_shared_among_trainers_and_serial_until_measured() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 7);
    assert!(
        budgets_of(&h, 1).is_empty(),
        "no inference on its GPU: no bound (a fresh block has none)"
    );
    h.reg(T0, 2, Class::Inference, 7);
    let cfg = SchedConfig::default();
    assert_eq!(
        budgets_of(&h, 1),
        vec![Some(LocalBudget {
            idle_ns: 1,
            active_ns: 1,
            default_est_ns: cfg.default_kernel_ns,
            hold_ns: cfg.request_hold_ns,
        })],
        "unmeasured: one launch at a time"
    );
    assert!(budgets_of(&h, 2).is_empty(), "inference is never bounded");
    // A sync measures its launches: the budgets become the GPU's.
    h.launch(T0 + 10 * US, 1, 5);
    h.sync(T0 + 20 * US, T0 + 2 * MS, 1);
    let b = budgets_of(&h, 1).last().copied().flatten().unwrap();
    assert_eq!(
        (b.idle_ns, b.active_ns),
        (cfg.idle_budget_ns, cfg.active_budget_ns)
    );
    assert!(b.default_est_ns > cfg.default_kernel_ns, "{b:?}");
    // A second trainer on the GPU halves each share.
    h.reg(T0 + 3 * MS, 3, Class::Training, 7);
    let b = budgets_of(&h, 1).last().copied().flatten().unwrap();
    assert_eq!(
        (b.idle_ns, b.active_ns),
        (cfg.idle_budget_ns / 2, cfg.active_budget_ns / 2)
    );
    // The inference job leaves: no bound again.
    h.input(T0 + 4 * MS, Input::Depart { client: 2 });
    assert_eq!(budgets_of(&h, 1).last().copied(), Some(None));
    assert_eq!(budgets_of(&h, 3).last().copied(), Some(None));
}

#[test]
fn measurements_publish_estimates_per_kernel_key_once_they_move_by_an_eighth() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 7);
    // Two keys (one function at two grids, as the drain keys them): 1 ms and
    // 3 ms of GPU time, learned from separate syncs.
    let (small, big) = (0xA1, 0xB2);
    h.launch(T0, 1, small);
    h.sync(T0 + 1, T0 + MS, 1);
    h.launch(T0 + 2 * MS, 1, big);
    h.sync(T0 + 2 * MS + 1, T0 + 5 * MS, 1);
    let e = estimates_of(&h, 1);
    assert!(e.contains(&(small, MS)), "{e:?}");
    assert!(e.contains(&(big, 3 * MS)), "{e:?}");
    // The same measurement again moves nothing: nothing new is published.
    let n = e.len();
    h.launch(T0 + 6 * MS, 1, small);
    h.sync(T0 + 6 * MS + 1, T0 + 7 * MS, 1);
    assert_eq!(estimates_of(&h, 1).len(), n);
    // Twice as long: the EWMA moves by a quarter, published.
    h.launch(T0 + 8 * MS, 1, small);
    h.sync(T0 + 8 * MS + 1, T0 + 10 * MS, 1);
    let last = *estimates_of(&h, 1).last().unwrap();
    assert_eq!(last, (small, (3 * MS + 2 * MS) / 4));
}

#[test]
fn an_inference_job_launching_back_to_back_stays_active_without_an_idle_gap() {
    // Requests every 1 ms with no idle gap of 2 ms: implicit request
    // detection never begins a second request, yet every launch keeps the
    // GPU active for the hold after it.
    let cfg = SchedConfig {
        request_hold_ns: 300 * US,
        ..SchedConfig::default()
    };
    let mut h = H::new(cfg);
    h.reg(T0, 1, Class::Training, 7);
    h.reg(T0, 2, Class::Inference, 7);
    let mut t = T0 + 10 * MS;
    for _ in 0..20 {
        h.launch(t, 2, 9);
        h.sync(t + 50 * US, t + 100 * US, 2);
        t += 250 * US;
        h.tick(t);
        assert!(h.gpu(7).inference_active, "at {t}: within the hold");
    }
    // Idle for longer than the hold (and the work drained): inactive.
    h.tick(t + 2 * MS);
    assert!(!h.gpu(7).inference_active);
}

#[test]
fn no_local_bound_without_completion_marks() {
    // The shim sees its work complete only through marks: a bound it could
    // never see drain would only make it wait out its 50 ms each launch.
    let mut h = H::new(SchedConfig {
        mark_every_ns: 0,
        ..SchedConfig::default()
    });
    h.reg(T0, 1, Class::Training, 7);
    h.reg(T0, 2, Class::Inference, 7);
    h.launch(T0 + 10 * US, 1, 5);
    h.sync(T0 + 20 * US, T0 + 2 * MS, 1);
    assert!(budgets_of(&h, 1).is_empty(), "{:?}", h.locals);
    assert_eq!(h.client(1).budget, None);
}
