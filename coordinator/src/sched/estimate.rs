//! Bounded per-client tables: kernel-duration estimates learned from syncs,
//! and the window of recent request latencies.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

/// Distinct kernels whose durations one client's table learns; launches of
/// further kernels use `default_kernel_ns` and are not learned.
pub const MAX_KERNELS_PER_CLIENT: usize = 1024;
/// No kernel is estimated shorter than this (a launch costs the GPU about a
/// microsecond even for an empty kernel).
pub const MIN_KERNEL_NS: u64 = 1_000;
/// No kernel is estimated longer than this (10 s), whatever a sync suggested.
pub const MAX_KERNEL_NS: u64 = 10_000_000_000;
/// The pseudo function id under which a client's graph launches are learned
/// (per kernel of the graph; the record carries only the kernel count).
pub const GRAPH_FUNC: u64 = u64::MAX;
/// Request latencies kept per client (a ring: exact quantiles over the last
/// this many requests).
pub const LATENCY_WINDOW: usize = 256;

/// A fixed (unkeyed) hasher: lookups only, never iteration, but determinism
/// costs nothing here.
type Fixed = BuildHasherDefault<DefaultHasher>;

#[derive(Clone, Copy, Debug)]
struct Entry {
    est_ns: u64,
    samples: u32,
    /// Launches of this kernel since the client's last drain point.
    pending: u32,
}

/// Per-(client, func_id) EWMA of kernel durations, and the launches since the
/// last drain point that the next sync will measure.
#[derive(Clone, Debug, Default)]
pub(crate) struct KernelTable {
    map: HashMap<u64, Entry, Fixed>,
    /// Function ids with `pending > 0`, in first-launch order (bounded by
    /// `MAX_KERNELS_PER_CLIENT`).
    touched: Vec<u64>,
    /// Estimated ns of pending launches of kernels the table had no room for.
    untracked_pending_ns: u64,
    /// Estimated ns of one launch call, recent mean (see
    /// [`KernelTable::mean_launch_ns`]); 0 until the first launch.
    mean_ns: u64,
    /// Launch calls since the last drain point (a graph launch is one).
    pending_calls: u64,
    /// A drain point has measured launches of this client.
    measured: bool,
}

impl KernelTable {
    /// Distinct kernels known.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Current estimate of one launch of `func`.
    pub(crate) fn estimate(&self, func: u64, default_ns: u64) -> u64 {
        self.map.get(&func).map_or(default_ns, |e| e.est_ns)
    }

    /// Number of samples behind `func`'s estimate (0: never measured).
    #[cfg(test)]
    pub(crate) fn samples(&self, func: u64) -> u32 {
        self.map.get(&func).map_or(0, |e| e.samples)
    }

    /// The client's recent mean estimate of one launch call (a graph launch
    /// is one call of all its kernels): at each drain point that measured
    /// something, the mean over the launches since the previous one, at
    /// their new estimates (so what a sync just taught applies at once);
    /// between drain points an EWMA (weight 1/8 per launch) of each launch's
    /// estimate; `default_ns` before the first launch. At least
    /// [`MIN_KERNEL_NS`].
    pub(crate) fn mean_launch_ns(&self, default_ns: u64) -> u64 {
        if self.mean_ns == 0 {
            default_ns.max(MIN_KERNEL_NS)
        } else {
            self.mean_ns.max(MIN_KERNEL_NS)
        }
    }

    /// Whether a drain point has measured any of this client's launches
    /// (until then every estimate is the default, a guess).
    pub(crate) fn measured(&self) -> bool {
        self.measured
    }

    /// Record `count` launches of `func`; returns their estimated total ns.
    pub(crate) fn launch(&mut self, func: u64, count: u32, default_ns: u64) -> u64 {
        let ns = self.launch_inner(func, count, default_ns);
        self.pending_calls = self.pending_calls.saturating_add(1);
        // One launch call is one unit of the launch limit: its whole
        // estimate (all kernels of a graph) is one sample of the mean.
        let sample = ns.clamp(MIN_KERNEL_NS, MAX_KERNEL_NS);
        self.mean_ns = if self.mean_ns == 0 {
            sample
        } else {
            (self.mean_ns * 7 + sample) / 8
        };
        ns
    }

