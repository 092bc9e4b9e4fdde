//! Property tests: random input streams (several inference and training
//! clients on two GPUs, monotone time, completion marks and their
//! completions, some lost or stale) against the contract's invariants.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
/// Clients 1..=2 start as inference, 3..=5 as training; GPU 1 has clients 1
/// and 3, GPU 2 has 2 and 4, and client 5's GPU is unknown (group 0: its
/// device report never came; see `gpu_of`).
const CLIENTS: u64 = 5;

fn gpu_of(c: u64) -> u64 {
    match c {
        2 | 4 => 2,
        5 => 0,
        _ => 1,
    }
}

#[derive(Clone, Debug)]
enum Op {
    Launch(u64, u64),
    Graph(u64, u32),
    SyncBegin(u64),
    SyncEnd(u64),
    ReqBegin(u64),
    ReqEnd(u64),
    Depart(u64),
    Register(u64, bool),
    SetClass(u64, bool),
    /// The client's next completion mark.
    Mark(u64),
    /// A completion of the client's mark `latest - back` (0: the latest; a
    /// `back` beyond the marks placed is a stale or unknown one).
    MarkDone(u64, u64),
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    let c = 1..=CLIENTS;
    prop_oneof![
        10 => (c.clone(), 0u64..4).prop_map(|(c, f)| Op::Launch(c, f)),
        1 => (c.clone(), 0u32..8).prop_map(|(c, k)| Op::Graph(c, k)),
        3 => c.clone().prop_map(Op::SyncBegin),
        3 => c.clone().prop_map(Op::SyncEnd),
        1 => c.clone().prop_map(Op::ReqBegin),
        1 => c.clone().prop_map(Op::ReqEnd),
        1 => c.clone().prop_map(Op::Depart),
        1 => (c.clone(), any::<bool>()).prop_map(|(c, i)| Op::Register(c, i)),
        1 => (c.clone(), any::<bool>()).prop_map(|(c, i)| Op::SetClass(c, i)),
        3 => c.clone().prop_map(Op::Mark),
        3 => (c, prop_oneof![4 => 0u64..3, 1 => 3u64..1_000]).prop_map(|(c, b)| Op::MarkDone(c, b)),
        2 => Just(Op::Tick),
    ]
}

/// (time step before the op, ts lag behind now, op)
fn stream() -> impl Strategy<Value = Vec<(u64, u64, Op)>> {
    prop::collection::vec((0..1_500 * US, 0..50 * US, op()), 1..200)
}

/// Valid configurations only (as `SchedConfig::validate` accepts them).
fn cfg() -> impl Strategy<Value = SchedConfig> {
    (
        100 * US..1_000 * US,
        0..4 * MS,
        0..4 * MS,
        0..500 * US,
        10 * US..200 * US,
        prop_oneof![Just(0), MIN_MARK_EVERY_NS..2 * MS],
    )
        .prop_map(|(active, above_active, above_max, hold, dflt, marks)| {
            let max_active = active + above_active;
            let c = SchedConfig {
                idle_budget_ns: max_active + above_max,
                active_budget_ns: active,
                max_active_budget_ns: max_active,
                request_hold_ns: hold,
                default_kernel_ns: dflt,
                mark_every_ns: marks,
                ..SchedConfig::default()
            };
            assert!(c.validate().is_ok(), "{c:?}");
            c
        })
}

fn class(inference: bool) -> Class {
    if inference {
        Class::Inference
    } else {
        Class::Training
    }
}

