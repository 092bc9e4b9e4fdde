//! The scheduling policy core: when may a training job launch on a GPU shared
//! with latency-sensitive inference.
//!
//! [`Scheduler`] is a pure, deterministic state machine: [`Input`]s (what the
//! shims' ring records and the registry say) and times go in, [`Output`]s
//! (gate, launch-limit and mark-interval changes) come out. It does no I/O,
//! reads no clock, starts no thread; the same inputs at the same times always
//! give the same outputs. Its tables are bounded ([`MAX_CLIENTS`] clients,
//! [`MAX_KERNELS_PER_CLIENT`] kernel estimates, [`LATENCY_WINDOW`] latencies
//! and [`MAX_SEALED_SEGMENTS`] sealed mark segments per client), and handling
//! an input allocates nothing except when a client or a kernel is seen for
//! the first time or a client's buffers first grow.
//!
//! (Not to be confused with tandemd's `admission` policy, which decides *who* may claim
//! the inference class; this module decides *when* training may launch.)
//!
//! # The model
//!
//! **Estimated backlog.** Clients are grouped by GPU (`gpu` of
//! [`Input::Register`]: a hash of the device uuid; 0, unknown, is one group of
//! its own). Each client has an estimated `busy_until`: every launch at `ts`
//! sets `busy_until = max(ts, busy_until) + est`, where `est` is the client's
//! current estimate of that kernel (`default_kernel_ns` when never measured;
//! a graph launch of k kernels counts as k launches of one per-client "graph
//! kernel"). The client's *backlog* at `now` is `busy_until - now` (0 when
//! past): the GPU time its queued work still needs, as if it ran alone.
//!
//! **Learning durations.** The shim cannot see kernels complete; *drain
//! points* tell: syncs, and completion marks.
//!
//! * A `SyncEnd` at `t` means everything the client launched had drained by
//!   `t`: `busy_until = min(busy_until, t)` (that nothing is left is all it
//!   says).
//! * A completion mark is the drain point of a prefix. The scheduler asks
//!   every training client for marks ([`Output::Marks`], `mark_every_ns`);
//!   its shim then records a driver event right after a launch at most that
//!   often ([`Input::Mark`], with a sequence number `seq` rising from 1) and
//!   reports when the GPU got there ([`Input::MarkDone`]). At a `Mark` the
//!   launches pending since the last mark or drain point are *sealed* into a
//!   segment labelled `seq`. A `MarkDone(seq)` at `t` means every sealed
//!   segment labelled `<= seq` had drained by `t` (so a lost MARK_DONE is
//!   covered by the next one; one that covers no sealed segment, stale or
//!   whose MARK was lost, changes nothing). Those segments are measured, and
//!   `busy_until = t +` the estimated ns of the launches still pending (the
//!   later sealed segments and the open one), at the estimates just learned:
//!   this corrects the backlog upwards as well as downwards. A `SyncEnd`
//!   drains the sealed segments and the open one alike. At most
//!   [`MAX_SEALED_SEGMENTS`] segments (together at most [`MAX_SEALED_ITEMS`]
//!   (kernel, count) entries) wait per client: sealing beyond that drops the
//!   oldest unmeasured, and the measurement right after it, which would
//!   contain its GPU time, is not taken. A mark whose `seq` does not rise
//!   is ignored. A mark on one stream says nothing about another; it is
//!   taken as a drain point of the client's one timeline, as syncs are.
//!
//! At either kind, the interval from `max(first launch of the launches
//! drained, last drain point)` to `t` is a measurement of the GPU time of
//! those launches. It is spread over them in proportion to their current
//! estimates and folded into per-(client, func_id) EWMAs (weight 1/4; the
//! first measurement replaces the default; clamped to 1 us .. 10 s).
//!
//! **Requests.** An inference request begins at an explicit `RequestBegin`,
//! or (for clients that never sent one) at a launch after at least
//! `request_idle_gap_ns` with no launch or sync of that client. It ends at
//! `RequestEnd`, or at the next `SyncEnd` (a result returned); latency = end -
//! begin, kept in a ring of the last [`LATENCY_WINDOW`] requests (p50/p99 are
//! exact over it). A request left open is dropped, uncounted, after
//! `request_idle_gap_ns` with no activity and no sync outstanding (implicit
//! requests) or after [`MAX_REQUEST_NS`] (any).
//!
//! An inference client makes its GPU **active** while one of its requests is
//! open, for `request_hold_ns` after one ended (short CPU gaps between the
//! phases of one request, or the next request of a busy server, find training
//! already held back), and while its own estimated work is still queued (a
//! launch burst that follows a request within the idle gap is inference work
//! too, even though it starts no new request).
//!
//! **Gates.** Inference gates are always open. On a GPU with no inference
//! client at all every training gate is open too: there is nothing to protect,
//! and estimates that no drain point corrects would otherwise throttle training
//! below what the GPU can do; a deep queue also hides the training job's own
//! CPU stalls (data loading), which any bound there would expose. The price:
//! an inference job that joins such a GPU finds what training queued
//! meanwhile (for a job that never syncs, up to the driver's launch queue)
//! ahead of its first kernels. The gate closes to the idle budget as soon as
//! its device report is read, so that is paid once, at its start, usually
//! while it loads its model; and on a real GPU the driver time-slices
//! between processes rather than queueing them (DESIGN.md: plain sharing
//! multiplied p99 by 1.8-3.1x, not by a queue's length). A bound for this
//! case (a budget while no inference job is on the GPU) was considered and
//! not built: it would trade a cost every training job pays for one an
//! inference job pays once. The exception is the unknown GPU (group 0):
//! a training client there whose device report tandemd has not read yet
//! (it follows the first launch) may share a GPU with inference, so while
//! any inference client is registered, on any GPU, it is gated like one
//! beside inference, for at most [`UNKNOWN_GPU_GRACE_NS`] after it
//! registered. (Without this a training job's first burst, faster than the
//! reader, went unlimited: on the fake driver, 4000 launches of 5 ms in the
//! first 50 ms, queued ahead of an inference job already running.) Otherwise a training client's gate is
//! open iff its backlog < its budget, where budget = (`active_budget` of its
//! GPU while the GPU is active, else `idle_budget_ns`) / (number of training
//! clients on that GPU), except that the budget is 0 while any inference
//! client of the GPU has estimated work queued (its `busy_until` is in the
//! future). So the training work a newly arriving inference kernel can find
//! queued ahead of it is bounded by the idle budget between requests and by
//! the active budget inside one (plus, each time, the one kernel launched
//! just before the gate closed, and what was launched before the reader saw
//! the inference launch); inference kernels queued behind each other are not
//! interleaved with new training work; and training keeps enough queued to
//! hide its CPU launch latency and fills every gap inference leaves (between
//! requests and between the phases of one). Dividing by n makes training
//! clients share fairly: each keeps at most its slice queued, so each gets
//! launches in proportion to what it drains. Gates are re-evaluated on every
//! input and on [`Scheduler::tick`], which returns when it next wants to be
//! called: the earliest time a closed gate's backlog falls under its budget,
//! inference's queued work drains, or the GPU stops being active. Only
//! changes are reported; a new client's gate is taken to start open (as a
//! fresh control block is).
//!
//! **Launch limits.** A gate acts only once the coordinator has read the
//! launches that filled the budget, so a burst faster than the reader would
//! pass it whole. So each training client also gets an [`Allowance`]: how
//! many more launches it may start beyond those the scheduler has seen,
//! which the shim enforces itself (the control block's `launch_limit`). On a
//! GPU with a gate to keep it is
//! `ceil((budget - backlog) / mean)` launches ([`allowance_for`]), with
//! `budget` the effective budget above and `mean` the client's recent mean
//! estimate of one launch call (a graph launch is one call of all its
//! kernels): the work the gate would let in before closing, counted before
//! it is launched. It is 0 exactly when the gate is closed and at least 1
//! when it is open, so it says the same as the gate, only sooner; like the
//! gate it may overshoot the budget by less than one mean launch. Until a
//! drain point has measured some of a client's launches its estimates are
//! only the default (50 us, often a hundredth of a training kernel), so its
//! allowance is at most 1: a guess is not allowed to grant a burst (each
//! further launch then waits for the reader to see the last one; the first
//! sync or completed mark ends this). It is
//! [`Allowance::Unlimited`] whenever the gate is held open regardless of
//! backlog: inference clients, every client of a GPU with no inference
//! client, and everything while `enabled = false`. The caller turns it
//! into an absolute limit, `launches + n`, with the client's launch counter
//! as it read it before handing the scheduler that client's records, so
//! launches that counter has seen but the scheduler has not are charged to
//! the allowance (never given on top of it). The absolute limit is never
//! below the launches counted (n >= 0), but it is lowered when the
//! allowance shrinks: allowance granted and not yet used is taken back when
//! the gate closes (an arriving inference request must not find it usable).
//! Nothing waits on a tick to grow an allowance: a client stopped at its
//! limit has launched everything it was allowed, the scheduler sees those
//! records, and either the gate is still open (a new allowance >= 1 follows
//! at once) or it closed (and the tick that reopens it grants again).
//!
//! **Local bound (scheduler v2).** Gates and launch limits act only once
//! tandemd's reader has seen the records, and a launch limit counts
//! launches, not their size. So each training client on a GPU with an
//! inference client (and completion marks on) also gets a [`LocalBudget`]
//! ([`Output::Budget`], [`local_budget`]): its share of the idle budget and
//! of the GPU's (SLO-adapted) active budget, the hold, and a default
//! estimate (its mean launch). Its shim keeps its own estimated in-flight
//! work (launches charged at the estimates this scheduler measured,
//! [`Output::Estimate`], keyed by function *and grid*, minus what its
//! completion marks saw complete) under the active budget while the node's
//! GPU board says an inference job launched within the hold, the idle one
//! otherwise; a launch longer than the budget waits until nothing of the
//! client is in flight and then runs alone. That reacts within a launch,
//! with no reader in the loop (`tandem_proto::inflight`,
//! `tandem_proto::board`). Until a drain point has measured the client,
//! both budgets are 1 ns: one launch at a time. An inference client also
//! counts as active for `request_hold_ns` after each of its launches here,
//! so back-to-back requests with no idle gap keep its GPU active.
//!
//! The rule "budget 0 while inference work is queued" is an addition to the
//! contract's v1 rule ([`Knobs`] keeps the other variants). The figures that
//! chose it, and the 4 ms idle budget, came from a FIFO simulator since
//! retired (one queue shared by every process; issue 13 reports that it gave
//! inference 29x its alone p99 with the policy off, where the H100 measured
//! 1.8-3.1x); there
//! it lowered inference p99 by 7-15 % in two of three scenarios at 0.2 %
//! less training throughput, and a smaller idle budget lowered p99 further
//! (2 ms: 13-33 %, 1 ms: 14-47 %, at 0.1-5 % of training). Those figures
//! are of that model only. The GPU-sharing model that replaced it
//! (`tandem-gpusim`, calibrated against the H100's plain-sharing and MPS
//! measurements; `scripts/sim`) checks the directions again
//! (`gpusim/src/policy_tests.rs`: the kept rule is no worse for inference
//! than the v1 rule) and gives today's defaults their rows in
//! `results/sim/matrix.md`; choosing new defaults from it is issue 14.
//!
//! Completion marks matter for a trainer that syncs rarely or never (in
//! the retired FIFO simulator, whose figures follow; the GPU-sharing model
//! re-checks the sync-every-50 case in
//! `completion_marks_keep_a_rarely_syncing_trainer_estimated`). One that never syncs, with 1-3 ms kernels, is otherwise
//! estimated at 50 us a kernel for ever: it queues without bound, and
//! requests wait seconds (p99 at least 8.9 s: most never finish within the
//! simulated 10 s); with marks every 500 us its estimates are within 5 % of
//! the truth and p99 is 12 ms at 97 % of its training throughput alone. For
//! trainers that sync every 25-100 ms, which syncs already correct, marks
//! changed p99 by -2 % to +9 % with training throughput within one point
//! (over 8 seeds each, p99 +4 % to +16 % on average): each mark measures a
//! few launches, with up to a poll interval (200 us) of noise at either end,
//! and the estimates no longer include the CPU stalls between segments that
//! a sync's interval contains.
//!
//! **SLO.** An inference client registered with `slo_p99_ns` is evaluated
//! every [`SLO_EVAL_EVERY`] completed requests, on the p99 of exactly those
//! requests: above the target, its GPU's active budget *= 0.7 (not below
//! `min_active_budget_ns`); below 0.8 x target, += 10 % of the range (not
//! above `max_active_budget_ns`) unless another inference client of that GPU
//! was last found above its own target.
//!
//! `enabled = false` keeps every gate open and everything else running (the
//! statistics then show what the jobs do unmanaged).
//!
//! # Parameters ([`SchedConfig`], `[scheduler]` in `tandemd.toml`)
//!
//! | key | default | meaning |
//! | --- | ---: | --- |
//! | `enabled` | `true` | close gates at all |
//! | `idle_budget_ns` | 4 ms | training backlog allowed per GPU while no inference request is active: what an arriving request can queue behind; large enough to hide training's CPU launch latency |
//! | `active_budget_ns` | 500 us | the same while a request is active (start value of the SLO loop) |
//! | `min_active_budget_ns` | 100 us | lower bound of the SLO loop |
//! | `max_active_budget_ns` | 4 ms | upper bound of the SLO loop |
//! | `request_idle_gap_ns` | 2 ms | an inference launch after this long idle begins a request |
//! | `request_hold_ns` | 200 us | the GPU stays active this long after a request ended |
//! | `default_kernel_ns` | 50 us | estimate of a kernel never measured |
//! | `mark_every_ns` | 500 us | training clients place a completion mark after a launch at most this often (see "Learning durations"); 0: no marks; else at least [`MIN_MARK_EVERY_NS`] |
//! | `[[scheduler.slo]]` | none | p99 targets: `p99_ms` and match criteria (`uids`, `executables`, `cgroups` prefixes); the first entry a job matches gives its `slo_p99_ns` ([`SchedConfig::slo_for`], fed in by the registry with [`Input::Register`]) |
//!
//! # What the model cannot see
//!
//! * **True completion.** Only syncs and completed marks tell when work
//!   finished. For a client that marks, the backlog is corrected at every
//!   mark, to within the shim's poll interval (about 200 us: a MARK_DONE is
//!   that late at most) plus the mark interval (what was launched since the
//!   last mark is still a prediction). Between drain points the backlog is a
//!   prediction; a client that neither syncs nor marks (an inference client
//!   that never syncs, `mark_every_ns = 0`, a shim that places no marks) is
//!   never corrected (its estimates stay as they are and `busy_until` just
//!   runs out). A measurement is wall time, so it also contains time the
//!   client's work spent queued behind *other* clients on the same GPU, and
//!   CPU gaps inside the interval in which its queue was empty (a sync's
//!   interval spans every gap since the last drain point; a mark's only
//!   those inside its segments): estimates drift up under contention (which
//!   errs on the side of inference; in the retired FIFO simulator two trainers on one GPU
//!   are each estimated at about twice their true durations, see its
//!   `estimates/true` column). The poll delay
//!   adds noise to each mark's measurement, which cancels over consecutive
//!   segments only while the client's queue stays full. An underestimate
//!   corrects itself at the next drain point (at a mark at once, upwards;
//!   at a sync the GPU stays busy and the interval is long); an
//!   overestimate under a closed gate corrects at a mark too, and otherwise
//!   only through the tail of each interval, slowly, costing training
//!   throughput meanwhile.
//! * **Streams.** One timeline per client: kernels on several streams that
//!   overlap on the GPU are counted as if serial (backlog overestimated), and a
//!   sync of one stream is taken as a drain of all of them (backlog
//!   underestimated until the next launch). Likewise a mark is placed on one
//!   stream and says nothing about work on another, but is taken as a drain
//!   point of everything launched before it.
//! * **The GPU's own scheduling.** Kernels of different processes are
//!   time-sliced by the driver, not queued FIFO; without MPS they do not
//!   overlap, with MPS they may run concurrently and the "serial GPU" bound
//!   is pessimistic. Neither is visible in the record stream.
//! * **Launch order vs reading order.** Gate changes take effect when the
//!   coordinator applies them: work launched between a record and the
//!   reader seeing it is not yet counted. Without launch limits the reader's
//!   delay added directly to what inference queues behind (in the retired FIFO
//!   simulator,
//!   polling every 1 ms instead of 100 us nearly doubled p99, and more with
//!   two training clients); with them the shim stops at its allowance on its
//!   own, and the slow reader costs no p99 there (it costs a little training
//!   throughput: a client at its limit waits for the reader to grant more).
//!   Inference work launched before the reader sees it is still not counted.
//! * **Which kernel is which.** Drain points measure sums. When every
//!   interval between them holds the same mix of kernels (a training step
//!   between syncs), the per-kernel shares cannot be told apart: the total is
//!   right, the split is by the estimates the kernels started with, so a long
//!   kernel can be counted as an average one and the backlog underestimated
//!   by its difference. Marks every few hundred microseconds cut a step into
//!   segments of different mixes, which tells kernels apart over time. Until
//!   a client's first drain point every kernel is `default_kernel_ns`,
//!   usually an underestimate for training (the retired FIFO simulator reported the first
//!   second apart for this reason).
//! * **Inference that never syncs** keeps its GPU active only while its
//!   estimated work is queued, and an inference client that keeps the GPU
//!   busy on its own keeps training waiting (bounded by the shim's wait).
//!
//! # Wiring
//!
//! Feed every record of every client as the matching [`Input`] (LAUNCH and
//! LAUNCH_EX as [`Input::Launch`], with the record's `ts_ns`; MARK and
//! MARK_DONE as [`Input::Mark`] and [`Input::MarkDone`] with `seq` = the
//! record's `func_id`), registry events as `Register`/`SetClass`/`Depart`,
//! and apply each [`Output::Gate`] to that client's control block, each
//! [`Output::Limit`] as described under "Launch limits", and each
//! [`Output::Marks`] as the control block's `mark_every_ns`. After a batch
//! of inputs, [`Scheduler::next_tick`] (or the value [`Scheduler::tick`]
//! returned) says when to call [`Scheduler::tick`] again; `None` means only
//! new inputs can change a gate. No output is emitted for a departing
//! client.
mod budget;
mod client;
mod config;
mod estimate;
mod gates;
mod gpu;
mod histogram;
mod input;
mod local;
mod output;
pub mod reserve;
mod scheduler;
mod snapshot;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

pub use budget::SLO_EVAL_EVERY;
pub use client::MAX_REQUEST_NS;
pub use config::{
    SchedConfig, SchedConfigError, SloMatch, SloRule, SpatialMode, MAX_PARAM_NS, MAX_SLO_P99_MS,
    MIN_MARK_EVERY_NS,
};
pub use estimate::{
    GRAPH_FUNC, LATENCY_WINDOW, MAX_KERNELS_PER_CLIENT, MAX_KERNEL_NS, MAX_SEALED_ITEMS,
    MAX_SEALED_SEGMENTS, MIN_KERNEL_NS,
};
pub use gates::UNKNOWN_GPU_GRACE_NS;
pub use gpu::SHARE_WINDOW_NS;
pub use histogram::{LatencyHistogram, LATENCY_BUCKETS_NS};
pub use input::{Class, ClientId, Input};
pub use local::{allowance_for, local_budget};
pub use output::{Allowance, LocalBudget, Output};
pub use scheduler::{Knobs, Scheduler, Split, MAX_CLIENTS};
pub use snapshot::{ClientSnapshot, GpuSnapshot, SchedSnapshot};
