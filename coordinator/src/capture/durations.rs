//! Kernel durations from drain points (completion marks and syncs): the
//! segments they end and the fit over them (the method is in the
//! [module docs](super)).

use std::collections::{HashMap, HashSet};

use tandem_proto::record::FLAG_TIMED;
use tandem_proto::{EventKind, Record};

/// What a launch's duration is learnt for: its function (or graph) and
/// dimensions, as the record carries them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The record's `func_id` (a graph launch's: its graph exec).
    pub func_id: u64,
    /// Grid x, y, z.
    pub grid: [u32; 3],
    /// Block x, y, z.
    pub block: [u16; 3],
}

impl Key {
    /// The key of a launch record.
    #[must_use]
    pub fn of(r: &Record) -> Key {
        Key {
            func_id: r.func_id,
            grid: [r.grid_x, u32::from(r.grid_y), u32::from(r.grid_z)],
            block: [r.block_x, r.block_y, r.block_z],
        }
    }
}

/// What the fit learns one duration for: a launch's key, and for the keys
/// several kernels share, its position in its request or step (the
/// launch's ordinal there), which tells them apart.
pub type Ident = (Key, Option<u32>);

/// Whether a record of `kind` is a launch (one op of the trace).
#[must_use]
pub fn is_launch(kind: u16) -> bool {
    EventKind::from_raw(kind).is_some_and(EventKind::is_launch)
}

/// Rounds of the fit.
const ROUNDS: usize = 30;

/// Launches since one drain point, ended by the next.
#[derive(Clone, Copy, Debug)]
struct Segment {
    /// Its launches: `launches[a..b]`.
    a: usize,
    b: usize,
    /// When the GPU had done everything before it (the previous drain point).
    start: u64,
    /// When it had done all of it.
    end: u64,
}

/// The fitted durations: per kernel, and per function (the mean over its
/// measured kernels, weighted by launches).
#[derive(Debug, Default)]
pub struct Fitted {
    by_key: HashMap<Key, u64>,
    /// Per position of a shared key ([`Ident`]).
    by_position: HashMap<Ident, u64>,
    by_func: HashMap<u64, u64>,
    /// The shim's timings: the index of the launch record each timed, and
    /// its GPU ns.
    pub timed_at: HashMap<usize, u64>,
    /// The keys whose timings disagree (the upper quartile over 1.5 times
    /// the lower): several kernels share each.
    pub shared: HashSet<Key>,
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
}

