//! Completion marks: a preloaded C host over the fake driver launches slow
//! kernels and never syncs; the coordinator (in the test) asks for marks and
//! must learn from MARK_DONE records when the GPU got where.

mod support;

use support::{run_client_host, socket_path, Coordinator, Mode};
use tandem_proto::record::FLAG_TIMED;
use tandem_proto::{EventKind, Record};

/// The host's `slow` kernel (client_host.c).
const KERNEL_NS: u64 = 2_000_000;
/// A launch record's timestamp is taken after the driver call returns; the
/// fake GPU started the kernel inside the call, up to this much earlier.
const LAUNCH_CALL_SLACK_NS: u64 = 100_000;

fn paced_records(mark_every_ns: u64, launches: u32, gap_us: u32) -> Vec<Record> {
    paced_host_records("paced", mark_every_ns, launches, gap_us, &[])
}

fn paced_host_records(
    mode: &str,
    mark_every_ns: u64,
    launches: u32,
    gap_us: u32,
    vars: &[(&str, &str)],
) -> Vec<Record> {
    let path = socket_path("marks");
    let coord = Coordinator::start(&path, Mode::Welcome);
    coord.set_mark_every_ns(mark_every_ns);
    let out = run_client_host(
        &path,
        &[mode, &launches.to_string(), &gap_us.to_string()],
        vars,
    );
    out.assert_ok();
    // The watcher put itself in the relaxed capture mode (its queries must
    // never invalidate a capture the program runs in another thread).
    assert_eq!(out.state_u64("main", "capture_mode_calls"), 1, "{out}");
    let clients = coord.kill();
    assert_eq!(clients.len(), 1, "one client: {clients:?}");
    clients[0].records.clone()
}

#[test]
fn marks_say_when_the_gpu_got_there_without_any_sync() {
    const N: u32 = 30;
    let records = paced_records(200_000, N, 300);
    let launches: Vec<&Record> = records
        .iter()
        .filter(|r| r.kind == EventKind::LAUNCH.raw())
        .collect();
    assert_eq!(launches.len(), N as usize);
    let first_launch = launches[0].ts_ns;
    assert!(
        !records.iter().any(|r| r.kind == EventKind::SYNC_END.raw()),
        "the host never syncs"
    );

    // Every mark follows a launch; its launch counter is the launches before it.
    let mut marks = Vec::new();
    let mut seen_launches = 0u64;
    let mut last_seq = 0;
    for (i, r) in records.iter().enumerate() {
        if r.kind == EventKind::LAUNCH.raw() {
            seen_launches += 1;
        } else if r.kind == EventKind::MARK.raw() {
            assert!(r.func_id > last_seq, "mark sequence increases: {r:?}");
            last_seq = r.func_id;
            assert_eq!(r.bytes, seen_launches, "launch counter at the mark");
            // Right after its launch (the watcher's MARK_DONEs may come between).
            let before = records[..i]
                .iter()
                .rev()
                .find(|p| p.kind != EventKind::MARK_DONE.raw())
                .expect("a record before the mark");
            assert_eq!(before.kind, EventKind::LAUNCH.raw());
            marks.push((r.func_id, seen_launches, r.ts_ns, i));
        }
    }
    // Launches 0.3 ms apart, marks at most every 0.2 ms: most launches get one.
    assert!(
        marks.len() >= N as usize / 2,
        "{} marks for {N} launches",
        marks.len()
    );

    // Every mark completes, after its MARK, and never before the GPU could
    // have run the kernels launched before it (they queue: 2 ms each, one
    // launched every 0.3 ms).
    for &(seq, k, mark_ts, at) in &marks {
        let done: Vec<(usize, &Record)> = records
            .iter()
            .enumerate()
            .filter(|(_, r)| r.kind == EventKind::MARK_DONE.raw() && r.func_id == seq)
            .collect();
        assert_eq!(done.len(), 1, "mark {seq} completes exactly once");
        let (pos, d) = done[0];
        assert!(pos > at, "MARK_DONE {seq} after its MARK");
        let gpu_there = first_launch + k * KERNEL_NS - LAUNCH_CALL_SLACK_NS;
        assert!(
            d.ts_ns >= gpu_there,
            "mark {seq} after launch {k} reported done at {} ns after the first launch, \
             before the GPU could be there ({} ns)",
            d.ts_ns as i64 - first_launch as i64,
            k * KERNEL_NS
        );
        assert!(d.ts_ns >= mark_ts);
    }
    // The queue grew: the last mark completed well after it was placed.
    let &(seq, _, mark_ts, _) = marks.last().unwrap();
    let done_ts = records
        .iter()
        .find(|r| r.kind == EventKind::MARK_DONE.raw() && r.func_id == seq)
        .unwrap()
        .ts_ns;
    assert!(
        done_ts - mark_ts >= 5 * KERNEL_NS,
        "the last mark waited behind the queue: {} ns",
        done_ts - mark_ts
    );
}

