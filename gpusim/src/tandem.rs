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
//! * **Shim gate** (`shim/src/client/session.rs`): the real
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
use tandem_proto::ring::{self, Consumer, RingLayout};
use tandem_proto::{ControlBlock, EventKind, Mapping, Record};
use tandem_sched::{Class, Input, Knobs, Output, SchedConfig, Scheduler};

use crate::gpu::Ns;
use crate::trace::Kernel;

/// The shim's bound on one gate wait (`MAX_GATE_WAIT` in
/// `shim/src/client/session.rs`; a test checks the two agree).
pub const MAX_GATE_WAIT_NS: Ns = 50_000_000;
/// How often the shim's watcher polls outstanding marks (`POLL_EVERY` in
/// `shim/src/client/marks.rs`).
pub const MARK_POLL_NS: Ns = 200_000;
/// Marks outstanding at most (`SLOTS` in `shim/src/client/marks.rs`).
pub const MARK_SLOTS: u32 = 32;

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
        }
    }

    fn cb(&self) -> &ControlBlock {
        ring::control_block(&self.region, self.layout).expect("the ring's control block")
    }
}

/// The shim's function id for a kernel: a hash of its name (FNV-1a).
#[must_use]
pub fn func_id(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Today's tandem (see the module docs).
pub struct TandemV1 {
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
        grant::apply(&mut self.out, &mut self.limits, |id| {
            clients
                .get(usize::try_from(id).ok()?.checked_sub(1)?)?
                .as_ref()
                .map(ShimClient::cb)
        })
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
        self.next_pass = now + u64::try_from(sleep.as_nanos()).unwrap_or(u64::MAX);
    }
}

impl TandemSide for TandemV1 {
    fn register(&mut self, now: Ns, job: usize, class: Class) {
        if self.clients.len() <= job {
            self.clients.resize_with(job + 1, || None);
        }
        self.clients[job] = Some(ShimClient::new(id_of(job)));
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

    fn before_launch(&mut self, now: Ns, job: usize, _k: &Kernel) -> Gate {
        let c = self.client(job);
        let cb = c.cb();
        if cb.launch_allowed() {
            cb.count_launch();
            c.waiting = false;
            return Gate::Proceed;
        }
        let first = !std::mem::replace(&mut c.waiting, true);
        if first {
            self.waits.0 += 1;
        }
        Gate::Wait {
            until: now + MAX_GATE_WAIT_NS,
        }
    }

    fn launch_anyway(&mut self, _now: Ns, job: usize) {
        self.waits.1 += 1;
        let c = self.client(job);
        c.waiting = false;
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
        self.push(job, EventKind::MARK, now, seq);
        Some(seq)
    }

    fn launch_completed(&mut self, now: Ns, job: usize, seq: u64) {
        let c = self.client(job);
        let Some(&(_, placed)) = c.marks_out.iter().find(|m| m.0 == seq) else {
            return;
        };
        // The watcher's first poll at or after the completion.
        let polls = (now.saturating_sub(placed)).div_ceil(MARK_POLL_NS).max(1);
        self.mark_dones
            .push(Reverse((placed + polls * MARK_POLL_NS, job, seq)));
    }

    fn host_event(&mut self, now: Ns, job: usize, ev: HostEvent) {
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
        let pass = (!self.clients.is_empty()).then_some(self.next_pass);
        match (mark, pass) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn wake(&mut self, now: Ns, ready: &mut Vec<usize>) {
        while let Some(&Reverse((t, job, seq))) = self.mark_dones.peek() {
            if t > now {
                break;
            }
            self.mark_dones.pop();
            self.client(job).marks_out.retain(|m| m.0 != seq);
            self.push(job, EventKind::MARK_DONE, t, seq);
        }
        if now >= self.next_pass {
            self.pass(now);
            for (job, c) in self.clients.iter().enumerate() {
                if let Some(c) = c {
                    if c.waiting && c.cb().launch_allowed() {
                        ready.push(job);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shims_bounds_are_the_shims() {
        let session = include_str!("../../shim/src/client/session.rs");
        assert!(session.contains("MAX_GATE_WAIT: Duration = Duration::from_millis(50)"));
        assert_eq!(MAX_GATE_WAIT_NS, 50_000_000);
        let marks = include_str!("../../shim/src/client/marks.rs");
        assert!(marks.contains("POLL_EVERY: Duration = Duration::from_micros(200)"));
        assert!(marks.contains("SLOTS: usize = 32"));
        assert_eq!((MARK_POLL_NS, MARK_SLOTS), (200_000, 32));
    }

    fn kernel() -> Kernel {
        Kernel {
            name: "k".into(),
            grid: [1, 1, 1],
            block: [32, 1, 1],
            blocks_per_sm: 1,
            duration_ns: 1_000_000,
            sm_share: 1.0,
            stream: 0,
            host_gap_ns: 0,
        }
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
        let Gate::Wait { until } = t.before_launch(20, 1, &k) else {
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
