//! One simulated run: jobs on one GPU, through tandem's side, on one
//! discrete-event clock.
//!
//! Three sources of events, merged in time order: the engine's own
//! ([`Gpu::next_time`]: blocks ending, copies, slices, switches), tandem's
//! ([`TandemSide::next_wake`]: reader passes, mark polls) and the jobs'
//! (arrivals, host gaps ending, gate waits reaching their bound). Everything
//! random (arrivals, CPU speed) comes from per-job generators seeded from
//! [`RunCfg::seed`], so a run is a function of its inputs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use tandem_sched::Class;

use crate::footprint;
use crate::gpu::{ClientCfg, Done, Gpu, GpuParams, Ns, Sharing, Work};
use crate::job::{outcome, JobSpec, JobState, Outcome, Phase};
use crate::mps::sm_cap;
use crate::rng::Rng;
use crate::tandem::{Gate, HostEvent, TandemSide};
use crate::trace::{JobClass, Op};

/// When the jobs start (tandem registrations happen at 0).
pub const START_NS: Ns = 1_000_000;

/// A run's settings.
#[derive(Clone, Debug)]
pub struct RunCfg {
    /// The GPU.
    pub gpu: GpuParams,
    /// Plain sharing or MPS.
    pub sharing: Sharing,
    /// Seed of every random draw.
    pub seed: u64,
    /// Excluded from the measurement at the start, ns.
    pub warmup_ns: Ns,
    /// The measured window, ns (inference arrivals stop at its end).
    pub window_ns: Ns,
    /// Longest the run goes on after the window to serve what arrived, ns.
    pub drain_max_ns: Ns,
    /// Inference jobs mark requests (`tandem_request_begin/end`).
    pub explicit_requests: bool,
}

/// A job's MPS settings in one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// `CUDA_MPS_CLIENT_PRIORITY`.
    pub priority: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Arrival(usize),
    Cpu(usize),
    GateBound(usize, u64),
}

/// The marks table's hasher: its keys are (job, token) pairs the model
/// makes itself, so a multiply-rotate mix (FxHash's) does; SipHash's
/// resistance to chosen keys cost 5% of a matrix run.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
}

struct World<'a> {
    cfg: &'a RunCfg,
    specs: &'a [JobSpec],
    gpu: Gpu,
    tandem: &'a mut dyn TandemSide,
    jobs: Vec<JobState>,
    arrivals: Vec<Rng>,
    cpu: Vec<Rng>,
    heap: BinaryHeap<Reverse<(Ns, u64, Ev)>>,
    seq: u64,
    marks: HashMap<(usize, u64), u64, BuildHasherDefault<KeyHasher>>,
    /// Each op's co-residence share and DRAM share (kernels only), per job,
    /// computed once: a launch looks them up.
    footprints: Vec<Vec<(f64, f64)>>,
    /// Each job's last kernel launched: (its token, finished on the GPU).
    last_kernel: Vec<Option<(u64, bool)>>,
    /// Each job's mark for the CUDA graph launch it is submitting, until
    /// its last node (see [`World::launch`]).
    graph_mark: Vec<Option<u64>>,
    arrivals_end: Ns,
}

/// Runs `specs` (each job is one GPU client, in this order) with their
/// MPS `placements`, through `tandem`; returns each job's [`Outcome`] and
/// the context switches made.
pub fn run(
    cfg: &RunCfg,
    specs: &[JobSpec],
    placements: &[Placement],
    tandem: &mut dyn TandemSide,
) -> (Vec<Outcome>, u64) {
    let (outs, switches, _) = run_observed(cfg, specs, placements, tandem, None);
    (outs, switches)
}