#[test]
fn no_marks_unless_the_coordinator_asks() {
    let records = paced_records(0, 10, 1000);
    let n = |k: EventKind| records.iter().filter(|r| r.kind == k.raw()).count();
    assert_eq!(n(EventKind::LAUNCH), 10);
    assert_eq!(n(EventKind::MARK), 0);
    assert_eq!(n(EventKind::MARK_DONE), 0);
}

/// The host's `short` kernel (client_host.c).
const SHORT_NS: u64 = 100_000;

/// The timed MARK_DONEs of `records`: (mark, GPU ns).
fn timed(records: &[Record]) -> Vec<(u64, u64)> {
    records
        .iter()
        .filter(|r| r.kind == EventKind::MARK_DONE.raw() && r.flags & FLAG_TIMED != 0)
        .map(|r| (r.func_id, r.bytes))
        .collect()
}

/// The median of `v` (not empty).
fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

/// A launch-bound job: 100 us kernels launched 1 ms apart (the GPU idle
/// between them), marks every 200 us. A mark's completion time cannot tell
/// a kernel's duration apart from the idle time before it was seen; the
/// timed launches (every mark interval by default: the launch after one
/// that found the interval over) measure each kernel on the GPU. Every
/// timed MARK_DONE follows its MARK right after a launch. On an idle stream
/// the start event completes when recorded, before the launch call reaches
/// the driver; the shim takes the host time between the two off (without
/// that, each timing here was 0.9-2.0% long on a quiet 2-core machine, up
/// to 11% on a loaded one). What is left is the difference between the two
/// calls' tails, a few hundred ns (-0.5% to +0.2% seen, under the leak
/// checker too; -0.86% on the CI machine while the lead also held the
/// shim's capture query after the launch): all but one timing within 5% (room for a preemption),
/// their median within 0.75%.
#[test]
fn timed_marks_measure_a_short_kernel_of_a_launch_bound_job() {
    const N: u32 = 20;
    let records = paced_host_records("paced-short", 200_000, N, 1000, &[]);
    let n = |k: EventKind| records.iter().filter(|r| r.kind == k.raw()).count();
    assert_eq!(n(EventKind::LAUNCH), N as usize);
    let timed = timed(&records);
    assert!(
        timed.len() >= N as usize / 3,
        "{} timed marks for {N} launches: {records:?}",
        timed.len()
    );
    eprintln!("timed (mark, ns): {timed:?}");
    let mid = median(timed.iter().map(|&(_, ns)| ns).collect());
    let err = mid as f64 / SHORT_NS as f64 - 1.0;
    assert!(
        err.abs() <= 0.0075,
        "the median timing of the 100 us kernel is {mid} ns ({:+.2}%): {timed:?}",
        err * 100.0
    );
    for &(seq, _) in &timed {
        let at = records
            .iter()
            .position(|r| r.kind == EventKind::MARK.raw() && r.func_id == seq)
            .expect("the timed mark's MARK");
        assert_eq!(records[at - 1].kind, EventKind::LAUNCH.raw(), "mark {seq}");
    }
    // One timing may be off by more than 5%: a host preemption between the
    // launch and its end event lengthens it (seen at +17% on a loaded 2-core
    // CI machine, in the test below).
    let off: Vec<_> = timed
        .iter()
        .filter(|&&(_, ns)| ns.abs_diff(SHORT_NS) > SHORT_NS / 20)
        .collect();
    assert!(off.len() <= 1, "timings off by over 5%: {off:?}");
    // Untimed completions carry no duration.
    assert!(records
        .iter()
        .filter(|r| r.kind == EventKind::MARK_DONE.raw() && r.flags & FLAG_TIMED == 0)
        .all(|r| r.bytes == 0));
}

