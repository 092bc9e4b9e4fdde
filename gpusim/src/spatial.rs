//! Scheduler v3's first candidate in the model (issue 23 (a)): while
//! inference is active, training's launches carry an SM mask that leaves
//! `R` SMs to inference, so an inference kernel finds SMs free instead of
//! waiting for training's resident blocks to retire.
//!
//! What the shims would do, and the model does here:
//!
//! * **Activity: the GPU board's rule** (`tandem_proto::board`), as the
//!   training shims read it. The inference shim bumps its GPU's slot at a
//!   launch when its last bump is older than a quarter of the hold
//!   ([`SpatialCfg::hangover_ns`]), and at every sync's and explicit
//!   request's begin and end, which it holds open in between (a thread
//!   blocked in a sync has work in flight on the GPU). Inference is
//!   *active* while anything is open or for the hold after the last bump:
//!   the CPU gaps between an eager job's launches must not drop the mask,
//!   and a GPU-bound request (a CUDA graph, kernels queued far ahead) keeps
//!   it through its sync. Until 2026-11-28 the model counted launches in
//!   flight by a completion mark after each, which the shim does not do;
//!   without the syncs held open, the board's rule dropped the mask in a
//!   GPU-bound request's tail (A100 BERT beside BERT b32, one seed: 2.74x
//!   to 4.18x).
//! * **`R` from the widths of inference's kernels.** Each inference launch's
//!   width (the SMs its first wave fills: blocks over blocks per SM, at
//!   most the GPU) joins a window of the last [`SpatialCfg::window`]
//!   launches; `R` is their [`SpatialCfg::quantile`], rounded up to a whole
//!   TPC (2 SMs) and clamped to `[min_reserve, max_reserve_share x SMs]`
//!   (the latter to the nearest TPC): tandemd's rule,
//!   `tandem_sched::reserve`. A CUDA graph's launch gives no width (the shim
//!   records one launch with no grid), and before any width `R` is the most,
//!   as tandemd leaves it.
//! * **The mask.** A training launch made while inference is active, whose
//!   blocks hold their SMs at least [`SpatialCfg::min_block_ns`] (its time
//!   over its waves), carries a mask of `SMs - R` SMs for its whole life (a per-launch mask, as
//!   libsmctrl sets through the launch callback: it binds at launch). The
//!   training client's masked kernels share that one mask. Launches made
//!   while inference is idle carry none; kernels already running keep what
//!   they were given, so the reserved SMs empty as training's older blocks
//!   retire. Off by default, as tandemd's `[scheduler]
//!   spatial_standing_kernel_ns`: with
//!   [`SpatialCfg::standing_block_ns`], launches whose blocks hold their SMs
//!   that long carry the mask while inference is idle too (as long as an
//!   inference client is on the GPU), so that the next request does not
//!   find every SM held by blocks launched in the gap.
//! * **Priority.** Training runs at MPS client priority 1, as in
//!   `mps_lowprio`: the mask adds space to MPS + priority, it does not
//!   replace it.
//!
//! Two further candidates of issue 23 are settings of the same side:
//!
//! * **(b) Green contexts** ([`SpatialCfg::green`]): the training process
//!   creates green contexts (`cuGreenCtxCreate`, CUDA 12.4+) and, while
//!   inference is active, the shim redirects training's launches to a
//!   stream of one with fewer SMs. In the model that is the mask of (a)
//!   with the partition's granularity: `cuDevSmResourceSplitByCount`
//!   makes groups of at least 8 SMs in multiples of 8 on compute
//!   capability 9.0 and of at least 4 in multiples of 2 on 8.x (CUDA
//!   12.4 driver API, "Green Contexts"), so `R` is rounded up to
//!   [`SpatialCfg::step`] SMs and the kept partition down. The events that
//!   keep the job's stream order across the redirect (a record and a wait
//!   per switch, a few microseconds of CPU) are not modelled.
//! * **(c) Duration-aware holds** ([`SpatialCfg::hold_slack_share`]): while
//!   inference is active, a training launch whose blocks hold their SMs
//!   longer than inference's slack is held until inference goes idle (or
//!   [`SpatialCfg::hold_max_ns`]), as Orion holds best-effort kernels
//!   longer than its threshold (Strati et al., EuroSys 2024). Block time,
//!   not the kernel's whole time ([`SpatialCfg::hold_by_block`]): under MPS
//!   client priority a kernel of many short waves yields its SMs to
//!   inference's pending blocks anyway. Holding by kernel time instead
//!   (Orion's rule, `--spatial hold_by_block=false`) met the goal on none
//!   of the 26 pairs against 2, costing the H100 ResNet50 batch-4 pairs
//!   0.18-0.19 of training for almost no p99. The slack is
//!   that share of inference's shortest recent active period (the time from
//!   a launch after idle to its last completion, over the last
//!   [`SpatialCfg::window`] periods): 0.1 for the goal of 1.10x. The
//!   kernel's time is the trace's, where the shim would learn it from its
//!   completion marks (`tandemctl trace` does, `docs/traces.md`).
//!
//! Not modelled: thread-block-cluster kernels needing whole GPCs (none of
//! the traces has one), the cost of the launch callback (the shim pays it
//! on the CPU, a few hundred ns a launch), and the mark's cost.

