//! Launch limits and local bounds, with the estimates they charge (`local.rs`, `gates.rs`).

use super::*;

// ---- launch limits ----

fn limit(client: ClientId, beyond: Allowance) -> Output {
    Output::Limit { client, beyond }
}

#[test]
fn allowance_is_the_room_in_mean_launches_rounded_up() {
    assert_eq!(allowance_for(4 * MS, 0, 50 * US), Allowance::Launches(80));
    assert_eq!(allowance_for(4 * MS, 1, 50 * US), Allowance::Launches(80));
    assert_eq!(
        allowance_for(4 * MS, 50 * US + 1, 50 * US),
        Allowance::Launches(79)
    );
    // Under one launch of room still allows one (the gate is open) ...
    assert_eq!(
        allowance_for(4 * MS, 4 * MS - 1, 5 * MS),
        Allowance::Launches(1)
    );
    // ... none at or over the budget (the gate is closed).
    assert_eq!(
        allowance_for(4 * MS, 4 * MS, 50 * US),
        Allowance::Launches(0)
    );
    assert_eq!(allowance_for(0, 0, 50 * US), Allowance::Launches(0));
    assert_eq!(allowance_for(4 * MS, 9 * MS, 0), Allowance::Launches(0));
}

#[test]
fn training_beside_inference_gets_an_allowance_that_shrinks_as_it_launches() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    assert!(
        h.limits.is_empty(),
        "alone on its GPU: unlimited, nothing emitted"
    );
    h.reg(T0, 9, Class::Inference, 0);
    // Nothing measured yet: one launch at a time.
    assert_eq!(h.limits, vec![limit(1, Allowance::Launches(1))]);
    assert_eq!(h.client(9).allowance, Allowance::Unlimited);
    assert!(h.launch(T0, 1, 99).is_empty());
    assert_eq!(h.client(1).allowance, Allowance::Launches(1));
    // A sync measures it at 50 us: the idle budget, 4 ms, is 80 launches.
    h.sync(T0, T0 + 50 * US, 1);
    assert_eq!(h.limits.last(), Some(&limit(1, Allowance::Launches(80))));
    let t = T0 + 50 * US;
    h.limits.clear();
    h.launch(t, 1, 99);
    assert_eq!(h.limits, vec![limit(1, Allowance::Launches(79))]);
    // Filling the budget takes the allowance to 0 exactly as the gate closes.
    assert_eq!(fill(&mut h, t, 1), 79);
    assert_eq!(h.client(1).allowance, Allowance::Launches(0));
    assert_eq!(h.limits.last(), Some(&limit(1, Allowance::Launches(0))));
    // Reopening grants again, limit before gate.
    h.limits.clear();
    h.s.tick(t + 1, &mut h.out);
    assert_eq!(
        std::mem::take(&mut h.out),
        vec![limit(1, Allowance::Launches(1)), gate(1, true)]
    );
}

#[test]
fn queued_inference_work_takes_the_allowance_to_zero_and_departure_lifts_it() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 0);
    h.reg(T0, 2, Class::Inference, 0);
    h.limits.clear();
    assert_eq!(h.launch(T0, 2, 1), vec![gate(1, false)]);
    assert_eq!(h.limits, vec![limit(1, Allowance::Launches(0))]);
    // The inference job leaves: nothing to protect, no limit.
    h.limits.clear();
    assert_eq!(
        h.input(T0 + US, Input::Depart { client: 2 }),
        vec![gate(1, true)]
    );
    assert_eq!(h.limits, vec![limit(1, Allowance::Unlimited)]);
}

#[test]
fn the_allowance_counts_in_the_clients_mean_launch_and_a_graph_is_one_launch() {
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    // One launch, measured by a sync at 1 ms: the mean is 1 ms at once (not
    // an average with the 50 us default it was launched with).
    h.launch(T0, 1, 7);
    h.sync(T0, T0 + MS, 1);
    assert_eq!(h.client(1).mean_launch_ns, MS);
    let t = T0 + 2 * MS;
    h.launch(t, 1, 7);
    // Backlog 1 ms: 3 ms of room is 3 launches.
    let c = h.client(1);
    assert_eq!(c.backlog_ns, MS);
    assert_eq!(c.mean_launch_ns, MS);
    assert_eq!(c.allowance, Allowance::Launches(3));
    // A graph of 8 of the default kernels is one launch of 400 us.
    h.input(
        t,
        Input::GraphLaunch {
            client: 1,
            kernels: 8,
            ts_ns: t,
        },
    );
    let c = h.client(1);
    let mean = (7 * MS + 400 * US) / 8;
    assert_eq!(c.mean_launch_ns, mean);
    assert_eq!(c.backlog_ns, 1_400 * US);
    // 2.6 ms of room at 925 us a launch: 2.8, rounded up.
    assert_eq!(c.allowance, Allowance::Launches(3));
    assert_eq!(c.allowance, allowance_for(4 * MS, c.backlog_ns, mean));
}

#[test]
fn disabled_and_inference_are_never_limited() {
    let mut h = H::new(SchedConfig {
        enabled: false,
        ..SchedConfig::default()
    });
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    for _ in 0..200 {
        h.launch(T0, 1, 99);
        h.launch(T0, 9, 98);
    }
    assert!(h.limits.is_empty(), "{:?}", h.limits);
    // Training set to inference while limited: the limit is lifted.
    let mut h = H::default();
    h.reg(T0, 9, Class::Inference, 0);
    h.reg(T0, 1, Class::Training, 0);
    h.limits.clear();
    h.input(
        T0,
        Input::SetClass {
            client: 1,
            class: Class::Inference,
        },
    );
    assert_eq!(h.limits, vec![limit(1, Allowance::Unlimited)]);
}

