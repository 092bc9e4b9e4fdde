use tandem_proto::{EventKind, Record};
use tandem_trace::{JobClass, Op, Trace};

use super::*;

fn rec(kind: EventKind, ts: u64) -> Record {
    Record::new(kind, ts)
}

fn launch(func: u64, ts: u64) -> Record {
    let mut r = rec(EventKind::LAUNCH, ts);
    r.func_id = func;
    r.set_dims([4, 1, 1], [128, 1, 1]);
    r
}

fn mark(kind: EventKind, seq: u64, ts: u64) -> Record {
    let mut r = rec(kind, ts);
    r.func_id = seq;
    r
}

/// `steps` GPU-bound steps of `kernels` (function, GPU ns, timed), launched
/// 1 us apart from 1 ms on, a mark after each launch seen `late` ns after
/// the GPU got there (timed by the shim where the kernel is), then a sync
/// that returns `sync_late` ns after the GPU finished; the next step starts
/// `next` ns after the GPU finished. Oldest first.
fn marked_steps(
    kernels: &[(u64, u64, bool)],
    steps: u64,
    late: u64,
    sync_late: u64,
    next: u64,
) -> Vec<Record> {
    let mut r = Vec::new();
    let (mut t, mut seq) = (1_000_000u64, 0u64);
    for _ in 0..steps {
        let mut gpu = t;
        for (i, &(f, ns, timed)) in kernels.iter().enumerate() {
            let at = t + i as u64 * 1_000;
            r.push(launch(f, at));
            gpu = gpu.max(at) + ns;
            seq += 1;
            r.push(mark(EventKind::MARK, seq, at + 10));
            let mut done = mark(EventKind::MARK_DONE, seq, gpu + late);
            if timed {
                done.flags = tandem_proto::record::FLAG_TIMED;
                done.bytes = ns;
            }
            r.push(done);
        }
        r.push(rec(
            EventKind::SYNC_BEGIN,
            t + (kernels.len() as u64 + 1) * 1_000,
        ));
        r.push(rec(EventKind::SYNC_END, gpu + sync_late));
        t = gpu + next;
    }
    r.sort_by_key(|x| x.ts_ns);
    r
}

/// The kernel durations of the trace `build` makes of a training job's
/// `records`.
fn training_durations(records: &[Record]) -> Vec<u64> {
    training_trace(records)
        .kernels()
        .map(|k| k.duration_ns)
        .collect()
}

fn training_trace(records: &[Record]) -> Trace {
    let src = Source {
        client: 4,
        job: "train".into(),
        class: JobClass::Training,
        device: String::new(),
        seconds: 10,
        idle_gap_ns: 2_000_000,
    };
    build(&src, records, |_| None).unwrap()
}

#[test]
fn the_window_keeps_the_last_records_and_no_allocations_or_frees() {
    let mut w = Window::new(3);
    for i in 1..=5 {
        w.push(&launch(i, i * 10));
        w.push(&rec(EventKind::ALLOC, i * 10 + 1));
    }
    let ids: Vec<u64> = w.iter().map(|r| r.func_id).collect();
    assert_eq!(ids, [3, 4, 5]);
    assert_eq!(w.last_ts(), Some(50));
    assert_eq!(w.copy_since(40).len(), 2);
    let mut off = Window::new(0);
    off.push(&launch(1, 1));
    assert!(off.is_empty());
}

#[test]
fn the_step_is_the_shortest_period_of_the_recent_launches() {
    // A warm-up, then steps of A A A B C.
    let step = [1, 1, 1, 2, 3];
    let mut seq = vec![9, 8, 7];
    for _ in 0..6 {
        seq.extend(step);
    }
    assert_eq!(step_period(&seq), Some(5));
    // Cut mid-step, the period is the same.
    seq.extend([1, 1]);
    assert_eq!(step_period(&seq), Some(5));
    // A single kernel repeated is a period of 1; nothing repeating is none.
    assert_eq!(step_period(&[4, 4, 4, 4]), Some(1));
    assert_eq!(step_period(&[1, 2, 3, 4, 5, 6]), None);
    // One repeat only of a long step still counts.
    assert_eq!(step_period(&[1, 2, 3, 1, 2, 3]), Some(3));
}