/// A timed launch on a busy stream: each 100 us kernel is launched right
/// after a 2 ms one (the mark interval found over by the 2 ms launch, so
/// the 100 us one is timed). Its start event completes when the 2 ms
/// kernel does, and the 100 us kernel starts right then: nothing is taken
/// off, and each timing is the kernel's own 100 us (exact on the fake
/// driver; the host time between the two submissions, which an idle
/// stream's timing loses, would make it a microsecond or more short here).
/// One pair may find the 2 ms kernel done (the host preempted that long
/// between the two launches; seen once on a loaded 2-core machine): that
/// timing is an idle stream's, within 5%.
#[test]
fn a_timed_launch_queued_behind_another_kernel_is_its_own_duration() {
    const N: u32 = 10;
    let records = paced_host_records("behind-slow", 200_000, N, 2500, &[]);
    let n = |k: EventKind| records.iter().filter(|r| r.kind == k.raw()).count();
    assert_eq!(n(EventKind::LAUNCH), 2 * N as usize);
    let timed = timed(&records);
    eprintln!("timed (mark, ns): {timed:?}");
    assert!(
        timed.len() >= N as usize / 2,
        "{} timed marks for {N} pairs: {records:?}",
        timed.len()
    );
    for &(seq, ns) in &timed {
        assert!(
            ns.abs_diff(SHORT_NS) <= SHORT_NS / 20,
            "mark {seq} timed the 100 us kernel at {ns} ns"
        );
    }
    // cuEventElapsedTime's float milliseconds: within 100 ns.
    let inexact: Vec<_> = timed
        .iter()
        .filter(|&&(_, ns)| ns.abs_diff(SHORT_NS) > 100)
        .collect();
    assert!(
        inexact.len() <= 1,
        "the 100 us kernel queued behind a 2 ms one was timed inexactly: {inexact:?}"
    );
}

/// `TANDEM_MARK_TIMING=0`: marks as before, none timed.
#[test]
fn no_timed_marks_when_timing_is_off() {
    let records = paced_host_records(
        "paced-short",
        200_000,
        10,
        1000,
        &[("TANDEM_MARK_TIMING", "0")],
    );
    assert!(records.iter().any(|r| r.kind == EventKind::MARK_DONE.raw()));
    assert_eq!(timed(&records), []);
}

