//! The contention engine: one GPU, its SMs, its copy engines, and the
//! kernels of several clients competing for them.
//!
//! # Kernels and SMs
//!
//! A kernel is its duration alone `D`, its blocks `B` and the blocks one SM
//! holds at its occupancy `p`. On a GPU of `S` SMs it runs in
//! `w = ceil(B / (S p))` waves, so one block takes `d = D / w` on its SM.
//! The engine dispatches blocks to SMs in **cohorts**: `g` SMs given to one
//! kernel at one moment run `min(pending, g p)` of its blocks and free up
//! together after `d`. A kernel alone therefore takes exactly `D`; kernels
//! that run at once share the SMs, and each one that gets fewer SMs than it
//! could use runs more waves and takes longer, by the share the others took.
//! Who gets free SMs is [`crate::mps::allocate`] (priority, then equal
//! shares, within the client's cap); under plain sharing only the context
//! that holds the GPU dispatches ([`crate::timeslice`]).
//!
//! **Running blocks are never preempted** (MPS): SMs come free only when a
//! cohort's blocks end. A cohort's blocks started together, which after a
//! few waves is no longer true on a real GPU: blocks drift apart and SMs
//! free up at a steady rate. So when a ready kernel finds no free SM, the
//! engine *spreads* the other kernels' running cohorts (each once, and
//! never a kernel's first wave, whose blocks did start together): a cohort
//! of `g` SMs becomes [`GpuParams::spread_pieces`] pieces whose ends are
//! spaced evenly over one block duration from now, as if its blocks were at
//! uniformly spread phases (mean remaining time `d / 2`, the expectation
//! for a waiting kernel arriving at a random moment). This is the one
//! approximation of the block level; it keeps both "a running block runs to
//! its end" and "SMs held by a kernel free up at the rate its blocks
//! complete" (tested in `tests::a_waiting_kernel_gets_sms_as_blocks_complete`).
//!
//! **Interference**: a block dispatched while other clients hold SMs runs
//! `1 + interference * (their share of the SMs)` times longer: kernels that
//! run side by side also share memory bandwidth and L2, which SM counts do
//! not show. Fitted (see the crate docs' parameter table). It is global:
//! a block pays it whichever SMs it lands on, so SMs a mask leaves free
//! ([`crate::spatial`]) do not escape it. Taking it as intra-SM instead
//! (paid only by blocks that share an SM with another client's) was tried
//! on the A100's fit set: it then no longer moved the Llama-2 pairs'
//! training fractions at any value, which the global form fits.
//!
//! **Time-slicing**: at a slice's end the holder's running cohorts are
//! suspended with their remaining time and resumed, on as many SMs, when
//! their context holds the GPU again (compute preemption).
//!
//! # Copies
//!
//! Host-to-device and device-to-host copies run on one copy engine per
//! direction, first come first served across clients, `latency + bytes /
//! bandwidth` each, in stream order with the kernels. They are not
//! time-sliced (the copy engines are separate engines; the jobs here copy a
//! few megabytes at most per request).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::mps::Candidate;
use crate::timeslice::Slicer;
use tandem_sched::reserve::width;

mod dispatch;
pub(crate) mod dram;
mod observe;
mod preempt;

pub use crate::attribution::{Attribution, Culprit};

pub use crate::Ns;

/// Capacity units per SM: a kernel whose blocks use a share `s` of their
/// SMs takes `s * UNITS` of each SM it holds; the rest is free for another
/// kernel's blocks (co-residence, MPS).
const UNITS: u64 = 1000;

/// Smallest cohort dispatched while a kernel wants more SMs (see `dispatch`).
const MIN_COHORT: u64 = 4;