/// The definition `step_period` implements, checked element by element
/// (quadratic): the reference for the linear search.
fn step_period_by_definition(seq: &[u8]) -> Option<usize> {
    let n = seq.len();
    (1..=n / 2).find(|&p| {
        let span = (2 * p).max(n / 2);
        (n - span..n - p).all(|i| seq[i] == seq[i + p])
    })
}

#[test]
fn the_linear_step_search_agrees_with_its_definition() {
    // Small alphabets make many near-periods; lengths 0..200.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m) as u8
    };
    let mut periodic = 0;
    for case in 0..3000 {
        let n = case % 200;
        let alphabet = 1 + case as u64 % 3;
        let seq: Vec<u8> = if case % 2 == 0 {
            (0..n).map(|_| next(alphabet)).collect()
        } else {
            // A random step repeated, after a random warm-up, cut anywhere.
            let step: Vec<u8> = (0..1 + next(20)).map(|_| next(alphabet + 1)).collect();
            let warm = next(10) as usize;
            (0..n)
                .map(|i| {
                    if i < warm {
                        9
                    } else {
                        step[(i - warm) % step.len()]
                    }
                })
                .collect()
        };
        let want = step_period_by_definition(&seq);
        periodic += usize::from(want.is_some_and(|p| p > 1));
        assert_eq!(step_period(&seq), want, "{seq:?}");
    }
    assert!(periodic > 500, "too few cases with a period: {periodic}");
}

#[test]
fn a_step_longer_than_the_old_search_limit_is_found() {
    // 32,518 launches a step (A100 ResNet50 b128's synthetic step), two and
    // a half of them, each step ending with a sync: the search once saw
    // only the last 16,384 launches, and answered "no repeating sequence".
    const STEP: u64 = 32_518;
    let mut records = Vec::new();
    let mut t = 1_000;
    for i in 0..2 * STEP + 10_000 {
        let j = i % STEP;
        records.push(launch(j % 700 + u64::from(j == 5) * 1000, t));
        t += 1_000;
        if j == STEP - 1 {
            records.push(rec(EventKind::SYNC_BEGIN, t));
            records.push(rec(EventKind::SYNC_END, t + 500));
            t += 1_000;
        }
    }
    let units = steps(&records).unwrap();
    assert!(!units.is_empty());
    for u in &units {
        let n = records[u.first..u.end]
            .iter()
            .filter(|r| is_launch(r.kind))
            .count();
        assert_eq!(n as u64, STEP, "{u:?}");
    }
}

/// `steps` of training: step = 3 kernels, then a sync (loss.item()).
fn training(steps: u64, durations: &[u64]) -> Vec<Record> {
    let mut out = Vec::new();
    let mut t = 1_000_000;
    for s in 0..steps {
        for f in [10, 11, 12] {
            out.push(launch(f, t));
            t += 1_000;
        }
        out.push(rec(EventKind::SYNC_BEGIN, t));
        t += durations[s as usize % durations.len()];
        out.push(rec(EventKind::SYNC_END, t));
        t += 5_000;
    }
    out
}

#[test]
fn a_training_step_starts_after_its_sync_and_the_median_one_is_taken() {
    let records = training(6, &[100_000, 300_000, 200_000]);
    let units = steps(&records).unwrap();
    // Six steps; the first has no launch before it to bound it and the last
    // no next one: the whole steps are those in between.
    assert!(units.len() >= 4, "{units:?}");
    for u in &units {
        assert_eq!(
            records[u.first].kind,
            EventKind::LAUNCH.raw(),
            "a step starts at a launch"
        );
        assert_eq!(records[u.end - 1].kind, EventKind::SYNC_END.raw());
        assert_eq!(u.end - u.first, 5);
    }
    let m = median_unit(&units).unwrap();
    let mut d: Vec<u64> = units.iter().map(Unit::duration_ns).collect();
    d.sort_unstable();
    assert_eq!(m.duration_ns(), d[(d.len() - 1) / 2]);
}