// ---- scheduler v2: local bounds, estimates, activity hold ----

fn budgets_of(h: &H, client: ClientId) -> Vec<Option<LocalBudget>> {
    h.locals
        .iter()
        .filter_map(|o| match *o {
            Output::Budget { client: c, budget } if c == client => Some(budget),
            _ => None,
        })
        .collect()
}

fn estimates_of(h: &H, client: ClientId) -> Vec<(u64, u64)> {
    h.locals
        .iter()
        .filter_map(|o| match *o {
            Output::Estimate { client: c, key, ns } if c == client => Some((key, ns)),
            _ => None,
        })
        .collect()
}

#[test]
fn training_beside_inference_gets_a_local_bound_shared_among_trainers_and_serial_until_measured() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 7);
    assert!(
        budgets_of(&h, 1).is_empty(),
        "no inference on its GPU: no bound (a fresh block has none)"
    );
    h.reg(T0, 2, Class::Inference, 7);
    let cfg = SchedConfig::default();
    assert_eq!(
        budgets_of(&h, 1),
        vec![Some(LocalBudget {
            idle_ns: 1,
            active_ns: 1,
            default_est_ns: cfg.default_kernel_ns,
            hold_ns: cfg.request_hold_ns,
        })],
        "unmeasured: one launch at a time"
    );
    assert!(budgets_of(&h, 2).is_empty(), "inference is never bounded");
    // A sync measures its launches: the budgets become the GPU's.
    h.launch(T0 + 10 * US, 1, 5);
    h.sync(T0 + 20 * US, T0 + 2 * MS, 1);
    let b = budgets_of(&h, 1).last().copied().flatten().unwrap();
    assert_eq!(
        (b.idle_ns, b.active_ns),
        (cfg.idle_budget_ns, cfg.active_budget_ns)
    );
    assert!(b.default_est_ns > cfg.default_kernel_ns, "{b:?}");
    // A second trainer on the GPU halves each share.
    h.reg(T0 + 3 * MS, 3, Class::Training, 7);
    let b = budgets_of(&h, 1).last().copied().flatten().unwrap();
    assert_eq!(
        (b.idle_ns, b.active_ns),
        (cfg.idle_budget_ns / 2, cfg.active_budget_ns / 2)
    );
    // The inference job leaves: no bound again.
    h.input(T0 + 4 * MS, Input::Depart { client: 2 });
    assert_eq!(budgets_of(&h, 1).last().copied(), Some(None));
    assert_eq!(budgets_of(&h, 3).last().copied(), Some(None));
}

#[test]
fn measurements_publish_estimates_per_kernel_key_once_they_move_by_an_eighth() {
    let mut h = H::default();
    h.reg(T0, 1, Class::Training, 7);
    // Two keys (one function at two grids, as the drain keys them): 1 ms and
    // 3 ms of GPU time, learned from separate syncs.
    let (small, big) = (0xA1, 0xB2);
    h.launch(T0, 1, small);
    h.sync(T0 + 1, T0 + MS, 1);
    h.launch(T0 + 2 * MS, 1, big);
    h.sync(T0 + 2 * MS + 1, T0 + 5 * MS, 1);
    let e = estimates_of(&h, 1);
    assert!(e.contains(&(small, MS)), "{e:?}");
    assert!(e.contains(&(big, 3 * MS)), "{e:?}");
    // The same measurement again moves nothing: nothing new is published.
    let n = e.len();
    h.launch(T0 + 6 * MS, 1, small);
    h.sync(T0 + 6 * MS + 1, T0 + 7 * MS, 1);
    assert_eq!(estimates_of(&h, 1).len(), n);
    // Twice as long: the EWMA moves by a quarter, published.
    h.launch(T0 + 8 * MS, 1, small);
    h.sync(T0 + 8 * MS + 1, T0 + 10 * MS, 1);
    let last = *estimates_of(&h, 1).last().unwrap();
    assert_eq!(last, (small, (3 * MS + 2 * MS) / 4));
}

#[test]
fn an_inference_job_launching_back_to_back_stays_active_without_an_idle_gap() {
    // Requests every 1 ms with no idle gap of 2 ms: implicit request
    // detection never begins a second request, yet every launch keeps the
    // GPU active for the hold after it.
    let cfg = SchedConfig {
        request_hold_ns: 300 * US,
        ..SchedConfig::default()
    };
    let mut h = H::new(cfg);
    h.reg(T0, 1, Class::Training, 7);
    h.reg(T0, 2, Class::Inference, 7);
    let mut t = T0 + 10 * MS;
    for _ in 0..20 {
        h.launch(t, 2, 9);
        h.sync(t + 50 * US, t + 100 * US, 2);
        t += 250 * US;
        h.tick(t);
        assert!(h.gpu(7).inference_active, "at {t}: within the hold");
    }
    // Idle for longer than the hold (and the work drained): inactive.
    h.tick(t + 2 * MS);
    assert!(!h.gpu(7).inference_active);
}

#[test]
fn no_local_bound_without_completion_marks() {
    // The shim sees its work complete only through marks: a bound it could
    // never see drain would only make it wait out its 50 ms each launch.
    let mut h = H::new(SchedConfig {
        mark_every_ns: 0,
        ..SchedConfig::default()
    });
    h.reg(T0, 1, Class::Training, 7);
    h.reg(T0, 2, Class::Inference, 7);
    h.launch(T0 + 10 * US, 1, 5);
    h.sync(T0 + 20 * US, T0 + 2 * MS, 1);
    assert!(budgets_of(&h, 1).is_empty(), "{:?}", h.locals);
    assert_eq!(h.client(1).budget, None);
}
