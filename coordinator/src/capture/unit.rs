//! Which records are one request (inference) or one step (training), and
//! the representative one: the rules are in the [module docs](super).

use tandem_proto::{EventKind, Record};

use super::key::{is_launch, Key};

/// One request or step: `records[first..end]`, from `begin_ns` (its
/// arrival, or the end of what came before it) to `end_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// Its first record.
    pub first: usize,
    /// One past its last record.
    pub end: usize,
    /// When it began (the first op's host gap counts from here), ns.
    pub begin_ns: u64,
    /// When it ended, ns.
    pub end_ns: u64,
}

impl Unit {
    /// How long it took, ns.
    #[must_use]
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.begin_ns)
    }
}

fn kind(r: &Record) -> Option<EventKind> {
    EventKind::from_raw(r.kind)
}

/// The complete requests in `records`: the explicit ones (REQUEST_BEGIN to
/// REQUEST_END) when there is any, else those a launch or copy after at
/// least `idle_gap_ns` of quiet begins and the next sync's return ends.
#[must_use]
pub fn requests(records: &[Record], idle_gap_ns: u64) -> Vec<Unit> {
    let explicit = records
        .iter()
        .any(|r| kind(r) == Some(EventKind::REQUEST_BEGIN));
    let mut out = Vec::new();
    if explicit {
        let mut open: Option<usize> = None;
        for (i, r) in records.iter().enumerate() {
            match kind(r) {
                Some(EventKind::REQUEST_BEGIN) => open = open.or(Some(i)),
                Some(EventKind::REQUEST_END) => {
                    if let Some(b) = open.take() {
                        out.push(Unit {
                            first: b + 1,
                            end: i,
                            begin_ns: records[b].ts_ns,
                            end_ns: r.ts_ns,
                        });
                    }
                }
                _ => {}
            }
        }
        return out;
    }
    let mut open: Option<usize> = None;
    let mut last: Option<u64> = None;
    for (i, r) in records.iter().enumerate() {
        let k = kind(r);
        let work = is_launch(r.kind) || k == Some(EventKind::COPY_H2D);
        if work {
            // Only after a quiet spell the window saw: the window's first
            // records may be the tail of a request that began before it.
            if open.is_none() && last.is_some_and(|l| r.ts_ns.saturating_sub(l) >= idle_gap_ns) {
                open = Some(i);
            }
            last = Some(r.ts_ns);
        } else if k == Some(EventKind::SYNC_BEGIN) {
            last = Some(r.ts_ns);
        } else if k == Some(EventKind::SYNC_END) {
            last = Some(r.ts_ns);
            if let Some(b) = open.take() {
                out.push(Unit {
                    first: b,
                    end: i + 1,
                    begin_ns: records[b].ts_ns,
                    end_ns: r.ts_ns,
                });
            }
        }
    }
    out
}

/// The shortest period `p` of `seq` such that it repeats with period `p`
/// over its last `max(2p, n/2)` elements; `None` when no `p <= n/2` does.
///
/// Linear in `n`: with `z` the Z-function of `seq` reversed (`z[p]`: how
/// many elements, from the last one backwards, equal those `p` before
/// them), period `p` holds over the last `span` elements exactly when
/// `z[p] >= span - p`.
#[must_use]
pub fn step_period<T: PartialEq>(seq: &[T]) -> Option<usize> {
    let n = seq.len();
    let z = z_function(&seq.iter().rev().collect::<Vec<_>>());
    (1..=n / 2).find(|&p| z[p] >= (2 * p).max(n / 2) - p)
}

/// The Z-function of `s`: `z[i]` is the length of the longest common
/// prefix of `s` and `s[i..]` (`z[0]`: `s.len()`). Linear (Gusfield's
/// box: each comparison past the box's right end moves it).
fn z_function<T: PartialEq>(s: &[T]) -> Vec<usize> {
    let n = s.len();
    let mut z = vec![0; n];
    if n == 0 {
        return z;
    }
    z[0] = n;
    // [l, r): the rightmost match box found, s[l..r] == s[..r - l].
    let (mut l, mut r) = (0, 0);
    for i in 1..n {
        let mut k = if i < r { z[i - l].min(r - i) } else { 0 };
        while i + k < n && s[k] == s[i + k] {
            k += 1;
        }
        z[i] = k;
        if i + k > r {
            (l, r) = (i, i + k);
        }
    }
    z
}