/// The GPU's fixed figures.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuParams {
    /// SMs.
    pub sms: u32,
    /// Slow-down of a block per unit share of SMs held by other clients.
    pub interference: f64,
    /// Copy bandwidth, bytes per ns (GB/s).
    pub copy_bytes_per_ns: f64,
    /// Fixed cost of one copy, ns.
    pub copy_latency_ns: Ns,
    /// Pieces a running cohort is spread into when a kernel waits for SMs.
    pub spread_pieces: u32,
    /// What one SM holds: threads, 32-bit registers, shared memory (bytes)
    /// and blocks (the device's compute-capability limits).
    pub sm: SmResources,
    /// DRAM bandwidth of the whole GPU at peak, bytes per ns (GB/s).
    pub dram_bytes_per_ns: f64,
    /// The block dispatcher serves ready kernels of one priority in the
    /// order they arrived: a kernel's blocks go to SMs only once every
    /// earlier kernel's blocks have been dispatched, and a later kernel
    /// takes what is left over (false: equal shares, the model before
    /// gpusim-2). See [`crate::mps`].
    pub fifo_dispatch: bool,
    /// Kernels that run at once share the DRAM bandwidth: when their
    /// demands add up to more than the peak, the memory-bound share of a
    /// block's time stretches by the oversubscription (false: bandwidth
    /// is never short).
    pub dram_contention: bool,
    /// The share of the GPU's SMs whose blocks, streaming, pull the whole
    /// DRAM bandwidth: one SM pulls at most the peak over that many SMs.
    /// A kernel given fewer SMs than it fills alone (beside another
    /// client, or under an SM mask) then keeps its memory phases' speed up
    /// to that limit, instead of losing it with the SMs: its memory-bound
    /// share of a block's time shrinks by `gpu::dram::dram_gain`. 1 (the default
    /// until a GPU measures it: `scripts/gpu/engine_rules.py`) keeps the
    /// rule of gpusim-3, a bandwidth that grows with the SMs up to all of
    /// them.
    pub dram_saturating_share: f64,
}

/// One SM's capacity (CUDA Programming Guide, "Compute Capabilities",
/// technical specifications per compute capability).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SmResources {
    /// Resident threads.
    pub threads: u32,
    /// 32-bit registers.
    pub regs: u32,
    /// Shared memory available to blocks, bytes.
    pub smem: u32,
    /// Resident blocks.
    pub blocks: u32,
}

impl SmResources {
    /// The same capacity as tandemd's occupancy rules take it.
    #[must_use]
    pub const fn limits(self) -> tandem_sched::reserve::SmLimits {
        tandem_sched::reserve::SmLimits {
            threads: self.threads,
            regs: self.regs,
            smem: self.smem,
            blocks: self.blocks,
        }
    }

    /// Compute capability 9.0 (H100): 2048 threads, 64 K registers,
    /// 227 KB of shared memory per SM usable by blocks, 32 blocks.
    pub const HOPPER: SmResources = SmResources {
        threads: 2048,
        regs: 65_536,
        smem: 227 * 1024,
        blocks: 32,
    };
    /// Compute capability 8.0 (A100): 2048 threads, 64 K registers,
    /// 163 KB of shared memory per SM usable by blocks, 32 blocks.
    pub const AMPERE: SmResources = SmResources {
        threads: 2048,
        regs: 65_536,
        smem: 163 * 1024,
        blocks: 32,
    };
}

/// How the clients share the GPU.
#[derive(Clone, Debug, PartialEq)]
pub enum Sharing {
    /// One context per client, time-sliced.
    TimeSlice {
        /// Slice length, ns.
        timeslice_ns: Ns,
        /// Idle time of a context switch, ns.
        switch_ns: Ns,
    },
    /// One shared context (MPS).
    Mps,
}

/// One client's MPS settings (ignored under time-slicing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientCfg {
    /// `CUDA_MPS_CLIENT_PRIORITY`: 0 normal, 1 below normal.
    pub priority: u8,
    /// Most SMs it may hold (`CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`).
    pub sm_cap: u32,
}

/// What a client submits on a stream.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Work {
    /// A kernel.
    Kernel {
        /// Blocks in the grid.
        blocks: u64,
        /// Blocks one SM holds.
        blocks_per_sm: u32,
        /// Duration on an empty GPU, ns.
        duration_ns: Ns,
        /// Share of the SM its blocks hold at its occupancy (0..=1]: the
        /// largest of its threads', registers', shared memory's and block
        /// slots' shares ([`crate::footprint`]); the rest is room for
        /// another kernel's blocks (co-residence).
        sm_share: f64,
        /// Share (0..=1) of its time alone that it pulls DRAM at the
        /// GPU's peak bandwidth: its bytes over (peak x duration).
        mem_frac: f64,
        /// An SM mask given at launch, as its width (0: every SM). The
        /// client's masked kernels together hold at most this many SMs:
        /// they share one mask, which leaves the rest to other clients
        /// ([`crate::spatial`]).
        sm_limit: u32,
    },
    /// A copy.
    Copy {
        /// Bytes.
        bytes: u64,
        /// Device to host (else host to device).
        d2h: bool,
    },
}