/// [`run`], with the engine's waits charged to `attribution` (see
/// [`crate::gpu::Attribution`]), which comes back with what it counted.
pub fn run_observed(
    cfg: &RunCfg,
    specs: &[JobSpec],
    placements: &[Placement],
    tandem: &mut dyn TandemSide,
    attribution: Option<crate::gpu::Attribution>,
) -> (Vec<Outcome>, u64, Option<crate::gpu::Attribution>) {
    let clients: Vec<ClientCfg> = specs
        .iter()
        .zip(placements)
        .map(|(s, p)| ClientCfg {
            priority: p.priority,
            sm_cap: sm_cap(cfg.gpu.sms, s.sm_pct),
        })
        .collect();
    let seed = |j: usize, k: u64| {
        cfg.seed
            .wrapping_mul(1_000_003)
            .wrapping_add(j as u64 * 17 + k)
    };
    let mut w = World {
        cfg,
        specs,
        gpu: Gpu::new(cfg.gpu.clone(), &cfg.sharing, &clients),
        tandem,
        jobs: specs.iter().map(|_| JobState::new()).collect(),
        arrivals: (0..specs.len()).map(|j| Rng::new(seed(j, 1))).collect(),
        cpu: (0..specs.len()).map(|j| Rng::new(seed(j, 2))).collect(),
        heap: BinaryHeap::new(),
        seq: 0,
        marks: HashMap::default(),
        footprints: specs
            .iter()
            .map(|s| {
                s.trace
                    .ops
                    .iter()
                    .map(|op| match op {
                        Op::Kernel(k) => (
                            footprint::sm_share(k, &cfg.gpu.sm),
                            footprint::mem_frac(k, cfg.gpu.dram_bytes_per_ns),
                        ),
                        _ => (0.0, 0.0),
                    })
                    .collect()
            })
            .collect(),
        last_kernel: vec![None; specs.len()],
        graph_mark: vec![None; specs.len()],
        arrivals_end: START_NS + cfg.warmup_ns + cfg.window_ns,
    };
    if let Some(a) = attribution {
        w.gpu.observe(a);
    }
    let end = w.arrivals_end + cfg.drain_max_ns;
    for (j, s) in specs.iter().enumerate() {
        let class = match s.class() {
            JobClass::Inference => Class::Inference,
            JobClass::Training => Class::Training,
        };
        w.tandem.register(0, j, class);
        match s.class() {
            JobClass::Inference => {
                let t = START_NS + w.arrivals[j].exp(1e9 / s.rate_per_s) as Ns;
                w.push(t, Ev::Arrival(j));
            }
            JobClass::Training => w.begin_unit(j, START_NS),
        }
    }
    let mut done = Vec::new();
    let mut ready = Vec::new();
    let (w0, w1) = (START_NS + cfg.warmup_ns, w.arrivals_end);
    // Each job's SM-time dispatched by the window's start and end.
    let sm_ns = |g: &Gpu| (0..specs.len()).map(|j| g.sm_ns(j)).collect::<Vec<_>>();
    let (mut at_w0, mut at_w1) = (None, None);
    loop {
        let tg = w.gpu.next_time();
        let tt = w.tandem.next_wake();
        let th = w.heap.peek().map(|r| r.0 .0);
        let Some(t) = min_opt(min_opt(tg, tt), th) else {
            break;
        };
        if t >= w0 && at_w0.is_none() {
            at_w0 = Some(sm_ns(&w.gpu));
        }
        if t >= w1 && at_w1.is_none() {
            at_w1 = Some(sm_ns(&w.gpu));
        }
        if t > end || (t >= w.arrivals_end && w.inference_drained() && w.training_past_window()) {
            break;
        }
        if tg == Some(t) {
            w.gpu.advance(t, &mut done);
            for d in done.drain(..) {
                w.on_done(d);
            }
        } else if tt == Some(t) {
            w.tandem.wake(t, &mut ready);
            for j in ready.drain(..) {
                w.retry_gate(t, j);
            }
        } else {
            let Reverse((t, _, ev)) = w.heap.pop().expect("an event");
            w.on_event(t, ev);
        }
    }
    let last = w.last_result().max(w1);
    let at_w0 = at_w0.unwrap_or_else(|| sm_ns(&w.gpu));
    let at_w1 = at_w1.unwrap_or_else(|| sm_ns(&w.gpu));
    let capacity = f64::from(cfg.gpu.sms) * w1.saturating_sub(w0).max(1) as f64;
    let outs = specs
        .iter()
        .zip(&w.jobs)
        .enumerate()
        .map(|(j, (s, st))| Outcome {
            gpu_share: (at_w1[j] - at_w0[j]) / capacity,
            ..outcome(s, st, START_NS, w0, w1, last.min(end))
        })
        .collect();
    (outs, w.gpu.switches(), w.gpu.take_attribution())
}

