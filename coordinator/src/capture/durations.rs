//! Kernel durations from drain points (completion marks and syncs): the
//! segments they end and the fit over them (the method is in the
//! [module docs](super)).

use std::collections::{HashMap, HashSet};

use tandem_proto::record::FLAG_TIMED;
use tandem_proto::{EventKind, Record};

use super::key::{Ident, Key};
use super::solve::{
    alone, factor, factor_free, lower_median, room, rounds, rounds_free, segments, sync_segments,
    Segment,
};

/// The fitted durations: per kernel, and per function (the mean over its
/// measured kernels, weighted by launches).
#[derive(Debug, Default)]
pub struct Fitted {
    by_key: HashMap<Key, u64>,
    /// Per position of a shared key ([`Ident`]).
    by_position: HashMap<Ident, u64>,
    by_func: HashMap<u64, u64>,
    /// Positions of a shared key that no timing reached ([`Self::untimed_positions`]).
    untimed_positions: usize,
}

/// The shim's timings in a window, read once for the request or step's
/// positions and for the fit.
#[derive(Debug)]
pub struct Timings {
    /// Each timing: the index of the launch record it timed, and its GPU ns
    /// ([`timings`]).
    at: Vec<(usize, u64)>,
    /// Per key: the timings' [`representative`] and how many.
    by_key: HashMap<Ident, (u64, u64)>,
    /// The keys whose timings disagree ([`agree`]): several kernels share
    /// each, and the fit learns them per position.
    pub shared: HashSet<Key>,
}

impl Timings {
    /// The timings of `records`.
    #[must_use]
    pub fn of(records: &[Record]) -> Timings {
        let at = timings(records);
        let (by_key, shared) = timed(records, &at, &HashMap::new());
        Timings { at, by_key, shared }
    }
}

/// How a launch's duration was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Found {
    /// A segment measured this kernel.
    Measured,
    /// The mean of its function's measured kernels.
    FunctionMean,
    /// Nothing measured it.
    Unknown,
}

impl Fitted {
    /// The duration of a launch of `key`, ns, and how it was found.
    #[must_use]
    pub fn duration(&self, key: &Key) -> (u64, Found) {
        if let Some(&ns) = self.by_key.get(key) {
            return (ns, Found::Measured);
        }
        match self.by_func.get(&key.func_id) {
            Some(&ns) => (ns, Found::FunctionMean),
            None => (0, Found::Unknown),
        }
    }

    /// The duration of the launch of `key` at `position` of its unit (where
    /// the fit was given positions), else as [`Self::duration`].
    #[must_use]
    pub fn duration_at(&self, key: &Key, position: u32) -> (u64, Found) {
        match self.by_position.get(&(*key, Some(position))) {
            Some(&ns) => (ns, Found::Measured),
            None => self.duration(key),
        }
    }

    /// Kernels measured.
    #[must_use]
    pub fn measured(&self) -> usize {
        self.by_key.len()
    }

    /// The positions of a request or step whose key several kernels share
    /// (an encoder's and a decoder's weight gradients) that no timing in
    /// the window reached: their durations are the key's mean or solved on
    /// the marks' segments, the capture's least certain ones. A window
    /// holding more requests or steps times more of them.
    #[must_use]
    pub fn untimed_positions(&self) -> usize {
        self.untimed_positions
    }
}

/// The kernels the shim timed on the GPU (a MARK_DONE with [`FLAG_TIMED`]:
/// `bytes` is the GPU time of the launch on the MARK's stream just before
/// it; another thread's launch may come between them in the ring): per key,
/// their [`representative`] and how many. Not their mean, because one
/// timing can be far off (the shim takes the launch call's host time off a
/// timing on an idle stream, but a launching thread preempted in the start
/// event's record or the launch after their work was queued makes one
/// timing long or short by the preemption), and one such must not move the
/// kernel's time.
/// Also the keys whose timings disagree. `at`: [`timings`]'s.
fn timed(
    records: &[Record],
    at: &[(usize, u64)],
    positions: &HashMap<usize, u32>,
) -> (HashMap<Ident, (u64, u64)>, HashSet<Key>) {
    let mut all: HashMap<Ident, Vec<u64>> = HashMap::new();
    for &(i, ns) in at {
        all.entry((Key::of(&records[i]), positions.get(&i).copied()))
            .or_default()
            .push(ns);
    }
    let mut shared = HashSet::new();
    let per_ident = all
        .into_iter()
        .map(|(id, mut v)| {
            v.sort_unstable();
            if !agree(&v) {
                shared.insert(id.0);
            }
            (id, (representative(&v), v.len() as u64))
        })
        .collect();
    (per_ident, shared)
}