use std::collections::VecDeque;

use crate::tandem::{Gate, HostEvent, TandemSide};
use crate::trace::Kernel;
use crate::Ns;
use tandem_sched::reserve::{width, ReserveRule, Widths};
use tandem_sched::Class;

/// The candidate's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SpatialCfg {
    /// How long inference stays active after the board's last bump, ns
    /// (tandemd's `request_hold_ns`).
    pub hangover_ns: Ns,
    /// Fewest SMs reserved.
    pub min_reserve: u32,
    /// Most SMs reserved, as a share of the GPU's.
    pub max_reserve_share: f64,
    /// Inference launches whose widths `R` is learnt from.
    pub window: usize,
    /// The quantile of those widths `R` covers.
    pub quantile: f64,
    /// Only training kernels whose blocks hold their SMs this long
    /// (duration over waves) are masked; 0: every training kernel. A
    /// shorter block's SM comes back within that time, and MPS client
    /// priority gives it to inference's pending blocks first, so masking
    /// such a kernel costs training its SMs for the kernel's whole life and
    /// buys inference less than one block's wait.
    pub min_block_ns: Ns,
    /// Training kernels whose blocks hold their SMs at least this long are
    /// masked whenever an inference client is on the GPU, active or not:
    /// launched while inference is idle, their resident blocks would hold
    /// every SM when its next request comes. 0: none (only while active).
    /// tandemd's `[scheduler] spatial_standing_kernel_ns` (default 0).
    pub standing_block_ns: Ns,
    /// `R` in whole steps of this many SMs (2: a TPC, for per-launch masks;
    /// a green context's partition step for (b)).
    pub step: u32,
    /// (c): hold a training launch while inference is active if its kernel
    /// takes longer than this share of inference's shortest recent active
    /// period; 0: no holds.
    pub hold_slack_share: f64,
    /// The longest a launch is held, ns (then it goes ahead).
    pub hold_max_ns: Ns,
    /// (c) compares the slack with the kernel's block time (its time over
    /// its waves: how long its blocks keep inference's blocks from their
    /// SMs under MPS client priority); false: with its whole time.
    pub hold_by_block: bool,
}

impl Default for SpatialCfg {
    fn default() -> Self {
        SpatialCfg {
            hangover_ns: 1_000_000,
            min_reserve: 8,
            max_reserve_share: 0.25,
            window: 128,
            quantile: 0.9,
            min_block_ns: 100_000,
            standing_block_ns: 0,
            step: 2,
            hold_slack_share: 0.0,
            hold_max_ns: 10_000_000,
            hold_by_block: true,
        }
    }
}

impl SpatialCfg {
    /// Sets one field from `KEY=VALUE` (`tandem-sim --spatial`).
    ///
    /// # Errors
    /// An unknown key or a value that does not parse.
    pub fn set(&mut self, kv: &str) -> Result<(), String> {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--spatial {kv}: KEY=VALUE"))?;
        let bad = |e: &dyn std::fmt::Display| format!("--spatial {kv}: {e}");
        match k {
            "hangover_ns" => self.hangover_ns = v.parse().map_err(|e| bad(&e))?,
            "min_reserve" => self.min_reserve = v.parse().map_err(|e| bad(&e))?,
            "max_reserve_share" => self.max_reserve_share = v.parse().map_err(|e| bad(&e))?,
            "window" => self.window = v.parse().map_err(|e| bad(&e))?,
            "quantile" => self.quantile = v.parse().map_err(|e| bad(&e))?,
            "min_block_ns" => self.min_block_ns = v.parse().map_err(|e| bad(&e))?,
            "standing_block_ns" => self.standing_block_ns = v.parse().map_err(|e| bad(&e))?,
            "step" => self.step = v.parse().map_err(|e| bad(&e))?,
            "hold_slack_share" => self.hold_slack_share = v.parse().map_err(|e| bad(&e))?,
            "hold_max_ns" => self.hold_max_ns = v.parse().map_err(|e| bad(&e))?,
            "hold_by_block" => self.hold_by_block = v.parse().map_err(|e| bad(&e))?,
            _ => return Err(bad(&"unknown key")),
        }
        Ok(())
    }