/// Launches a step search looks at, at most: as many as the largest window
/// holds (`MAX_WINDOW`, checked where both are known; the search is
/// linear). A step is found once the window holds two of it, so
/// `[trace] window` bounds the longest step found.
pub const MAX_STEP_LAUNCHES: usize = 1 << 20;

/// The whole steps in `records` (see the [module docs](super)), or why none
/// was found.
///
/// # Errors
/// Fewer than two launches, no repeating sequence, or no whole step.
pub fn steps(records: &[Record]) -> Result<Vec<Unit>, String> {
    let mut launches: Vec<usize> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| is_launch(r.kind))
        .map(|(i, _)| i)
        .collect();
    if launches.len() > MAX_STEP_LAUNCHES {
        launches.drain(..launches.len() - MAX_STEP_LAUNCHES);
    }
    let keys: Vec<(u64, [u32; 3])> = launches
        .iter()
        .map(|&i| {
            let k = Key::of(&records[i]);
            (k.func_id, k.grid)
        })
        .collect();
    let n = launches.len();
    let p = step_period(&keys).ok_or_else(|| {
        format!(
            "its {n} launches show no repeating sequence (no training step found; a step of \
             more than {} launches needs a larger `[trace] window`)",
            n / 2
        )
    })?;
    // The repeating stretch, extended back as far as it repeats.
    let mut s = n - (2 * p).max(n / 2);
    while s > 0 && keys[s - 1] == keys[s - 1 + p] {
        s -= 1;
    }
    // The boundary before launch j: after the last SYNC_END between launch
    // j-1 and launch j (and the host time from that sync's return to launch
    // j), else at launch j.
    let boundary = |j: usize| -> (usize, Option<u64>) {
        let lo = launches[j - 1] + 1;
        let hi = launches[j];
        match (lo..hi)
            .rev()
            .find(|&i| kind(&records[i]) == Some(EventKind::SYNC_END))
        {
            Some(i) => (
                i + 1,
                Some(records[hi].ts_ns.saturating_sub(records[i].ts_ns)),
            ),
            None => (hi, None),
        }
    };
    // The phase: in the last period, the launch after a sync that the
    // longest host time follows (a step's own syncs, a grad scaler's
    // `found_inf.item()`, come right before more launches; the step's end,
    // `loss.item()`, before the next step's data), else the launch after
    // the period's longest gap. (Taking the period's last sync instead cut
    // Whisper's steps one launch early whenever the window ended before the
    // next step's first launch: the step then began with the last one's
    // final kernel.)
    let last = (n - p).max(1)..n;
    let phase = last
        .clone()
        .filter_map(|j| Some((j, boundary(j).1?)))
        .max_by_key(|&(_, after_sync)| after_sync)
        .map(|(j, _)| j)
        .or_else(|| {
            last.max_by_key(|&j| {
                records[launches[j]]
                    .ts_ns
                    .saturating_sub(records[launches[j - 1]].ts_ns)
            })
        })
        .ok_or("too few launches for one step")?
        % p;
    let mut out = Vec::new();
    let mut j = s + (phase + p - s % p) % p;
    if j == 0 {
        j += p;
    }
    while j + p < n {
        let (first, _) = boundary(j);
        let (end, _) = boundary(j + p);
        out.push(Unit {
            first,
            end,
            begin_ns: records[first - 1].ts_ns,
            end_ns: records[end - 1].ts_ns,
        });
        j += p;
    }
    if out.is_empty() {
        return Err(format!(
            "its launches repeat every {p} launches, but the window holds no whole step yet"
        ));
    }
    Ok(out)
}

/// The unit of median duration (the lower median of an even count).
#[must_use]
pub fn median_unit(units: &[Unit]) -> Option<Unit> {
    let mut v: Vec<Unit> = units.to_vec();
    v.sort_by_key(|u| (u.duration_ns(), u.first));
    v.get(v.len().saturating_sub(1) / 2).copied()
}
