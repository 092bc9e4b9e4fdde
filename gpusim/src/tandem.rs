//! tandem's side of the model: the seam ([`TandemSide`]) the simulated jobs
//! launch through, and today's tandem (v1) behind it.
//!
//! # The seam
//!
//! A simulated job's CPU thread calls [`TandemSide::before_launch`] before
//! each kernel launch, exactly where the shim's `Session::gate` runs, and
//! [`TandemSide::after_launch`] after it (the shim's ring record and
//! completion mark). Syncs and request marks go through
//! [`TandemSide::host_event`]. Everything tandemd does on its own clock (the
//! reader's passes, the shim's mark polling) is [`TandemSide::wake`], called
//! at [`TandemSide::next_wake`]. A side decides the MPS client priority of
//! each class ([`TandemSide::mps_priority`]).
//!
//! Scheduler v2 plugs in here: a per-GPU "inference active" word written by
//! inference shims at launches and request begin/end and read by training
//! shims in `before_launch` (no reader in the loop: state the side keeps
//! itself, no `wake` needed); launch limits in predicted nanoseconds keyed
//! by (function, grid) (`before_launch` gets the kernel's name and grid);
//! tandem over MPS with training at low client priority (`mps_priority`).
//!
//! # v1 ([`TandemV1`]): today's code, as it runs
//!
//! * **Shim gate** (`shim/src/client/gate.rs`): the real
//!   [`ControlBlock`] of `tandem-proto` in real shared memory; a launch
//!   proceeds iff `launch_allowed()` (gate open, launch limit not reached)
//!   and is counted with `count_launch()`. Otherwise the thread waits,
//!   woken when tandemd stores a change that allows it, for at most
//!   [`MAX_GATE_WAIT_NS`], then launches anyway (fail-open).
//! * **Ring**: one [`Record`] per launch (function id: a hash of the
//!   kernel's name), sync, request mark and completion mark, stamped with
//!   the time the shim wrote it; tandemd reads them at its next pass.
//! * **Completion marks** (`shim/src/client/marks.rs`): after a launch, at
//!   most once per `mark_every_ns` (the control block's), at most
//!   [`MARK_SLOTS`] outstanding; the watcher polls every [`MARK_POLL_NS`]
//!   from the mark's placement and writes MARK_DONE at the first poll after
//!   the GPU finished the marked launch.
//! * **Reader** (`coordinator/src/reader.rs`, `drain.rs`, `grant.rs`): the
//!   real functions: each pass observes every client's launch counter,
//!   drains its records into the real [`Scheduler`]
//!   (`drain::sched_input`, timestamps bounded by the pass's time), ticks
//!   it, and applies its outputs with `grant::apply` to the control blocks.
//!   The next pass is `reader::sleep_for(reader::next_period_gated(..))`
//!   later: about every 1 ms while records flow, backing off to 10 ms when
//!   idle, 250 us after a pass that opened a gate, sooner for a tick the
//!   scheduler asked for (never under 50 us).
//!
//! Not modelled: the heartbeat (tandemd beats on every pass here, so a
//! wait never goes stale), ring overflow (the rings never fill at these
//! rates), and the time a woken thread takes to run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use tandem_coordinator::{drain, grant, reader};
use tandem_proto::estimates::EstimateTable;
use tandem_proto::inflight::{CLASS_INFERENCE, CLASS_TRAINING};
use tandem_proto::ring::{self, Consumer, RingLayout};
use tandem_proto::{ControlBlock, EventKind, Mapping, Record};
use tandem_sched::{Class, Input, Knobs, Output, SchedConfig, Scheduler};

use crate::gpu::Ns;
use crate::local::{Local, NodeBoard, Verdict, WAIT_POLL_NS};
use crate::trace::Kernel;