/// A submitted op finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Whose.
    pub client: usize,
    /// The token given at submission.
    pub token: u64,
    /// When.
    pub at: Ns,
}

#[derive(Clone, Debug)]
struct Running {
    client: usize,
    stream: usize,
    token: u64,
    pending: u64,
    outstanding: u64,
    bps: u32,
    block_ns: f64,
    seq: u64,
    held: u32,
    /// Capacity units (thousandths of an SM) per SM it holds.
    units: u64,
    /// Some of its blocks have completed (its later blocks no longer run in
    /// lock-step with its first wave).
    completed_any: bool,
    /// Its DRAM demand alone, as a share of the peak bandwidth.
    mem_frac: f64,
    /// The [`dram::dram_gain`] of its latest cohort (1 before any).
    dram_gain: f64,
    /// SMs it holds alone (its first wave).
    alone_sms: u32,
    /// Its SM mask's width (0: none).
    limit: u32,
}

#[derive(Clone, Copy, Debug)]
struct Cohort {
    kernel: usize,
    sms: u32,
    blocks: u64,
    end: Ns,
    spread: bool,
    gen: u64,
}

/// A preempted cohort: (kernel, SMs, blocks, remaining ns, spread).
type Suspended = (usize, u32, u64, Ns, bool);

struct Client {
    cfg: ClientCfg,
    streams: Vec<VecDeque<(Work, u64)>>,
    /// The kernel at each stream's head, if it is one that started.
    head_kernel: Vec<Option<usize>>,
    held: u32,
    suspended: Vec<Suspended>,
    /// SM-ns of blocks run (statistics).
    sm_ns: f64,
}

/// The engine. Feed it work with [`Gpu::submit`]; ask [`Gpu::next_time`]
/// when it next changes and call [`Gpu::advance`] at that time.
pub struct Gpu {
    params: GpuParams,
    slicer: Option<Slicer>,
    clients: Vec<Client>,
    kernels: Vec<Option<Running>>,
    free_kernels: Vec<usize>,
    cohorts: Vec<Option<Cohort>>,
    free_cohorts: Vec<usize>,
    ends: BinaryHeap<Reverse<(Ns, usize, u64)>>,
    copies: BinaryHeap<Reverse<(Ns, usize, usize, u64)>>,
    copy_free: [Ns; 2],
    free_units: u64,
    seq: u64,
    gen: u64,
    /// Reused buffers of `dispatch`.
    scratch: (Vec<(usize, u64)>, Vec<Candidate>, Vec<usize>),
    /// Reused buffers of `allocate_into` and of `has_work`.
    alloc_scratch: (Vec<u32>, Vec<usize>, Vec<bool>),
    /// Who waits for whom, when asked ([`Gpu::observe`]).
    attribution: Option<Box<Attribution>>,
}

impl Gpu {
    /// A GPU shared as `sharing` by clients with these settings.
    #[must_use]
    pub fn new(params: GpuParams, sharing: &Sharing, clients: &[ClientCfg]) -> Gpu {
        let slicer = match *sharing {
            Sharing::TimeSlice {
                timeslice_ns,
                switch_ns,
            } => Some(Slicer::new(timeslice_ns, switch_ns)),
            Sharing::Mps => None,
        };
        Gpu {
            free_units: u64::from(params.sms) * UNITS,
            params,
            slicer,
            clients: clients
                .iter()
                .map(|&cfg| Client {
                    cfg,
                    streams: Vec::new(),
                    head_kernel: Vec::new(),
                    held: 0,
                    suspended: Vec::new(),
                    sm_ns: 0.0,
                })
                .collect(),
            kernels: Vec::new(),
            free_kernels: Vec::new(),
            cohorts: Vec::new(),
            free_cohorts: Vec::new(),
            ends: BinaryHeap::new(),
            copies: BinaryHeap::new(),
            copy_free: [0, 0],
            seq: 0,
            gen: 0,
            scratch: (Vec::new(), Vec::new(), Vec::new()),
            alloc_scratch: (Vec::new(), Vec::new(), Vec::new()),
            attribution: None,
        }
    }

