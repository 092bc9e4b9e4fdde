//! Gates: when training may launch on each GPU (`gates.rs`).

use super::*;

// ---- gates ----

#[test]
fn training_alone_on_a_gpu_is_never_gated() {
    // No inference client on the GPU: nothing to protect, whatever the backlog
    // estimate says (a job that never syncs never corrects its estimates).
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    for _ in 0..1000 {
        assert!(h.launch(T0, 1, 99).is_empty(), "training alone was gated");
    }
    assert!(h.client(1).gate_open);
    assert!(
        h.client(1).backlog_ns > 4 * MS,
        "the backlog is still estimated"
    );
    // An inference client arriving on that GPU brings the budget back at once.
    assert_eq!(h.reg(T0, 2, Class::Inference, 0), vec![gate(1, false)]);
}

#[test]
fn one_training_client_keeps_the_idle_budget_queued_and_reopens_on_tick() {
    let mut h = H::default();
    // An idle inference client on the GPU: the idle budget applies.
    h.reg(T0, 9, Class::Inference, 0);
    assert!(
        h.reg(T0, 1, Class::Training, 0).is_empty(),
        "new gates start open"
    );
    // 4 ms / 50 us = 80 launches fill the idle budget.
    assert_eq!(fill(&mut h, T0, 1), 80);
    assert!(!h.client(1).gate_open);
    // The gate reopens once the backlog is under 4 ms: 1 ns later.
    let (o, next) = h.tick(T0);
    assert!(o.is_empty());
    assert_eq!(next, Some(T0 + 1));
    let (o, next) = h.tick(T0 + 1);
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(next, None, "no gate closed, no tick wanted");
}

#[test]
fn an_active_request_shrinks_the_budget_and_its_end_restores_it() {
    // The hold this test's times were written for (the default is 1 ms).
    let mut h = H::v1_with(SchedConfig {
        request_hold_ns: 200 * US,
        ..SchedConfig::default()
    });
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    // 1 ms of training queued: under the idle budget.
    for _ in 0..20 {
        assert!(h.launch(T0, 1, 99).is_empty());
    }
    // An inference request begins: 1 ms >= 500 us, training's gate closes.
    assert_eq!(h.launch(T0, 2, 5), vec![gate(1, false)]);
    assert!(h.gpu(0).inference_active);
    assert_eq!(h.gpu(0).training_budget_ns, 500 * US);
    // The gate opens when the backlog falls under 500 us: at T0 + 500 us + 1.
    let (o, next) = h.tick(T0 + 400 * US);
    assert!(o.is_empty());
    assert_eq!(next, Some(T0 + 500 * US + 1));
    let (o, _) = h.tick(T0 + 500 * US + 1);
    assert_eq!(o, vec![gate(1, true)]);
    // Training refills to the active budget only.
    let t = T0 + 500 * US + 1;
    assert_eq!(h.launch(t, 1, 99), vec![gate(1, false)]);
    // The request ends; during the hold the budget stays small.
    // 550 - 100 = 450 us of backlog is under 500: open again; refill.
    let o = h.sync(t + US, t + 100 * US, 2);
    assert_eq!(o, vec![gate(1, true)]);
    assert!(h.gpu(0).inference_active);
    let t2 = t + 100 * US;
    assert_eq!(fill(&mut h, t2, 1), 2);
    // The backlog falls under the active budget 50 us later: that is the tick.
    let (_, next) = h.tick(t2);
    assert_eq!(next, Some(t2 + 50 * US));
    let (o, _) = h.tick(t2 + 50 * US);
    assert_eq!(o, vec![gate(1, true)]);
    fill(&mut h, t2 + 50 * US, 1);
    // Whatever tick comes first, by the end of the hold (200 us after the
    // sync) the idle budget applies again.
    let (_, next) = h.tick(t2 + 50 * US);
    assert!(next.is_some_and(|n| n <= t2 + 200 * US));
    let (o, _) = h.tick(t2 + 200 * US);
    assert_eq!(o, vec![gate(1, true)]);
    assert!(!h.gpu(0).inference_active);
}

