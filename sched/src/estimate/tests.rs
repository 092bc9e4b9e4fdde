use super::*;

#[test]
fn unknown_kernels_use_the_default_and_first_sample_replaces_it() {
    let mut t = KernelTable::default();
    assert_eq!(t.estimate(7, 50_000), 50_000);
    assert_eq!(t.launch(0, 7, 1, 50_000), 50_000);
    t.drain(Some(200_000));
    assert_eq!(t.estimate(7, 50_000), 200_000);
    assert_eq!(t.samples(7), 1);
    // EWMA weight 1/4 from then on.
    t.launch(0, 7, 1, 50_000);
    t.drain(Some(100_000));
    assert_eq!(t.estimate(7, 50_000), 175_000);
}

#[test]
fn a_measurement_is_spread_in_proportion_to_estimates() {
    let mut t = KernelTable::default();
    t.launch(0, 1, 1, 10_000);
    t.drain(Some(10_000));
    t.launch(0, 2, 1, 10_000);
    t.drain(Some(30_000));
    // 1 x kernel1 (10 us) + 1 x kernel2 (30 us) took 80 us: both doubled (first
    // samples were already taken, so EWMA: 3/4 old + 1/4 new).
    t.launch(0, 1, 1, 10_000);
    t.launch(0, 2, 1, 10_000);
    t.drain(Some(80_000));
    assert_eq!(t.estimate(1, 10_000), (3 * 10_000 + 20_000) / 4);
    assert_eq!(t.estimate(2, 10_000), (3 * 30_000 + 60_000) / 4);
}

