//! Scheduler v3's first candidate in the model (issue 23 (a)): while
//! inference is active, training's launches carry an SM mask that leaves
//! `R` SMs to inference, so an inference kernel finds SMs free instead of
//! waiting for training's resident blocks to retire.
//!
//! What the shims would do, and the model does here:
//!
//! * **Activity.** The inference job's shim counts its launches in flight
//!   (a completion mark after each, on the GPU board) and the time of its
//!   last launch or completion. Inference is *active* while a launch is in
//!   flight or for [`SpatialCfg::hangover_ns`] after the last one: the CPU
//!   gaps between an eager job's launches must not drop the mask.
//! * **`R` from the widths of inference's kernels.** Each inference launch's
//!   width (the SMs its first wave fills: blocks over blocks per SM, at
//!   most the GPU) joins a window of the last [`SpatialCfg::window`]
//!   launches; `R` is their [`SpatialCfg::quantile`], rounded up to a whole
//!   TPC (2 SMs) and clamped to `[min_reserve, max_reserve_share x SMs]`.
//! * **The mask.** A training launch made while inference is active, whose
//!   blocks hold their SMs at least [`SpatialCfg::min_block_ns`] (its time
//!   over its waves), carries a mask of `SMs - R` SMs for its whole life (a per-launch mask, as
//!   libsmctrl sets through the launch callback: it binds at launch). The
//!   training client's masked kernels share that one mask. Launches made
//!   while inference is idle carry none; kernels already running keep what
//!   they were given, so the reserved SMs empty as training's older blocks
//!   retire.
//! * **Priority.** Training runs at MPS client priority 1, as in
//!   `mps_lowprio`: the mask adds space to MPS + priority, it does not
//!   replace it.
//!
//! Not modelled: thread-block-cluster kernels needing whole GPCs (none of
//! the traces has one), the cost of the launch callback (the shim pays it
//! on the CPU, a few hundred ns a launch), and the mark's cost.

use std::collections::VecDeque;

use crate::gpu::{alone_sms, waves};
use crate::tandem::{Gate, HostEvent, TandemSide};
use crate::trace::Kernel;
use crate::Ns;
use tandem_sched::Class;

/// The candidate's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct SpatialCfg {
    /// How long inference stays active after its last launch or
    /// completion, ns.
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
            _ => return Err(bad(&"unknown key")),
        }
        Ok(())
    }
}

/// How long one of `k`'s blocks holds its SM on a GPU of `sms` SMs: the
/// kernel's time over its waves (one wave: the whole kernel).
#[must_use]
pub fn block_ns(k: &Kernel, sms: u32) -> Ns {
    k.duration_ns / waves(k.blocks(), k.blocks_per_sm, sms.max(1)).max(1)
}

/// The candidate as a [`TandemSide`].
#[derive(Clone, Debug)]
pub struct Spatial {
    cfg: SpatialCfg,
    sms: u32,
    classes: Vec<Option<Class>>,
    inflight: u32,
    last_inference: Option<Ns>,
    widths: VecDeque<u32>,
    /// `widths`, sorted (kept so as each launch comes, for [`Spatial::reserve`]).
    sorted: Vec<u32>,
    seq: u64,
    /// Training launches that carried a mask (statistics).
    pub masked_launches: u64,
}

impl Spatial {
    /// The candidate on a GPU of `sms` SMs.
    #[must_use]
    pub fn new(sms: u32, cfg: SpatialCfg) -> Spatial {
        Spatial {
            cfg,
            sms,
            classes: Vec::new(),
            inflight: 0,
            last_inference: None,
            widths: VecDeque::new(),
            sorted: Vec::new(),
            seq: 0,
            masked_launches: 0,
        }
    }

    fn class(&self, job: usize) -> Option<Class> {
        self.classes.get(job).copied().flatten()
    }

