//! Bounded per-client tables: kernel-duration estimates learned from drain
//! points (syncs and completion marks), and the window of recent request
//! latencies.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, VecDeque};
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
/// Sealed segments (launches up to a completion mark whose completion has not
/// been seen yet) kept per client. Sealing one more drops the oldest,
/// unmeasured (see "Learning durations" in the [module docs](super)).
pub const MAX_SEALED_SEGMENTS: usize = 64;
/// (kernel, count) entries kept over all of a client's sealed segments (each
/// segment has one per distinct kernel in it); sealing beyond this drops the
/// oldest segments, unmeasured, as [`MAX_SEALED_SEGMENTS`] does.
pub const MAX_SEALED_ITEMS: usize = 2 * MAX_KERNELS_PER_CLIENT;

/// A fixed (unkeyed) hasher: lookups only, never iteration, but determinism
/// costs nothing here.
type Fixed = BuildHasherDefault<DefaultHasher>;

#[derive(Clone, Copy, Debug)]
struct Entry {
    est_ns: u64,
    samples: u32,
    /// Launches of this kernel in the open segment (since the last seal or
    /// drain point).
    pending: u32,
    /// Launches of this kernel in the measurement being taken (0 between
    /// measurements).
    draining: u32,
    /// The estimate last reported as changed (0: never).
    published: u64,
}

/// Launches sealed by a completion mark, waiting for the mark to complete.
#[derive(Clone, Copy, Debug)]
struct Segment {
    /// The mark's sequence number.
    label: u64,
    /// Timestamp of its first launch.
    first_ts: u64,
    /// Launch calls in it (a graph launch is one).
    calls: u64,
    /// Estimated ns of its launches of kernels the table had no room for.
    untracked_ns: u64,
    /// Its (kernel, count) entries: the next this many of
    /// [`KernelTable::items`] after those of the segments before it.
    items: usize,
}

/// Per-(client, func_id) EWMA of kernel durations, and the launches since the
/// last drain point that a later drain point will measure.
///
/// Pending launches are kept in segments: the *open* segment (launches since
/// the last seal or drain point) and up to [`MAX_SEALED_SEGMENTS`] *sealed*
/// ones, each closed by a completion mark ([`KernelTable::seal`]) and
/// labelled with its sequence number. When a mark completes,
/// [`KernelTable::drain_through`] measures the sealed segments up to it and
/// leaves later launches pending; a sync ([`KernelTable::drain`]) measures
/// everything.
#[derive(Clone, Debug, Default)]
pub(crate) struct KernelTable {
    map: HashMap<u64, Entry, Fixed>,
    /// Function ids with `pending > 0`, in first-launch order (bounded by
    /// `MAX_KERNELS_PER_CLIENT`).
    touched: Vec<u64>,
    /// Estimated ns of the open segment's launches of kernels the table had
    /// no room for.
    untracked_pending_ns: u64,
    /// Estimated ns of one launch call, recent mean (see
    /// [`KernelTable::mean_launch_ns`]); 0 until the first launch.
    mean_ns: u64,
    /// Launch calls in the open segment (a graph launch is one).
    pending_calls: u64,
    /// Timestamp of the open segment's first launch.
    open_first: Option<u64>,
    /// Sealed segments, oldest (lowest label) first.
    sealed: VecDeque<Segment>,
    /// The sealed segments' (kernel, count) entries, in segment order.
    items: VecDeque<(u64, u32)>,
    /// The highest mark label sealed or skipped so far (labels must rise).
    last_label: u64,
    /// A sealed segment was dropped unmeasured since the last drain point:
    /// the next measurement would include its GPU time, so it is not taken.
    lost: bool,
    /// Kernels of the measurement being taken (reused; empty between).
    scratch: Vec<u64>,
    /// A drain point has measured launches of this client.
    measured: bool,
    /// Kernels whose estimate a measurement set or moved by an eighth or
    /// more since they were last taken ([`KernelTable::take_changed`]).
    changed: Vec<(u64, u64)>,
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

