//! Backlog and learning: estimates added at launches, measured at syncs and completion marks (`scheduler.rs`, `client.rs`, `estimate.rs`).

use super::*;

// ---- backlog and learning ----

#[test]
fn backlog_adds_estimates_after_the_later_of_now_and_busy_until() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 7);
    // Three launches at once: 3 x 50 us queued.
    h.launch(T0, 1, 10);
    h.launch(T0, 1, 10);
    h.launch(T0, 1, 10);
    assert_eq!(h.client(1).backlog_ns, 150 * US);
    // 100 us later: 50 us left; a launch adds after busy_until.
    h.launch(T0 + 100 * US, 1, 10);
    assert_eq!(h.client(1).backlog_ns, 100 * US);
    // After it drained, a launch starts from now.
    h.launch(T0 + MS, 1, 10);
    assert_eq!(h.client(1).backlog_ns, 50 * US);
    // A sync that ended earlier than predicted clamps busy_until.
    h.launch(T0 + MS + 10 * US, 1, 10);
    h.sync(T0 + MS + 20 * US, T0 + MS + 30 * US, 1);
    assert_eq!(h.client(1).backlog_ns, 0);
}

#[test]
fn sync_end_teaches_kernel_durations() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    // 4 launches of kernel 5 took 2 ms from the first launch to the drain.
    for i in 0..4 {
        h.launch(T0 + i * US, 1, 5);
    }
    h.sync(T0 + 5 * US, T0 + 2 * MS, 1);
    assert_eq!(h.s.kernel_estimate(1, 5), Some(500 * US));
    // Unknown kernels still use the default.
    assert_eq!(h.s.kernel_estimate(1, 6), Some(50 * US));
    // The next interval starts at the first launch after the drain, not at the
    // drain: a CPU pause before it is not counted.
    let t = T0 + 10 * MS;
    h.launch(t, 1, 5);
    h.launch(t, 1, 6);
    // 500 us + 50 us estimated took 1.1 ms: both doubled, EWMA for 5 (3/4 old).
    h.sync(t + US, t + 1_100 * US, 1);
    assert_eq!(
        h.s.kernel_estimate(1, 5),
        Some((3 * 500 * US + 1000 * US) / 4)
    );
    assert_eq!(h.s.kernel_estimate(1, 6), Some(100 * US));
}

#[test]
fn graph_launches_count_their_kernels() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.input(
        T0,
        Input::GraphLaunch {
            client: 1,
            kernels: 10,
            ts_ns: T0,
        },
    );
    assert_eq!(h.client(1).backlog_ns, 500 * US);
    h.sync(T0 + US, T0 + 3 * MS, 1);
    assert_eq!(h.s.kernel_estimate(1, GRAPH_FUNC), Some(300 * US));
    // An unknown kernel count counts as one.
    h.input(
        T0 + 10 * MS,
        Input::GraphLaunch {
            client: 1,
            kernels: 0,
            ts_ns: T0 + 10 * MS,
        },
    );
    assert_eq!(h.client(1).backlog_ns, 300 * US);
}

// ---- completion marks ----

fn marks(client: ClientId, every_ns: u64) -> Output {
    Output::Marks { client, every_ns }
}

/// Inference client 1 and training client 3 on GPU 1.
fn marking_pair() -> H {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 1);
    h.reg(T0, 3, Class::Training, 1);
    h
}

#[test]
fn a_completed_mark_corrects_the_backlog_upwards_and_leaves_later_launches_pending() {
    let mut h = marking_pair();
    // Four launches guessed at 50 us each, a mark after the second.
    h.launch(T0, 3, 7);
    h.launch(T0 + 10 * US, 3, 7);
    h.mark(T0 + 10 * US, 3, 1);
    h.launch(T0 + 20 * US, 3, 7);
    h.launch(T0 + 30 * US, 3, 7);
    // By the guess everything was done 200 us in; the mark completes only
    // at 5 ms: the first two launches took 2.5 ms each, and the two still
    // queued are 5 ms of work.
    let o = h.mark_done(T0 + 5 * MS, 3, 1);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(2_500 * US));
    let c = h.client(3);
    assert_eq!(c.backlog_ns, 5 * MS);
    assert_eq!(c.marks_measured, 1);
    assert!(c.measured);
    assert_eq!(o, vec![gate(3, false)], "5 ms is over the 4 ms idle budget");
    // A sync at 6 ms drains the two launches the mark left pending: they
    // are measured from the mark's completion (1 ms, 500 us each).
    h.sync(T0 + 6 * MS, T0 + 6 * MS, 3);
    assert_eq!(
        h.s.kernel_estimate(3, 7),
        Some((3 * 2_500 * US + 500 * US) / 4)
    );
    assert_eq!(h.client(3).marks_measured, 1, "a sync is not a mark");
}