    /// Whether inference is active at `now`.
    #[must_use]
    pub fn active(&self, now: Ns) -> bool {
        self.inflight > 0
            || self
                .last_inference
                .is_some_and(|t| now < t.saturating_add(self.cfg.hangover_ns))
    }

    /// The SMs reserved for inference now.
    #[must_use]
    pub fn reserve(&self) -> u32 {
        let max = ((f64::from(self.sms) * self.cfg.max_reserve_share) as u32).max(1);
        let min = self.cfg.min_reserve.min(max);
        if self.sorted.is_empty() {
            return min;
        }
        let w = &self.sorted;
        let i = ((w.len() - 1) as f64 * self.cfg.quantile).round() as usize;
        let r = w[i.min(w.len() - 1)].div_ceil(2) * 2;
        r.clamp(min, max)
    }
}

impl TandemSide for Spatial {
    fn register(&mut self, _: Ns, job: usize, class: Class) {
        if self.classes.len() <= job {
            self.classes.resize(job + 1, None);
        }
        self.classes[job] = Some(class);
    }

    fn before_launch(&mut self, _: Ns, _: usize, _: &Kernel) -> Gate {
        Gate::Proceed
    }

    fn launch_anyway(&mut self, _: Ns, _: usize) {}

    fn after_launch(&mut self, now: Ns, job: usize, k: &Kernel) -> Option<u64> {
        if self.class(job) != Some(Class::Inference) {
            return None;
        }
        let width = alone_sms(k.blocks(), k.blocks_per_sm, self.sms);
        if self.widths.len() == self.cfg.window.max(1) {
            if let Some(old) = self.widths.pop_front() {
                let at = self.sorted.partition_point(|&x| x < old);
                self.sorted.remove(at);
            }
        }
        self.widths.push_back(width);
        let at = self.sorted.partition_point(|&x| x < width);
        self.sorted.insert(at, width);
        self.inflight += 1;
        self.last_inference = Some(now);
        self.seq += 1;
        Some(self.seq)
    }

    fn launch_completed(&mut self, now: Ns, job: usize, _: u64) {
        if self.class(job) == Some(Class::Inference) {
            self.inflight = self.inflight.saturating_sub(1);
            self.last_inference = Some(now);
        }
    }

    fn host_event(&mut self, _: Ns, _: usize, _: HostEvent) {}

    fn next_wake(&self) -> Option<Ns> {
        None
    }

    fn wake(&mut self, _: Ns, _: &mut Vec<usize>) {}

    fn mps_priority(&self, class: Class) -> u8 {
        u8::from(class == Class::Training)
    }