    /// Queue `work` on `client`'s `stream` at `now`; its [`Done`] carries `token`.
    pub fn submit(&mut self, now: Ns, client: usize, stream: usize, work: Work, token: u64) {
        self.attribute(now);
        let c = &mut self.clients[client];
        if c.streams.len() <= stream {
            c.streams.resize_with(stream + 1, VecDeque::new);
            c.head_kernel.resize(stream + 1, None);
        }
        c.streams[stream].push_back((work, token));
        if c.streams[stream].len() == 1 {
            self.start_head(now, client, stream);
            self.schedule(now);
        }
    }

    /// Nothing of `client`'s is queued or running.
    #[must_use]
    pub fn idle(&self, client: usize) -> bool {
        self.clients[client].streams.iter().all(VecDeque::is_empty)
    }

    /// SMs `client` holds now.
    #[must_use]
    pub fn held(&self, client: usize) -> u32 {
        self.clients[client].held
    }

    /// SM-ns of blocks `client` has run so far (its share of the GPU's work).
    #[must_use]
    pub fn sm_ns(&self, client: usize) -> f64 {
        self.clients[client].sm_ns
    }

    /// Context switches so far (time-slicing).
    #[must_use]
    pub fn switches(&self) -> u64 {
        self.slicer.as_ref().map_or(0, |s| s.switches)
    }

    /// When the engine next changes by itself.
    pub fn next_time(&mut self) -> Option<Ns> {
        while let Some(&Reverse((_, id, gen))) = self.ends.peek() {
            if self.cohorts[id].is_some_and(|c| c.gen == gen) {
                break;
            }
            self.ends.pop();
        }
        let mut t = self.ends.peek().map(|r| r.0 .0);
        let mut take = |x: Option<Ns>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        take(self.copies.peek().map(|r| r.0 .0));
        if self.slicer.is_some() {
            let has = self.has_work();
            take(self.slicer.as_ref().and_then(|s| s.next_time(&has)));
            self.alloc_scratch.2 = has;
        }
        t
    }

    /// Process everything due at `now` (call at [`Gpu::next_time`]);
    /// completions go to `done`.
    pub fn advance(&mut self, now: Ns, done: &mut Vec<Done>) {
        self.attribute(now);
        while let Some(&Reverse((t, id, gen))) = self.ends.peek() {
            if t > now {
                break;
            }
            self.ends.pop();
            let Some(c) = self.cohorts[id].filter(|c| c.gen == gen) else {
                continue;
            };
            self.cohorts[id] = None;
            self.free_cohorts.push(id);
            let k = self.kernels[c.kernel].as_mut().expect("a cohort's kernel");
            self.free_units += u64::from(c.sms) * k.units;
            k.outstanding -= c.blocks;
            k.held -= c.sms;
            k.completed_any = true;
            let client = k.client;
            self.clients[client].held -= c.sms;
            if k.pending == 0 && k.outstanding == 0 {
                self.finish_kernel(now, c.kernel, done);
            }
        }
        while let Some(&Reverse((t, client, stream, token))) = self.copies.peek() {
            if t > now {
                break;
            }
            self.copies.pop();
            self.pop_head(now, client, stream, token, done);
        }
        if let Some(s) = self.slicer.as_mut() {
            if s.switching.is_some_and(|(t, _)| t <= now) {
                let c = s.finish_switch(now).expect("a switch");
                self.resume_suspended(now, c);
            }
        }
        self.schedule(now);
    }

    fn finish_kernel(&mut self, now: Ns, kid: usize, done: &mut Vec<Done>) {
        let k = self.kernels[kid].take().expect("kernel");
        self.free_kernels.push(kid);
        self.clients[k.client].head_kernel[k.stream] = None;
        self.pop_head(now, k.client, k.stream, k.token, done);
    }