/// The input of `op` at `ts`; `marks` holds each client's latest mark
/// sequence number.
fn to_input(op: &Op, ts: u64, marks: &mut BTreeMap<u64, u64>) -> Option<Input> {
    Some(match *op {
        Op::Mark(client) => {
            let seq = marks.entry(client).or_default();
            *seq += 1;
            Input::Mark {
                client,
                seq: *seq,
                ts_ns: ts,
            }
        }
        Op::MarkDone(client, back) => Input::MarkDone {
            client,
            seq: marks.get(&client).copied().unwrap_or(0).wrapping_sub(back),
            ts_ns: ts,
        },
        Op::Launch(client, func_id) => Input::Launch {
            client,
            func_id,
            ts_ns: ts,
        },
        Op::Graph(client, kernels) => Input::GraphLaunch {
            client,
            kernels,
            ts_ns: ts,
        },
        Op::SyncBegin(client) => Input::SyncBegin { client, ts_ns: ts },
        Op::SyncEnd(client) => Input::SyncEnd { client, ts_ns: ts },
        Op::ReqBegin(client) => Input::RequestBegin { client, ts_ns: ts },
        Op::ReqEnd(client) => Input::RequestEnd { client, ts_ns: ts },
        Op::Depart(client) => Input::Depart { client },
        Op::Register(client, inf) => Input::Register {
            client,
            class: class(inf),
            gpu: gpu_of(client),
            slo_p99_ns: inf.then_some(2 * MS),
        },
        Op::SetClass(client, inf) => Input::SetClass {
            client,
            class: class(inf),
        },
        Op::Tick => return None,
    })
}

/// Everything one run produced, for the determinism check.
type Trace = Vec<(u64, Vec<Output>, Option<u64>)>;

type Gates = BTreeMap<u64, bool>;
type Allowances = BTreeMap<u64, Allowance>;
/// The mark interval last emitted per client.
type Marks = BTreeMap<u64, u64>;