#[test]
fn the_table_is_bounded_and_overflow_uses_the_default() {
    let mut t = KernelTable::default();
    for f in 0..(MAX_KERNELS_PER_CLIENT as u64 + 10) {
        t.launch(0, f, 1, 5_000);
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
    t.launch(0, 3, 4, 1_000);
    t.drain(None);
    assert_eq!(t.samples(3), 0);
    t.launch(0, 3, 1, 1_000);
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
    t.launch(0, 1, 1, 8_000);
    assert_eq!(
        t.mean_launch_ns(50_000),
        8_000,
        "the first launch replaces it"
    );
    t.launch(0, 2, 1, 8_000);
    // A sync measures 2 launches at 40 us: each kernel is now 20 us, and
    // so is the mean, at once.
    t.drain(Some(40_000));
    assert_eq!(t.mean_launch_ns(50_000), 20_000);
    assert!(t.measured());
    // Between syncs: an EWMA of the launches' estimates.
    t.launch(0, 3, 1, 8_000);
    assert_eq!(t.mean_launch_ns(50_000), (7 * 20_000 + 8_000) / 8);
    // A graph launch of 4 kernels is one launch of 4 kernels' worth.
    let before = t.mean_launch_ns(50_000);
    t.launch(0, GRAPH_FUNC, 4, 8_000);
    assert_eq!(t.mean_launch_ns(50_000), (7 * before + 4 * 8_000) / 8);
    // A drain with nothing measured leaves the mean alone.
    let before = t.mean_launch_ns(50_000);
    t.drain(None);
    assert_eq!(t.mean_launch_ns(50_000), before);
    // The next measured interval: 1 launch of kernel 3 + 1 graph launch of
    // 4 kernels = 2 calls of 5 kernels estimated at 8 us each; it took
    // 100 us: 20 us a kernel (first samples), 50 us a call.
    t.launch(0, 3, 1, 8_000);
    t.launch(0, GRAPH_FUNC, 4, 8_000);
    t.drain(Some(100_000));
    assert_eq!(t.estimate(3, 0), 20_000);
    assert_eq!(t.mean_launch_ns(50_000), 50_000);
}

/// Launches of kernels 1 (x2) and 2, mark 1; kernel 3, mark 2; kernel 4
/// (open). Every kernel starts at 10 us.
fn three_segments() -> KernelTable {
    let mut t = KernelTable::default();
    t.launch(100, 1, 1, 10_000);
    t.launch(105, 1, 1, 10_000);
    t.launch(110, 2, 1, 10_000);
    t.seal(1);
    t.launch(120, 3, 1, 10_000);
    t.seal(2);
    t.launch(130, 4, 1, 10_000);
    t
}

#[test]
fn a_mark_measures_only_the_segments_it_covers() {
    let mut t = three_segments();
    assert_eq!(t.sealed_len(), 2);
    assert_eq!(t.first_pending(), Some(100));
    assert_eq!(t.covered_first(1), Some(100));
    // The first segment (3 launches of 10 us) took 60 us: 20 us each.
    t.drain_through(1, Some(60_000));
    assert_eq!((t.estimate(1, 0), t.estimate(2, 0)), (20_000, 20_000));
    assert_eq!((t.samples(1), t.samples(2)), (1, 1));
    // Later launches are still pending, unmeasured, at their estimates.
    assert_eq!((t.samples(3), t.samples(4)), (0, 0));
    assert_eq!(t.sealed_len(), 1);
    assert_eq!(t.first_pending(), Some(120));
    assert_eq!(t.queued_ns(), 20_000);
    assert!(t.measured());
    // The mean is the measured launches' (3 calls of 20 us).
    assert_eq!(t.mean_launch_ns(50_000), 20_000);
    // The next mark measures exactly kernel 3.
    t.drain_through(2, Some(35_000));
    assert_eq!(t.estimate(3, 0), 35_000);
    assert_eq!(t.samples(4), 0);
    assert_eq!(t.queued_ns(), 10_000, "the open segment");
}

#[test]
fn a_lost_mark_done_is_covered_by_the_next_as_one_measurement() {
    let mut t = three_segments();
    // Mark 1's completion never came; mark 2's covers both segments: 4
    // launches of 10 us took 80 us together.
    assert_eq!(t.covered_first(2), Some(100));
    t.drain_through(2, Some(80_000));
    for f in 1..=3 {
        assert_eq!((t.estimate(f, 0), t.samples(f)), (20_000, 1), "kernel {f}");
    }
    assert_eq!(t.sealed_len(), 0);
    assert_eq!(t.samples(4), 0);
    assert_eq!(t.first_pending(), Some(130));
    // A completion beyond every sealed mark never takes the open segment.
    let mut t = three_segments();
    t.drain_through(u64::MAX, Some(80_000));
    assert_eq!(t.samples(4), 0);
    assert_eq!(t.queued_ns(), 10_000);
}

#[test]
fn a_mark_that_covers_nothing_changes_nothing() {
    let mut t = three_segments();
    let before = format!("{t:?}");
    // Seq 0: before every sealed mark (stale, or its MARK was lost).
    assert_eq!(t.covered_first(0), None);
    t.drain_through(0, Some(1_000_000));
    assert_eq!(format!("{t:?}"), before);
    // A mark that does not rise is ignored: its launches stay open.
    t.seal(2);
    assert_eq!(t.sealed_len(), 2);
    // A mark with nothing launched before it keeps no segment.
    let mut e = KernelTable::default();
    e.seal(1);
    assert_eq!((e.sealed_len(), e.covered_first(1)), (0, None));
}

#[test]
fn a_sync_drains_sealed_segments_and_the_open_one_together() {
    let mut t = three_segments();
    // 5 launches of 10 us took 100 us: everything measured at once.
    t.drain(Some(100_000));
    for f in 1..=4 {
        assert_eq!((t.estimate(f, 0), t.samples(f)), (20_000, 1), "kernel {f}");
    }
    assert_eq!(
        (t.sealed_len(), t.first_pending(), t.queued_ns()),
        (0, None, 0)
    );
    // A late completion of a mark the sync drained covers nothing.
    assert_eq!(t.covered_first(2), None);
}

#[test]
fn the_sealed_queue_is_bounded_and_drops_the_oldest_unmeasured() {
    let mut t = KernelTable::default();
    for seq in 1..=(MAX_SEALED_SEGMENTS as u64 + 1) {
        t.launch(seq, seq, 1, 10_000);
        t.seal(seq);
    }
    assert_eq!(t.sealed_len(), MAX_SEALED_SEGMENTS);
    // Segment 1 was dropped: its completion covers nothing ...
    assert_eq!(t.covered_first(1), None);
    assert_eq!(t.first_pending(), Some(2));
    // ... and the next measurement, which would include its GPU time, is
    // not taken; the one after it is.
    assert!(!t.drain_through(2, Some(1_000_000)));
    assert_eq!((t.samples(2), t.estimate(2, 0)), (0, 10_000));
    assert!(t.drain_through(3, Some(30_000)));
    assert_eq!((t.samples(3), t.estimate(3, 0)), (1, 30_000));
    // The (kernel, count) entries are bounded too: segments of 1000
    // distinct kernels each.
    let mut t = KernelTable::default();
    for seq in 1..=3u64 {
        for f in 0..1_000 {
            t.launch(seq, f, 1, 10_000);
        }
        t.seal(seq);
    }
    assert_eq!(t.sealed_len(), MAX_SEALED_ITEMS / 1_000);
    assert!(t.items.len() <= MAX_SEALED_ITEMS);
    assert_eq!(t.covered_first(1), None, "the oldest was dropped");
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