    fn pop_head(
        &mut self,
        now: Ns,
        client: usize,
        stream: usize,
        token: u64,
        done: &mut Vec<Done>,
    ) {
        let q = &mut self.clients[client].streams[stream];
        let (_, t) = q.pop_front().expect("a head");
        debug_assert_eq!(t, token);
        done.push(Done {
            client,
            token,
            at: now,
        });
        if !q.is_empty() {
            self.start_head(now, client, stream);
        }
    }

    /// The op at the head of a stream begins.
    fn start_head(&mut self, now: Ns, client: usize, stream: usize) {
        let (work, token) = self.clients[client].streams[stream][0];
        match work {
            Work::Copy { bytes, d2h } => {
                let e = usize::from(d2h);
                let start = now.max(self.copy_free[e]);
                let end = start
                    + self.params.copy_latency_ns
                    + (bytes as f64 / self.params.copy_bytes_per_ns) as Ns;
                self.copy_free[e] = end;
                self.copies.push(Reverse((end, client, stream, token)));
            }
            Work::Kernel {
                blocks,
                blocks_per_sm,
                duration_ns,
                sm_share,
                mem_frac,
                sm_limit,
            } => {
                let bps = blocks_per_sm.max(1);
                let alone_sms = width(blocks.max(1), bps, self.params.sms);
                self.seq += 1;
                let k = Running {
                    client,
                    stream,
                    token,
                    pending: blocks.max(1),
                    outstanding: 0,
                    bps,
                    block_ns: duration_ns.max(1) as f64
                        / waves(blocks.max(1), bps, self.params.sms) as f64,
                    seq: self.seq,
                    held: 0,
                    units: ((sm_share.clamp(0.001, 1.0) * UNITS as f64).round() as u64).max(1),
                    completed_any: false,
                    mem_frac: mem_frac.clamp(0.0, 1.0),
                    dram_gain: 1.0,
                    alone_sms: alone_sms.max(1),
                    limit: sm_limit,
                };
                let kid = match self.free_kernels.pop() {
                    Some(i) => {
                        self.kernels[i] = Some(k);
                        i
                    }
                    None => {
                        self.kernels.push(Some(k));
                        self.kernels.len() - 1
                    }
                };
                self.clients[client].head_kernel[stream] = Some(kid);
            }
        }
    }

    /// Which clients have kernel work (running, pending or suspended).
    /// (In a reused buffer: give it back through `alloc_scratch.2`.)
    fn has_work(&mut self) -> Vec<bool> {
        let mut has = std::mem::take(&mut self.alloc_scratch.2);
        has.clear();
        has.extend(
            self.clients
                .iter()
                .map(|c| c.head_kernel.iter().any(Option::is_some)),
        );
        has
    }

    fn add_cohort(&mut self, end: Ns, kernel: usize, sms: u32, blocks: u64, spread: bool) {
        self.gen += 1;
        let c = Cohort {
            kernel,
            sms,
            blocks,
            end,
            spread,
            gen: self.gen,
        };
        let id = match self.free_cohorts.pop() {
            Some(i) => {
                self.cohorts[i] = Some(c);
                i
            }
            None => {
                self.cohorts.push(Some(c));
                self.cohorts.len() - 1
            }
        };
        self.ends.push(Reverse((end, id, self.gen)));
    }
}

/// The waves a kernel of `blocks` blocks, `blocks_per_sm` to an SM, runs in
/// alone on `sms` SMs: `w = ceil(B / (S p))` (the [module docs](self)); one
/// block holds its SM for the kernel's time over `w`.
#[must_use]
pub fn waves(blocks: u64, blocks_per_sm: u32, sms: u32) -> u64 {
    blocks.div_ceil(u64::from(sms) * u64::from(blocks_per_sm.max(1)))
}

/// `x.round()` as whole nanoseconds, for `0 <= x < 2^53`: the same value
/// as `f64::round` (half away from zero) without its libm call, which the
/// engine makes for every cohort. `x - t` is exact there (`t` is `x`'s
/// integer part), so the comparison is too.
#[inline]
fn round_ns(x: f64) -> Ns {
    debug_assert!((0.0..9_007_199_254_740_992.0).contains(&x), "{x}");
    let t = x as Ns;
    if x - t as f64 >= 0.5 {
        t + 1
    } else {
        t
    }
}

#[cfg(test)]
#[path = "gpu_tests.rs"]
mod tests;