/// The checks after every step: (1), (2), (4), (6), inference gates open, and
/// that a closed gate has asked for a tick no later than its backlog allows
/// reopening.
fn check(
    s: &Scheduler,
    gates: &Gates,
    allowances: &Allowances,
    marks: &Marks,
) -> Result<(), String> {
    // Every GPU evaluated at the current time (an input evaluates only its
    // own client's GPU): its allowances must cover all of the room.
    let mut copy = s.clone();
    copy.tick(s.snapshot().now_ns, &mut Vec::new());
    let fresh = copy.snapshot();
    for c in &fresh.clients {
        let g = fresh
            .gpus
            .iter()
            .find(|g| g.gpu == c.gpu)
            .ok_or("client's GPU missing")?;
        check_allowance(&fresh, c, g, true)?;
    }
    let snap = s.snapshot();
    let now = snap.now_ns;
    let next = s.next_tick();
    for c in &snap.clients {
        let g = snap
            .gpus
            .iter()
            .find(|g| g.gpu == c.gpu)
            .ok_or("client's GPU missing")?;
        if gates.get(&c.client).copied().unwrap_or(true) != c.gate_open {
            return Err(format!("emitted gate state differs from snapshot: {c:?}"));
        }
        let emitted = allowances
            .get(&c.client)
            .copied()
            .unwrap_or(Allowance::Unlimited);
        if emitted != c.allowance {
            return Err(format!("emitted allowance differs from snapshot: {c:?}"));
        }
        // Marks are asked of training clients only (all of them: the
        // configurations here are enabled).
        let want = match c.class {
            Class::Training => s.config().mark_every_ns,
            Class::Inference => 0,
        };
        if marks.get(&c.client).copied().unwrap_or(0) != want || c.mark_every_ns != want {
            return Err(format!(
                "mark interval emitted {:?}, snapshot {}, wanted {want}: {c:?}",
                marks.get(&c.client),
                c.mark_every_ns
            ));
        }
        check_allowance(&snap, c, g, false)?;
        match c.class {
            Class::Inference => {
                if !c.gate_open {
                    return Err(format!("inference gate closed: {c:?}"));
                }
            }
            Class::Training => {
                let n = u64::from(g.training_clients.max(1));
                // Each share is at least 1 ns (a share never rounds to 0).
                let budget = if g.inference_active {
                    g.active_budget_ns / n
                } else {
                    s.config().idle_budget_ns / n
                }
                .max(1);
                // The kept policy also gives training nothing while inference
                // work is queued (which makes the GPU active).
                let blocked = g.inference_active && g.training_budget_ns == 0;
                if g.training_budget_ns != budget && !blocked {
                    return Err(format!("budget {} != {budget}", g.training_budget_ns));
                }
                // (1) active: open => backlog < active/n.
                if g.inference_active && c.gate_open && c.backlog_ns >= g.training_budget_ns {
                    return Err(format!("(1) open over the active budget: {c:?} {g:?}"));
                }
                // (2) closed => backlog >= its budget (idle/n when not active) ...
                if !c.gate_open && c.backlog_ns < g.training_budget_ns {
                    return Err(format!("(2) closed under its budget: {c:?} {g:?}"));
                }
                // ... and the tick it asked for is no later than the reopening
                // (when blocked, the copy's tick below checks the unblocking).
                if !c.gate_open && !blocked {
                    let reopen = now + (c.backlog_ns - g.training_budget_ns) + 1;
                    if next.is_none_or(|t| t > reopen) {
                        return Err(format!(
                            "(2) tick {next:?} later than reopening at {reopen}: {c:?}"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// (6) The launch allowance: unlimited exactly where the gate is held open
/// regardless of backlog (inference; a GPU with no inference client);
/// otherwise 0 exactly when the gate is closed (so always 0 while inference
/// work is queued), and the launches it allows, at the client's mean
/// estimate, end less than one launch beyond the budget, but reach it.
fn check_allowance(
    snap: &SchedSnapshot,
    c: &ClientSnapshot,
    g: &GpuSnapshot,
    fresh: bool,
) -> Result<(), String> {
    let guarded = snap
        .clients
        .iter()
        .any(|o| o.gpu == c.gpu && o.class == Class::Inference);
    // A training client of the unknown GPU is held while inference runs
    // anywhere, for a grace period after it registered (not in the
    // snapshot): either answer is right there, and a limit must be sound.
    let maybe_held = c.gpu == 0
        && c.class == Class::Training
        && snap.clients.iter().any(|o| o.class == Class::Inference);
    let n = match c.allowance {
        Allowance::Unlimited if c.class == Class::Inference || !guarded => return Ok(()),
        Allowance::Launches(n) if maybe_held => n,
        Allowance::Unlimited => {
            return Err(format!("(6) unlimited training beside inference: {c:?}"))
        }
        Allowance::Launches(_) if c.class == Class::Inference || !guarded => {
            return Err(format!("(6) a limit where nothing is protected: {c:?}"))
        }
        Allowance::Launches(n) => n,
    };
    if (n == 0) == c.gate_open {
        return Err(format!(
            "(6) allowance {n} with gate open = {}: {c:?}",
            c.gate_open
        ));
    }
    // Less than one mean launch beyond the room (the room only grows while
    // no input comes, so an allowance computed earlier is checked too) ...
    let room = g.training_budget_ns.saturating_sub(c.backlog_ns);
    let granted = u128::from(n) * u128::from(c.mean_launch_ns);
    if granted >= u128::from(room) + u128::from(c.mean_launch_ns) {
        return Err(format!(
            "(6) allowance {n} x {} ns beyond the room {room} ns: {c:?} {g:?}",
            c.mean_launch_ns
        ));
    }
    // ... and, evaluated now, all of the room (at most one launch while no
    // sync has measured the client's launches).
    if !c.measured && n > 1 {
        return Err(format!("(6) allowance {n} before any measurement: {c:?}"));
    }
    if fresh && c.measured && granted < u128::from(room) {
        return Err(format!(
            "(6) allowance {n} x {} ns short of the room {room} ns: {c:?} {g:?}",
            c.mean_launch_ns
        ));
    }
    Ok(())
}

/// Run one stream; ticks at every time the scheduler asked for before later
/// inputs; checks every step; finally lets time run with no input until no
/// tick is wanted, and checks every gate ended open (5).
fn run(cfg: &SchedConfig, ops: &[(u64, u64, Op)]) -> Result<Trace, String> {
    let mut s = Scheduler::new(cfg.clone());
    let mut gates = Gates::new();
    let mut allowances = Allowances::new();
    let mut marks = Marks::new();
    let mut seqs = BTreeMap::new();
    let mut trace = Trace::new();
    let mut out = Vec::new();
    let mut now = 10 * MS;
    let apply = |out: &mut Vec<Output>,
                 gates: &mut Gates,
                 allowances: &mut Allowances,
                 marks: &mut Marks|
     -> Result<Vec<Output>, String> {
        for o in out.iter() {
            match *o {
                Output::Gate { client, open } => {
                    let prev = gates.insert(client, open).unwrap_or(true);
                    // (4) only changes are reported.
                    if prev == open {
                        return Err(format!("(4) repeated state {o:?}"));
                    }
                }
                Output::Limit { client, beyond } => {
                    let prev = allowances
                        .insert(client, beyond)
                        .unwrap_or(Allowance::Unlimited);
                    if prev == beyond {
                        return Err(format!("(4) repeated allowance {o:?}"));
                    }
                }
                Output::Marks { client, every_ns } => {
                    let prev = marks.insert(client, every_ns).unwrap_or(0);
                    if prev == every_ns {
                        return Err(format!("(4) repeated mark interval {o:?}"));
                    }
                }
                // Local bounds and estimates: their own tests (tests.rs).
                Output::Budget { .. } | Output::Estimate { .. } => {}
            }
        }
        Ok(std::mem::take(out))
    };
    for id in 1..=CLIENTS {
        s.handle(
            now,
            Input::Register {
                client: id,
                class: class(id <= 2),
                gpu: gpu_of(id),
                slo_p99_ns: (id <= 2).then_some(MS),
            },
            &mut out,
        );
    }
    let o = apply(&mut out, &mut gates, &mut allowances, &mut marks)?;
    trace.push((now, o, s.next_tick()));
    for (dt, lag, op) in ops {
        let target = now + dt;
        // Ticks the scheduler asked for, in order, before the next input.
        while let Some(t) = s.next_tick().filter(|&t| t <= target) {
            now = t;
            let next = s.tick(now, &mut out);
            let o = apply(&mut out, &mut gates, &mut allowances, &mut marks)?;
            check(&s, &gates, &allowances, &marks)?;
            trace.push((now, o, next));
        }
        // Those ticks were enough: a tick right now (on a copy) changes no
        // gate. It may grow allowances (backlogs drain with time), and only
        // grow them: nothing waits for that (see "Launch limits").
        let mut copy = s.clone();
        let mut pending = Vec::new();
        copy.tick(target, &mut pending);
        for o in &pending {
            let grew = match *o {
                Output::Gate { .. }
                | Output::Marks { .. }
                | Output::Budget { .. }
                | Output::Estimate { .. } => false,
                Output::Limit { client, beyond } => {
                    let was = allowances
                        .get(&client)
                        .copied()
                        .unwrap_or(Allowance::Unlimited);
                    match (was, beyond) {
                        (Allowance::Launches(a), Allowance::Launches(b)) => b > a,
                        _ => false,
                    }
                }
            };
            if !grew {
                return Err(format!(
                    "(2) a change was due by {target} but no tick asked: {pending:?}"
                ));
            }
        }
        now = target;
        match to_input(op, now.saturating_sub(*lag), &mut seqs) {
            Some(input) => {
                if let Input::Depart { client } = input {
                    gates.remove(&client);
                    allowances.remove(&client);
                    marks.remove(&client);
                }
                s.handle(now, input, &mut out);
            }
            None => {
                s.tick(now, &mut out);
            }
        }
        let o = apply(&mut out, &mut gates, &mut allowances, &mut marks)?;
        check(&s, &gates, &allowances, &marks)?;
        trace.push((now, o, s.next_tick()));
    }
    // (5) With no more input, every gate opens (no gate is stuck closed).
    for _ in 0..10_000 {
        let Some(t) = s.next_tick() else { break };
        now = t;
        s.tick(now, &mut out);
        let o = apply(&mut out, &mut gates, &mut allowances, &mut marks)?;
        check(&s, &gates, &allowances, &marks)?;
        trace.push((now, o, s.next_tick()));
    }
    if s.next_tick().is_some() {
        return Err("still wants ticks after 10000".into());
    }
    if let Some(c) = s.snapshot().clients.iter().find(|c| !c.gate_open) {
        return Err(format!("(5) gate stuck closed: {c:?}"));
    }
    // ... and no client is left without a launch it may start.
    if let Some(c) = s
        .snapshot()
        .clients
        .iter()
        .find(|c| c.allowance == Allowance::Launches(0))
    {
        return Err(format!("(5) no launch allowed: {c:?}"));
    }
    Ok(trace)
}

proptest! {
    // No regression files in the repository: a failure prints its case.
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// (1), (2), (4), (5) on every step of random streams.
    #[test]
    fn invariants_hold_on_random_streams(cfg in cfg(), ops in stream()) {
        run(&cfg, &ops).map_err(TestCaseError::fail)?;
    }

    /// (3) The same inputs at the same times give the same outputs.
    #[test]
    fn same_inputs_same_outputs(cfg in cfg(), ops in stream()) {
        let a = run(&cfg, &ops).map_err(TestCaseError::fail)?;
        let b = run(&cfg, &ops).map_err(TestCaseError::fail)?;
        prop_assert_eq!(a, b);
    }

    /// (5) Departures, in any order and at any time, never leave another
    /// client's gate closed beyond what its own backlog justifies.
    #[test]
    fn departures_never_strand_a_gate(
        cfg in cfg(),
        ops in stream(),
        departs in prop::collection::vec((1..=CLIENTS, 0..200usize), 1..6),
    ) {
        let mut ops = ops;
        for (c, at) in departs {
            let at = at.min(ops.len());
            ops.insert(at, (0, 0, Op::Depart(c)));
        }
        run(&cfg, &ops).map_err(TestCaseError::fail)?;
    }
}

/// Scheduler v2's outputs on a random stream: after every step, each
/// client's local bound (as last emitted) follows the rules of
/// [`local_budget`], Budget outputs are changes only, and published
/// estimates are in range and never for the graph pseudo-kernel.
fn check_local(cfg: &SchedConfig, ops: &[(u64, u64, Op)]) -> Result<(), String> {
    let mut s = Scheduler::new(cfg.clone());
    let mut seqs = BTreeMap::new();
    let mut out = Vec::new();
    let mut last: BTreeMap<u64, Option<LocalBudget>> = BTreeMap::new();
    let mut now = 10 * MS;
    for (step, lag, op) in ops {
        now += step;
        match to_input(op, now.saturating_sub(*lag), &mut seqs) {
            Some(input) => {
                if let Input::Depart { client } = input {
                    last.remove(&client);
                }
                s.handle(now, input, &mut out);
            }
            None => {
                s.tick(now, &mut out);
            }
        }
        for o in out.drain(..) {
            match o {
                Output::Budget { client, budget } => {
                    let prev = last.insert(client, budget).flatten();
                    if prev == budget {
                        return Err(format!("repeated local bound {o:?}"));
                    }
                }
                Output::Estimate { key, ns, .. }
                    if key == GRAPH_FUNC || !(MIN_KERNEL_NS..=MAX_KERNEL_NS).contains(&ns) =>
                {
                    return Err(format!("bad estimate {o:?}"));
                }
                _ => {}
            }
        }
        let snap = s.snapshot();
        for c in &snap.clients {
            let inference_on_gpu = snap
                .clients
                .iter()
                .any(|o| o.gpu == c.gpu && o.class == Class::Inference);
            let inference_anywhere = snap.clients.iter().any(|o| o.class == Class::Inference);
            match c.budget {
                None => {}
                Some(_) if c.class == Class::Inference => {
                    return Err(format!("inference client bounded: {c:?}"));
                }
                Some(_) if cfg.mark_every_ns == 0 => {
                    return Err(format!("bounded without marks: {c:?}"));
                }
                Some(_) if !(inference_on_gpu || c.gpu == 0 && inference_anywhere) => {
                    return Err(format!("bounded with nothing to protect: {c:?}"));
                }
                Some(b) => {
                    let n = snap
                        .clients
                        .iter()
                        .filter(|o| o.gpu == c.gpu && o.class == Class::Training)
                        .count() as u64;
                    let ok = if c.measured {
                        b.active_ns <= b.idle_ns
                            && b.idle_ns <= (cfg.idle_budget_ns / n.max(1)).max(1)
                            && b.active_ns <= (cfg.max_active_budget_ns / n.max(1)).max(1)
                    } else {
                        (b.idle_ns, b.active_ns) == (1, 1)
                    };
                    if !ok || b.hold_ns != cfg.request_hold_ns {
                        return Err(format!(
                            "local bound {b:?} breaks the rules for {c:?} (n {n})"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Scheduler v2: local bounds and estimates follow their rules.
    #[test]
    fn local_bounds_follow_their_rules(cfg in cfg(), ops in stream()) {
        check_local(&cfg, &ops).map_err(TestCaseError::fail)?;
    }
}