#[test]
fn training_waits_while_inference_work_is_queued() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    // Nothing of training's queued, but inference's 2 x 50 us are: training
    // waits for them, whatever its budget.
    assert_eq!(h.launch(T0, 2, 1), vec![gate(1, false)]);
    h.launch(T0 + 10 * US, 2, 1);
    assert_eq!(h.gpu(0).training_budget_ns, 0);
    let (o, next) = h.tick(T0 + 50 * US);
    assert!(o.is_empty());
    assert_eq!(next, Some(T0 + 100 * US));
    // Inference's work has (by estimate) drained; the request is still open
    // (no sync yet): the active budget applies.
    let (o, _) = h.tick(T0 + 100 * US);
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(h.gpu(0).training_budget_ns, 500 * US);
    assert!(h.gpu(0).inference_active);
}

#[test]
fn several_training_clients_split_the_budget() {
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Training, 0);
    assert_eq!(h.gpu(0).training_budget_ns, 2 * MS);
    assert_eq!(fill(&mut h, T0, 1), 40);
    assert_eq!(fill(&mut h, T0, 2), 40);
    // A third client shrinks both shares at once (1.33 ms each).
    let o = h.reg(T0, 3, Class::Training, 0);
    assert!(o.is_empty(), "already closed: no change to report: {o:?}");
    assert_eq!(h.gpu(0).training_budget_ns, 4 * MS / 3);
    // Client 3's own backlog is 0: open; client 1 reopens when under 1.33 ms.
    let (_, next) = h.tick(T0);
    assert_eq!(next, Some(T0 + 2 * MS - 4 * MS / 3 + 1));
    // The departure of two of them gives the last the whole budget.
    assert!(h.input(T0, Input::Depart { client: 3 }).is_empty());
    let o = h.input(T0, Input::Depart { client: 2 });
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(h.gpu(0).training_budget_ns, 4 * MS);
}

#[test]
fn gpus_are_independent() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0xA);
    h.reg(T0, 2, Class::Training, 0xB);
    h.reg(T0, 3, Class::Inference, 0xA);
    h.reg(T0, 4, Class::Inference, 0xB);
    for _ in 0..20 {
        h.launch(T0, 1, 99);
        h.launch(T0, 2, 99);
    }
    // Inference on A closes A's training gate only; B keeps its whole budget.
    assert_eq!(h.launch(T0, 3, 1), vec![gate(1, false)]);
    assert!(!h.gpu(0xB).inference_active);
    assert_eq!(h.gpu(0xB).training_budget_ns, 4 * MS);
    assert_eq!(fill(&mut h, T0, 2), 60);
}

#[test]
fn inference_gates_stay_open_and_set_class_moves_clients() {
    let mut h = H::v1();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Training, 0);
    fill(&mut h, T0, 1);
    // Promoted to inference: the gate opens at once, and the other training
    // client now has the budget alone.
    let o = h.input(
        T0,
        Input::SetClass {
            client: 1,
            class: Class::Inference,
        },
    );
    assert_eq!(o, vec![gate(1, true)]);
    assert_eq!(h.gpu(0).training_clients, 1);
    // Its queued work is inference work: the GPU is active.
    assert!(h.gpu(0).inference_active);
    for _ in 0..100 {
        assert!(h.launch(T0, 1, 99).is_empty(), "inference is never gated");
    }
    // Demoted back: its 7 ms backlog closes its gate.
    let o = h.input(
        T0,
        Input::SetClass {
            client: 1,
            class: Class::Training,
        },
    );
    assert_eq!(o, vec![gate(1, false)]);
}