/// A step with a sync inside it (a grad scaler's `found_inf.item()`) and
/// one at its end (`loss.item()`), the host busy 2 ms after the last one
/// (the next batch) and 5 us after the other; the window ends with the
/// last step's sync, before any launch of the next. Each step starts at its
/// first kernel: the boundary is the sync followed by the longest host
/// time, not the period's last sync (which made each step begin with the
/// one before's final kernel, as Whisper's did).
#[test]
fn a_step_starts_after_the_sync_its_longest_host_time_follows() {
    let mut records = Vec::new();
    let mut t = 1_000_000;
    let sync = |records: &mut Vec<Record>, t: &mut u64, host_after: u64| {
        records.push(rec(EventKind::SYNC_BEGIN, *t));
        *t += 50_000;
        records.push(rec(EventKind::SYNC_END, *t));
        *t += host_after;
    };
    for _ in 0..6 {
        for f in [10, 11, 12] {
            records.push(launch(f, t));
            t += 1_000;
        }
        sync(&mut records, &mut t, 5_000);
        records.push(launch(13, t));
        t += 1_000;
        sync(&mut records, &mut t, 2_000_000);
    }
    let units = steps(&records).unwrap();
    assert!(units.len() >= 4, "{units:?}");
    for u in &units {
        assert_eq!(
            records[u.first].func_id, 10,
            "a step starts at its first kernel: {u:?}"
        );
        assert_eq!(records[u.end - 1].kind, EventKind::SYNC_END.raw());
    }
}

#[test]
fn requests_are_the_explicit_ones_else_from_quiet_to_sync_and_the_median_wins() {
    let gap = 2_000_000;
    let mut r = Vec::new();
    let mut t = 10_000_000;
    // Implicit: three requests lasting 5, 9 and 7 ms, quiet between.
    r.push(launch(1, t - 5_000_000)); // the tail of an earlier one
    for ms in [5u64, 9, 7] {
        r.push(launch(1, t));
        r.push(launch(2, t + 1_000));
        r.push(rec(EventKind::SYNC_BEGIN, t + 2_000));
        r.push(rec(EventKind::SYNC_END, t + ms * 1_000_000));
        t += ms * 1_000_000 + 3 * gap;
    }
    let units = requests(&r, gap);
    let d: Vec<u64> = units.iter().map(|u| u.duration_ns() / 1_000_000).collect();
    assert_eq!(d, [5, 9, 7]);
    assert_eq!(median_unit(&units).unwrap().duration_ns(), 7_000_000);
    // A launch with too little quiet before it joins no new request.
    assert_eq!(requests(&r, 20 * gap).len(), 0);
    // Explicit boundaries win over the implicit rule.
    let mut e = r.clone();
    e.insert(1, rec(EventKind::REQUEST_BEGIN, 9_000_000));
    e.push(rec(EventKind::REQUEST_END, t));
    let units = requests(&e, gap);
    assert_eq!(units.len(), 1);
    assert_eq!((units[0].begin_ns, units[0].end_ns), (9_000_000, t));
}

#[test]
fn back_to_back_kernels_are_measured_by_the_marks_between_them() {
    // Kernel 1 takes 100 us, kernel 2 300 us, launched far ahead of the GPU
    // (GPU-bound); a mark after every second launch, done when the GPU got
    // there.
    let mut r = Vec::new();
    let (mut gpu, mut seq) = (0u64, 0u64);
    let mut pending = Vec::new();
    for i in 0..40u64 {
        let f = 1 + i % 2;
        let t = 1_000 * i;
        r.push(launch(f, t));
        gpu = gpu.max(t) + if f == 1 { 100_000 } else { 300_000 };
        if i % 3 == 2 {
            seq += 1;
            r.push(mark(EventKind::MARK, seq, t));
            pending.push((seq, gpu));
        }
    }
    for (s, done) in pending {
        r.push(mark(EventKind::MARK_DONE, s, done));
    }
    r.sort_by_key(|x| x.ts_ns);
    let fitted = fit(&r);
    let d1 = fitted.duration(&Key::of(&launch(1, 0)));
    let d2 = fitted.duration(&Key::of(&launch(2, 0)));
    assert_eq!(d1.1, Found::Measured);
    assert!(d1.0.abs_diff(100_000) < 5_000, "{d1:?}");
    assert!(d2.0.abs_diff(300_000) < 5_000, "{d2:?}");
}

