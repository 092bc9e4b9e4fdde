//! A discrete-event simulator of one GPU shared by inference and training
//! clients, driving the [`Scheduler`] exactly as tandemd would: it sees the
//! records the shim would send (with their true timestamps), delivered when
//! the reader would read them, and its gate outputs are applied to the
//! clients' launch paths. Seeded and deterministic: its numbers are
//! behaviour, not timing.
//!
//! The model:
//! * **GPU**: one serial FIFO timeline across all clients (like the fake
//!   driver's shared device): a kernel starts at max(launch time, end of the
//!   previous kernel of any client) and runs for its true duration.
//! * **Inference client**: requests arrive as a Poisson process; one CPU
//!   thread serves them in order: K kernels of known true durations, each
//!   launch costing CPU time, then a stream sync. Latency = arrival to sync
//!   return (queueing behind its own earlier requests included).
//! * **Training client**: an endless loop of kernels (true durations 50 us -
//!   2 ms, a fixed cycle of func ids), launched as fast as its CPU allows,
//!   with a CPU stall (data loading, Python) every few launches and a sync
//!   every `sync_every` launches (0: never). Before each launch it checks its
//!   gate and (with `launch_limits`) its launch limit; a closed gate or a
//!   launch beyond the limit blocks its CPU thread until it may go, at most
//!   [`MAX_GATE_WAIT_NS`] (the shim's bound).
//! * **Completion marks**: a training client obeys [`Output::Marks`] as the
//!   shim does: after a launch, when marks are asked for and at least
//!   `every_ns` has passed since its last mark, it places one (an
//!   [`Input::Mark`] stamped with the launch's time); the [`Input::MarkDone`]
//!   follows at the first tick of the shim's poll ([`MARK_POLL_NS`], a fixed
//!   grid of sim time) at or after the GPU finished that launch.
//! * **Launch limits** (`launch_limits: true`): as tandemd's registry does,
//!   each training client's limit is its launch count as of the reader's
//!   last poll (read before that poll's records are handed over) plus its
//!   latest [`Allowance`].
//! * **Reader**: records are delivered to the scheduler at the reader's next
//!   poll (every `poll_ns`), in order; the scheduler's ticks run at the times it
//!   asks for.
//!
//! `policy: None` is "off": no scheduler, gates always open.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use super::scheduler::{Knobs, Split};
use super::*;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
/// The shim's bound on one wait at a closed gate (`MAX_GATE_WAIT`).
const MAX_GATE_WAIT_NS: u64 = 50 * MS;
/// How often the shim polls its marks for completion.
const MARK_POLL_NS: u64 = 200 * US;