    /// Candidate (b) on a GPU of compute capability `major`.x: green
    /// contexts' partition step (8 SMs from 9.0, 2 before) and minimum
    /// (8 from 9.0, 4 on 8.x).
    #[must_use]
    pub fn green(self, major: u32) -> SpatialCfg {
        let (step, min) = if major >= 9 { (8, 8) } else { (2, 4) };
        SpatialCfg {
            step,
            min_reserve: self.min_reserve.max(min).div_ceil(step) * step,
            ..self
        }
    }

    /// The reservation's size, as tandemd's rule takes it.
    #[must_use]
    pub fn reserve_rule(&self) -> ReserveRule {
        ReserveRule {
            min_reserve: self.min_reserve,
            max_reserve_share: self.max_reserve_share,
            window: self.window,
            quantile: self.quantile,
            step: self.step,
        }
    }

    /// Candidate (c): (a) with duration-aware holds at a slack of a tenth
    /// of inference's shortest active period, or the share already set
    /// (`--spatial hold_slack_share=X` reaches `tandem_hold` and
    /// `tandem_slice`).
    #[must_use]
    pub fn holding(self) -> SpatialCfg {
        SpatialCfg {
            hold_slack_share: if self.hold_slack_share > 0.0 {
                self.hold_slack_share
            } else {
                0.1
            },
            ..self
        }
    }
}

/// How long one of `k`'s blocks holds its SM on a GPU of `sms` SMs: the
/// kernel's time over its waves (one wave: the whole kernel).
#[must_use]
pub fn block_ns(k: &Kernel, sms: u32) -> Ns {
    tandem_proto::spatial::block_ns(k.duration_ns, k.blocks(), k.blocks_per_sm, sms)
}

/// The candidate as a [`TandemSide`].
#[derive(Clone, Debug)]
pub struct Spatial {
    cfg: SpatialCfg,
    sms: u32,
    classes: Vec<Option<Class>>,
    /// Syncs and explicit requests of inference open on the board.
    open: u32,
    /// The board's last bump.
    last_inference: Option<Ns>,
    /// Inference's widths and the reserve they give (tandemd's rule).
    widths: Widths,
    /// When inference's current active period began.
    period_start: Option<Ns>,
    /// The last [`SpatialCfg::window`] active periods' lengths.
    periods: VecDeque<Ns>,
    /// Training jobs whose launch is held.
    held: Vec<usize>,
    /// Training launches that carried a mask (statistics).
    pub masked_launches: u64,
    /// Training launches held (statistics).
    pub held_launches: u64,
}

impl Spatial {
    /// The candidate on a GPU of `sms` SMs.
    #[must_use]
    pub fn new(sms: u32, cfg: SpatialCfg) -> Spatial {
        Spatial {
            widths: Widths::new(sms, cfg.reserve_rule()),
            cfg,
            sms,
            classes: Vec::new(),
            open: 0,
            last_inference: None,
            period_start: None,
            periods: VecDeque::new(),
            held: Vec::new(),
            masked_launches: 0,
            held_launches: 0,
        }
    }

    fn class(&self, job: usize) -> Option<Class> {
        self.classes.get(job).copied().flatten()
    }

    /// Whether inference is active at `now`.
    #[must_use]
    pub fn active(&self, now: Ns) -> bool {
        self.open > 0
            || self
                .last_inference
                .is_some_and(|t| now < t.saturating_add(self.cfg.hangover_ns))
    }

    /// The SMs reserved for inference now: the quantile of its widths in
    /// whole steps, clamped to the bounds (the most rounded to the nearest
    /// step: a TPC mask cannot leave 33 SMs), and whatever the training
    /// partition's whole steps leave.
    #[must_use]
    pub fn reserve(&self) -> u32 {
        self.widths.reserve()
    }