/// The shim's bound on one gate wait (`MAX_GATE_WAIT` in
/// `shim/src/client/session.rs`; a test checks the two agree).
pub const MAX_GATE_WAIT_NS: Ns = 50_000_000;
/// How often the shim's watcher polls outstanding marks (`POLL_EVERY` in
/// `shim/src/client/marks.rs`).
pub const MARK_POLL_NS: Ns = 200_000;
/// Marks outstanding at most (`SLOTS` in `shim/src/client/slots.rs`).
pub const MARK_SLOTS: u32 = 512;

/// The shim's verdict on a launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Launch now (counted).
    Proceed,
    /// Wait: until [`TandemSide::wake`] names this job, or until `until`
    /// (then [`TandemSide::launch_anyway`]).
    Wait {
        /// The wait's bound.
        until: Ns,
        /// `Some(seq)`: place completion mark `seq` after the job's last
        /// launch (call [`TandemSide::launch_completed`] when the GPU is
        /// past it, at once if it already is): the shim's on-demand mark.
        mark: Option<u64>,
    },
}

/// Host-side events the shim reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostEvent {
    /// A synchronising call begins.
    SyncBegin,
    /// It returned (the job's work had drained).
    SyncEnd,
    /// `tandem_request_begin`.
    RequestBegin,
    /// `tandem_request_end`.
    RequestEnd,
}

/// What tandem does for the simulated jobs (see the module docs).
pub trait TandemSide {
    /// Job `job` (its index) registered as `class`.
    fn register(&mut self, now: Ns, job: usize, class: Class);
    /// The job's thread is about to launch `k`.
    fn before_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Gate;
    /// A wait ended at its bound: the launch goes ahead (counted).
    fn launch_anyway(&mut self, now: Ns, job: usize);
    /// `k` was launched; `Some(seq)`: a completion mark was placed right
    /// after it, call [`TandemSide::launch_completed`] when it completes.
    fn after_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Option<u64>;
    /// The launch marked `seq` completed on the GPU at `now`.
    fn launch_completed(&mut self, now: Ns, job: usize, seq: u64);
    /// A sync or request mark.
    fn host_event(&mut self, now: Ns, job: usize, ev: HostEvent);
    /// When [`TandemSide::wake`] next has something to do.
    fn next_wake(&self) -> Option<Ns>;
    /// Do what is due at `now`; push the waiting jobs that may now launch.
    fn wake(&mut self, now: Ns, ready: &mut Vec<usize>);
    /// The MPS client priority for a job of this class (0 normal).
    fn mps_priority(&self, _class: Class) -> u8 {
        0
    }
    /// The width of the SM mask job `job`'s launch of `k` carries at `now`
    /// (0: none). Asked once per launch that reaches the GPU.
    fn sm_limit(&mut self, _now: Ns, _job: usize, _k: &Kernel) -> u32 {
        0
    }
}

/// No tandem: every launch proceeds.
#[derive(Debug, Default)]
pub struct Off;

impl TandemSide for Off {
    fn register(&mut self, _: Ns, _: usize, _: Class) {}
    fn before_launch(&mut self, _: Ns, _: usize, _: &Kernel) -> Gate {
        Gate::Proceed
    }
    fn launch_anyway(&mut self, _: Ns, _: usize) {}
    fn after_launch(&mut self, _: Ns, _: usize, _: &Kernel) -> Option<u64> {
        None
    }
    fn launch_completed(&mut self, _: Ns, _: usize, _: u64) {}
    fn host_event(&mut self, _: Ns, _: usize, _: HostEvent) {}
    fn next_wake(&self) -> Option<Ns> {
        None
    }
    fn wake(&mut self, _: Ns, _: &mut Vec<usize>) {}
}

struct ShimClient {
    region: Mapping,
    layout: RingLayout,
    /// Records written, not yet read by tandemd.
    ring: Vec<Record>,
    waiting: bool,
    last_mark: Option<Ns>,
    mark_seq: u64,
    /// Marks placed and not yet reported done: (seq, placed at).
    marks_out: Vec<(u64, Ns)>,
    /// v2: the board and the local bound.
    local: Local,
    /// v2: `charged_ns` each outstanding mark covers.
    mark_charged: Vec<(u64, u64)>,
    /// v2: `charged_ns` when the current sync began.
    sync_charged: u64,
}