/// splitmix64: small, seeded, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
    fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        (-self.unit().ln() * mean_ns) as u64
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[derive(Clone, Debug)]
pub(crate) struct InfSpec {
    pub(crate) rate_per_s: f64,
    /// True durations of the request's kernels, in launch order.
    pub(crate) kernels: Vec<u64>,
    pub(crate) cpu_per_launch_ns: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct TrainSpec {
    /// True durations of the cycle of kernels (func id = index).
    pub(crate) kernels: Vec<u64>,
    pub(crate) cpu_per_launch_ns: u64,
    /// A sync after every this many launches; 0: never.
    pub(crate) sync_every: u32,
    pub(crate) stall_every: u32,
    pub(crate) stall_ns: (u64, u64),
}

#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    pub(crate) inference: Vec<InfSpec>,
    pub(crate) training: Vec<TrainSpec>,
    pub(crate) duration_ns: u64,
    /// Requests arriving before this are reported apart.
    pub(crate) warmup_ns: u64,
    pub(crate) poll_ns: u64,
    pub(crate) seed: u64,
    /// The shims enforce the scheduler's launch allowances.
    pub(crate) launch_limits: bool,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Outcome {
    /// Every request's latency, all inference clients, after the warm-up;
    /// a request still unfinished at the end counts as its time so far (a
    /// lower bound).
    pub(crate) latencies: Vec<u64>,
    /// Requests after the warm-up still unfinished at the end.
    pub(crate) unfinished: usize,
    /// The same during the warm-up (the scheduler has not seen a sync of
    /// every training kernel yet).
    pub(crate) warmup_latencies: Vec<u64>,
    /// GPU ns of completed kernels, per training client.
    pub(crate) train_gpu_ns: Vec<u64>,
    /// Gate waits that hit the shim's bound.
    pub(crate) bounded_waits: u64,
    /// Completion marks placed, all training clients.
    pub(crate) marks: u64,
    /// At the end, the first training client's learned estimates over its
    /// kernels' true durations, summed over its kernel cycle (1: exact;
    /// `None`: no scheduler).
    pub(crate) est_over_true: Option<f64>,
}

impl Outcome {
    pub(crate) fn pct(&self, q: f64) -> u64 {
        let mut v = self.latencies.clone();
        super::estimate::quantile(&mut v, q).unwrap_or(0)
    }
    pub(crate) fn train_total(&self) -> u64 {
        self.train_gpu_ns.iter().sum()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival(usize),
    InfStep(usize),
    InfSyncDone(usize),
    TrainStep(usize),
    TrainSyncDone(usize),
    TrainWaitBound(usize, u64),
    /// (client, mark seq): the shim's poll sees the mark complete.
    TrainMarkDone(usize, u64),
    Poll,
    Tick,
}

struct Inf {
    queue: VecDeque<u64>,
    busy: bool,
    next_kernel: usize,
    last_end: u64,
}

struct Train {
    gate_open: bool,
    waiting: Option<u64>,
    wait_gen: u64,
    launches: u64,
    last_end: u64,
    allowance: Allowance,
    /// `launches` as the reader last read it.
    launches_read: u64,
    /// A wait hit the shim's bound: the next launch goes regardless.
    bounded_pass: bool,
    /// The mark interval asked for (0: none).
    mark_every_ns: u64,
    /// When the last mark was placed.
    last_mark: Option<u64>,
    /// The last mark's sequence number.
    mark_seq: u64,
}

impl Train {
    /// The launch limit in force (`None`: unlimited).
    fn limit(&self, enforce: bool) -> Option<u64> {
        match self.allowance {
            Allowance::Launches(n) if enforce => Some(self.launches_read + n),
            _ => None,
        }
    }
    /// The next launch may start.
    fn may_launch(&self, enforce: bool) -> bool {
        self.gate_open && self.limit(enforce).is_none_or(|l| self.launches < l)
    }
}

/// Inference clients get ids 1.., training clients 101...
fn inf_id(i: usize) -> ClientId {
    1 + i as u64
}
fn train_id(j: usize) -> ClientId {
    101 + j as u64
}

pub(crate) fn simulate(sc: &Scenario, policy: Option<(SchedConfig, Knobs)>) -> Outcome {
    let mut rng = Rng(sc.seed);
    let mut q: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<Reverse<(u64, u64, Ev)>>, t: u64, e: Ev| {
        seq += 1;
        q.push(Reverse((t, seq, e)));
    };
    let mut sched = policy.map(|(cfg, knobs)| Scheduler::with_knobs(cfg, knobs));
    let mut pending: Vec<Input> = Vec::new();
    let mut out = Vec::new();
    let mut gpu_free = 0u64;
    let mut res = Outcome {
        train_gpu_ns: vec![0; sc.training.len()],
        ..Outcome::default()
    };
    let mut infs: Vec<Inf> = sc
        .inference
        .iter()
        .map(|_| Inf {
            queue: VecDeque::new(),
            busy: false,
            next_kernel: 0,
            last_end: 0,
        })
        .collect();
    let mut trains: Vec<Train> = sc
        .training
        .iter()
        .map(|_| Train {
            gate_open: true,
            waiting: None,
            wait_gen: 0,
            launches: 0,
            last_end: 0,
            allowance: Allowance::Unlimited,
            launches_read: 0,
            bounded_pass: false,
            mark_every_ns: 0,
            last_mark: None,
            mark_seq: 0,
        })
        .collect();
    let start = 10 * MS;
    if let Some(s) = sched.as_mut() {
        for (i, _) in sc.inference.iter().enumerate() {
            s.handle(
                start,
                Input::Register {
                    client: inf_id(i),
                    class: Class::Inference,
                    gpu: 1,
                    slo_p99_ns: None,
                },
                &mut out,
            );
        }
        for (j, _) in sc.training.iter().enumerate() {
            s.handle(
                start,
                Input::Register {
                    client: train_id(j),
                    class: Class::Training,
                    gpu: 1,
                    slo_p99_ns: None,
                },
                &mut out,
            );
        }
        push(&mut q, start + sc.poll_ns, Ev::Poll);
    }
    for (i, spec) in sc.inference.iter().enumerate() {
        let t = start + rng.exp_ns(1e9 / spec.rate_per_s);
        push(&mut q, t, Ev::Arrival(i));
    }
    for j in 0..sc.training.len() {
        push(&mut q, start, Ev::TrainStep(j));
    }
    let end = start + sc.duration_ns;
    let mut tick_at: Option<u64> = None;
    while let Some(Reverse((now, _, ev))) = q.pop() {
        if now > end {
            break;
        }
        match ev {
            Ev::Arrival(i) => {
                let spec = &sc.inference[i];
                infs[i].queue.push_back(now);
                if !infs[i].busy {
                    infs[i].busy = true;
                    infs[i].next_kernel = 0;
                    push(&mut q, now, Ev::InfStep(i));
                }
                let t = now + rng.exp_ns(1e9 / spec.rate_per_s);
                push(&mut q, t, Ev::Arrival(i));
            }
            Ev::InfStep(i) => {
                let spec = &sc.inference[i];
                let inf = &mut infs[i];
                if inf.next_kernel < spec.kernels.len() {
                    let d = spec.kernels[inf.next_kernel];
                    let e = now.max(gpu_free) + d;
                    gpu_free = e;
                    inf.last_end = e;
                    pending.push(Input::Launch {
                        client: inf_id(i),
                        func_id: 1000 + inf.next_kernel as u64,
                        ts_ns: now,
                    });
                    inf.next_kernel += 1;
                    push(&mut q, now + spec.cpu_per_launch_ns, Ev::InfStep(i));
                } else {
                    pending.push(Input::SyncBegin {
                        client: inf_id(i),
                        ts_ns: now,
                    });
                    push(&mut q, now.max(inf.last_end), Ev::InfSyncDone(i));
                }
            }
            Ev::InfSyncDone(i) => {
                pending.push(Input::SyncEnd {
                    client: inf_id(i),
                    ts_ns: now,
                });
                let inf = &mut infs[i];
                let arrived = inf.queue.pop_front().expect("a request in service");
                if arrived >= start + sc.warmup_ns {
                    res.latencies.push(now - arrived);
                } else {
                    res.warmup_latencies.push(now - arrived);
                }
                if inf.queue.is_empty() {
                    inf.busy = false;
                } else {
                    inf.next_kernel = 0;
                    push(&mut q, now, Ev::InfStep(i));
                }
            }
            Ev::TrainStep(j) => {
                let spec = &sc.training[j];
                let tr = &mut trains[j];
                let pass = std::mem::take(&mut tr.bounded_pass);
                if !pass && !tr.may_launch(sc.launch_limits) && tr.waiting.is_none() {
                    tr.waiting = Some(now);
                    tr.wait_gen += 1;
                    push(
                        &mut q,
                        now + MAX_GATE_WAIT_NS,
                        Ev::TrainWaitBound(j, tr.wait_gen),
                    );
                    continue;
                }
                if !pass && tr.waiting.is_some() {
                    continue; // woken by the gate, the limit or the bound only
                }
                let k = (tr.launches % spec.kernels.len() as u64) as usize;
                let d = spec.kernels[k];
                let e = now.max(gpu_free) + d;
                gpu_free = e;
                tr.last_end = e;
                if e <= end {
                    res.train_gpu_ns[j] += d;
                }
                pending.push(Input::Launch {
                    client: train_id(j),
                    func_id: k as u64,
                    ts_ns: now,
                });
                tr.launches += 1;
                if tr.mark_every_ns > 0
                    && tr
                        .last_mark
                        .is_none_or(|m| now.saturating_sub(m) >= tr.mark_every_ns)
                {
                    tr.last_mark = Some(now);
                    tr.mark_seq += 1;
                    res.marks += 1;
                    pending.push(Input::Mark {
                        client: train_id(j),
                        seq: tr.mark_seq,
                        ts_ns: now,
                    });
                    push(
                        &mut q,
                        e.div_ceil(MARK_POLL_NS) * MARK_POLL_NS,
                        Ev::TrainMarkDone(j, tr.mark_seq),
                    );
                }
                let mut t = now + spec.cpu_per_launch_ns;
                if tr.launches.is_multiple_of(u64::from(spec.stall_every)) {
                    t += rng.range(spec.stall_ns.0, spec.stall_ns.1);
                }
                if spec.sync_every > 0 && tr.launches.is_multiple_of(u64::from(spec.sync_every)) {
                    pending.push(Input::SyncBegin {
                        client: train_id(j),
                        ts_ns: t,
                    });
                    push(&mut q, t.max(tr.last_end), Ev::TrainSyncDone(j));
                } else {
                    push(&mut q, t, Ev::TrainStep(j));
                }
            }
            Ev::TrainSyncDone(j) => {
                pending.push(Input::SyncEnd {
                    client: train_id(j),
                    ts_ns: now,
                });
                push(
                    &mut q,
                    now + sc.training[j].cpu_per_launch_ns,
                    Ev::TrainStep(j),
                );
            }
            Ev::TrainMarkDone(j, seq) => {
                pending.push(Input::MarkDone {
                    client: train_id(j),
                    seq,
                    ts_ns: now,
                });
            }
            Ev::TrainWaitBound(j, gen) => {
                let tr = &mut trains[j];
                if tr.waiting.is_some() && tr.wait_gen == gen {
                    tr.waiting = None;
                    res.bounded_waits += 1;
                    // Proceed as the shim does: launch once, gate or not.
                    tr.bounded_pass = true;
                    push(&mut q, now, Ev::TrainStep(j));
                }
            }
            Ev::Poll | Ev::Tick => {
                let Some(s) = sched.as_mut() else { continue };
                if ev == Ev::Poll {
                    // The launch counters, read before the records.
                    for tr in &mut trains {
                        tr.launches_read = tr.launches;
                    }
                    // Records are pushed in event (time) order, but a sync's
                    // begin is stamped when the CPU gets there: sort by ts.
                    pending.sort_by_key(ts_of);
                    let mut later = Vec::new();
                    for input in pending.drain(..) {
                        if ts_of(&input) <= now {
                            s.handle(now, input, &mut out);
                        } else {
                            later.push(input);
                        }
                    }
                    pending = later;
                    push(&mut q, now + sc.poll_ns, Ev::Poll);
                }
                let next = s.tick(now, &mut out);
                for o in out.drain(..) {
                    let (client, set): (ClientId, &dyn Fn(&mut Train)) = match o {
                        Output::Gate { client, open } => (client, &move |t| t.gate_open = open),
                        Output::Limit { client, beyond } => {
                            (client, &move |t| t.allowance = beyond)
                        }
                        Output::Marks { client, every_ns } => {
                            (client, &move |t| t.mark_every_ns = every_ns)
                        }
                        // The FIFO model has no local bound (v1 only).
                        Output::Budget { .. } | Output::Estimate { .. } => continue,
                    };
                    if client >= 101 {
                        set(&mut trains[(client - 101) as usize]);
                    }
                }
                // Wake every waiter that may launch now (a gate opened, or a
                // limit moved with the counter or the allowance).
                for (j, tr) in trains.iter_mut().enumerate() {
                    if tr.waiting.is_some() && tr.may_launch(sc.launch_limits) {
                        tr.waiting = None;
                        push(&mut q, now, Ev::TrainStep(j));
                    }
                }
                if let Some(t) = next {
                    if tick_at.is_none_or(|a| a <= now || t < a) {
                        tick_at = Some(t);
                        push(&mut q, t, Ev::Tick);
                    }
                }
            }
        }
    }
    if let (Some(s), Some(spec)) = (sched.as_ref(), sc.training.first()) {
        let est: u64 = (0..spec.kernels.len() as u64)
            .filter_map(|k| s.kernel_estimate(train_id(0), k))
            .sum();
        res.est_over_true = Some(est as f64 / spec.kernels.iter().sum::<u64>() as f64);
    }
    for inf in &infs {
        for &arrived in inf.queue.iter().filter(|&&a| a >= start + sc.warmup_ns) {
            res.latencies.push(end.saturating_sub(arrived));
            res.unfinished += 1;
        }
    }
    res
}

fn ts_of(i: &Input) -> u64 {
    match *i {
        Input::Launch { ts_ns, .. }
        | Input::GraphLaunch { ts_ns, .. }
        | Input::SyncBegin { ts_ns, .. }
        | Input::SyncEnd { ts_ns, .. }
        | Input::RequestBegin { ts_ns, .. }
        | Input::RequestEnd { ts_ns, .. }
        | Input::Mark { ts_ns, .. }
        | Input::MarkDone { ts_ns, .. } => ts_ns,
        Input::Register { .. } | Input::SetClass { .. } | Input::Depart { .. } => 0,
    }
}

// ---- the scenarios and the comparison ----

fn inference(rate: f64) -> InfSpec {
    InfSpec {
        rate_per_s: rate,
        kernels: vec![
            150 * US,
            100 * US,
            200 * US,
            100 * US,
            50 * US,
            100 * US,
            150 * US,
            50 * US,
        ],
        cpu_per_launch_ns: 10 * US,
    }
}

fn training() -> TrainSpec {
    TrainSpec {
        kernels: vec![
            50 * US,
            200 * US,
            1_000 * US,
            2_000 * US,
            100 * US,
            500 * US,
            300 * US,
            800 * US,
            50 * US,
            150 * US,
        ],
        cpu_per_launch_ns: 20 * US,
        sync_every: 50,
        stall_every: 10,
        stall_ns: (200 * US, 2 * MS),
    }
}

/// A training job whose kernels all take 1-3 ms (20-60 x the 50 us a kernel
/// is estimated at before it is measured), syncing every `sync_every`
/// launches (0: never).
fn long_kernel_training(sync_every: u32) -> TrainSpec {
    TrainSpec {
        kernels: vec![2 * MS, 1_500 * US, 3 * MS, 2 * MS, MS, 2_500 * US],
        sync_every,
        ..training()
    }
}

fn base(
    name: &'static str,
    inference: Vec<InfSpec>,
    training: Vec<TrainSpec>,
    seed: u64,
) -> Scenario {
    Scenario {
        name,
        inference,
        training,
        duration_ns: 10_000 * MS,
        warmup_ns: 1_000 * MS,
        poll_ns: 100 * US,
        seed,
        launch_limits: true,
    }
}

/// Trainers that sync rarely or never, with kernels far from the default
/// estimate: what completion marks are for.
pub(crate) fn rare_sync_scenarios() -> Vec<Scenario> {
    vec![
        base(
            "1 inference + 1 training of 1-3 ms kernels, never syncing",
            vec![inference(30.0)],
            vec![long_kernel_training(0)],
            4,
        ),
        base(
            "1 inference + 1 training of 1-3 ms kernels, syncing every 50 launches (~100 ms)",
            vec![inference(30.0)],
            vec![long_kernel_training(50)],
            5,
        ),
    ]
}

pub(crate) fn scenarios() -> Vec<Scenario> {
    vec![
        base(
            "1 inference + 1 training",
            vec![inference(30.0)],
            vec![training()],
            1,
        ),
        base(
            "1 inference + 2 training",
            vec![inference(30.0)],
            vec![training(), training()],
            2,
        ),
        base(
            "2 inference + 1 training",
            vec![inference(15.0), inference(15.0)],
            vec![training()],
            3,
        ),
    ]
}

pub(crate) struct Row {
    pub(crate) p50: u64,
    pub(crate) p99: u64,
    /// Training GPU work done / the same training alone (policy off).
    pub(crate) train_kept: f64,
    pub(crate) bounded_waits: u64,
    /// Requests unfinished at the end (counted at their time so far).
    pub(crate) unfinished: usize,
    /// [`Outcome::est_over_true`].
    pub(crate) est_over_true: Option<f64>,
}

pub(crate) fn row(sc: &Scenario, policy: Option<(SchedConfig, Knobs)>, alone_train: u64) -> Row {
    let o = simulate(sc, policy);
    Row {
        p50: o.pct(0.5),
        p99: o.pct(0.99),
        train_kept: o.train_total() as f64 / alone_train as f64,
        bounded_waits: o.bounded_waits,
        unfinished: o.unfinished,
        est_over_true: o.est_over_true,
    }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The variants compared (name, config, knobs); the first is the kept one.
/// "v1" is the contract's rule as written; the others change one thing of the
/// kept policy.
pub(crate) fn variants() -> Vec<(&'static str, SchedConfig, Knobs)> {
    let d = SchedConfig::default;
    let k = Knobs::default;
    let v1 = Knobs {
        block_while_inference_queued: false,
        ..k()
    };
    vec![
        ("kept (defaults)", d(), k()),
        ("v1: no block while queued", d(), v1),
        (
            "v1, budget not split",
            d(),
            Knobs {
                split: Split::Whole,
                ..v1
            },
        ),
        (
            "hold 0",
            SchedConfig {
                request_hold_ns: 0,
                ..d()
            },
            k(),
        ),
        (
            "hold 1 ms",
            SchedConfig {
                request_hold_ns: MS,
                ..d()
            },
            k(),
        ),
        (
            "active budget 250 us",
            SchedConfig {
                active_budget_ns: 250 * US,
                ..d()
            },
            k(),
        ),
        // The idle budget may not be below the active budget's ceiling
        // (validate() refuses it, and the scheduler would raise it).
        (
            "idle budget 2 ms",
            SchedConfig {
                idle_budget_ns: 2 * MS,
                max_active_budget_ns: 2 * MS,
                ..d()
            },
            k(),
        ),
        (
            "idle budget 1 ms",
            SchedConfig {
                idle_budget_ns: MS,
                max_active_budget_ns: MS,
                ..d()
            },
            k(),
        ),
        (
            "no completion marks",
            SchedConfig {
                mark_every_ns: 0,
                ..d()
            },
            k(),
        ),
    ]
}

/// The comparison the contract asks for, printed (run with --nocapture),
/// with the directions asserted.
#[test]
fn policy_on_beats_off_for_inference_and_keeps_training() {
    for sc in scenarios() {
        let alone_inf = simulate(
            &Scenario {
                training: vec![],
                ..sc.clone()
            },
            None,
        );
        let alone_train = simulate(
            &Scenario {
                inference: vec![],
                ..sc.clone()
            },
            None,
        )
        .train_total();
        let alone_train_on = simulate(
            &Scenario {
                inference: vec![],
                ..sc.clone()
            },
            Some((SchedConfig::default(), Knobs::default())),
        )
        .train_total();
        let off = row(&sc, None, alone_train);
        println!("== {} (poll {} us)", sc.name, sc.poll_ns / US);
        println!(
            "   inference alone:           p50 {:7.3} ms  p99 {:7.3} ms",
            ms(alone_inf.pct(0.5)),
            ms(alone_inf.pct(0.99))
        );
        println!(
            "   training alone, policy on: kept {:.3} of alone",
            alone_train_on as f64 / alone_train as f64
        );
        println!(
            "   policy off:                p50 {:7.3} ms  p99 {:7.3} ms  training kept {:.3}",
            ms(off.p50),
            ms(off.p99),
            off.train_kept
        );
        for (i, (name, cfg, knobs)) in variants().into_iter().enumerate() {
            let on = row(&sc, Some((cfg, knobs)), alone_train);
            println!(
                "   on, {:27} p50 {:7.3} ms  p99 {:7.3} ms  training kept {:.3}  bounded waits {}  estimates/true {:.2}",
                format!("{name}:"),
                ms(on.p50),
                ms(on.p99),
                on.train_kept,
                on.bounded_waits,
                on.est_over_true.unwrap_or(0.0)
            );
            if i == 0 {
                assert!(
                    on.p99 < off.p99 / 2,
                    "{}: p99 on {} vs off {}",
                    sc.name,
                    on.p99,
                    off.p99
                );
                assert!(
                    on.train_kept > 0.5,
                    "{}: training kept {}",
                    sc.name,
                    on.train_kept
                );
                assert_eq!(on.bounded_waits, 0, "no wait should need the shim's bound");
            }
        }
        let slow = Scenario {
            poll_ns: MS,
            ..sc.clone()
        };
        let on_slow = row(
            &slow,
            Some((SchedConfig::default(), Knobs::default())),
            alone_train,
        );
        println!(
            "   on, kept, reader poll 1 ms:  p50 {:7.3} ms  p99 {:7.3} ms  training kept {:.3}",
            ms(on_slow.p50),
            ms(on_slow.p99),
            on_slow.train_kept
        );
        // The same without the shim-side launch limits (the gate alone).
        let kept = || Some((SchedConfig::default(), Knobs::default()));
        for (label, poll_ns) in [("poll 100 us", sc.poll_ns), ("poll 1 ms", MS)] {
            let no_limits = Scenario {
                poll_ns,
                launch_limits: false,
                ..sc.clone()
            };
            let r = row(&no_limits, kept(), alone_train);
            // What the limits are for: the reader's delay no longer lets
            // bursts through, so with a slow reader the limits win clearly.
            if poll_ns == MS {
                assert!(
                    on_slow.p99 < r.p99,
                    "{}: poll 1 ms, p99 with limits {} vs without {}",
                    sc.name,
                    on_slow.p99,
                    r.p99
                );
            }
            println!(
                "   on, kept, no limits, {:10} p50 {:7.3} ms  p99 {:7.3} ms  training kept {:.3}",
                format!("{label}:"),
                ms(r.p50),
                ms(r.p99),
                r.train_kept
            );
        }
        // Training alone is not slowed by the policy (the count-cap lesson).
        assert!(alone_train_on as f64 > 0.95 * alone_train as f64);
    }
}

#[test]
fn the_simulation_is_deterministic() {
    let sc = &scenarios()[1];
    let a = simulate(sc, Some((SchedConfig::default(), Knobs::default())));
    let b = simulate(sc, Some((SchedConfig::default(), Knobs::default())));
    assert_eq!(a.latencies, b.latencies);
    assert_eq!(a.train_gpu_ns, b.train_gpu_ns);
}

/// Completion marks on (the default) vs off, for trainers that sync rarely or
/// never and whose kernels are far longer than the default estimate, printed
/// (run with --nocapture) with the robust directions asserted.
#[test]
fn marks_correct_a_trainer_that_rarely_syncs() {
    let no_marks = SchedConfig {
        mark_every_ns: 0,
        ..SchedConfig::default()
    };
    for sc in rare_sync_scenarios() {
        let alone_train = simulate(
            &Scenario {
                inference: vec![],
                ..sc.clone()
            },
            None,
        )
        .train_total();
        let off = row(&sc, None, alone_train);
        let on = row(
            &sc,
            Some((SchedConfig::default(), Knobs::default())),
            alone_train,
        );
        let unmarked = row(&sc, Some((no_marks.clone(), Knobs::default())), alone_train);
        println!("== {} (poll {} us)", sc.name, sc.poll_ns / US);
        for (name, r) in [
            ("policy off", &off),
            ("on, marks every 500 us", &on),
            ("on, no marks", &unmarked),
        ] {
            println!(
                "   {:27} p50 {:9.3} ms  p99 {:9.3} ms  training kept {:.3}  bounded waits {:2}  unfinished {:3}  estimates/true {}",
                format!("{name}:"),
                ms(r.p50),
                ms(r.p99),
                r.train_kept,
                r.bounded_waits,
                r.unfinished,
                r.est_over_true.map_or("-".into(), |e| format!("{e:.2}"))
            );
        }
        let never_syncs = sc.training.iter().all(|t| t.sync_every == 0);
        if never_syncs {
            // Without marks nothing ever corrects the 50 us guess: the
            // trainer queues without bound and requests wait for seconds.
            // With them its backlog is known within a few marks.
            assert!(
                on.p99 < unmarked.p99 / 10,
                "{}: p99 with marks {} vs without {}",
                sc.name,
                on.p99,
                unmarked.p99
            );
            assert_eq!(on.unfinished, 0, "{}: requests left waiting", sc.name);
        } else {
            // A sync now and then already corrects the estimates: marks
            // change little (see the module docs), and break nothing.
            assert!(
                on.p99 < 2 * unmarked.p99,
                "{}: p99 with marks {} vs without {}",
                sc.name,
                on.p99,
                unmarked.p99
            );
        }
        assert!(
            on.train_kept > unmarked.train_kept.min(0.95) - 0.02,
            "{}: training kept {} with marks, {} without",
            sc.name,
            on.train_kept,
            unmarked.train_kept
        );
    }
}