    /// Inference's slack for (c): the configured share of its shortest
    /// recent active period; `None` without holds or before a period ended.
    #[must_use]
    pub fn slack(&self) -> Option<Ns> {
        if self.cfg.hold_slack_share <= 0.0 {
            return None;
        }
        let shortest = *self.periods.iter().min()?;
        Some((shortest as f64 * self.cfg.hold_slack_share) as Ns)
    }

    /// When the current active period ends, if nothing else comes: `None`
    /// while a launch is in flight.
    fn idle_at(&self) -> Option<Ns> {
        if self.open > 0 {
            return None;
        }
        self.last_inference
            .map(|t| t.saturating_add(self.cfg.hangover_ns))
    }

    /// An inference launch at `now`: a new active period begins if it was
    /// idle, and the last one's length is kept.
    fn inference_launch(&mut self, now: Ns) {
        if self.active(now) {
            return;
        }
        if let (Some(start), Some(end)) = (self.period_start, self.last_inference) {
            if self.periods.len() == self.cfg.window.max(1) {
                self.periods.pop_front();
            }
            self.periods.push_back(end.saturating_sub(start));
        }
        self.period_start = Some(now);
    }
}

impl TandemSide for Spatial {
    fn register(&mut self, _: Ns, job: usize, class: Class) {
        if self.classes.len() <= job {
            self.classes.resize(job + 1, None);
        }
        self.classes[job] = Some(class);
    }

    fn before_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Gate {
        let hold = self.class(job) == Some(Class::Training)
            && self.active(now)
            && self.slack().is_some_and(|s| {
                let t = if self.cfg.hold_by_block {
                    block_ns(k, self.sms)
                } else {
                    k.duration_ns
                };
                t > s
            });
        if !hold {
            self.held.retain(|&j| j != job);
            return Gate::Proceed;
        }
        if !self.held.contains(&job) {
            self.held.push(job);
            self.held_launches += 1;
        }
        Gate::Wait {
            until: now.saturating_add(self.cfg.hold_max_ns),
            mark: None,
        }
    }

    fn launch_anyway(&mut self, _: Ns, job: usize) {
        self.held.retain(|&j| j != job);
    }

    fn after_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Option<u64> {
        if self.class(job) != Some(Class::Inference) {
            return None;
        }
        self.inference_launch(now);
        // A graph launch's record carries no grid: the shim and tandemd
        // learn no width from it (`k` is the graph's first node here).
        if k.graph == 0 {
            self.widths
                .push(width(k.blocks(), k.blocks_per_sm, self.sms));
        }
        // The shim bumps at a launch only when its last bump is older than
        // a quarter of the hold.
        let due = self
            .last_inference
            .is_none_or(|t| now >= t.saturating_add(self.cfg.hangover_ns / 4));
        if due {
            self.last_inference = Some(now);
        }
        None
    }

    fn launch_completed(&mut self, _: Ns, _: usize, _: u64) {}

    fn host_event(&mut self, now: Ns, job: usize, ev: HostEvent) {
        if self.class(job) != Some(Class::Inference) {
            return;
        }
        match ev {
            HostEvent::SyncBegin | HostEvent::RequestBegin => {
                self.inference_launch(now);
                self.open += 1;
            }
            HostEvent::SyncEnd | HostEvent::RequestEnd => {
                self.open = self.open.saturating_sub(1);
            }
        }
        self.last_inference = Some(now);
    }

    fn next_wake(&self) -> Option<Ns> {
        if self.held.is_empty() {
            None
        } else {
            self.idle_at()
        }
    }

    fn wake(&mut self, now: Ns, ready: &mut Vec<usize>) {
        if !self.active(now) {
            ready.append(&mut self.held);
        }
    }

    fn mps_priority(&self, class: Class) -> u8 {
        u8::from(class == Class::Training)
    }