/// Every position of a request gets timed, its first kernel too. The
/// launch that finds a mark interval over after it launched is never the
/// one timed (the timing goes to the launch after it), and after an idle
/// spell that launch is always a request's first. So the one to four
/// launches after a sync ask before they launch, and each that finds the
/// interval over is timed itself; and intervals end a drawn time after
/// the launch that found the last one over, not one interval after it
/// (which put them at the same positions of every request), nor on a clock
/// grid (which this request loop, about 2 ms, locked onto in 4 runs of 20:
/// positions 1, or 1 and 3, of every request). Before all three: position
/// 1 only. With the sync's own check in place of the pre-checks, a loaded
/// CI run timed no first kernel in 34 requests.
#[test]
fn the_first_kernel_after_a_sync_is_timed() {
    // Most intervals end in the idle spell, so most timings are of a
    // request's first kernel; each later position is timed in a few
    // percent of requests (its gap before it over the 2 ms cycle): with
    // 100 requests, positions 1 to 3 were each timed 2 to 16 times a run
    // in 16 runs (2026-11-28, 8 of them beside four busy loops).
    const N: u32 = 100;
    let path = socket_path("marks");
    let coord = Coordinator::start(&path, Mode::Welcome);
    coord.set_mark_every_ns(1_000_000);
    run_client_host(&path, &["requests", &N.to_string()], &[]).assert_ok();
    let clients = coord.kill();
    let records = &clients[0].records;
    let timed_seqs: Vec<u64> = timed(records).iter().map(|&(seq, _)| seq).collect();
    // Each timed mark's launch, as its position in its request (0: first).
    let mut positions = Vec::new();
    let mut in_request = 0;
    for r in records {
        match EventKind::from_raw(r.kind) {
            Some(EventKind::LAUNCH) => in_request += 1,
            Some(EventKind::SYNC_END) => in_request = 0,
            Some(EventKind::MARK) if timed_seqs.contains(&r.func_id) => {
                positions.push(in_request - 1);
            }
            _ => {}
        }
    }
    eprintln!("timed positions: {positions:?}");
    assert!(
        positions.contains(&0),
        "no request's first kernel was timed; timed positions: {positions:?}"
    );
    let mut distinct = positions.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(
        distinct.len() >= 3,
        "timed positions {positions:?}: the same few of every request"
    );
    // The timings themselves: their median within 5%, and at most one in
    // ten off by more (a host preemption between the launch and its end
    // event lengthens one, seen at +17% on a loaded 2-core CI machine).
    let all = timed(records);
    let mid = median(all.iter().map(|&(_, ns)| ns).collect());
    assert!(
        mid.abs_diff(SHORT_NS) <= SHORT_NS / 20,
        "median timing {mid} ns: {all:?}"
    );
    let off: Vec<_> = all
        .iter()
        .filter(|&&(_, ns)| ns.abs_diff(SHORT_NS) > SHORT_NS / 20)
        .collect();
    eprintln!("{} timings, {} off by over 5%", all.len(), off.len());
    assert!(
        off.len() <= 1.max(all.len() / 10),
        "timings off by over 5%: {off:?} of {all:?}"
    );
}

/// A burst far ahead of the GPU: 2 ms kernels launched every 50 us (about
/// 110 us with usleep's slack; the GPU falls behind from the first), marks
/// every 1 ms. Once a timed launch finds its start event queued behind
/// earlier work, the intervals end about 8 times sooner, so more
/// launches than one per millisecond of host time are timed (every other
/// one here: the launch that finds an interval over is not the one timed),
/// each at its kernel's own 2 ms (it starts when the kernel before it ends:
/// nothing to take off). Before the finer grid: 7 of the 50, one per
/// millisecond; after, 24.
#[test]
fn a_burst_ahead_of_the_gpu_is_timed_at_many_launches() {
    const N: u32 = 50;
    let records = paced_host_records("paced", 1_000_000, N, 50, &[]);
    let launches: Vec<u64> = records
        .iter()
        .filter(|r| r.kind == EventKind::LAUNCH.raw())
        .map(|r| r.ts_ns)
        .collect();
    assert_eq!(launches.len(), N as usize);
    let burst_ms = (launches[launches.len() - 1] - launches[0]) as f64 / 1e6;
    let timed = timed(&records);
    eprintln!(
        "{} timed marks in a burst of {burst_ms:.1} ms: {timed:?}",
        timed.len()
    );
    assert!(
        timed.len() as f64 >= 2.0 * burst_ms,
        "{} timed marks in a burst of {burst_ms:.1} ms of host time: at most one per ms",
        timed.len()
    );
    for &(seq, ns) in &timed {
        assert!(
            ns.abs_diff(2_000_000) <= 20_000,
            "mark {seq} timed a 2 ms kernel at {ns} ns"
        );
    }
}
