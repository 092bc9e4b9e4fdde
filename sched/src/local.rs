//! A gated training client's own bounds, which its shim enforces between two
//! scheduler decisions: the local in-flight budget and the launch allowance.

use crate::config::SchedConfig;
use crate::output::{Allowance, LocalBudget};

/// Whether `new` differs from the bound last emitted enough to emit it:
/// any budget or hold change, or the default estimate moving by an eighth.
pub(crate) fn budget_changed(old: Option<LocalBudget>, new: Option<LocalBudget>) -> bool {
    match (old, new) {
        (Some(o), Some(n)) => {
            o.idle_ns != n.idle_ns
                || o.active_ns != n.active_ns
                || o.hold_ns != n.hold_ns
                || o.default_est_ns.abs_diff(n.default_est_ns) >= o.default_est_ns / 8
        }
        (o, n) => o != n,
    }
}

/// The local in-flight bound of one of `n` training clients on a GPU whose
/// active budget is `active_total_ns` (the SLO loop's), with launches
/// estimated at `mean_ns` on average (`measured`: a drain point has measured
/// some). Each gets its share of the idle and of the active budget (at least
/// 1 ns: then one launch at a time); until a measurement, one launch at a
/// time in both (a guess may not grant a burst).
#[must_use]
pub fn local_budget(
    cfg: &SchedConfig,
    active_total_ns: u64,
    n: u32,
    measured: bool,
    mean_ns: u64,
) -> LocalBudget {
    let share = |total: u64| (total / u64::from(n.max(1))).max(1);
    let (idle_ns, active_ns) = if measured {
        (share(cfg.idle_budget_ns), share(active_total_ns))
    } else {
        (1, 1)
    };
    LocalBudget {
        idle_ns,
        active_ns,
        default_est_ns: mean_ns,
        hold_ns: cfg.request_hold_ns,
    }
}

/// The launch allowance of a gated training client with `backlog_ns` of work
/// queued under a budget of `budget_ns`, one launch estimated at `mean_ns`:
/// `ceil((budget - backlog) / mean)`, so 0 exactly when the backlog has
/// reached the budget (the gate is closed), and the launches allowed add up
/// to less than one mean launch beyond the budget.
#[must_use]
pub fn allowance_for(budget_ns: u64, backlog_ns: u64, mean_ns: u64) -> Allowance {
    Allowance::Launches(
        budget_ns
            .saturating_sub(backlog_ns)
            .div_ceil(mean_ns.max(1)),
    )
}