/// A launch-bound job: 40 us kernels launched every 1 ms, a mark after
/// each, seen done a poll interval (200 us) after the kernel ended. The
/// marks alone make each kernel look a poll interval long; the shim's
/// timed marks (FLAG_TIMED, the kernel's GPU time in `bytes`) on every
/// other one give its own time, which the capture takes for that kernel:
/// the median of the timings, which one preempted launch (timed 4 ms) does
/// not move.
#[test]
fn a_kernel_the_shim_timed_on_the_gpu_takes_its_own_time() {
    let mut r = Vec::new();
    let mut t = 1_000_000;
    for seq in 1..=20u64 {
        r.push(launch(5, t));
        // Another thread's launch on another stream, between the timed
        // launch and its mark.
        let mut other = launch(6, t + 100);
        other.stream = 2;
        r.push(other);
        r.push(mark(EventKind::MARK, seq, t + 500));
        let mut done = mark(EventKind::MARK_DONE, seq, t + 40_000 + 200_000);
        if seq % 2 == 0 {
            done.flags = tandem_proto::record::FLAG_TIMED;
            done.bytes = match seq {
                4 => 4_000_000,
                _ => 40_000 + seq % 3 * 500,
            };
        }
        r.push(done);
        t += 1_000_000;
    }
    let fitted = fit(&r);
    let key = Key::of(&launch(5, 0));
    let (ns, found) = fitted.duration(&key);
    assert_eq!(found, Found::Measured);
    assert_eq!(ns, 40_500, "the median of the timings");
    // Another grid of the same function, never launched here, takes the
    // function's mean: the timed one's.
    let mut other = launch(5, 0);
    other.set_dims([8, 1, 1], [128, 1, 1]);
    assert_eq!(
        fitted.duration(&Key::of(&other)),
        (40_500, Found::FunctionMean)
    );
}

/// A GPU-bound step (kernels of 100 and 300 us launched far ahead of the
/// GPU, a sync ending each step) whose marks are seen late (1 ms: a
/// loaded node's watcher), which inflates what the marks alone say; the
/// syncs give the scale. The 100 us kernel is timed on the GPU: it keeps
/// its timing, and the syncs' scale is solved for the others with it
/// fixed, so the 300 us kernel comes out right too (scaling all and then
/// putting the timing in left it 10% short).
#[test]
fn the_sync_scale_leaves_timed_kernels_alone() {
    let mut r = Vec::new();
    let (mut t, mut seq) = (1_000_000u64, 0u64);
    for _ in 0..6 {
        let mut gpu = t;
        for i in 0..10u64 {
            let f = 1 + i % 2;
            r.push(launch(f, t + i * 1_000));
            gpu = gpu.max(t + i * 1_000) + if f == 1 { 100_000 } else { 300_000 };
            if i % 3 == 0 {
                seq += 1;
                r.push(mark(EventKind::MARK, seq, t + i * 1_000 + 10));
                let mut done = mark(EventKind::MARK_DONE, seq, gpu + 1_000_000);
                if f == 1 {
                    done.flags = tandem_proto::record::FLAG_TIMED;
                    done.bytes = 100_000;
                }
                r.push(done);
            }
        }
        r.push(rec(EventKind::SYNC_BEGIN, t + 10_000));
        r.push(rec(EventKind::SYNC_END, gpu));
        t = gpu + 50_000;
    }
    r.sort_by_key(|x| x.ts_ns);
    let fitted = fit(&r);
    let d1 = fitted.duration(&Key::of(&launch(1, 0))).0;
    let d2 = fitted.duration(&Key::of(&launch(2, 0))).0;
    assert_eq!(d1, 100_000, "the timed kernel keeps its timing");
    assert!(
        d2.abs_diff(300_000) < 15_000,
        "the other scaled by the syncs: {d2}"
    );
}