#[test]
fn a_completed_mark_corrects_the_backlog_downwards() {
    let mut h = marking_pair();
    // A sync teaches 1 ms per launch.
    h.launch(T0, 3, 7);
    h.sync(T0 + MS, T0 + MS, 3);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(MS));
    let t = T0 + 2 * MS;
    for i in 0..4 {
        h.launch(t + i * 10 * US, 3, 7);
        if i == 1 {
            h.mark(t + 10 * US, 3, 1);
        }
    }
    assert_eq!(h.client(3).backlog_ns, 4 * MS - 30 * US);
    // The first two were done 200 us in: 100 us each (EWMA from 1 ms), and
    // the backlog is the two left at the new estimate, from then.
    h.mark_done(t + 200 * US, 3, 1);
    let est = (3 * MS + 100 * US) / 4;
    assert_eq!(h.s.kernel_estimate(3, 7), Some(est));
    assert_eq!(h.client(3).backlog_ns, 2 * est);
}

#[test]
fn a_mark_done_that_covers_no_sealed_segment_changes_nothing() {
    let mut h = marking_pair();
    h.launch(T0, 3, 7);
    h.launch(T0 + 10 * US, 3, 7);
    let before = h.client(3);
    // No mark was ever placed: an unknown (or stale) seq.
    assert_eq!(h.mark_done(T0 + 10 * US, 3, 1), vec![]);
    assert_eq!(h.client(3), before);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(50 * US));
    // A mark, then a completion of an older seq than it.
    h.mark(T0 + 10 * US, 3, 5);
    h.mark_done(T0 + 10 * US, 3, 4);
    assert_eq!(h.client(3), before);
    // A sync drained the sealed segment: the late completion of its mark
    // covers nothing either.
    h.sync(T0 + MS, T0 + MS, 3);
    let after_sync = h.client(3);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(500 * US));
    h.mark_done(T0 + MS, 3, 5);
    assert_eq!(h.client(3), after_sync);
    assert_eq!(after_sync.marks_measured, 0);
    // Marks of an unknown client are ignored.
    assert_eq!(h.mark(T0 + MS, 42, 1), vec![]);
    assert_eq!(h.mark_done(T0 + MS, 42, 1), vec![]);
}

#[test]
fn a_lost_mark_done_is_covered_by_the_next() {
    let mut h = marking_pair();
    h.launch(T0, 3, 7);
    h.mark(T0, 3, 1);
    h.launch(T0 + 10 * US, 3, 8);
    h.mark(T0 + 10 * US, 3, 2);
    h.launch(T0 + 20 * US, 3, 9);
    // MARK_DONE 1 was lost; 2 says both segments were done by 400 us: one
    // measurement, split by the estimates (equal: 200 us each).
    h.mark_done(T0 + 400 * US, 3, 2);
    assert_eq!(h.s.kernel_estimate(3, 7), Some(200 * US));
    assert_eq!(h.s.kernel_estimate(3, 8), Some(200 * US));
    assert_eq!(h.s.kernel_estimate(3, 9), Some(50 * US), "still pending");
    let c = h.client(3);
    assert_eq!(c.marks_measured, 1);
    assert_eq!(c.backlog_ns, 50 * US);
}

#[test]
fn marks_are_asked_of_training_clients_only_and_only_changes_are_emitted() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Inference, 1);
    assert_eq!(h.marks, vec![], "inference: 0, as a fresh block holds");
    h.reg(T0, 3, Class::Training, 1);
    assert_eq!(h.marks, vec![marks(3, 500 * US)]);
    assert_eq!(h.client(3).mark_every_ns, 500 * US);
    // Registered again (a Device), same class: nothing new.
    h.reg(T0, 3, Class::Training, 2);
    h.input(
        T0,
        Input::SetClass {
            client: 3,
            class: Class::Training,
        },
    );
    assert_eq!(h.marks.len(), 1);
    // Class changes flip it.
    for (class, want) in [(Class::Training, 500 * US), (Class::Inference, 0)] {
        h.input(T0, Input::SetClass { client: 1, class });
        assert_eq!(h.marks.last(), Some(&marks(1, want)));
    }
    assert_eq!(h.marks.len(), 3);
    // Reconfiguration: a new interval, none, and disabled.
    let mut out = Vec::new();
    let every = |ns| SchedConfig {
        mark_every_ns: ns,
        ..SchedConfig::default()
    };
    h.s.reconfigure(every(MS), &mut out);
    h.s.reconfigure(every(MS), &mut out);
    h.s.reconfigure(every(0), &mut out);
    h.s.reconfigure(every(500 * US), &mut out);
    h.s.reconfigure(
        SchedConfig {
            enabled: false,
            ..SchedConfig::default()
        },
        &mut out,
    );
    let emitted: Vec<Output> = out
        .into_iter()
        .filter(|o| matches!(o, Output::Marks { .. }))
        .collect();
    assert_eq!(
        emitted,
        vec![marks(3, MS), marks(3, 0), marks(3, 500 * US), marks(3, 0)]
    );
    // Disabled from the start: a training client is asked for none.
    let mut d = H::new(SchedConfig {
        enabled: false,
        ..SchedConfig::default()
    });
    d.reg(T0, 3, Class::Training, 1);
    assert_eq!(d.marks, vec![]);
    // Nothing is emitted for a departing client.
    h.input(T0, Input::Depart { client: 3 });
    assert_eq!(h.marks.len(), 3);
}