    fn launch_inner(&mut self, func: u64, count: u32, default_ns: u64) -> u64 {
        let room = self.map.len() < MAX_KERNELS_PER_CLIENT;
        let entry = match self.map.get_mut(&func) {
            Some(e) => Some(e),
            None if room => Some(self.map.entry(func).or_insert(Entry {
                est_ns: default_ns,
                samples: 0,
                pending: 0,
            })),
            None => None,
        };
        match entry {
            Some(e) => {
                if e.pending == 0 {
                    self.touched.push(func);
                }
                e.pending = e.pending.saturating_add(count);
                e.est_ns.saturating_mul(u64::from(count))
            }
            None => {
                let ns = default_ns.saturating_mul(u64::from(count));
                self.untracked_pending_ns = self.untracked_pending_ns.saturating_add(ns);
                ns
            }
        }
    }

    /// A drain point: the pending launches took `measured_ns` of wall time on
    /// the GPU. Spread it over them in proportion to their current estimates
    /// and fold each kernel's share into its EWMA (weight 1/4; the first
    /// measurement replaces the default). `None`: nothing measurable, just
    /// forget the pending launches.
    pub(crate) fn drain(&mut self, measured_ns: Option<u64>) {
        let total: u128 = self
            .touched
            .iter()
            .filter_map(|f| self.map.get(f))
            .map(|e| u128::from(e.est_ns) * u128::from(e.pending))
            .sum::<u128>()
            + u128::from(self.untracked_pending_ns);
        let mut new_total = u128::from(self.untracked_pending_ns);
        for f in self.touched.drain(..) {
            let Some(e) = self.map.get_mut(&f) else {
                continue;
            };
            let share =
                measured_ns.and_then(|m| (u128::from(e.est_ns) * u128::from(m)).checked_div(total));
            if let Some(share) = share {
                let sample =
                    share.clamp(u128::from(MIN_KERNEL_NS), u128::from(MAX_KERNEL_NS)) as u64;
                e.est_ns = if e.samples == 0 {
                    sample
                } else {
                    (e.est_ns * 3 + sample) / 4
                };
                e.samples = e.samples.saturating_add(1);
            }
            new_total += u128::from(e.est_ns) * u128::from(e.pending);
            e.pending = 0;
        }
        if measured_ns.is_some() {
            if let Some(mean) = new_total.checked_div(u128::from(self.pending_calls)) {
                self.measured = true;
                self.mean_ns =
                    mean.clamp(u128::from(MIN_KERNEL_NS), u128::from(MAX_KERNEL_NS)) as u64;
            }
        }
        self.pending_calls = 0;
        self.untracked_pending_ns = 0;
    }
}

/// The last [`LATENCY_WINDOW`] request latencies (a fixed ring).
#[derive(Clone, Debug)]
pub(crate) struct LatencyWindow {
    ring: Box<[u64; LATENCY_WINDOW]>,
    len: usize,
    next: usize,
}

impl Default for LatencyWindow {
    fn default() -> Self {
        LatencyWindow {
            ring: Box::new([0; LATENCY_WINDOW]),
            len: 0,
            next: 0,
        }
    }
}