/// A GPU-bound step of ten 100 us kernels timed on the GPU and one 20 us
/// kernel never timed, whose sync returns 1 ms after the GPU finished (a
/// copy, the sync's own return: time no kernel explains). The syncs' scale
/// would give all of that 1 ms to the one free kernel (then 1 ms long, the
/// step's sum 5% long); its share of the step is too small to solve for,
/// so it keeps what its marks and the syncs' scale over all kernels say
/// (about 40 us here: that scale, taken before the timings, holds the
/// unexplained time too).
#[test]
fn time_no_kernel_explains_is_not_given_to_a_few_untimed_kernels() {
    let step: Vec<(u64, u64, bool)> = (0..11)
        .map(|i| {
            if i == 5 {
                (2, 20_000, false)
            } else {
                (1, 100_000, true)
            }
        })
        .collect();
    let r = marked_steps(&step, 6, 5_000, 1_000_000, 1_100_000);
    let fitted = fit(&r);
    assert_eq!(fitted.duration(&Key::of(&launch(1, 0))).0, 100_000);
    let free = fitted.duration(&Key::of(&launch(2, 0))).0;
    assert!(
        (20_000..100_000).contains(&free),
        "the untimed kernel: {free} ns"
    );
}

#[test]
fn an_isolated_kernel_is_measured_from_its_launch_not_from_the_idle_gpu() {
    // Launch-bound: 50 us kernels launched every 1 ms, a sync after each
    // pair: the GPU idles between them, which must not count.
    let mut r = Vec::new();
    let mut t = 1_000_000;
    for _ in 0..10 {
        r.push(launch(7, t));
        r.push(launch(8, t + 1_000_000));
        r.push(rec(EventKind::SYNC_BEGIN, t + 1_001_000));
        r.push(rec(EventKind::SYNC_END, t + 1_050_000));
        t += 3_000_000;
    }
    let fitted = fit(&r);
    let (ns, found) = fitted.duration(&Key::of(&launch(8, 0)));
    assert_eq!(found, Found::Measured);
    assert!(ns.abs_diff(50_000) < 2_000, "{ns}");
}

#[test]
fn an_inference_trace_is_one_request_ending_in_its_sync() {
    let mut r = Vec::new();
    let mut t = 10_000_000;
    for _ in 0..5 {
        let mut c = rec(EventKind::COPY_H2D, t);
        c.bytes = 4096;
        r.push(c);
        r.push(launch(1, t + 20_000));
        r.push(launch(2, t + 50_000));
        r.push(rec(EventKind::SYNC_BEGIN, t + 60_000));
        r.push(rec(EventKind::SYNC_END, t + 400_000));
        t += 5_000_000;
    }
    let src = Source {
        client: 3,
        job: "infer".into(),
        class: JobClass::Inference,
        device: String::new(),
        seconds: 10,
        idle_gap_ns: 2_000_000,
    };
    // The launches of "conv" ask for 2 KB of dynamic shared memory; the
    // shim sent its registers and static shared memory with its name.
    for x in r.iter_mut().filter(|x| x.func_id == 1) {
        x.shared_mem_bytes = 2048;
    }
    let attrs = tandem_proto::wire::FuncAttrs {
        regs_per_thread: 96,
        static_smem_bytes: 16_384,
    };
    let names = |f: u64| (f == 1).then(|| ("conv".to_string(), Some(attrs)));
    let t = build(&src, &r, names).unwrap();
    let ks: Vec<_> = t.kernels().collect();
    // Known resources: registers, static + dynamic shared memory, and the
    // occupancy left to the model (0); unknown: 1 block per SM as before.
    assert_eq!(
        (
            ks[0].regs_per_thread,
            ks[0].smem_per_block,
            ks[0].blocks_per_sm
        ),
        (96, 16_384 + 2048, 0)
    );
    assert_eq!(
        (
            ks[1].regs_per_thread,
            ks[1].smem_per_block,
            ks[1].blocks_per_sm
        ),
        (0, 0, 1)
    );
    assert_eq!(t.kernels().count(), 2);
    assert!(matches!(t.ops[0], Op::CopyH2d { bytes: 4096, .. }));
    assert!(matches!(
        t.ops.last(),
        Some(Op::Sync {
            host_gap_ns: 10_000
        })
    ));
    let k: Vec<&str> = t.kernels().map(|k| k.name.as_str()).collect();
    assert_eq!(k, ["conv", "fn-0000000000000002"]);
    assert_eq!(t.kernels().nth(1).unwrap().host_gap_ns, 30_000);
    assert!(tandem_trace::Trace::from_json(&t.to_json()).is_ok());
    // Nothing complete yet: a one-line error naming the client.
    let e = build(&src, &r[..3], names).unwrap_err();
    assert_eq!(
        e.0,
        "client 3 has reported no complete request in the last 10 s"
    );
}

