//! Scheduler v3's reservation size (issue 23 (a)): how many SMs a training
//! job's mask leaves to inference while inference is active, learnt from the
//! widths of inference's own kernels. One definition, used by tandemd (fed
//! by the inference clients' LAUNCH records) and by the GPU-sharing model's
//! `tandem_spatial` (`gpusim/src/spatial.rs`), so that what the model
//! predicts is what the daemon does.
//!
//! * **Occupancy** ([`blocks_per_sm`]) and **width** ([`width`]): the
//!   blocks of one kernel an SM holds, and the SMs a launch's first wave
//!   fills; defined in `tandem_proto::spatial`, where the shim, which
//!   decides which launches to mask by the same rules, reads them.
//! * **`R`** ([`Widths::reserve`]): the [`ReserveRule::quantile`] of the last
//!   [`ReserveRule::window`] widths, rounded up to whole steps of
//!   [`ReserveRule::step`] SMs (2: a TPC, what a per-launch mask can leave),
//!   clamped to `[min_reserve, max_reserve_share x SMs]` (the latter to the
//!   nearest step), and whatever the training side's whole steps leave.
//!   Before any width, the most: nothing says inference needs less, and
//!   inference that launches only CUDA graphs never gives one (the shim sees
//!   a graph launch, not its kernels).
//! * **Owners**: each width remembers the job that launched it
//!   ([`Widths::push_from`]), so that a job found not to be inference after
//!   all (tandemd's `auto_class = "detect"` runs a training job's first
//!   forward pass as inference) takes its widths back out
//!   ([`Widths::forget`]).

use std::collections::VecDeque;

pub use tandem_proto::spatial::{blocks_per_sm, width, SmLimits};

/// How `R` follows the widths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReserveRule {
    /// Fewest SMs reserved.
    pub min_reserve: u32,
    /// Most SMs reserved, as a share of the GPU's.
    pub max_reserve_share: f64,
    /// Inference launches whose widths `R` is learnt from.
    pub window: usize,
    /// The quantile of those widths `R` covers.
    pub quantile: f64,
    /// `R` in whole steps of this many SMs (2: a TPC).
    pub step: u32,
}

impl Default for ReserveRule {
    /// The GPU-sharing model's: at least 8 SMs, at most a quarter of the
    /// GPU, covering 9 in 10 of the last 128 launches, in TPCs.
    fn default() -> Self {
        ReserveRule {
            min_reserve: 8,
            max_reserve_share: 0.25,
            window: 128,
            quantile: 0.9,
            step: 2,
        }
    }
}

/// The last [`ReserveRule::window`] widths of one GPU's inference launches.
#[derive(Clone, Debug)]
pub struct Widths {
    rule: ReserveRule,
    sms: u32,
    /// The widths in launch order, each with the job that launched it.
    widths: VecDeque<(u32, u64)>,
    /// `widths`' widths, sorted (kept so as each launch comes).
    sorted: Vec<u32>,
}

impl Widths {
    /// None yet, on a GPU of `sms` SMs.
    #[must_use]
    pub fn new(sms: u32, rule: ReserveRule) -> Widths {
        Widths {
            rule,
            sms,
            widths: VecDeque::new(),
            sorted: Vec::new(),
        }
    }

    /// The GPU's SMs.
    #[must_use]
    pub fn sms(&self) -> u32 {
        self.sms
    }

    /// Widths held (at most the window).
    #[must_use]
    pub fn len(&self) -> usize {
        self.widths.len()
    }