impl ShimClient {
    fn new(id: u64) -> ShimClient {
        let layout = RingLayout::new(1024).expect("a valid ring size");
        let region = Mapping::anonymous_shared(layout.region_len()).expect("anonymous memory");
        Consumer::init(&region, layout, id).expect("a fresh ring");
        ShimClient {
            region,
            layout,
            ring: Vec::new(),
            waiting: false,
            last_mark: None,
            mark_seq: 0,
            marks_out: Vec::new(),
            local: Local::default(),
            mark_charged: Vec::new(),
            sync_charged: 0,
        }
    }

    fn cb(&self) -> &ControlBlock {
        ring::control_block(&self.region, self.layout).expect("the ring's control block")
    }

    fn estimates(&self) -> &EstimateTable {
        ring::estimates(&self.region, self.layout).expect("the ring's estimate table")
    }
}

pub use crate::trace::func_id;

/// tandem: v1 (the module docs), and with [`TandemV1::v2`] scheduler v2's
/// shim side on top ([`crate::local`]).
pub struct TandemV1 {
    /// Scheduler v2's local bound and board in the shims.
    v2: bool,
    board: NodeBoard,
    /// v2: local completions due: (time, job, charged covered).
    local_dones: BinaryHeap<Reverse<(Ns, usize, u64)>>,
    /// The MPS client priority of training jobs (tandem over MPS: 1).
    training_priority: u8,
    /// The latest time the side was called at.
    now: Ns,
    /// tandem over MPS (training at a low priority): `[mps]
    /// training_inflight_ns` (0: none), as tandemd's grant applies it
    /// (`grant::mps_adjust`: no gate or launch limit, this local bound).
    pub mps_inflight_ns: Option<u64>,
    /// Whether the shims obey tandemd's gates and launch limits at all (an
    /// experiment knob of the model; tandemd always sets them).
    pub v1_gates: bool,
    sched: Scheduler,
    out: Vec<Output>,
    limits: grant::Limits,
    clients: Vec<Option<ShimClient>>,
    next_pass: Ns,
    period: Duration,
    /// MARK_DONE records due: (time, job, seq).
    mark_dones: BinaryHeap<Reverse<(Ns, usize, u64)>>,
    /// Launches that waited at the gate, and waits that hit the bound.
    pub waits: (u64, u64),
}

/// tandemd's client id of job `job`.
fn id_of(job: usize) -> u64 {
    job as u64 + 1
}

impl TandemV1 {
    /// tandem with this scheduler configuration.
    #[must_use]
    pub fn new(cfg: SchedConfig) -> TandemV1 {
        TandemV1::with_knobs(cfg, Knobs::default())
    }

    /// tandem running a policy variant of the scheduler.
    #[must_use]
    pub fn with_knobs(cfg: SchedConfig, knobs: Knobs) -> TandemV1 {
        TandemV1 {
            v2: false,
            board: NodeBoard::new(),
            local_dones: BinaryHeap::new(),
            training_priority: 0,
            now: 0,
            mps_inflight_ns: None,
            v1_gates: true,
            sched: Scheduler::with_knobs(cfg, knobs),
            out: Vec::new(),
            limits: grant::Limits::default(),
            clients: Vec::new(),
            next_pass: 0,
            period: reader::IDLE_PERIOD,
            mark_dones: BinaryHeap::new(),
            waits: (0, 0),
        }
    }

    /// Scheduler v2 (local bound, board, per-kernel estimates), training at
    /// MPS client priority `training_priority` where MPS is in force.
    #[must_use]
    pub fn v2(cfg: SchedConfig, training_priority: u8) -> TandemV1 {
        TandemV1 {
            v2: true,
            training_priority,
            ..TandemV1::new(cfg)
        }
    }

    /// Launches that waited at the local bound, all jobs.
    #[must_use]
    pub fn local_waits(&self) -> u64 {
        self.clients.iter().flatten().map(|c| c.local.waits).sum()
    }