/// The fit's known weakness: a GPU-bound step's long and short kernels,
/// with exact marks every seven launches, come out pulled towards their
/// mean (30 rounds of the fit put 43% of the step's time on the wrong
/// kernels here). Running the fit to convergence (up to 3,000 rounds)
/// passes this test, but on the fake driver's round trips, whose marks are
/// seen up to a poll interval late, it drove some kernels to 0 ns and put
/// BERT b32's step sum 10% high, and the predictions moved both ways
/// (docs/traces.md, "What the model is not told"): a regularised fit, or
/// marks timed on the GPU, is what this needs.
#[test]
#[ignore = "the duration fit flattens a GPU-bound step's proportions (see the doc comment)"]
fn a_gpu_bound_steps_long_and_short_kernels_keep_their_proportions() {
    // A training step of 60 kernels of 12 functions whose durations span
    // 50 us to 6.4 ms (as a transformer's GEMMs and element-wise kernels),
    // launched far ahead of the GPU; a mark every 7 launches, done when the
    // GPU got there; a sync at each step's end; 6 steps, the launches
    // drifting so the marks fall at different kernels in each.
    let dur = |f: u64| {
        [6_400_000u64, 50_000, 2_000_000, 300_000, 4_800_000, 100_000][f as usize % 6] + f * 10_000
    };
    let mut r = Vec::new();
    let (mut gpu, mut seq, mut t, mut n) = (0u64, 0u64, 0u64, 0u64);
    for step in 0..6u64 {
        let mut pending = Vec::new();
        for i in 0..60u64 {
            let f = 1 + i % 12;
            t += 20_000 + 3_000 * ((i * 7 + step * 3) % 5);
            r.push(launch(f, t));
            n += 1;
            gpu = gpu.max(t) + dur(f);
            if n % 7 == 0 {
                seq += 1;
                r.push(mark(EventKind::MARK, seq, t));
                pending.push((seq, gpu));
            }
        }
        for (s, done) in pending {
            r.push(mark(EventKind::MARK_DONE, s, done));
        }
        t = t.max(gpu);
        r.push(rec(EventKind::SYNC_BEGIN, t));
        r.push(rec(EventKind::SYNC_END, gpu));
        t = gpu + 1_000;
    }
    r.sort_by_key(|x| x.ts_ns);
    let fitted = fit(&r);
    // Each kernel's error, weighted by its time.
    let (mut miss, mut total) = (0u64, 0u64);
    for f in 1..=12u64 {
        let (ns, found) = fitted.duration(&Key::of(&launch(f, 0)));
        assert_eq!(found, Found::Measured);
        miss += ns.abs_diff(dur(f));
        total += dur(f);
        if dur(f) >= 1_000_000 {
            assert!(
                ns.abs_diff(dur(f)) * 50 < dur(f),
                "f{f}: {ns} for {}",
                dur(f)
            );
        }
    }
    assert!(miss * 50 < total, "{miss} ns missed of {total}");
}

/// A key's timings: one kernel (agreeing, one preempted timing among them)
/// takes their median; two kernels sharing the key (0.8 and 12.4 ms, as
/// Whisper's encoder and decoder weight gradients) take their trimmed
/// mean, which keeps the key's total: the median gave both one mode's time.
#[test]
fn a_keys_timings_give_its_median_unless_they_disagree() {
    let mut one = vec![100_000u64; 9];
    one.push(400_000);
    one.sort_unstable();
    assert_eq!(durations::representative(&one), 100_000);
    let mut two: Vec<u64> = [800_000u64, 12_400_000]
        .iter()
        .flat_map(|&d| std::iter::repeat_n(d, 6))
        .collect();
    two.sort_unstable();
    let got = durations::representative(&two);
    assert_eq!(got, 6_600_000, "the mean of the two modes");
    // Two kernels, one sampled in 9 of 11 timings: the quartiles agree, the
    // gap between the modes says two kernels (the mean, not one mode).
    let mut skewed = vec![47_000u64; 9];
    skewed.extend([92_000, 92_000]);
    let got = durations::representative(&skewed);
    assert_eq!(got, (8 * 47_000 + 92_000) / 9, "the trimmed mean");
    // One preempted timing at each end is one kernel still.
    let mut preempted = vec![100_000u64; 9];
    preempted.insert(0, 20_000);
    preempted.push(400_000);
    assert_eq!(durations::representative(&preempted), 100_000);
}