#[test]
fn depart_reopens_the_others_and_emits_nothing_for_the_departed() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Training, 0);
    h.reg(T0, 3, Class::Inference, 0);
    fill(&mut h, T0, 1);
    fill(&mut h, T0, 2);
    h.launch(T0, 3, 1);
    // The last inference client leaves: nothing left to protect, both reopen.
    let o = h.input(T0, Input::Depart { client: 3 });
    assert_eq!(o, vec![gate(1, true), gate(2, true)]);
    // Client 2 leaves: client 1 is already open, nothing to report.
    assert!(h.input(T0, Input::Depart { client: 2 }).is_empty());
    assert!(h.s.snapshot().clients.iter().all(|c| c.client == 1));
    // Inputs for departed or unknown clients are ignored.
    assert!(h.launch(T0, 2, 1).is_empty());
    assert!(h.input(T0, Input::Depart { client: 42 }).is_empty());
}

#[test]
fn disabled_never_closes_a_gate_but_still_measures() {
    let mut h = H::new(SchedConfig {
        enabled: false,
        ..SchedConfig::default()
    });
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    h.launch(T0, 2, 1);
    for _ in 0..1000 {
        assert!(h.launch(T0, 1, 99).is_empty());
    }
    assert_eq!(h.client(1).backlog_ns, 50 * MS);
    h.sync(T0 + US, T0 + 300 * US, 2);
    assert_eq!(h.client(2).requests, 1);
    assert_eq!(h.tick(T0 + MS).1, None);
}

#[test]
fn clients_beyond_the_bound_are_not_tracked_and_never_gated() {
    let mut h = H::default();
    for id in 0..MAX_CLIENTS as u64 {
        h.reg(T0, id, Class::Inference, id % 64);
    }
    h.reg(T0, u64::MAX, Class::Training, 0);
    for _ in 0..1000 {
        assert!(h.launch(T0, u64::MAX, 1).is_empty());
    }
    assert_eq!(h.s.snapshot().clients.len(), MAX_CLIENTS);
}

#[test]
fn a_training_client_of_unknown_gpu_is_held_while_inference_runs_anywhere() {
    let mut h = H::default();
    // Inference on a known GPU; a trainer registers before its device report.
    h.reg(T0, 1, Class::Inference, 7);
    h.reg(T0, 2, Class::Training, 0);
    // Unmeasured and possibly beside that inference: one launch at a time.
    assert_eq!(h.client(2).allowance, Allowance::Launches(1));
    h.launch(T0 + 10 * US, 2, 5);
    assert_eq!(h.client(2).allowance, Allowance::Launches(1));
    // Its device report: another GPU, with no inference on it: unlimited.
    h.reg(T0 + 20 * US, 2, Class::Training, 9);
    assert_eq!(h.client(2).allowance, Allowance::Unlimited);
    // Its device report never comes: the hold ends after the grace period.
    let t = T0 + 30 * US;
    h.reg(t, 3, Class::Training, 0);
    assert_eq!(h.client(3).allowance, Allowance::Launches(1));
    h.launch(t + UNKNOWN_GPU_GRACE_NS - US, 3, 5);
    assert_eq!(h.client(3).allowance, Allowance::Launches(1));
    h.launch(t + UNKNOWN_GPU_GRACE_NS, 3, 5);
    assert_eq!(h.client(3).allowance, Allowance::Unlimited);
}

#[test]
fn a_training_client_of_unknown_gpu_is_free_when_no_inference_runs() {
    let mut h = H::default();
    h.reg(T0, 2, Class::Training, 0);
    assert_eq!(h.client(2).allowance, Allowance::Unlimited);
    // Inference arrives (on some GPU): the unknown-GPU trainer is held.
    h.reg(T0 + MS, 1, Class::Inference, 7);
    assert_eq!(h.client(2).allowance, Allowance::Launches(1));
    // It leaves again: nothing to protect, released at once (no launch needed).
    h.input(T0 + 2 * MS, Input::Depart { client: 1 });
    assert_eq!(h.client(2).allowance, Allowance::Unlimited);
}