    fn client(&mut self, job: usize) -> &mut ShimClient {
        self.clients[job].as_mut().expect("a registered job")
    }

    fn push(&mut self, job: usize, kind: EventKind, now: Ns, func_id: u64) {
        let mut r = Record::new(kind, now);
        r.func_id = func_id;
        self.client(job).ring.push(r);
    }

    /// Store the scheduler's outputs into the control blocks (`grant::apply`);
    /// returns the gates opened.
    fn apply(&mut self) -> usize {
        let clients = &self.clients;
        let client = |id: u64| {
            clients
                .get(usize::try_from(id).ok()?.checked_sub(1)?)?
                .as_ref()
        };
        // Training joined tandem's MPS daemon at low priority: tandemd's
        // grant treats it so (as `Registry::apply_gates` does for a client
        // whose `mps_inflight_ns` is set).
        let (mps, training_priority) = (self.mps_inflight_ns, self.training_priority);
        grant::apply(
            &mut self.out,
            &mut self.limits,
            |id| client(id).map(ShimClient::cb),
            |id| client(id).map(ShimClient::estimates),
            |id| {
                let trains = client(id)?.cb().class() == CLASS_TRAINING;
                mps.filter(|_| trains && training_priority > 0)
            },
        )
    }

    /// One reader pass at `now` (`Registry::poll`).
    fn pass(&mut self, now: Ns) {
        let mut records = 0;
        for job in 0..self.clients.len() {
            let Some(c) = self.clients[job].as_mut() else {
                continue;
            };
            self.limits.observe(id_of(job), c.cb());
            for r in std::mem::take(&mut c.ring) {
                records += 1;
                if let Some(input) = drain::sched_input(id_of(job), &r, r.ts_ns.min(now)) {
                    self.sched.handle(now, input, &mut self.out);
                }
            }
        }
        let next_tick = self.sched.tick(now, &mut self.out);
        let opened = self.apply();
        self.period = reader::next_period_gated(self.period, records, opened);
        let sleep = reader::sleep_for(self.period, now, next_tick);
        // (A v2 waiter whose budgets just changed is looked at by `wake`.)
        self.next_pass = now + u64::try_from(sleep.as_nanos()).unwrap_or(u64::MAX);
    }
}

impl TandemSide for TandemV1 {
    fn register(&mut self, now: Ns, job: usize, class: Class) {
        if self.clients.len() <= job {
            self.clients.resize_with(job + 1, || None);
        }
        let c = ShimClient::new(id_of(job));
        // What tandemd's sched_event writes (the shim reads its class there).
        c.cb().set_class(match class {
            Class::Inference => CLASS_INFERENCE,
            Class::Training => CLASS_TRAINING,
        });
        self.clients[job] = Some(c);
        let input = Input::Register {
            client: id_of(job),
            class,
            gpu: 1,
            slo_p99_ns: None,
        };
        self.sched.handle(now, input, &mut self.out);
        self.apply();
        if self.next_pass < now {
            self.next_pass = now;
        }
    }

    fn before_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Gate {
        self.now = self.now.max(now);
        let v2 = self.v2;
        let board = &self.board;
        let c = self.clients[job].as_mut().expect("a registered job");
        if v2 {
            let (cb, est) = (
                ring::control_block(&c.region, c.layout).expect("the control block"),
                ring::estimates(&c.region, c.layout).expect("the estimate table"),
            );
            if let Verdict::Wait { mark } = c.local.before_launch(now, cb, est, board, k) {
                let mark = mark.then(|| {
                    c.mark_seq += 1;
                    let seq = c.mark_seq;
                    c.marks_out.push((seq, now));
                    c.mark_charged.push((seq, cb.charged_ns()));
                    seq
                });
                if let Some(seq) = mark {
                    self.push(job, EventKind::MARK, now, seq);
                }
                return Gate::Wait {
                    until: now + MAX_GATE_WAIT_NS,
                    mark,
                };
            }
        }
        let v1_gates = self.v1_gates;
        let c = self.client(job);
        let cb = c.cb();
        if !v1_gates || cb.launch_allowed() {
            cb.count_launch();
            c.waiting = false;
            c.local.launched();
            return Gate::Proceed;
        }
        let first = !std::mem::replace(&mut c.waiting, true);
        if first {
            self.waits.0 += 1;
        }
        Gate::Wait {
            until: now + MAX_GATE_WAIT_NS,
            mark: None,
        }
    }

