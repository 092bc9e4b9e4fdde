//! A model of one GPU shared by several processes, with tandem in the loop
//! (issue 13): the world in which tandem's launch policy is designed, tuned
//! and regression-tested without a GPU. It replaces the FIFO simulator that
//! lived in `sched/src/sim.rs`.
//!
//! Pure and deterministic: events in, time injected, every random draw from
//! a seeded generator. One run is [`world::run`]; the benchmark's matrix is
//! [`matrix::run_matrix`] (`scripts/sim`, binary `tandem-sim`).
//!
//! # What is modelled
//!
//! * **The GPU** ([`gpu`]): an H100 (132 SMs) or an A100 (108 SMs); kernels
//!   described by their duration alone and footprint (blocks, blocks per
//!   SM, the share of an SM they hold from their registers, shared memory
//!   and threads: [`footprint`]; their DRAM bytes); blocks dispatched to SMs
//!   in cohorts, never preempted under MPS; kernels that run at once share
//!   the DRAM bandwidth; copy engines.
//! * **Plain sharing** ([`timeslice`]): one context at a time, a timeslice,
//!   a switch cost, compute preemption at the slice's end, a context with no
//!   work yields.
//! * **MPS** ([`mps`]): all clients' kernels at once, pending blocks by
//!   client priority then in arrival order (a later kernel takes what the
//!   earlier ones leave over), `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` caps,
//!   co-residence where a kernel's blocks leave room on their SMs.
//! * **The jobs' CPU side** ([`job`], [`world`]): launch costs and host gaps
//!   from the trace, syncs, copies; inference serves Poisson arrivals in
//!   order (latency from arrival to result); training loops its step.
//! * **tandem** ([`tandem`]): the seam [`tandem::TandemSide`] and v1 behind
//!   it: the real control block (gate, launch limit) as the shim applies
//!   it, the real reader periods, drain mapping and grant, the real
//!   `tandem_sched::Scheduler`.
//! * **Workloads** ([`trace`], [`synthetic`]): the documented trace format;
//!   synthetic traces of the benchmark's five jobs from public figures until
//!   captured ones (`tests/traces/`, `scripts/gpu/trace_capture.py`)
//!   replace them.
//!
//! # Approximations (each tested where it matters)
//!
//! * Blocks of one cohort end together; when a kernel waits for SMs, running
//!   cohorts (other than a kernel's first wave) are spread over one block
//!   time, so SMs free up at the rate blocks complete ([`gpu`]).
//! * Cohorts smaller than 4 SMs wait for more SMs to free up while the
//!   kernel wants more (bounds the number of events).
//! * Under MPS, equal-priority kernels are served in arrival order (the
//!   hardware's left-over policy, cited in [`mps`]); gpusim-1 shared free
//!   SMs equally, which made MPS at batch 32 1.15x where the H100 gave 2.0x.
//! * DRAM bandwidth: the memory-bound share of a block's time stretches by
//!   the running kernels' oversubscription of the peak, decided when the
//!   block is dispatched ([`gpu`]); a memory-bound kernel on fewer SMs than
//!   alone does not get more bandwidth per SM (left out: `docs/MODEL.md`).
//! * CUDA graphs pass tandem's gate once per launch, as the shim sees them.
//!
//! `docs/MODEL.md` has every assumption in one table, with its source and
//! what it leaves out.
//! * Copies are not time-sliced; the driver's launch queue is unbounded
//!   (the jobs here sync every request or step); tandemd's heartbeat never
//!   goes stale; a woken thread runs at once.
//!
//! # Parameters and calibration
//!
//! Every parameter, its value and its source (measured, public, assumed or
//! fitted) is in [`params`]; the measured points, pair by pair, and the
//! tolerance in [`calibration`]; `results/sim/matrix.md` reports the fit and
//! `results/sim/holdout.md` the held-out points apart.
//!
//! # Scheduler v2
//!
//! [`tandem::TandemV1::v2`] runs scheduler v2's shim side on top of v1
//! ([`local`]): the real GPU board, the local in-flight bound with the
//! estimates tandemd publishes (keyed by function and grid), completion
//! marks placed on demand by a waiting launch, and, under MPS, training at
//! client priority 1 with tandemd's grant treating it as tandem over MPS
//! does (`grant::mps_adjust`: no gate or launch limit, the `[mps]`
//! in-flight bound). The matrix's `tandem` and `tandem_mps` rows are v2;
//! `tandem_v1` and `tandem_v1_mps` (on request) are v1 alone.

/// Nanoseconds.
pub type Ns = u64;

pub mod attribution;
pub mod calibration;
pub mod footprint;
pub mod gpu;
pub mod job;
pub mod local;
pub mod matrix;
pub mod measured;
pub mod mps;
pub mod params;
pub mod predict;
pub mod report;
pub mod rng;
pub mod slicing;
pub mod spatial;
pub mod synthetic;
pub mod synthetic_a100;
pub mod tally;
pub mod tandem;
pub mod timeslice;
pub mod trace;
pub mod world;

#[cfg(test)]
mod policy_tests;
