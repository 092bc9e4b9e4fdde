//! The SLO loop that adapts the active budget, and the work shares (`budget.rs`, `gpu.rs`, `snapshot.rs`).

use super::*;

// ---- SLO ----

fn slo_harness(target: u64) -> H {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.input(
        T0,
        Input::Register {
            client: 2,
            class: Class::Inference,
            gpu: 0,
            slo_p99_ns: Some(target),
        },
    );
    h
}

#[test]
fn slo_above_target_shrinks_the_active_budget_down_to_its_floor() {
    let mut h = slo_harness(MS);
    let mut t = T0;
    // 99 requests do not trigger an evaluation yet.
    t = requests(&mut h, t, SLO_EVAL_EVERY - 1, 2 * MS);
    assert_eq!(h.gpu(0).active_budget_ns, 500 * US);
    t = requests(&mut h, t, 1, 2 * MS);
    assert_eq!(h.gpu(0).active_budget_ns, 350 * US);
    for _ in 0..10 {
        t = requests(&mut h, t, SLO_EVAL_EVERY, 2 * MS);
    }
    assert_eq!(h.gpu(0).active_budget_ns, 100 * US);
    let c = h.client(2);
    assert_eq!((c.slo_p99_ns, c.p99_ns), (Some(MS), Some(2 * MS)));
}

#[test]
fn slo_well_below_target_grows_the_active_budget_up_to_its_ceiling() {
    let mut h = slo_harness(10 * MS);
    let mut t = T0;
    t = requests(&mut h, t, SLO_EVAL_EVERY, MS);
    // + 10 % of (4 ms - 100 us).
    assert_eq!(h.gpu(0).active_budget_ns, 500 * US + 390 * US);
    for _ in 0..20 {
        t = requests(&mut h, t, SLO_EVAL_EVERY, MS);
    }
    assert_eq!(h.gpu(0).active_budget_ns, 4 * MS);
    // Between 0.8 x target and the target: unchanged.
    let before = h.gpu(0).active_budget_ns;
    requests(&mut h, t, SLO_EVAL_EVERY, 9 * MS);
    assert_eq!(h.gpu(0).active_budget_ns, before);
}

#[test]
fn reconfigure_keeps_estimates_and_reevaluates() {
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    fill(&mut h, T0, 1);
    let mut out = Vec::new();
    h.s.reconfigure(
        SchedConfig {
            idle_budget_ns: 8 * MS,
            ..SchedConfig::default()
        },
        &mut out,
    );
    // The limit first (one launch: no sync has measured the client yet),
    // then the gate.
    let limit = Output::Limit {
        client: 1,
        beyond: Allowance::Launches(1),
    };
    assert_eq!(out, vec![limit, gate(1, true)]);
    h.s.reconfigure(
        SchedConfig {
            enabled: false,
            ..SchedConfig::default()
        },
        &mut out,
    );
    assert_eq!(h.s.config().idle_budget_ns, 4 * MS);
}

#[test]
fn shares_count_estimated_work_per_gpu() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    for _ in 0..3 {
        h.launch(T0, 1, 99);
    }
    h.launch(T0, 2, 1);
    let c1 = h.client(1);
    assert!((c1.work_share - 0.75).abs() < 1e-9, "{c1:?}");
    let c2 = h.client(2);
    assert!((c2.train_share - 0.75).abs() < 1e-9, "{c2:?}");
    assert!((h.gpu(0).training_share - 0.75).abs() < 1e-9);
}

/// The shares are of recent work: with no event since, a snapshot two share
/// windows later counts none of it (the training that ran before a job
/// turned inference is not "recent work" forever).
#[test]
fn shares_forget_work_older_than_two_windows_without_an_event() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    for _ in 0..3 {
        h.launch(T0, 1, 99);
    }
    let at = |t: u64| h.s.snapshot_at(t).gpus[0].training_share;
    assert!((at(T0) - 1.0).abs() < 1e-9);
    assert!(
        (at(T0 + SHARE_WINDOW_NS) - 1.0).abs() < 1e-9,
        "one window on: still recent"
    );
    assert_eq!(
        at(T0 + 2 * SHARE_WINDOW_NS),
        0.0,
        "two windows on: none recent"
    );
    assert_eq!(
        h.s.snapshot_at(T0 + 2 * SHARE_WINDOW_NS).clients[0].work_share,
        0.0
    );
}