/// Two kernels that share a key (function, grid and block), 1 ms at a
/// step's second launch and 10 ms at its fourth, each timed in some steps:
/// the captured step gives each its own time by its position, where one
/// duration for the key gave both the same.
#[test]
fn kernels_sharing_a_key_keep_their_own_times_by_position() {
    use tandem_proto::record::FLAG_TIMED;
    let mut r = Vec::new();
    let mut t = 1_000_000;
    let mut seq = 0;
    for step in 0..8u64 {
        for (pos, (f, ns)) in [(1, 50_000), (7, 1_000_000), (2, 50_000), (7, 10_000_000)]
            .into_iter()
            .enumerate()
        {
            r.push(launch(f, t));
            // Step s times position s % 4 (each position in two steps).
            if step % 4 == pos as u64 {
                seq += 1;
                r.push(mark(EventKind::MARK, seq, t + 10));
                let mut done = mark(EventKind::MARK_DONE, seq, t + 20);
                done.flags = FLAG_TIMED;
                done.bytes = ns;
                r.push(done);
            }
            t += 1_000;
        }
        r.push(rec(EventKind::SYNC_BEGIN, t));
        t += 11_100_000;
        r.push(rec(EventKind::SYNC_END, t));
        t += 3_000_000;
    }
    let ns = training_durations(&r);
    assert_eq!(ns.len(), 4, "{ns:?}");
    assert_eq!((ns[1], ns[3]), (1_000_000, 10_000_000), "{ns:?}");
}

/// As above, but the 10 ms kernel is never timed (its key's timings all
/// say 1 ms, and one more timed kernel of the key at another position
/// makes it shared): a mark after every launch, seen 20 us late. Fitted
/// per position with every other duration held, it takes the drain
/// points' 10 ms; by its key it would take the timed kernels' 1 ms.
#[test]
fn a_position_no_timing_reached_is_fitted_on_its_own() {
    let step = [
        (1, 50_000, true),
        (7, 1_000_000, true),
        (2, 50_000, true),
        (7, 10_000_000, false),
        (7, 3_000_000, true),
    ];
    let trace = training_trace(&marked_steps(&step, 8, 20_000, 5_000, 3_000_000));
    let ns: Vec<u64> = trace.kernels().map(|k| k.duration_ns).collect();
    assert_eq!(ns.len(), 5, "{ns:?}");
    assert_eq!((ns[1], ns[4]), (1_000_000, 3_000_000), "timed: {ns:?}");
    assert!(
        ns[3].abs_diff(10_000_000) < 200_000,
        "the untimed position: {ns:?}"
    );
    // The notes say one position was timed in no step.
    assert!(
        trace.notes.contains("timed in no step of the window, at positions whose function, grid and block other kernels of different duration share: 1 ("),
        "{}",
        trace.notes
    );
}

#[test]
fn the_notes_name_no_untimed_position_where_every_one_was_timed() {
    let step = [
        (1, 50_000, true),
        (7, 1_000_000, true),
        (7, 3_000_000, true),
    ];
    let trace = training_trace(&marked_steps(&step, 8, 20_000, 5_000, 3_000_000));
    assert!(!trace.notes.contains("timed in no step"), "{}", trace.notes);
}

/// As [`marked_steps`], but a mark only after the timed launches (as the
/// shim places them while the GPU is behind: each timed launch carries its
/// interval's mark), so a segment holds the untimed launches before a
/// timed one.
fn timed_marks_only(kernels: &[(u64, u64, bool)], steps: u64, late: u64) -> Vec<Record> {
    let all = marked_steps(kernels, steps, late, 5_000, 3_000_000);
    // Drop the untimed marks and their completions.
    let untimed: std::collections::HashSet<u64> = all
        .iter()
        .filter(|r| {
            EventKind::from_raw(r.kind) == Some(EventKind::MARK_DONE)
                && r.flags & tandem_proto::record::FLAG_TIMED == 0
        })
        .map(|r| r.func_id)
        .collect();
    all.into_iter()
        .filter(|r| {
            let k = EventKind::from_raw(r.kind);
            !(matches!(k, Some(EventKind::MARK | EventKind::MARK_DONE))
                && untimed.contains(&r.func_id))
        })
        .collect()
}