    fn sm_limit(&mut self, now: Ns, job: usize, k: &Kernel) -> u32 {
        let block = block_ns(k, self.sms);
        let standing = self.cfg.standing_block_ns > 0
            && block >= self.cfg.standing_block_ns
            && self.classes.contains(&Some(Class::Inference));
        if self.class(job) == Some(Class::Training)
            && block >= self.cfg.min_block_ns
            && (standing || self.active(now))
        {
            self.masked_launches += 1;
            self.sms - self.reserve()
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The candidate on `sms` SMs with inference (job 0) and training (job
    /// 1) registered.
    fn pair(sms: u32, cfg: SpatialCfg) -> Spatial {
        let mut s = Spatial::new(sms, cfg);
        s.register(0, 0, Class::Inference);
        s.register(0, 1, Class::Training);
        s
    }

    fn kernel(blocks: u32, bps: u32) -> Kernel {
        Kernel::new("k", blocks, 256, bps, 1_000)
    }

    #[test]
    fn training_launches_are_masked_only_while_inference_is_active() {
        let mut s = pair(108, SpatialCfg::default());
        let t = Kernel {
            duration_ns: 1_000_000,
            ..kernel(400, 4)
        };
        assert_eq!(s.sm_limit(0, 1, &t), 0, "inference never seen: no mask");
        s.after_launch(100, 0, &kernel(20, 1));
        s.host_event(100, 0, HostEvent::SyncBegin);
        assert_eq!(
            s.sm_limit(200, 1, &t),
            108 - 20,
            "R = the inference kernel's 20 SMs"
        );
        assert_eq!(
            s.sm_limit(200, 0, &t),
            0,
            "inference itself is never masked"
        );
        s.host_event(5_000, 0, HostEvent::SyncEnd);
        assert_ne!(s.sm_limit(5_000 + 999_999, 1, &t), 0, "within the hangover");
        assert_eq!(s.sm_limit(5_000 + 1_000_000, 1, &t), 0, "idle: no mask");
        assert_eq!(s.masked_launches, 2);
    }

    /// A standing reservation (a what-if): a training kernel whose blocks
    /// hold their SMs at least `standing_block_ns` is masked while inference
    /// is idle too, as long as an inference client is on the GPU; shorter
    /// ones only while it is active; none with no inference client.
    #[test]
    fn a_standing_reservation_masks_long_blocks_while_inference_is_idle() {
        let cfg = SpatialCfg {
            standing_block_ns: 500_000,
            ..SpatialCfg::default()
        };
        let mut s = pair(108, cfg.clone());
        s.after_launch(0, 0, &kernel(20, 1));
        let idle = 10_000_000;
        assert!(!s.active(idle));
        let long = Kernel {
            duration_ns: 1_000_000,
            ..kernel(400, 4)
        };
        let short = Kernel {
            duration_ns: 200_000,
            ..kernel(400, 4)
        };
        assert_eq!(s.sm_limit(idle, 1, &long), 108 - 20, "standing");
        assert_eq!(s.sm_limit(idle, 1, &short), 0, "only while active");
        assert_eq!(s.sm_limit(100, 1, &short), 108 - 20, "active");
        let mut alone = Spatial::new(108, cfg);
        alone.register(0, 1, Class::Training);
        assert_eq!(alone.sm_limit(idle, 1, &long), 0, "no inference client");
    }

    /// The board's rule, as the training shims read it: a launch keeps
    /// inference active for the hold after it; a sync keeps it active while
    /// it waits, however long the GPU-bound request runs past its last
    /// launch, and for the hold after it returns.
    #[test]
    fn inference_is_active_for_the_hold_after_a_launch_and_through_a_sync() {
        let mut s = pair(108, SpatialCfg::default());
        s.after_launch(0, 0, &kernel(20, 1));
        assert!(s.active(999_999));
        assert!(!s.active(1_000_000), "no sync: the hold ends it");
        // A request of one launch, then a 20 ms wait in its sync.
        s.after_launch(2_000_000, 0, &kernel(20, 1));
        s.host_event(2_000_100, 0, HostEvent::SyncBegin);
        assert!(s.active(21_000_000), "waiting in the sync");
        s.host_event(22_000_000, 0, HostEvent::SyncEnd);
        assert!(s.active(22_999_999));
        assert!(!s.active(23_000_000));
        // A training job's sync is no inference activity.
        s.host_event(30_000_000, 1, HostEvent::SyncBegin);
        assert!(!s.active(30_000_001));
    }

    #[test]
    fn only_kernels_whose_blocks_hold_their_sms_long_are_masked() {
        let mut s = pair(108, SpatialCfg::default());
        s.after_launch(0, 0, &kernel(20, 1));
        // One wave (400 blocks, 4 an SM on 108 SMs): each block holds its
        // SM the whole 1 ms.
        let persistent = Kernel {
            duration_ns: 1_000_000,
            ..kernel(400, 4)
        };
        assert_eq!(block_ns(&persistent, 108), 1_000_000);
        assert_eq!(s.sm_limit(10, 1, &persistent), 108 - 20);
        // The same 1 ms over 100 waves: 10 us blocks, left unmasked.
        let waves = Kernel {
            duration_ns: 1_000_000,
            ..kernel(43_200, 4)
        };
        assert_eq!(block_ns(&waves, 108), 10_000);
        assert_eq!(s.sm_limit(10, 1, &waves), 0);
        assert_eq!(s.masked_launches, 1);
        let mut all = pair(
            108,
            SpatialCfg {
                min_block_ns: 0,
                ..SpatialCfg::default()
            },
        );
        all.after_launch(0, 0, &kernel(20, 1));
        assert_eq!(all.sm_limit(10, 1, &waves), 108 - 20, "0: every kernel");
    }

    #[test]
    fn holds_take_a_slack_share_set_before_them() {
        assert_eq!(SpatialCfg::default().holding().hold_slack_share, 0.1);
        let mut c = SpatialCfg::default();
        c.set("hold_slack_share=0.3").unwrap();
        assert_eq!(c.holding().hold_slack_share, 0.3);
    }

    #[test]
    fn a_graph_launch_teaches_no_width() {
        // The shim sees one cuGraphLaunch with no grid, so tandemd learns no
        // width from it: beside graph-only inference the reserve stays the
        // most (a quarter of 132 SMs, 33, to the nearest TPC).
        let mut s = Spatial::new(132, SpatialCfg::default());
        s.register(0, 0, Class::Inference);
        let node = Kernel {
            graph: 7,
            ..kernel(3, 1)
        };
        for _ in 0..20 {
            s.after_launch(0, 0, &node);
        }
        assert_eq!(s.reserve(), 34, "no width: the most");
        for _ in 0..20 {
            s.after_launch(0, 0, &kernel(3, 1));
        }
        assert_eq!(s.reserve(), 8, "eager 3-SM kernels: the least");
    }

    #[test]
    fn green_contexts_reserve_in_their_partition_steps() {
        // Hopper: groups of 8 SMs, so training keeps a multiple of 8 and
        // inference the rest (132 = 15 x 8 + 12 at a 9-SM width).
        let mut h = Spatial::new(132, SpatialCfg::default().green(9));
        h.register(0, 0, Class::Inference);
        h.after_launch(0, 0, &kernel(1, 1));
        assert_eq!(
            h.reserve(),
            12,
            "the minimum of 8, and 132's remainder of 4"
        );
        for _ in 0..10 {
            h.after_launch(0, 0, &kernel(9, 1));
        }
        assert_eq!(h.reserve(), 20, "9 SMs: 16, and the remainder");
        for _ in 0..200 {
            h.after_launch(0, 0, &kernel(1000, 1));
        }
        assert_eq!(
            h.reserve(),
            36,
            "a quarter, 33, to the nearest 8, and the remainder"
        );
        assert_eq!((132 - h.reserve()) % 8, 0);
        // Ampere: steps of 2 from 4; the mask's minimum of 8 stands.
        let a = SpatialCfg::default().green(8);
        assert_eq!((a.step, a.min_reserve), (2, 8));
    }

    /// [`pair`] on 108 SMs after one 4 ms active period of inference (a
    /// slack of 400 us with holds) and inside a second, from a launch at
    /// 10 ms (within its hold).
    fn in_second_period(cfg: SpatialCfg) -> Spatial {
        let mut s = pair(108, cfg);
        s.after_launch(0, 0, &kernel(20, 1));
        s.host_event(0, 0, HostEvent::SyncBegin);
        s.host_event(4_000_000, 0, HostEvent::SyncEnd);
        s.after_launch(10_000_000, 0, &kernel(20, 1));
        s
    }

    /// Candidate (c): a training kernel longer than the slack waits while
    /// inference is active and goes when it is idle; a short one goes at
    /// once; without a finished active period there is no slack.
    #[test]
    fn long_training_launches_wait_while_inference_is_active() {
        let mut s = pair(108, SpatialCfg::default().holding());
        let long = Kernel {
            duration_ns: 500_000,
            ..kernel(400, 4)
        };
        let short = Kernel {
            duration_ns: 300_000,
            ..kernel(400, 4)
        };
        // A first active period: 0 to 4 ms.
        s.after_launch(0, 0, &kernel(20, 1));
        s.host_event(0, 0, HostEvent::SyncBegin);
        assert_eq!(s.before_launch(10, 1, &long), Gate::Proceed, "no slack yet");
        s.host_event(4_000_000, 0, HostEvent::SyncEnd);
        // Idle past the hangover; the next launch opens a second period
        // and closes the first (4 ms: a slack of 400 us).
        s.after_launch(10_000_000, 0, &kernel(20, 1));
        s.host_event(10_000_000, 0, HostEvent::SyncBegin);
        assert_eq!(s.slack(), Some(400_000));
        assert_eq!(s.before_launch(10_000_100, 1, &short), Gate::Proceed);
        assert!(matches!(
            s.before_launch(10_000_100, 1, &long),
            Gate::Wait {
                until: 20_000_100,
                ..
            }
        ));
        assert_eq!(s.next_wake(), None, "inference waiting in a sync");
        s.host_event(12_000_000, 0, HostEvent::SyncEnd);
        assert_eq!(s.next_wake(), Some(13_000_000), "its hangover's end");
        let mut ready = Vec::new();
        s.wake(12_500_000, &mut ready);
        assert!(ready.is_empty(), "still active");
        s.wake(13_000_000, &mut ready);
        assert_eq!(ready, [1]);
        assert_eq!(s.next_wake(), None);
        assert_eq!(s.before_launch(13_000_000, 1, &long), Gate::Proceed);
        assert_eq!(s.held_launches, 1);
        // By block time (the default): 500 us over 5 waves (100 us blocks)
        // goes, as its blocks leave their SMs within the slack; by kernel
        // time it waits.
        let mut b = in_second_period(SpatialCfg::default().holding());
        let waves = Kernel {
            duration_ns: 500_000,
            ..kernel(5 * 108 * 4, 4)
        };
        assert_eq!(b.before_launch(10_000_100, 1, &waves), Gate::Proceed);
        assert!(matches!(
            b.before_launch(10_000_100, 1, &long),
            Gate::Wait { .. }
        ));
        let mut k = in_second_period(SpatialCfg {
            hold_by_block: false,
            ..SpatialCfg::default().holding()
        });
        assert!(matches!(
            k.before_launch(10_000_100, 1, &waves),
            Gate::Wait { .. }
        ));
        // Without (c), nothing is ever held.
        let mut a = in_second_period(SpatialCfg::default());
        assert_eq!(a.slack(), None);
        assert_eq!(a.before_launch(10_000_100, 1, &long), Gate::Proceed);
    }

    /// In the matrix, on the same H100 pair, holding training's long
    /// kernels (by kernel time) while inference is active takes the p99 far
    /// below what the mask alone leaves, and costs training some of its
    /// share: holds act, and trade.
    #[test]
    fn holds_lower_the_p99_the_mask_leaves() {
        use crate::matrix::{one_pair, Device};
        let get = one_pair(
            Device::H100,
            ("bert_b8", "gpt2_train"),
            &["tandem_spatial", "tandem_hold"],
            |m| m.tandem.spatial.hold_by_block = false,
        );
        let (mask, hold) = (get("tandem_spatial"), get("tandem_hold"));
        assert!(hold.0 < mask.0 - 0.1, "p99: hold {hold:?} vs mask {mask:?}");
        assert!(hold.1 < mask.1, "training: hold {hold:?} vs mask {mask:?}");
    }

    /// In the matrix, on an H100 pair where MPS + priority leaves the
    /// inference p99 at 1.12x (BERT beside GPT-2 training), the candidate
    /// lowers it: the mask gives inference's kernels SMs that training's
    /// pending waves would otherwise take.
    #[test]
    fn the_candidate_lowers_the_p99_that_mps_priority_leaves() {
        use crate::matrix::{one_pair, Device};
        let get = one_pair(
            Device::H100,
            ("bert_b8", "gpt2_train"),
            &["mps_lowprio", "tandem_spatial"],
            |_| {},
        );
        let p99 = |mode: &str| get(mode).0;
        assert!(
            p99("tandem_spatial") < p99("mps_lowprio") - 0.02,
            "spatial {} vs MPS + priority {}",
            p99("tandem_spatial"),
            p99("mps_lowprio")
        );
    }
}