    fn launch_anyway(&mut self, _now: Ns, job: usize) {
        self.waits.1 += 1;
        let c = self.client(job);
        c.waiting = false;
        if let Some(est) = c.local.waiting {
            // The shim's local wait ended at its bound: charged, launched.
            c.cb().charge(est);
        }
        c.local.launched();
        c.cb().count_launch();
    }

    fn after_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Option<u64> {
        self.push(job, EventKind::LAUNCH, now, func_id(&k.name));
        let c = self.client(job);
        let every = c.cb().mark_every_ns();
        let due = every > 0 && c.last_mark.is_none_or(|m| now.saturating_sub(m) >= every);
        if !due || c.marks_out.len() >= MARK_SLOTS as usize {
            return None;
        }
        c.last_mark = Some(now);
        c.mark_seq += 1;
        let seq = c.mark_seq;
        c.marks_out.push((seq, now));
        let charged = {
            let ShimClient {
                local,
                region,
                layout,
                ..
            } = &mut *c;
            local.mark_placed(ring::control_block(region, *layout).expect("the control block"))
        };
        c.mark_charged.push((seq, charged));
        self.push(job, EventKind::MARK, now, seq);
        Some(seq)
    }

    fn launch_completed(&mut self, now: Ns, job: usize, seq: u64) {
        let v2 = self.v2;
        let c = self.client(job);
        let Some(&(_, placed)) = c.marks_out.iter().find(|m| m.0 == seq) else {
            return;
        };
        // The watcher's first poll at or after the completion.
        let polls = (now.saturating_sub(placed)).div_ceil(MARK_POLL_NS).max(1);
        let watcher = placed + polls * MARK_POLL_NS;
        if v2 {
            if let Some(i) = c.mark_charged.iter().position(|m| m.0 == seq) {
                let (_, charged) = c.mark_charged.swap_remove(i);
                // A waiting launch polls the marks itself, every 50 us.
                let seen = if c.local.waiting.is_some() {
                    watcher.min(now + WAIT_POLL_NS)
                } else {
                    watcher
                };
                self.local_dones.push(Reverse((seen, job, charged)));
            }
        }
        self.mark_dones.push(Reverse((watcher, job, seq)));
    }

    fn host_event(&mut self, now: Ns, job: usize, ev: HostEvent) {
        let board = &self.board;
        let c = self.clients[job].as_mut().expect("a registered job");
        let cb = ring::control_block(&c.region, c.layout).expect("the control block");
        match ev {
            // As the shim: an inference job's sync holds the board open
            // while it waits (`shim/src/memops.rs`, `synchronizing`).
            HostEvent::SyncBegin => {
                c.sync_charged = cb.charged_ns();
                if self.v2 {
                    c.local.request(true, cb, board);
                }
            }
            // Everything charged before the sync has completed.
            HostEvent::SyncEnd => {
                cb.complete_through(c.sync_charged);
                if self.v2 {
                    c.local.request(false, cb, board);
                }
            }
            HostEvent::RequestBegin if self.v2 => c.local.request(true, cb, board),
            HostEvent::RequestEnd if self.v2 => c.local.request(false, cb, board),
            _ => {}
        }
        let kind = match ev {
            HostEvent::SyncBegin => EventKind::SYNC_BEGIN,
            HostEvent::SyncEnd => EventKind::SYNC_END,
            HostEvent::RequestBegin => EventKind::REQUEST_BEGIN,
            HostEvent::RequestEnd => EventKind::REQUEST_END,
        };
        self.push(job, kind, now, 0);
    }