    /// Whether none was seen.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.widths.is_empty()
    }

    /// One inference launch `width` SMs wide, of no job in particular
    /// ([`Self::push_from`] owner 0); the oldest leaves a full window.
    pub fn push(&mut self, width: u32) {
        self.push_from(0, width);
    }

    /// One launch `width` SMs wide by the job `owner`; the oldest leaves a
    /// full window.
    pub fn push_from(&mut self, owner: u64, width: u32) {
        let width = width.min(self.sms);
        if self.widths.len() == self.rule.window.max(1) {
            if let Some((old, _)) = self.widths.pop_front() {
                let at = self.sorted.partition_point(|&x| x < old);
                self.sorted.remove(at);
            }
        }
        self.widths.push_back((width, owner));
        let at = self.sorted.partition_point(|&x| x < width);
        self.sorted.insert(at, width);
    }

    /// Take every width `owner` launched back out (a job that turned out
    /// not to be inference); how many were held. The others keep their
    /// order, and the window refills with new launches.
    pub fn forget(&mut self, owner: u64) -> usize {
        let before = self.widths.len();
        self.widths.retain(|&(_, o)| o != owner);
        let gone = before - self.widths.len();
        if gone > 0 {
            self.sorted.clear();
            self.sorted.extend(self.widths.iter().map(|&(w, _)| w));
            self.sorted.sort_unstable();
        }
        gone
    }

    /// The most `R` may be: the share of the GPU to the nearest step.
    #[must_use]
    pub fn max_reserve(&self) -> u32 {
        let step = self.step();
        ((f64::from(self.sms) * self.rule.max_reserve_share / f64::from(step)).round() as u32
            * step)
            .clamp(step, self.sms.max(1))
    }

    fn step(&self) -> u32 {
        self.rule.step.clamp(1, self.sms.max(1))
    }

    /// The SMs reserved for inference now: the quantile of its widths in
    /// whole steps, clamped to the bounds (the most when none was seen),
    /// and whatever the training side's whole steps leave.
    #[must_use]
    pub fn reserve(&self) -> u32 {
        let step = self.step();
        let max = self.max_reserve();
        let min = self.rule.min_reserve.min(max);
        let want = if self.sorted.is_empty() {
            max
        } else {
            let w = &self.sorted;
            let i = ((w.len() - 1) as f64 * self.rule.quantile).round() as usize;
            (w[i.min(w.len() - 1)].div_ceil(step) * step).clamp(min, max)
        };
        self.sms - (self.sms.saturating_sub(want) / step * step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_follows_the_widths_within_its_bounds() {
        let mut w = Widths::new(132, ReserveRule::default());
        assert_eq!(w.reserve(), 34, "nothing learnt: the most");
        for _ in 0..9 {
            w.push(3);
        }
        w.push(132);
        assert_eq!(w.reserve(), 8, "narrow kernels: the minimum");
        for _ in 0..10 {
            w.push(21);
        }
        assert_eq!(w.reserve(), 22, "21 SMs rounds up to 11 TPCs");
        for _ in 0..200 {
            w.push(1000);
        }
        assert_eq!(w.len(), 128, "the window");
        assert_eq!(w.reserve(), 34, "a quarter, 33, to the nearest TPC");
        assert_eq!(w.max_reserve(), 34);
    }

    #[test]
    fn the_reserve_is_the_quantile_of_the_last_window_of_widths() {
        let rule = ReserveRule {
            min_reserve: 1,
            max_reserve_share: 1.0,
            window: 5,
            quantile: 0.9,
            step: 1,
        };
        let mut w = Widths::new(132, rule);
        let widths = [40u32, 2, 90, 90, 7, 61, 3, 3, 120, 18, 55, 40, 9];
        for (n, &x) in widths.iter().enumerate() {
            w.push(x);
            let mut last: Vec<u32> = widths[(n + 1).saturating_sub(5)..=n].to_vec();
            last.sort_unstable();
            let i = ((last.len() - 1) as f64 * 0.9).round() as usize;
            assert_eq!(w.reserve(), last[i], "after {n}: {last:?}");
        }
    }

    #[test]
    fn a_job_forgotten_takes_its_widths_out_of_the_reserve() {
        let mut w = Widths::new(132, ReserveRule::default());
        for _ in 0..40 {
            w.push_from(7, 3);
        }
        // A training job's forward pass, counted as inference for a while,
        // between the inference job's launches.
        for _ in 0..30 {
            w.push_from(9, 100);
            w.push_from(7, 3);
        }
        assert_eq!(w.reserve(), 34, "the wide launches set the most");
        assert_eq!(w.forget(9), 30);
        assert_eq!(w.len(), 70);
        assert_eq!(w.reserve(), 8, "the inference job's own: the minimum");
        assert_eq!(w.forget(9), 0, "nothing left of it");
        // The window still slides, oldest first.
        for _ in 0..58 {
            w.push_from(7, 21);
        }
        assert_eq!(w.len(), 128);
        assert_eq!(w.reserve(), 22);
        assert_eq!(w.forget(7), 128);
        assert!(w.is_empty());
        assert_eq!(w.reserve(), 34, "nothing learnt: the most again");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 300,
            failure_persistence: None,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Pushes and forgets in any order leave the reserve a window
        /// refilled from scratch with the same widths in the same order
        /// would give.
        #[test]
        fn forgetting_is_as_if_the_job_had_never_pushed(
            ops in proptest::collection::vec((0u64..4, 0u32..140, proptest::bool::weighted(0.05)), 0..400)
        ) {
            let rule = ReserveRule { window: 16, ..ReserveRule::default() };
            let mut w = Widths::new(132, rule);
            let mut held: VecDeque<(u32, u64)> = VecDeque::new();
            for (owner, width, forget) in ops {
                if forget {
                    let before = held.len();
                    held.retain(|&(_, o)| o != owner);
                    proptest::prop_assert_eq!(w.forget(owner), before - held.len());
                } else {
                    w.push_from(owner, width);
                    if held.len() == 16 {
                        held.pop_front();
                    }
                    held.push_back((width.min(132), owner));
                }
                let mut fresh = Widths::new(132, rule);
                for &(x, o) in &held {
                    fresh.push_from(o, x);
                }
                proptest::prop_assert_eq!(w.len(), held.len());
                proptest::prop_assert_eq!(w.reserve(), fresh.reserve());
            }
        }
    }

    #[test]
    fn training_keeps_whole_steps() {
        // Steps of 8 on 132 SMs: training keeps a multiple of 8, inference
        // the rest (the minimum of 8 and 132's remainder of 4).
        let rule = ReserveRule {
            step: 8,
            ..ReserveRule::default()
        };
        let mut w = Widths::new(132, rule);
        assert_eq!(w.reserve(), 36, "the most: a quarter, 33, to 32, and 4");
        w.push(1);
        assert_eq!(w.reserve(), 12);
        assert_eq!((132 - w.reserve()) % 8, 0);
    }
}