/// The segments of `records` (oldest first) and their launches' keys and
/// times. A segment needs the drain point before it, so the launches before
/// the window's first drain point are measured by none.
fn segments(records: &[Record], at: &HashMap<usize, u32>) -> (Vec<(u64, Ident)>, Vec<Segment>) {
    let mut launches = Vec::new();
    let mut segs = Vec::new();
    // Mark sequence number -> launches before it.
    let mut marks: HashMap<u64, usize> = HashMap::new();
    let mut drained = 0usize;
    // The last drain point: its time and whether a mark's.
    let mut drain_ts: Option<(u64, bool)> = None;
    let mut point = |n: usize,
                     ts: u64,
                     by_mark: bool,
                     drained: &mut usize,
                     drain_ts: &mut Option<(u64, bool)>| {
        if n < *drained {
            return;
        }
        if let Some((start, _)) = *drain_ts {
            if n > *drained && ts > start {
                segs.push(Segment {
                    a: *drained,
                    b: n,
                    start,
                    end: ts,
                });
            }
        }
        *drained = n;
        *drain_ts = Some(match *drain_ts {
            Some((d, m)) if d > ts => (d, m),
            _ => (ts, by_mark),
        });
    };
    for (i, r) in records.iter().enumerate() {
        match EventKind::from_raw(r.kind) {
            Some(k) if k.is_launch() => launches.push((r.ts_ns, (Key::of(r), at.get(&i).copied()))),
            Some(EventKind::MARK) => {
                marks.insert(r.func_id, launches.len());
            }
            Some(EventKind::MARK_DONE) => {
                if let Some(n) = marks.remove(&r.func_id) {
                    point(n, r.ts_ns, true, &mut drained, &mut drain_ts);
                }
            }
            Some(EventKind::SYNC_END) => {
                point(launches.len(), r.ts_ns, false, &mut drained, &mut drain_ts);
            }
            _ => {}
        }
    }
    (launches, segs)
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

/// The keys several kernels share: those whose timings disagree
/// ([`agree`]), which the fit then learns per position.
#[must_use]
pub fn shared_keys(records: &[Record]) -> HashSet<Key> {
    timed(records, &timings(records), &HashMap::new()).1
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

/// The lower median of `sorted` (the middle one, or the lower of the two
/// middle ones); `None` when empty.
pub(super) fn lower_median<T: Copy>(sorted: &[T]) -> Option<T> {
    sorted.get(sorted.len().checked_sub(1)? / 2).copied()
}

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
    fit_at(records, &HashMap::new())
}

/// [`fit`], with a duration per position for the launches `positions`
/// names (record index: the launch's ordinal in its request or step; the
/// launches of [`shared_keys`]): each is then timed, or fitted to the
/// drain points, on its own.
#[must_use]
pub fn fit_at(records: &[Record], positions: &HashMap<usize, u32>) -> Fitted {
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
    let at = timings(records);
    let (by_key, shared) = timed(records, &at, &HashMap::new());
    let (timed, _) = timed(records, &at, positions);
    let mut fixed = vec![false; d.len()];
    for (key, &(median, _)) in &timed {
        if let Some(&k) = index.get(key) {
            d[k] = median as f64;
            fixed[k] = true;
        }
    }
    // A position of a shared key that no timing reached: from its key's
    // timings, then solved with every other kernel's duration held, on the
    // drain points around it (the marks' segments hold few such kernels
    // among timed ones).
    let solve: Vec<bool> = {
        let mut v = vec![false; d.len()];
        for (id, &k) in &index {
            if id.1.is_some() && !fixed[k] {
                if let Some(&(ns, _)) = by_key.get(&(id.0, None)) {
                    d[k] = ns as f64;
                }
                v[k] = true;
            }
        }
        v
    };
    if solve.contains(&true) {
        d = rounds_free(&segs, &times, &kernel, d, &solve);
    }
    if fixed.contains(&true) {
        let mut factors: Vec<f64> = syncs
            .iter()
            .filter_map(|s| factor_free(s, &times, &kernel, &d, &fixed))
            .collect();
        factors.sort_by(f64::total_cmp);
        if let Some(x) = lower_median(&factors) {
            d.iter_mut()
                .zip(&fixed)
                .filter(|(_, &f)| !f)
                .for_each(|(v, _)| *v *= x);
        }
    }
    let mut fitted = Fitted::default();
    // Per function and per key: the mean over their launches.
    let mut per_func: HashMap<u64, (f64, f64)> = HashMap::new();
    let mut per_key: HashMap<Key, (f64, f64)> = HashMap::new();
    let mut add = |id: &Ident, ns: f64, count: f64, fitted: &mut Fitted| {
        if id.1.is_some() {
            fitted.by_position.insert(*id, ns.round() as u64);
        }
        let f = per_func.entry(id.0.func_id).or_default();
        f.0 += ns * count;
        f.1 += count;
        let f = per_key.entry(id.0).or_default();
        f.0 += ns * count;
        f.1 += count;
    };
    for (id, &(median, count)) in &timed {
        if !index.contains_key(id) {
            add(id, median as f64, count as f64, &mut fitted);
        }
    }
    for (id, &k) in &index {
        let known = n[k] > 0.0 || timed.contains_key(id);
        if known && d[k] >= 0.5 {
            add(id, d[k], n[k].max(1.0), &mut fitted);
        }
    }
    fitted.by_key = per_key
        .into_iter()
        .map(|(k, (sum, c))| (k, (sum / c).round() as u64))
        .collect();
    fitted.timed_at = at.into_iter().collect();
    fitted.shared = shared;
    fitted.by_func = per_func
        .into_iter()
        .map(|(f, (sum, c))| (f, (sum / c).round() as u64))
        .collect();
    fitted
}

/// [`ROUNDS`] of the fit from `d`; the durations and the sum of squared misses of the segments' ends.
///
/// A segment's simulated end with its kernels' durations scaled by `x` is
/// the latest of `start + x * S(a)` and, for each launch `i`, `t(i) + x *
/// S(i)` (`S(i)`: the durations from launch `i` to the segment's end): a
/// maximum of lines rising in `x`, which first reaches the measured end at
/// the least of the lines' own solutions. Each kernel's share of the
/// segment is its duration times that `x`; its new duration the mean of
/// its shares.
fn rounds(segs: &[Segment], times: &[f64], kernel: &[usize], mut d: Vec<f64>) -> (Vec<f64>, f64) {
    let mut num = vec![0f64; d.len()];
    let mut den = vec![0f64; d.len()];
    let mut sse = 0.0;
    for _ in 0..ROUNDS {
        num.iter_mut().for_each(|x| *x = 0.0);
        den.iter_mut().for_each(|x| *x = 0.0);
        sse = 0.0;
        for s in segs {
            let Some(x) = factor(s, times, kernel, &d) else {
                continue;
            };
            let sim = simulated_end(s, times, kernel, &d);
            sse += (sim - s.end as f64) * (sim - s.end as f64);
            for &k in &kernel[s.a..s.b] {
                num[k] += d[k] * x;
                den[k] += 1.0;
            }
        }
        for k in 0..d.len() {
            if den[k] > 0.0 {
                d[k] = num[k] / den[k];
            }
        }
    }
    (d, sse)
}

/// [`ROUNDS`] of the fit of the durations `solve` marks, every other held:
/// each segment's [`factor_free`] (with the others as fixed), each solved
/// duration the mean of its scaled shares.
fn rounds_free(
    segs: &[Segment],
    times: &[f64],
    kernel: &[usize],
    mut d: Vec<f64>,
    solve: &[bool],
) -> Vec<f64> {
    let held: Vec<bool> = solve.iter().map(|s| !s).collect();
    let mut num = vec![0f64; d.len()];
    let mut den = vec![0f64; d.len()];
    for _ in 0..ROUNDS {
        num.iter_mut().for_each(|x| *x = 0.0);
        den.iter_mut().for_each(|x| *x = 0.0);
        for s in segs {
            if !kernel[s.a..s.b].iter().any(|&k| solve[k]) {
                continue;
            }
            let Some(x) = scale_free(s, times, kernel, &d, &held) else {
                continue;
            };
            for &k in &kernel[s.a..s.b] {
                if solve[k] {
                    num[k] += d[k] * x;
                    den[k] += 1.0;
                }
            }
        }
        for k in 0..d.len() {
            if den[k] > 0.0 {
                d[k] = num[k] / den[k];
            }
        }
    }
    d
}

/// The factor by which `d`'s durations of `s`'s launches must be scaled for
/// its simulated end to be its measured end (see [`rounds`]), if positive.
fn factor(s: &Segment, times: &[f64], kernel: &[usize], d: &[f64]) -> Option<f64> {
    let end = s.end as f64;
    let (mut suffix, mut x) = (0.0, f64::INFINITY);
    for i in (s.a..s.b).rev() {
        suffix += d[kernel[i]];
        if suffix > 0.0 {
            x = x.min((end - times[i]) / suffix);
        }
    }
    if suffix > 0.0 {
        x = x.min((end - s.start as f64) / suffix);
    }
    (x.is_finite() && x > 0.0).then_some(x)
}

/// The least share of a sync segment's kernel time the free durations must
/// hold for the syncs' scale to be solved for them. The time of a segment
/// no kernel explains (a copy, the sync's own return, the timings' small
/// errors) goes wholly to its free kernels: where they are a sliver of it,
/// a few untimed kernels took it all (ResNet50 training's first
/// convolution, 147 us, came back 0.28 to 1.28 ms and the step's sum up to
/// +3.8%).
const MIN_FREE_SHARE: f64 = 0.25;

/// As [`factor`], scaling only the durations not `fixed`: each line is
/// `t(i) + F(i) + x * U(i)` (`F`, `U`: the fixed and the free durations from
/// launch `i` to the segment's end). `None` where the free durations hold
/// less than [`MIN_FREE_SHARE`] of `s`'s kernel time (none at all
/// included), or the fixed ones alone overrun its end.
fn factor_free(
    s: &Segment,
    times: &[f64],
    kernel: &[usize],
    d: &[f64],
    fixed: &[bool],
) -> Option<f64> {
    let (u, f) = kernel[s.a..s.b].iter().fold((0.0, 0.0), |(u, f), &k| {
        if fixed[k] {
            (u, f + d[k])
        } else {
            (u + d[k], f)
        }
    });
    if u < MIN_FREE_SHARE * (u + f) {
        return None;
    }
    scale_free(s, times, kernel, d, fixed)
}

/// [`factor_free`] without its least share.
fn scale_free(
    s: &Segment,
    times: &[f64],
    kernel: &[usize],
    d: &[f64],
    fixed: &[bool],
) -> Option<f64> {
    let end = s.end as f64;
    let (mut f, mut u, mut x) = (0.0, 0.0, f64::INFINITY);
    let line = |from: f64, f: f64, u: f64, x: &mut f64| {
        if u > 0.0 {
            *x = x.min((end - from - f) / u);
        }
    };
    for i in (s.a..s.b).rev() {
        let k = kernel[i];
        if fixed[k] {
            f += d[k];
        } else {
            u += d[k];
        }
        line(times[i], f, u, &mut x);
    }
    line(s.start as f64, f, u, &mut x);
    (x.is_finite() && x > 0.0).then_some(x)
}

/// When `s`'s launches would have completed with durations `d`.
fn simulated_end(s: &Segment, times: &[f64], kernel: &[usize], d: &[f64]) -> f64 {
    let mut c = s.start as f64;
    for i in s.a..s.b {
        c = c.max(times[i]) + d[kernel[i]];
    }
    c
}

/// The segments from one sync's return to the next (marks ignored).
fn sync_segments(records: &[Record]) -> Vec<Segment> {
    let mut out = Vec::new();
    let (mut n, mut prev): (usize, Option<(u64, usize)>) = (0, None);
    for r in records {
        match EventKind::from_raw(r.kind) {
            Some(k) if k.is_launch() => n += 1,
            Some(EventKind::SYNC_END) => {
                if let Some((start, a)) = prev {
                    if n > a && r.ts_ns > start {
                        out.push(Segment {
                            a,
                            b: n,
                            start,
                            end: r.ts_ns,
                        });
                    }
                }
                prev = Some((r.ts_ns, n));
            }
            _ => {}
        }
    }
    out
}