    /// Sealed segments waiting for their marks.
    #[cfg(test)]
    pub(crate) fn sealed_len(&self) -> usize {
        self.sealed.len()
    }

    /// The client's recent mean estimate of one launch call (a graph launch
    /// is one call of all its kernels): at each drain point that measured
    /// something, the mean over the launches it measured, at their new
    /// estimates (so what a drain point just taught applies at once);
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

    /// The kernels whose estimates changed enough to publish since the last
    /// call, with their new estimates (taken: the list is empty after).
    pub(crate) fn drain_changed(&mut self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.changed.drain(..)
    }

    /// Whether a drain point has measured any of this client's launches
    /// (until then every estimate is the default, a guess).
    pub(crate) fn measured(&self) -> bool {
        self.measured
    }

    /// Record `count` launches of `func` at `ts`; returns their estimated
    /// total ns.
    pub(crate) fn launch(&mut self, ts: u64, func: u64, count: u32, default_ns: u64) -> u64 {
        let ns = self.launch_inner(func, count, default_ns);
        self.pending_calls = self.pending_calls.saturating_add(1);
        if self.open_first.is_none() {
            self.open_first = Some(ts);
        }
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
                draining: 0,
                published: 0,
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

    /// A completion mark `label` placed after the launches so far: seal the
    /// open segment under that label (nothing is kept when it holds no
    /// launch). Labels must rise: a mark whose label is not above every
    /// label seen before is ignored (its launches stay in the open segment).
    /// When [`MAX_SEALED_SEGMENTS`] or [`MAX_SEALED_ITEMS`] would be
    /// exceeded, the oldest sealed segments are dropped unmeasured: their
    /// launches are forgotten, and the next measurement, which would include
    /// their GPU time, is not taken (the next drain point only resets the
    /// backlog).
    pub(crate) fn seal(&mut self, label: u64) {
        if label <= self.last_label {
            return;
        }
        self.last_label = label;
        let Some(first_ts) = self.open_first else {
            return;
        };
        while !self.sealed.is_empty()
            && (self.sealed.len() >= MAX_SEALED_SEGMENTS
                || self.items.len() + self.touched.len() > MAX_SEALED_ITEMS)
        {
            if let Some(old) = self.sealed.pop_front() {
                self.items.drain(..old.items);
                self.lost = true;
            }
        }
        let items = self.touched.len();
        for f in self.touched.drain(..) {
            if let Some(e) = self.map.get_mut(&f) {
                self.items.push_back((f, e.pending));
                e.pending = 0;
            }
        }
        self.sealed.push_back(Segment {
            label,
            first_ts,
            calls: self.pending_calls,
            untracked_ns: self.untracked_pending_ns,
            items,
        });
        self.open_first = None;
        self.pending_calls = 0;
        self.untracked_pending_ns = 0;
    }

    /// The first launch time of the sealed segments a completion of mark
    /// `seq` covers (those labelled `<= seq`), or `None` when it covers none
    /// (a stale mark, or one whose MARK was lost or had no launch before it).
    pub(crate) fn covered_first(&self, seq: u64) -> Option<u64> {
        self.sealed
            .front()
            .filter(|s| s.label <= seq)
            .map(|s| s.first_ts)
    }

    /// The first launch time of every pending launch (sealed or open).
    pub(crate) fn first_pending(&self) -> Option<u64> {
        self.sealed.front().map(|s| s.first_ts).or(self.open_first)
    }

    /// Mark `seq` completed: the sealed segments labelled `<= seq` took
    /// `measured_ns` of wall time on the GPU, together. They are measured as
    /// [`KernelTable::drain`] measures everything; later launches stay
    /// pending. Returns whether the measurement was taken (`measured_ns`
    /// given and not discarded after a dropped segment).
    pub(crate) fn drain_through(&mut self, seq: u64, measured_ns: Option<u64>) -> bool {
        let n = self.sealed.iter().take_while(|s| s.label <= seq).count();
        n > 0 && self.measure(n, false, measured_ns)
    }

    /// A drain point for every pending launch (a sync): they took
    /// `measured_ns` of wall time on the GPU. Spread it over them in
    /// proportion to their current estimates and fold each kernel's share
    /// into its EWMA (weight 1/4; the first measurement replaces the
    /// default). `None`: nothing measurable, just forget the pending
    /// launches.
    pub(crate) fn drain(&mut self, measured_ns: Option<u64>) {
        self.measure(self.sealed.len(), true, measured_ns);
    }

    /// Estimated ns of every launch still pending (sealed and open), at the
    /// current estimates.
    pub(crate) fn queued_ns(&self) -> u64 {
        let est = |f: &u64, n: u32| {
            self.map
                .get(f)
                .map_or(0, |e| u128::from(e.est_ns) * u128::from(n))
        };
        let sealed: u128 = self.items.iter().map(|(f, n)| est(f, *n)).sum::<u128>()
            + self
                .sealed
                .iter()
                .map(|s| u128::from(s.untracked_ns))
                .sum::<u128>();
        let open: u128 = self
            .touched
            .iter()
            .filter_map(|f| self.map.get(f))
            .map(|e| u128::from(e.est_ns) * u128::from(e.pending))
            .sum::<u128>()
            + u128::from(self.untracked_pending_ns);
        u64::try_from(sealed + open).unwrap_or(u64::MAX)
    }

    /// Measure the first `segments` sealed segments (and the open one with
    /// `open`) as one interval of `measured_ns`, and forget them. Returns
    /// whether the measurement was taken.
    fn measure(&mut self, segments: usize, open: bool, measured_ns: Option<u64>) -> bool {
        // The interval after a dropped segment holds its GPU time too.
        let lost = std::mem::take(&mut self.lost);
        let measured_ns = measured_ns.filter(|_| !lost);
        let mut calls = 0u64;
        let mut untracked = 0u64;
        let mut collect = |map: &mut HashMap<u64, Entry, Fixed>, f: u64, n: u32| {
            if let Some(e) = map.get_mut(&f) {
                if e.draining == 0 {
                    self.scratch.push(f);
                }
                e.draining = e.draining.saturating_add(n);
            }
        };
        for _ in 0..segments {
            let Some(s) = self.sealed.pop_front() else {
                break;
            };
            calls = calls.saturating_add(s.calls);
            untracked = untracked.saturating_add(s.untracked_ns);
            for (f, n) in self.items.drain(..s.items) {
                collect(&mut self.map, f, n);
            }
        }
        if open {
            for f in self.touched.drain(..) {
                let n = self
                    .map
                    .get_mut(&f)
                    .map_or(0, |e| std::mem::take(&mut e.pending));
                collect(&mut self.map, f, n);
            }
            calls = calls.saturating_add(std::mem::take(&mut self.pending_calls));
            untracked = untracked.saturating_add(std::mem::take(&mut self.untracked_pending_ns));
            self.open_first = None;
        }
        let total: u128 = self
            .scratch
            .iter()
            .filter_map(|f| self.map.get(f))
            .map(|e| u128::from(e.est_ns) * u128::from(e.draining))
            .sum::<u128>()
            + u128::from(untracked);
        let mut new_total = u128::from(untracked);
        for f in self.scratch.drain(..) {
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
            new_total += u128::from(e.est_ns) * u128::from(e.draining);
            e.draining = 0;
            let moved = e.est_ns.abs_diff(e.published) >= e.published / 8;
            if share.is_some() && (e.published == 0 || moved) && f != GRAPH_FUNC {
                e.published = e.est_ns;
                self.changed.push((f, e.est_ns));
            }
        }
        if measured_ns.is_some() {
            if let Some(mean) = new_total.checked_div(u128::from(calls)) {
                self.measured = true;
                self.mean_ns =
                    mean.clamp(u128::from(MIN_KERNEL_NS), u128::from(MAX_KERNEL_NS)) as u64;
            }
        }
        measured_ns.is_some()
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
mod tests;