/// The earlier of two times, either of which may be absent.
#[inline]
fn min_opt(a: Option<Ns>, b: Option<Ns>) -> Option<Ns> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl World<'_> {
    fn push(&mut self, t: Ns, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn inference_drained(&self) -> bool {
        self.specs
            .iter()
            .zip(&self.jobs)
            .all(|(s, st)| s.class() == JobClass::Training || st.queue.is_empty())
    }

    /// Every training job has completed a step at or after the window's
    /// end, so that its throughput over the window is interpolated between
    /// two completions rather than counted in whole steps (a step of 5 s
    /// in a 20 s window would otherwise be off by up to a quarter).
    fn training_past_window(&self) -> bool {
        self.specs.iter().zip(&self.jobs).all(|(s, st)| {
            s.class() == JobClass::Inference
                || st.steps.last().is_some_and(|&c| c >= self.arrivals_end)
        })
    }

    fn last_result(&self) -> Ns {
        self.jobs
            .iter()
            .filter_map(|st| st.served.last().map(|&(_, d)| d))
            .max()
            .unwrap_or(0)
    }

    fn gap(&self, j: usize) -> Ns {
        let st = &self.jobs[j];
        (self.specs[j].trace.ops[st.op].host_gap_ns() as f64 * st.factor).round() as Ns
    }

    /// A request (or step) begins at `t`.
    fn begin_unit(&mut self, j: usize, t: Ns) {
        let cv = self.specs[j].cpu_cv;
        let factor = self.cpu[j].jitter(cv);
        let st = &mut self.jobs[j];
        st.op = 0;
        st.factor = factor;
        st.phase = Phase::Cpu;
        if self.cfg.explicit_requests && self.specs[j].class() == JobClass::Inference {
            self.tandem.host_event(t, j, HostEvent::RequestBegin);
        }
        let g = self.gap(j);
        self.push(t + g, Ev::Cpu(j));
    }

    /// The op just issued is done with (on the CPU): go on.
    fn next_op(&mut self, j: usize, t: Ns) {
        self.jobs[j].op += 1;
        if self.jobs[j].op < self.specs[j].trace.ops.len() {
            self.jobs[j].phase = Phase::Cpu;
            let g = self.gap(j);
            self.push(t + g, Ev::Cpu(j));
            return;
        }
        match self.specs[j].class() {
            JobClass::Inference => {
                if self.cfg.explicit_requests {
                    self.tandem.host_event(t, j, HostEvent::RequestEnd);
                }
                let st = &mut self.jobs[j];
                let a = st.queue.pop_front().expect("a request in service");
                st.served.push((a, t));
                if st.queue.is_empty() {
                    st.phase = Phase::Idle;
                } else {
                    self.begin_unit(j, t);
                }
            }
            JobClass::Training => {
                self.jobs[j].steps.push(t);
                self.begin_unit(j, t);
            }
        }
    }

    fn on_event(&mut self, t: Ns, ev: Ev) {
        match ev {
            Ev::Arrival(j) => {
                self.jobs[j].queue.push_back(t);
                let next = t + self.arrivals[j].exp(1e9 / self.specs[j].rate_per_s) as Ns;
                if next < self.arrivals_end {
                    self.push(next, Ev::Arrival(j));
                }
                if self.jobs[j].phase == Phase::Idle {
                    self.begin_unit(j, t);
                }
            }
            Ev::Cpu(j) => self.issue(j, t),
            Ev::GateBound(j, gen) => {
                if self.jobs[j].phase == Phase::Gate && self.jobs[j].gate_gen == gen {
                    self.tandem.launch_anyway(t, j);
                    self.launch(j, t);
                }
            }
        }
    }

    fn issue(&mut self, j: usize, t: Ns) {
        let spec = self.specs;
        match &spec[j].trace.ops[self.jobs[j].op] {
            Op::Kernel(k) if self.graph_node(j, k) => self.launch(j, t),
            Op::Kernel(k) => match self.tandem.before_launch(t, j, k) {
                Gate::Proceed => self.launch(j, t),
                Gate::Wait { until, mark } => {
                    let st = &mut self.jobs[j];
                    st.phase = Phase::Gate;
                    st.gate_gen += 1;
                    let gen = st.gate_gen;
                    self.push(until, Ev::GateBound(j, gen));
                    self.mark_last(j, t, mark);
                }
            },
            Op::CopyH2d { bytes, stream, .. } | Op::CopyD2h { bytes, stream, .. } => {
                let d2h = matches!(spec[j].trace.ops[self.jobs[j].op], Op::CopyD2h { .. });
                let token = self.token(j);
                self.gpu.submit(
                    t,
                    j,
                    *stream as usize,
                    Work::Copy { bytes: *bytes, d2h },
                    token,
                );
                self.next_op(j, t);
            }
            Op::Sync { .. } => {
                self.tandem.host_event(t, j, HostEvent::SyncBegin);
                if self.gpu.idle(j) {
                    self.sync_end(j, t);
                } else {
                    self.jobs[j].phase = Phase::Sync;
                }
            }
        }
    }

    fn token(&mut self, j: usize) -> u64 {
        let st = &mut self.jobs[j];
        st.next_token += 1;
        st.next_token
    }

    fn launch(&mut self, j: usize, t: Ns) {
        let spec = self.specs;
        let Op::Kernel(k) = &spec[j].trace.ops[self.jobs[j].op] else {
            unreachable!("launch of a kernel op")
        };
        let token = self.token(j);
        let work = Work::Kernel {
            blocks: k.blocks(),
            blocks_per_sm: k.blocks_per_sm,
            duration_ns: k.duration_ns,
            sm_share: self.footprints[j][self.jobs[j].op].0,
            mem_frac: self.footprints[j][self.jobs[j].op].1,
            sm_limit: self.tandem.sm_limit(t, j, k),
        };
        self.gpu.submit(t, j, k.stream as usize, work, token);
        self.last_kernel[j] = Some((token, false));
        // The shim's mark after a graph launch is an event recorded behind
        // the whole graph: it completes with the graph's last node, not
        // its first.
        let seq = if self.graph_node(j, k) {
            self.graph_mark[j].take()
        } else {
            self.tandem.after_launch(t, j, k)
        };
        if let Some(seq) = seq {
            if self.graph_continues(j, k) {
                self.graph_mark[j] = Some(seq);
            } else {
                self.marks.insert((j, token), seq);
            }
        }
        self.next_op(j, t);
    }

    /// `k`, job `j`'s current op, is a node of a CUDA graph launch whose
    /// next node is the op after it.
    fn graph_continues(&self, j: usize, k: &crate::trace::Kernel) -> bool {
        k.graph != 0
            && matches!(self.specs[j].trace.ops.get(self.jobs[j].op + 1), Some(Op::Kernel(n)) if n.graph == k.graph)
    }

    /// `k`, job `j`'s current op, is a later node of the CUDA graph launch
    /// the op before it belongs to: the GPU starts it, the shim saw its
    /// graph's one launch already.
    fn graph_node(&self, j: usize, k: &crate::trace::Kernel) -> bool {
        let op = self.jobs[j].op;
        k.graph != 0
            && op > 0
            && matches!(&self.specs[j].trace.ops[op - 1], Op::Kernel(p) if p.graph == k.graph)
    }

    fn retry_gate(&mut self, t: Ns, j: usize) {
        if self.jobs[j].phase != Phase::Gate {
            return;
        }
        let spec = self.specs;
        let Op::Kernel(k) = &spec[j].trace.ops[self.jobs[j].op] else {
            return;
        };
        match self.tandem.before_launch(t, j, k) {
            Gate::Proceed => self.launch(j, t),
            // Still waiting, under the bound already pushed.
            Gate::Wait { mark, .. } => self.mark_last(j, t, mark),
        }
    }

    /// The shim's on-demand completion mark `mark` after job `j`'s last
    /// launch: reported when the GPU is past it (at once if it is already).
    fn mark_last(&mut self, j: usize, t: Ns, mark: Option<u64>) {
        let Some(seq) = mark else { return };
        match self.last_kernel[j] {
            Some((token, false)) => {
                self.marks.insert((j, token), seq);
            }
            _ => self.tandem.launch_completed(t, j, seq),
        }
    }

    fn sync_end(&mut self, j: usize, t: Ns) {
        self.tandem.host_event(t, j, HostEvent::SyncEnd);
        self.next_op(j, t);
    }

    fn on_done(&mut self, d: Done) {
        let j = d.client;
        if let Some((token, done)) = self.last_kernel[j].as_mut() {
            if *token == d.token {
                *done = true;
            }
        }
        if let Some(seq) = self.marks.remove(&(j, d.token)) {
            self.tandem.launch_completed(d.at, j, seq);
        }
        if self.jobs[j].phase == Phase::Sync && self.gpu.idle(j) {
            self.sync_end(j, d.at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tandem::Off;
    use crate::trace::{Kernel, Trace, FORMAT};

    /// A training job whose step is one kernel of `grid` blocks (one an
    /// SM, each `sm_share` of it) lasting `duration_ns` after `gap_ns` of
    /// CPU, then a sync, run alone under MPS on the calibrated H100.
    fn one_kernel_steps(grid: u32, duration_ns: Ns, sm_share: f64, gap_ns: Ns) -> JobSpec {
        let trace = Trace {
            format: FORMAT.into(),
            job: "t".into(),
            class: JobClass::Training,
            source: "synthetic".into(),
            device: String::new(),
            notes: String::new(),
            ops: vec![
                Op::Kernel(Kernel {
                    sm_share,
                    host_gap_ns: gap_ns,
                    ..Kernel::new("k", grid, 128, 1, duration_ns)
                }),
                Op::Sync { host_gap_ns: 0 },
            ],
        };
        JobSpec {
            trace,
            rate_per_s: 0.0,
            cpu_cv: 0.0,
            sm_pct: 100,
        }
    }

    /// `spec` alone, measured over `window_ns` after `warmup_ns`.
    fn alone(spec: JobSpec, warmup_ns: Ns, window_ns: Ns) -> Outcome {
        let cfg = RunCfg {
            gpu: crate::params::Params::calibrated().gpu,
            sharing: Sharing::Mps,
            seed: 1,
            warmup_ns,
            window_ns,
            drain_max_ns: 1_000_000_000,
            explicit_requests: false,
        };
        let (mut out, _) = run(&cfg, &[spec], &[Placement { priority: 0 }], &mut Off);
        out.remove(0)
    }

    /// A training job of 3 ms steps measured over a 10 ms window runs at
    /// 333 steps/s, not the 300 that counting whole steps gives.
    #[test]
    fn a_training_step_longer_than_the_windows_remainder_is_interpolated() {
        let out = alone(one_kernel_steps(1, 3_000_000, 1.0, 0), 0, 10_000_000);
        let sps = out.steps_per_s.unwrap();
        assert!((sps - 1e3 / 3.0).abs() < 1.0, "{sps}");
    }

    /// A job's share of the GPU over the window is the SM-time of its
    /// blocks over the GPU's: half the SMs, at half of each, half the time
    /// (1 ms kernels after 1 ms of CPU each) is an eighth.
    #[test]
    fn a_jobs_gpu_share_is_its_blocks_sm_time_over_the_gpus() {
        assert_eq!(crate::params::Params::calibrated().gpu.sms, 132);
        let spec = one_kernel_steps(66, 1_000_000, 0.5, 1_000_000);
        let out = alone(spec, 10_000_000, 200_000_000);
        let (share, sps) = (out.gpu_share, out.steps_per_s.unwrap());
        // A step is a little over 2 ms (the launch floor), so a little under.
        assert!((0.118..=0.125).contains(&share), "{share} at {sps} steps/s");
        // And it is the SM-time of the steps the window saw.
        let per_step = 66.0 * 0.5 * 1e6 / (132.0 * 1e9);
        assert!(
            (share / (sps * per_step) - 1.0).abs() < 0.01,
            "{share} at {sps} steps/s"
        );
    }

    /// What tandem saw: the launches its gate passed, and each launch's
    /// time and, once reported, its completion's.
    #[derive(Default)]
    struct Seen {
        gated: usize,
        launches: Vec<(Ns, Option<Ns>)>,
    }

    impl TandemSide for Seen {
        fn register(&mut self, _: Ns, _: usize, _: Class) {}
        fn before_launch(&mut self, _: Ns, _: usize, _: &crate::trace::Kernel) -> Gate {
            self.gated += 1;
            Gate::Proceed
        }
        fn launch_anyway(&mut self, _: Ns, _: usize) {}
        fn after_launch(&mut self, now: Ns, _: usize, _: &crate::trace::Kernel) -> Option<u64> {
            self.launches.push((now, None));
            Some(self.launches.len() as u64 - 1)
        }
        fn launch_completed(&mut self, now: Ns, _: usize, seq: u64) {
            self.launches[seq as usize].1 = Some(now);
        }
        fn host_event(&mut self, _: Ns, _: usize, _: HostEvent) {}
        fn next_wake(&self) -> Option<Ns> {
            None
        }
        fn wake(&mut self, _: Ns, _: &mut Vec<usize>) {}
    }

    /// `t` alone under MPS for 1 s, 5 requests a second: what tandem saw,
    /// and the requests served.
    fn seen_alone(p: &crate::params::Params, t: &Trace) -> (Seen, usize) {
        let cfg = RunCfg {
            gpu: p.gpu.clone(),
            sharing: Sharing::Mps,
            seed: 1,
            warmup_ns: 0,
            window_ns: 1_000_000_000,
            drain_max_ns: 1_000_000_000,
            explicit_requests: false,
        };
        let spec = JobSpec {
            trace: t.clone(),
            rate_per_s: 5.0,
            cpu_cv: 0.0,
            sm_pct: 100,
        };
        let mut seen = Seen::default();
        let (out, _) = run(&cfg, &[spec], &[Placement { priority: 0 }], &mut seen);
        let requests = out[0].latencies_ms.len();
        assert!(requests > 0);
        (seen, requests)
    }

    /// A request launched as one CUDA graph passes tandem's gate once, as
    /// the shim sees one `cuGraphLaunch`; launched eagerly, once a kernel.
    #[test]
    fn a_graph_launch_passes_the_gate_once() {
        let p = crate::params::Params::calibrated();
        let eager = crate::synthetic::job(&p, "bert_b8").unwrap();
        let graph = crate::synthetic::as_graph(&eager, "bert_b8_graph", &p);
        graph.check().unwrap();
        let kernels = eager.kernels().count();
        let (seen, requests) = seen_alone(&p, &eager);
        assert_eq!(
            (seen.gated, seen.launches.len()),
            (requests * kernels, requests * kernels)
        );
        let (seen, requests) = seen_alone(&p, &graph);
        assert_eq!((seen.gated, seen.launches.len()), (requests, requests));
        // The graph's later nodes carry no host gap: the job is GPU-bound.
        assert!(graph.host_ns() < eager.host_ns() / 10);
    }

    /// The shim's mark after a `cuGraphLaunch` is an event behind the whole
    /// graph: tandem hears of its completion when the graph's last node is
    /// done, not its first (which put an A100 BERT graph's inference idle
    /// while most of its request still ran, and the SM reservation off).
    #[test]
    fn a_graph_launch_completes_with_its_last_node() {
        let p = crate::params::Params::calibrated();
        let eager = crate::synthetic::job(&p, "bert_b8").unwrap();
        let graph = crate::synthetic::as_graph(&eager, "bert_b8_graph", &p);
        let (seen, requests) = seen_alone(&p, &graph);
        assert_eq!(seen.launches.len(), requests, "one launch a request");
        // Alone on the GPU the nodes run back to back: the graph takes
        // about its kernel time, its first node a sliver of it.
        let kernels = graph.kernel_ns();
        for &(at, done) in &seen.launches {
            let took = done.expect("every graph's mark completes") - at;
            assert!(took >= kernels * 9 / 10, "{took} ns of {kernels}");
        }
    }
}