    fn next_wake(&self) -> Option<Ns> {
        let mark = self.mark_dones.peek().map(|r| r.0 .0);
        let local = self.local_dones.peek().map(|r| r.0 .0);
        // A launch waiting under the active budget looks again when the
        // board's hold runs out.
        let hold = self
            .clients
            .iter()
            .flatten()
            .filter(|c| c.local.waiting.is_some())
            .map(|c| c.local.hold_ends())
            .filter(|&t| t > self.now)
            .min();
        let pass = (!self.clients.is_empty()).then_some(self.next_pass);
        [mark, local, hold, pass].into_iter().flatten().min()
    }

    fn wake(&mut self, now: Ns, ready: &mut Vec<usize>) {
        self.now = self.now.max(now);
        while let Some(&Reverse((t, job, seq))) = self.mark_dones.peek() {
            if t > now {
                break;
            }
            self.mark_dones.pop();
            self.client(job).marks_out.retain(|m| m.0 != seq);
            self.push(job, EventKind::MARK_DONE, t, seq);
        }
        while let Some(&Reverse((t, job, charged))) = self.local_dones.peek() {
            if t > now {
                break;
            }
            self.local_dones.pop();
            self.client(job).cb().complete_through(charged);
        }
        if now >= self.next_pass {
            self.pass(now);
        }
        let board = &self.board;
        for (job, c) in self.clients.iter().enumerate() {
            let Some(c) = c else { continue };
            let cb = c.cb();
            let local_ok = c.local.waiting.is_none() || c.local.fits(now, cb, board);
            let waiting = c.waiting || c.local.waiting.is_some();
            if waiting && local_ok && (c.local.waiting.is_some() || cb.launch_allowed()) {
                ready.push(job);
            }
        }
    }

    fn mps_priority(&self, class: Class) -> u8 {
        match class {
            Class::Training => self.training_priority,
            Class::Inference => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shims_bounds_are_the_shims() {
        let gate = include_str!("../../shim/src/client/gate.rs");
        assert!(gate.contains("MAX_GATE_WAIT: Duration = Duration::from_millis(50)"));
        // The local bound's wait has the same bound in the shim and here.
        let local = include_str!("../../shim/src/client/local.rs");
        assert!(local.contains("MAX_LOCAL_WAIT: Duration = Duration::from_millis(50)"));
        assert_eq!(MAX_GATE_WAIT_NS, 50_000_000);
        let marks = include_str!("../../shim/src/client/marks.rs");
        assert!(marks.contains("POLL_EVERY: Duration = Duration::from_micros(200)"));
        let slots = include_str!("../../shim/src/client/slots.rs");
        assert!(slots.contains("SLOTS: usize = 512"));
        assert_eq!((MARK_POLL_NS, MARK_SLOTS), (200_000, 512));
    }

    fn kernel() -> Kernel {
        Kernel::new("k", 1, 32, 1, 1_000_000)
    }

    #[test]
    fn training_beside_inference_is_held_by_its_control_block_until_the_reader_frees_it() {
        let mut t = TandemV1::new(SchedConfig::default());
        t.register(0, 0, Class::Inference);
        t.register(0, 1, Class::Training);
        let k = kernel();
        // Unmeasured estimates: training gets one launch per reader pass.
        assert_eq!(t.before_launch(10, 1, &k), Gate::Proceed);
        t.after_launch(10, 1, &k);
        let Gate::Wait { until, .. } = t.before_launch(20, 1, &k) else {
            panic!("the second launch must wait for the reader")
        };
        assert_eq!(until, 20 + MAX_GATE_WAIT_NS);
        // The reader's pass reads the launch and grants one more.
        let mut ready = Vec::new();
        let pass = t.next_wake().expect("a pass is due");
        t.wake(pass.max(30), &mut ready);
        assert_eq!(ready, vec![1]);
        assert_eq!(t.before_launch(pass.max(30), 1, &k), Gate::Proceed);
        // Inference is never held.
        for i in 0..100 {
            assert_eq!(t.before_launch(40 + i, 0, &k), Gate::Proceed);
            t.after_launch(40 + i, 0, &k);
        }
    }
}