impl LatencyWindow {
    pub(crate) fn push(&mut self, ns: u64) {
        self.ring[self.next] = ns;
        self.next = (self.next + 1) % LATENCY_WINDOW;
        self.len = (self.len + 1).min(LATENCY_WINDOW);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copy the last `n` (at most `len`) latencies into `out` (cleared first).
    pub(crate) fn last_into(&self, n: usize, out: &mut Vec<u64>) {
        out.clear();
        let n = n.min(self.len);
        for i in 0..n {
            let idx = (self.next + LATENCY_WINDOW - 1 - i) % LATENCY_WINDOW;
            out.push(self.ring[idx]);
        }
    }
}

/// Nearest-rank quantile `q` (0 < q <= 1) of `v` (reordered in place).
pub(crate) fn quantile(v: &mut [u64], q: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    let (_, x, _) = v.select_nth_unstable(rank - 1);
    Some(*x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_kernels_use_the_default_and_first_sample_replaces_it() {
        let mut t = KernelTable::default();
        assert_eq!(t.estimate(7, 50_000), 50_000);
        assert_eq!(t.launch(7, 1, 50_000), 50_000);
        t.drain(Some(200_000));
        assert_eq!(t.estimate(7, 50_000), 200_000);
        assert_eq!(t.samples(7), 1);
        // EWMA weight 1/4 from then on.
        t.launch(7, 1, 50_000);
        t.drain(Some(100_000));
        assert_eq!(t.estimate(7, 50_000), 175_000);
    }

    #[test]
    fn a_measurement_is_spread_in_proportion_to_estimates() {
        let mut t = KernelTable::default();
        t.launch(1, 1, 10_000);
        t.drain(Some(10_000));
        t.launch(2, 1, 10_000);
        t.drain(Some(30_000));
        // 1 x kernel1 (10 us) + 1 x kernel2 (30 us) took 80 us: both doubled (first
        // samples were already taken, so EWMA: 3/4 old + 1/4 new).
        t.launch(1, 1, 10_000);
        t.launch(2, 1, 10_000);
        t.drain(Some(80_000));
        assert_eq!(t.estimate(1, 10_000), (3 * 10_000 + 20_000) / 4);
        assert_eq!(t.estimate(2, 10_000), (3 * 30_000 + 60_000) / 4);
    }

    #[test]
    fn the_table_is_bounded_and_overflow_uses_the_default() {
        let mut t = KernelTable::default();
        for f in 0..(MAX_KERNELS_PER_CLIENT as u64 + 10) {
            t.launch(f, 1, 5_000);
        }
        assert_eq!(t.len(), MAX_KERNELS_PER_CLIENT);
        t.drain(Some(u64::MAX / 2));
        assert_eq!(t.len(), MAX_KERNELS_PER_CLIENT);
        assert_eq!(t.estimate(u64::MAX - 1, 5_000), 5_000);
        // An absurd measurement is clamped.
        assert_eq!(t.estimate(0, 5_000), MAX_KERNEL_NS);
    }

    #[test]
    fn drain_without_a_measurement_forgets_pending_launches() {
        let mut t = KernelTable::default();
        t.launch(3, 4, 1_000);
        t.drain(None);
        assert_eq!(t.samples(3), 0);
        t.launch(3, 1, 1_000);
        t.drain(Some(9_000));
        // Only the one launch since the last drain was measured.
        assert_eq!(t.estimate(3, 1_000), 9_000);
    }

    #[test]
    fn the_mean_follows_launches_and_their_current_estimates() {
        let mut t = KernelTable::default();
        assert_eq!(
            t.mean_launch_ns(50_000),
            50_000,
            "no launch yet: the default"
        );
        assert_eq!(t.mean_launch_ns(10), MIN_KERNEL_NS, "never below the floor");
        assert!(!t.measured());
        t.launch(1, 1, 8_000);
        assert_eq!(
            t.mean_launch_ns(50_000),
            8_000,
            "the first launch replaces it"
        );
        t.launch(2, 1, 8_000);
        // A sync measures 2 launches at 40 us: each kernel is now 20 us, and
        // so is the mean, at once.
        t.drain(Some(40_000));
        assert_eq!(t.mean_launch_ns(50_000), 20_000);
        assert!(t.measured());
        // Between syncs: an EWMA of the launches' estimates.
        t.launch(3, 1, 8_000);
        assert_eq!(t.mean_launch_ns(50_000), (7 * 20_000 + 8_000) / 8);
        // A graph launch of 4 kernels is one launch of 4 kernels' worth.
        let before = t.mean_launch_ns(50_000);
        t.launch(GRAPH_FUNC, 4, 8_000);
        assert_eq!(t.mean_launch_ns(50_000), (7 * before + 4 * 8_000) / 8);
        // A drain with nothing measured leaves the mean alone.
        let before = t.mean_launch_ns(50_000);
        t.drain(None);
        assert_eq!(t.mean_launch_ns(50_000), before);
        // The next measured interval: 1 launch of kernel 3 + 1 graph launch of
        // 4 kernels = 2 calls of 5 kernels estimated at 8 us each; it took
        // 100 us: 20 us a kernel (first samples), 50 us a call.
        t.launch(3, 1, 8_000);
        t.launch(GRAPH_FUNC, 4, 8_000);
        t.drain(Some(100_000));
        assert_eq!(t.estimate(3, 0), 20_000);
        assert_eq!(t.mean_launch_ns(50_000), 50_000);
    }

    #[test]
    fn latency_window_keeps_the_last_entries_and_quantiles_are_nearest_rank() {
        let mut w = LatencyWindow::default();
        for i in 1..=(LATENCY_WINDOW as u64 + 44) {
            w.push(i);
        }
        assert_eq!(w.len(), LATENCY_WINDOW);
        let mut v = Vec::new();
        w.last_into(3, &mut v);
        assert_eq!(v, vec![300, 299, 298]);
        let mut v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&mut v, 0.99), Some(99));
        assert_eq!(quantile(&mut v, 0.5), Some(50));
        assert_eq!(quantile(&mut [], 0.5), None);
    }
}