    fn sm_limit(&mut self, now: Ns, job: usize, k: &Kernel) -> u32 {
        if self.class(job) == Some(Class::Training)
            && self.active(now)
            && block_ns(k, self.sms) >= self.cfg.min_block_ns
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

    fn kernel(blocks: u32, bps: u32) -> Kernel {
        Kernel {
            name: "k".into(),
            grid: [blocks, 1, 1],
            block: [256, 1, 1],
            blocks_per_sm: bps,
            duration_ns: 1_000,
            sm_share: 1.0,
            regs_per_thread: 0,
            smem_per_block: 0,
            dram_bytes: 0,
            graph: 0,
            stream: 0,
            host_gap_ns: 0,
        }
    }

    #[test]
    fn training_launches_are_masked_only_while_inference_is_active() {
        let mut s = Spatial::new(108, SpatialCfg::default());
        s.register(0, 0, Class::Inference);
        s.register(0, 1, Class::Training);
        let t = Kernel {
            duration_ns: 1_000_000,
            ..kernel(400, 4)
        };
        assert_eq!(s.sm_limit(0, 1, &t), 0, "inference never seen: no mask");
        let seq = s.after_launch(100, 0, &kernel(20, 1)).unwrap();
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
        s.launch_completed(5_000, 0, seq);
        assert_ne!(s.sm_limit(5_000 + 999_999, 1, &t), 0, "within the hangover");
        assert_eq!(s.sm_limit(5_000 + 1_000_000, 1, &t), 0, "idle: no mask");
        assert_eq!(s.masked_launches, 2);
    }

    #[test]
    fn only_kernels_whose_blocks_hold_their_sms_long_are_masked() {
        let mut s = Spatial::new(108, SpatialCfg::default());
        s.register(0, 0, Class::Inference);
        s.register(0, 1, Class::Training);
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
        let mut all = Spatial::new(
            108,
            SpatialCfg {
                min_block_ns: 0,
                ..SpatialCfg::default()
            },
        );
        all.register(0, 0, Class::Inference);
        all.register(0, 1, Class::Training);
        all.after_launch(0, 0, &kernel(20, 1));
        assert_eq!(all.sm_limit(10, 1, &waves), 108 - 20, "0: every kernel");
    }

    #[test]
    fn the_reserve_follows_the_widths_within_its_bounds() {
        let mut s = Spatial::new(132, SpatialCfg::default());
        s.register(0, 0, Class::Inference);
        assert_eq!(s.reserve(), 8, "nothing learnt: the minimum");
        for _ in 0..9 {
            s.after_launch(0, 0, &kernel(3, 1));
        }
        s.after_launch(0, 0, &kernel(500, 1));
        assert_eq!(s.reserve(), 8, "narrow kernels: the minimum");
        for _ in 0..10 {
            s.after_launch(0, 0, &kernel(21, 1));
        }
        assert_eq!(s.reserve(), 22, "21 SMs rounds up to 11 TPCs");
        for _ in 0..200 {
            s.after_launch(0, 0, &kernel(1000, 1));
        }
        assert_eq!(s.reserve(), 33, "at most a quarter of the GPU");
    }

    #[test]
    fn the_reserve_is_the_quantile_of_the_last_window_of_widths() {
        // The sorted copy kept as launches come must drop the widths that
        // leave the window: compare with sorting the window afresh.
        let cfg = SpatialCfg {
            window: 5,
            min_reserve: 1,
            max_reserve_share: 1.0,
            ..SpatialCfg::default()
        };
        let mut s = Spatial::new(132, cfg.clone());
        s.register(0, 0, Class::Inference);
        let widths = [40u32, 2, 90, 90, 7, 61, 3, 3, 120, 18, 55, 40, 9];
        for (n, &w) in widths.iter().enumerate() {
            s.after_launch(0, 0, &kernel(w, 1));
            let mut last: Vec<u32> = widths[(n + 1).saturating_sub(5)..=n].to_vec();
            last.sort_unstable();
            let i = ((last.len() - 1) as f64 * cfg.quantile).round() as usize;
            let want = (last[i].div_ceil(2) * 2).clamp(1, 132);
            assert_eq!(s.reserve(), want, "after {n}: window {last:?}");
        }
    }

    /// In the matrix, on an H100 pair where MPS + priority leaves the
    /// inference p99 at 1.12x (BERT beside GPT-2 training), the candidate
    /// lowers it: the mask gives inference's kernels SMs that training's
    /// pending waves would otherwise take.
    #[test]
    fn the_candidate_lowers_the_p99_that_mps_priority_leaves() {
        use crate::calibration::reduced_matrix;
        use crate::matrix::{run_matrix, Device, MatrixCfg};
        let rows = run_matrix(
            &MatrixCfg {
                pairs: vec![("bert_b8".into(), "gpt2_train".into())],
                modes: vec!["mps_lowprio".into(), "tandem_spatial".into()],
                ..reduced_matrix(Device::H100, Device::H100.params())
            },
            None,
        )
        .unwrap();
        let p99 = |mode: &str| {
            rows.iter()
                .find(|r| r.mode == mode)
                .and_then(|r| r.p99_ratio)
                .unwrap()
        };
        assert!(
            p99("tandem_spatial") < p99("mps_lowprio") - 0.02,
            "spatial {} vs MPS + priority {}",
            p99("tandem_spatial"),
            p99("mps_lowprio")
        );
    }
}