/// Each timing in `records`: the index of the launch record it timed, and
/// its GPU ns (see [`timed`]).
fn timings(records: &[Record]) -> Vec<(usize, u64)> {
    let mut out = Vec::new();
    // Per stream, its latest launch.
    let mut last: HashMap<u64, usize> = HashMap::new();
    let mut marks: HashMap<u64, usize> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        match EventKind::from_raw(r.kind) {
            Some(k) if k.is_launch() => {
                last.insert(r.stream, i);
            }
            Some(EventKind::MARK) => {
                if let Some(&at) = last.get(&r.stream) {
                    marks.insert(r.func_id, at);
                }
            }
            Some(EventKind::MARK_DONE) => {
                if let Some(at) = marks.remove(&r.func_id) {
                    if r.flags & FLAG_TIMED != 0 && r.bytes > 0 {
                        out.push((at, r.bytes));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The least share of a sync segment's kernel time the free durations must
/// hold for the syncs' scale to be solved for them. The time of a segment
/// no kernel explains (a copy, the sync's own return, the timings' small
/// errors) goes wholly to its free kernels: where they are a sliver of it,
/// a few untimed kernels took it all (ResNet50 training's first
/// convolution, 147 us, came back 0.28 to 1.28 ms and the step's sum up to
/// +3.8%).
const MIN_FREE_SHARE: f64 = 0.25;

/// The marks' resolution, ns: the shim's watcher polls them every 200 us,
/// so a mark's completion is seen up to that late (more while the watcher
/// waits to be scheduled).
const MARK_RESOLUTION_NS: f64 = 200_000.0;

/// Whether a key's timings (sorted, not empty) agree: the upper quartile
/// within 1.5 times the lower, and no gap of over 1.5 times between two
/// neighbouring timings with two or more on each side (one kernel, perhaps
/// with a preempted timing); where they do not, several kernels share the
/// key. The gap rule finds a pair whose timings mostly sampled one of the
/// kernels: ResNet50 training's 92 us and 47 us convolutions of one shape,
/// timed 47 us in over three quarters of the samples, took 47 us at both
/// positions by the quartiles alone.
fn agree(v: &[u64]) -> bool {
    let n = v.len();
    if v[(3 * n) / 4] as f64 > 1.5 * v[n / 4] as f64 {
        return false;
    }
    !(2..n.saturating_sub(1)).any(|i| v[i] as f64 > 1.5 * v[i - 1] as f64)
}

/// One key's duration from its timings (sorted, not empty): their median
/// while they [`agree`]; where they do not, several kernels share the key
/// (function, grid and block alike, the work not: an encoder's and a
/// decoder's weight gradients), and the median would give all of them one
/// kernel's time; then their mean with the outer tenth at each end left
/// out, which keeps the key's share of the job's time as the timings sample
/// its launches.
pub(super) fn representative(v: &[u64]) -> u64 {
    let n = v.len();
    if agree(v) {
        return lower_median(v).unwrap_or(0);
    }
    let cut = n / 10;
    let kept = &v[cut..n - cut];
    (kept.iter().map(|&x| x as f64).sum::<f64>() / kept.len() as f64).round() as u64
}

/// Fit every kernel's duration to the window's drain points (the method is
/// in the [module docs](super)); a kernel the shim timed on the GPU takes
/// its timings' [`representative`] instead, and where the job syncs, every
/// kernel is then scaled so that the syncs' segments keep their length.
#[must_use]
pub fn fit(records: &[Record]) -> Fitted {
    fit_at(records, &Timings::of(records), &HashMap::new())
}

/// [`fit`], with a duration per position for the launches `positions`
/// names (record index: the launch's ordinal in its request or step; the
/// launches of [`Timings::shared`]): each is then timed, or fitted to the
/// drain points, on its own. `t`: the timings of `records`.
#[must_use]
pub fn fit_at(records: &[Record], t: &Timings, positions: &HashMap<usize, u32>) -> Fitted {
    let (launches, segs) = segments(records, positions);
    let mut index: HashMap<Ident, usize> = HashMap::new();
    let kernel: Vec<usize> = launches
        .iter()
        .map(|(_, k)| {
            let n = index.len();
            *index.entry(*k).or_insert(n)
        })
        .collect();
    // Start: each segment's time shared evenly among its launches.
    let mut d0 = vec![0f64; index.len()];
    let mut n = vec![0f64; index.len()];
    for s in &segs {
        let each = (s.end - s.start.max(launches[s.a].0)) as f64 / (s.b - s.a) as f64;
        for &k in &kernel[s.a..s.b] {
            d0[k] += each;
            n[k] += 1.0;
        }
    }
    for (x, c) in d0.iter_mut().zip(&n) {
        if *c > 0.0 {
            *x /= c;
        }
    }
    let times: Vec<f64> = launches.iter().map(|l| l.0 as f64).collect();
    let (mut d, _) = rounds(&segs, &times, &kernel, d0);
    // The scale from the syncs alone: the shim sees a mark's completion
    // late by its poll interval or more (its watcher thread must run), a
    // sync's at once; the median factor over the segments from one sync to
    // the next corrects the marks' durations as a whole.
    let syncs = sync_segments(records);
    let rescale = |d: &mut Vec<f64>| {
        let mut factors: Vec<f64> = syncs
            .iter()
            .filter_map(|s| factor(s, &times, &kernel, d))
            .collect();
        factors.sort_by(f64::total_cmp);
        if let Some(x) = lower_median(&factors) {
            d.iter_mut().for_each(|v| *v *= x);
        }
    };
    rescale(&mut d);
    // The kernels timed on the GPU take their timings; then the syncs'
    // scale once more, over all (a job that syncs keeps its measured total:
    // the timings fix the proportions, not the sum).
    let by_position;
    let timed = if positions.is_empty() {
        &t.by_key
    } else {
        by_position = timed(records, &t.at, positions).0;
        &by_position
    };
    let mut fixed = vec![false; d.len()];
    for (key, &(median, _)) in timed {
        if let Some(&k) = index.get(key) {
            d[k] = median as f64;
            fixed[k] = true;
        }
    }
    // A position of a shared key that no timing reached: its key's timings'
    // trimmed mean; where that is a mark's resolution or more, then solved
    // with every other kernel's duration held, on the drain points around
    // it (the marks' segments hold few such kernels among timed ones). A
    // shorter one would take the marks' lateness for its own time (a 3.7 us
    // PointNet convolution came back 222 us).
    let mut untimed_positions = 0;
    let solve: Vec<bool> = {
        let mut v = vec![false; d.len()];
        for (id, &k) in &index {
            if id.1.is_some() && !fixed[k] {
                untimed_positions += 1;
                if let Some(&(ns, _)) = t.by_key.get(&(id.0, None)) {
                    d[k] = ns as f64;
                }
                v[k] = d[k] >= MARK_RESOLUTION_NS;
            }
        }
        v
    };
    if solve.contains(&true) {
        d = rounds_free(&segs, &times, &kernel, d, &solve);
    }
    // A kernel of its own key that no timing reached keeps the rounds'
    // duration above, where every kernel was free, which can be far off in
    // a GPU-bound step (GPT-2's 286 us `log_softmax_backward`, never timed
    // in 22 steps, came back 4.4 to 4.8 ms in two captures of four: the
    // rounds gave it much of the 9.3 ms GEMM after it, whose own timings
    // then fixed the GEMM). Where the marks' segments around it hold no
    // other kernel untimed, each segment measures it alone: it takes their
    // median (one segment ended late by the watcher's poll does not move
    // it). Solving it jointly with other untimed kernels instead moved
    // their errors onto it (a 2.5 us `isnan` came back 2.6 ms). As above,
    // only where the rounds gave it a mark's resolution or more.
    if fixed.contains(&true) {
        let untimed: Vec<bool> = fixed.iter().map(|f| !f).collect();
        for (k, ns) in alone(&segs, &times, &kernel, &d, &untimed) {
            if !solve[k] && d[k] >= MARK_RESOLUTION_NS {
                d[k] = ns;
            }
        }
        // Then the syncs' scale, over the kernels not timed.
        if let Some(x) = free_factor(&syncs, &times, &kernel, &d, &fixed, MIN_FREE_SHARE) {
            scale_free(&mut d, &fixed, x);
        }
        within_syncs(&syncs, &times, &kernel, &mut d, &fixed);
    }
    let mut by_position = HashMap::new();
    // Per function and per key: the mean over their launches.
    let mut per_func = Means::default();
    let mut per_key = Means::default();
    let mut add = |id: &Ident, ns: f64, count: f64| {
        if id.1.is_some() {
            by_position.insert(*id, ns.round() as u64);
        }
        per_func.add(id.0.func_id, ns, count);
        per_key.add(id.0, ns, count);
    };
    for (id, &(median, count)) in timed {
        if !index.contains_key(id) {
            add(id, median as f64, count as f64);
        }
    }
    for (id, &k) in &index {
        let known = n[k] > 0.0 || timed.contains_key(id);
        if known && d[k] >= 0.5 {
            add(id, d[k], n[k].max(1.0));
        }
    }
    Fitted {
        by_key: per_key.means(),
        by_position,
        by_func: per_func.means(),
        untimed_positions,
    }
}

/// Holds the kernels not timed (`fixed` false) to what the syncs allow: a
/// stream runs its work in order, so the kernels between two syncs fit in
/// the time between them. A kernel solved on the marks' segments takes any
/// lateness of their marks for its own time, and where the watcher waits
/// to be scheduled that lateness is not bounded by the poll interval:
/// ResNet50 training's first convolution (147 us, at a position no timing
/// reached) came back 2.9 ms, a tenth of its 27 ms step, on a loaded 2-core
/// machine. So each such kernel (a mark's resolution or more) is cut to the
/// lower median, over the sync segments holding it, of the [`room`] the
/// timed kernels leave it there; then, where the kernels not timed still
/// overrun the syncs together, all of them are scaled down by the lower
/// median of the syncs' [`factor_free`] (never up: the syncs' scale up is
/// the rescale before, only where they hold enough of the time).
pub(super) fn within_syncs(
    syncs: &[Segment],
    times: &[f64],
    kernel: &[usize],
    d: &mut [f64],
    fixed: &[bool],
) {
    for k in 0..d.len() {
        if fixed[k] || d[k] < MARK_RESOLUTION_NS {
            continue;
        }
        let mut rooms: Vec<f64> = syncs
            .iter()
            .filter_map(|s| room(s, times, kernel, d, fixed, k))
            .collect();
        rooms.sort_by(f64::total_cmp);
        if let Some(most) = lower_median(&rooms) {
            d[k] = d[k].min(most);
        }
    }
    if let Some(x) = free_factor(syncs, times, kernel, d, fixed, 0.0).filter(|&x| x < 1.0) {
        scale_free(d, fixed, x);
    }
}

/// The lower median over the sync segments `syncs` of [`factor_free`]:
/// the scale of the durations not `fixed` that keeps the syncs' lengths.
fn free_factor(
    syncs: &[Segment],
    times: &[f64],
    kernel: &[usize],
    d: &[f64],
    fixed: &[bool],
    min_share: f64,
) -> Option<f64> {
    let mut factors: Vec<f64> = syncs
        .iter()
        .filter_map(|s| factor_free(s, times, kernel, d, fixed, min_share))
        .collect();
    factors.sort_by(f64::total_cmp);
    lower_median(&factors)
}

/// Scales the durations not `fixed` by `x`.
fn scale_free(d: &mut [f64], fixed: &[bool], x: f64) {
    d.iter_mut()
        .zip(fixed)
        .filter(|(_, &f)| !f)
        .for_each(|(v, _)| *v *= x);
}

/// Launch-weighted means per key: the sum and the weight so far.
struct Means<K>(HashMap<K, (f64, f64)>);

impl<K> Default for Means<K> {
    fn default() -> Self {
        Means(HashMap::new())
    }
}

impl<K: std::hash::Hash + Eq> Means<K> {
    fn add(&mut self, k: K, ns: f64, count: f64) {
        let e = self.0.entry(k).or_default();
        e.0 += ns * count;
        e.1 += count;
    }

    /// The means, rounded to whole ns.
    fn means(self) -> HashMap<K, u64> {
        self.0
            .into_iter()
            .map(|(k, (sum, c))| (k, (sum / c).round() as u64))
            .collect()
    }
}
