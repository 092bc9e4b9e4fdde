//! The drain points (completion marks and syncs), the segments of launches
//! they end, and the fits over them: a segment's factor, the rounds that
//! share each segment's time among its kernels, and the same with some
//! durations held (the method is in the [module docs](super)).

use std::collections::HashMap;

use tandem_proto::{EventKind, Record};

use super::key::{Ident, Key};

/// Rounds of the fit.
pub(super) const ROUNDS: usize = 30;

/// Launches since one drain point, ended by the next.
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment {
    /// Its launches: `launches[a..b]`.
    pub(super) a: usize,
    pub(super) b: usize,
    /// When the GPU had done everything before it (the previous drain point).
    pub(super) start: u64,
    /// When it had done all of it.
    pub(super) end: u64,
}

/// The segments of `records` (oldest first) and their launches' keys and
/// times. A segment needs the drain point before it, so the launches before
/// the window's first drain point are measured by none.
pub(super) fn segments(
    records: &[Record],
    at: &HashMap<usize, u32>,
) -> (Vec<(u64, Ident)>, Vec<Segment>) {
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

/// [`ROUNDS`] of the fit from `d`; the durations and the sum of squared misses of the segments' ends.
///
/// A segment's simulated end with its kernels' durations scaled by `x` is
/// the latest of `start + x * S(a)` and, for each launch `i`, `t(i) + x *
/// S(i)` (`S(i)`: the durations from launch `i` to the segment's end): a
/// maximum of lines rising in `x`, which first reaches the measured end at
/// the least of the lines' own solutions. Each kernel's share of the
/// segment is its duration times that `x`; its new duration the mean of
/// its shares.
pub(super) fn rounds(
    segs: &[Segment],
    times: &[f64],
    kernel: &[usize],
    mut d: Vec<f64>,
) -> (Vec<f64>, f64) {
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
/// each segment's [`factor_free`] (with the others as fixed, whatever their
/// share), each solved
/// duration the mean of its scaled shares.
pub(super) fn rounds_free(
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
            let Some(x) = factor_free(s, times, kernel, &d, &held, 0.0) else {
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

/// The lower median of `sorted` (the middle one, or the lower of the two
/// middle ones); `None` when empty.
pub(super) fn lower_median<T: Copy>(sorted: &[T]) -> Option<T> {
    sorted.get(sorted.len().checked_sub(1)? / 2).copied()
}

/// The kernels of `free` that some segment holds with no other kernel of
/// `free` and none of them more than once: each such segment's measure of
/// it (its duration scaled by [`factor_free`] with every other held), and
/// their lower median over the segments. A segment whose end a late mark
/// put off measures one kernel long, and the median keeps it out.
pub(super) fn alone(
    segs: &[Segment],
    times: &[f64],
    kernel: &[usize],
    d: &[f64],
    free: &[bool],
) -> Vec<(usize, f64)> {
    let mut measures: HashMap<usize, Vec<f64>> = HashMap::new();
    let mut held = vec![true; d.len()];
    for s in segs {
        let mut only = None;
        let mut alone = true;
        for &k in &kernel[s.a..s.b] {
            if free[k] {
                alone &= only.is_none();
                only = Some(k);
            }
        }
        let Some(k) = only.filter(|_| alone) else {
            continue;
        };
        if d[k] <= 0.0 {
            continue;
        }
        held[k] = false;
        if let Some(x) = factor_free(s, times, kernel, d, &held, 0.0) {
            measures.entry(k).or_default().push(d[k] * x);
        }
        held[k] = true;
    }
    measures
        .into_iter()
        .filter_map(|(k, mut v)| {
            v.sort_by(f64::total_cmp);
            lower_median(&v).map(|ns| (k, ns))
        })
        .collect()
}

/// The factor by which `d`'s durations of `s`'s launches must be scaled for
/// its simulated end to be its measured end (see [`rounds`]), if positive.
pub(super) fn factor(s: &Segment, times: &[f64], kernel: &[usize], d: &[f64]) -> Option<f64> {
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

/// As [`factor`], scaling only the durations not `fixed`: each line is
/// `t(i) + F(i) + x * U(i)` (`F`, `U`: the fixed and the free durations from
/// launch `i` to the segment's end). `None` where the free durations hold
/// less than `min_share` of `s`'s kernel time (none at all included), or
/// the fixed ones alone overrun its end.
pub(super) fn factor_free(
    s: &Segment,
    times: &[f64],
    kernel: &[usize],
    d: &[f64],
    fixed: &[bool],
    min_share: f64,
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
    if u < min_share * (u + f) {
        return None;
    }
    line(s.start as f64, f, u, &mut x);
    (x.is_finite() && x > 0.0).then_some(x)
}

/// The most time kernel `k` can take in `s` (a sync segment: its start
/// and end are exact) with the `fixed` kernels' durations `d` and every
/// other free kernel taking none: the least, over the lines of
/// [`factor_free`] that hold `k` (`n` times), of `(end - from - F) / n`.
/// `None` where `s` holds no `k`, or the fixed durations alone overrun its
/// end (their small errors, not room).
pub(super) fn room(
    s: &Segment,
    times: &[f64],
    kernel: &[usize],
    d: &[f64],
    fixed: &[bool],
    k: usize,
) -> Option<f64> {
    let end = s.end as f64;
    let (mut f, mut n, mut most) = (0.0, 0.0, f64::INFINITY);
    let mut line = |from: f64, f: f64, n: f64| {
        if n > 0.0 {
            most = most.min((end - from - f) / n);
        } else if from + f > end {
            most = f64::NEG_INFINITY;
        }
    };
    for i in (s.a..s.b).rev() {
        let j = kernel[i];
        if j == k {
            n += 1.0;
        } else if fixed[j] {
            f += d[j];
        }
        line(times[i], f, n);
    }
    line(s.start as f64, f, n);
    (most.is_finite() && most > 0.0).then_some(most)
}

/// When `s`'s launches would have completed with durations `d`.
pub(super) fn simulated_end(s: &Segment, times: &[f64], kernel: &[usize], d: &[f64]) -> f64 {
    let mut c = s.start as f64;
    for i in s.a..s.b {
        c = c.max(times[i]) + d[kernel[i]];
    }
    c
}

/// The segments from one sync's return to the next (marks ignored).
pub(super) fn sync_segments(records: &[Record]) -> Vec<Segment> {
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