/// A step whose 300 us kernel (its own key) is never timed and sits
/// before a timed 9 ms GEMM.
const UNTIMED_BEFORE_GEMM: [(u64, u64, bool); 4] = [
    (1, 50_000, true),
    (5, 300_000, false),
    (7, 9_000_000, true),
    (2, 5_000_000, true),
];

#[test]
fn an_untimed_kernel_of_its_own_key_is_measured_by_the_segments_it_is_alone_in() {
    // The 300 us kernel is never timed; its segment ends at the timed 9 ms
    // GEMM's mark. The rounds, every kernel free, split that segment's
    // time between the two (one segment holds both, and nothing else
    // measures either); the GEMM's timings then fix its own.
    let ns = training_durations(&timed_marks_only(&UNTIMED_BEFORE_GEMM, 8, 20_000));
    assert_eq!(ns.len(), 4, "{ns:?}");
    assert_eq!((ns[2], ns[3]), (9_000_000, 5_000_000), "timed: {ns:?}");
    assert!(
        ns[1].abs_diff(300_000) < 40_000,
        "the untimed kernel: {ns:?}"
    );
}

#[test]
fn a_late_mark_does_not_move_a_kernel_measured_alone() {
    // As above, with one step's GEMM mark seen 5 ms late: the median over
    // the eight segments keeps it out.
    let mut records = timed_marks_only(&UNTIMED_BEFORE_GEMM, 8, 20_000);
    let gemm_done = records
        .iter()
        .position(|r| {
            EventKind::from_raw(r.kind) == Some(EventKind::MARK_DONE) && r.bytes == 9_000_000
        })
        .expect("the GEMM's timed mark");
    records[gemm_done].ts_ns += 5_000_000;
    records.sort_by_key(|x| x.ts_ns);
    let ns = training_durations(&records);
    assert!(
        ns[1].abs_diff(300_000) < 40_000,
        "the untimed kernel: {ns:?}"
    );
}

/// Eight steps of one stream between syncs, each: a timed 1 ms kernel, an
/// untimed one (150 us in truth) that the marks made 2.9 ms (a late mark:
/// ResNet50 training's first convolution came back so on a loaded 2-core
/// machine), a timed 3 ms kernel and an untimed 50 us one; the sync returns
/// 5 us after the GPU finished. A stream runs its work in order, so the
/// untimed kernels get at most the 205 us the timed ones leave; an
/// untimed kernel within that room is not moved.
#[test]
fn untimed_kernels_get_no_more_than_the_syncs_leave_them() {
    let steps = 8;
    let (mut times, mut kernel, mut syncs) = (Vec::new(), Vec::new(), Vec::new());
    let mut t = 1_000_000.0;
    for _ in 0..steps {
        let a = times.len();
        for k in 0..4 {
            times.push(t + f64::from(k) * 1_000.0);
            kernel.push(k as usize);
        }
        let end = t + 4_200_000.0 + 5_000.0;
        syncs.push(solve::Segment {
            a,
            b: times.len(),
            start: t as u64 - 2_000,
            end: end as u64,
        });
        t = end + 3_000_000.0;
    }
    let fixed = [true, false, true, false];
    let mut d = vec![1_000_000.0, 2_900_000.0, 3_000_000.0, 50_000.0];
    durations::within_syncs(&syncs, &times, &kernel, &mut d, &fixed);
    assert_eq!((d[0], d[2]), (1_000_000.0, 3_000_000.0), "timed: {d:?}");
    let sum: f64 = d.iter().sum();
    assert!(
        sum <= 4_205_000.5,
        "the step's kernels overrun its syncs: {d:?}"
    );
    assert!(d[1] >= 100_000.0 && d[3] >= 30_000.0, "{d:?}");
    // Kernels that fit are left as they are.
    let mut fits = vec![1_000_000.0, 150_000.0, 3_000_000.0, 50_000.0];
    durations::within_syncs(&syncs, &times, &kernel, &mut fits, &fixed);
    assert_eq!(fits, [1_000_000.0, 150_000.0, 3_000_000.0, 50_000.0]);
}
