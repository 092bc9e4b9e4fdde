//! The grant: the scheduler's outputs written into the clients' control
//! blocks and estimate tables, the only place tandemd changes what a shim may
//! do. Estimates, local in-flight budgets ([`tandem_proto::inflight`]), mark
//! intervals and launch limits are stored first (so a gate that opens finds
//! its limit in place), then gate changes ([`apply`]). The local budgets and
//! the estimates are what a training shim bounds its own queued work with,
//! reacting to the GPU board without tandemd; the gates and launch limits
//! are tandemd's own, slower, line behind it.
//!
//! ## Launch limits
//!
//! The scheduler's per-client [`Allowance`]s become the
//! absolute `launch_limit` each shim enforces itself (see "Launch limits" in
//! [`crate::sched`]).
//!
//! For each client the table keeps the allowance the scheduler last emitted
//! and the client's launch counter (`launches` in its control block) as read
//! just before its ring was drained into the scheduler. The limit stored is
//! `launches + allowance` (0, unlimited, for [`Allowance::Unlimited`]), and it
//! is stored again whenever either changes. Reading the counter *before* the
//! drain means every launch it counts has been started before the records
//! the scheduler then sees were read: launches the counter has seen and the
//! scheduler has not (at most one per thread inside the driver call) are
//! charged to the allowance, and those the scheduler saw beyond the counter
//! only make the allowance smaller. The stored limit is never below the
//! counter as read (the allowance is never negative); it is lowered when the
//! allowance shrinks, taking back allowance not yet used.
//!
//! Storing a raised limit advances the gate word and wakes the client's
//! waiters ([`ControlBlock::set_launch_limit`]); a lowered one is a plain
//! store. The counter is the client's claim: a client that misreports it
//! only changes its own limit (the shim enforcing it is the client's own
//! code anyway).
//!
//! A limit of 0 launches beyond a counter of 0 would be stored as 0, which
//! the shim reads as unlimited; the allowance is 0 only while the client's
//! gate is closed, and the closed gate holds the launch then.

use std::collections::BTreeMap;

use tandem_proto::control::LAUNCH_UNLIMITED;
use tandem_proto::ControlBlock;
use tracing::debug;

use tandem_proto::estimates::EstimateTable;
use tandem_proto::inflight::Budgets;

use crate::sched::{Allowance, LocalBudget, Output};

/// What tandem over MPS makes of an output for a client that joined MPS at
/// low priority with an in-flight bound of `inflight` ns (0: none): gates
/// stay open, launch limits are lifted, and the local bound is `inflight`
/// whatever inference does (its priority, not the bound, keeps inference
/// first; the GPU-sharing model's matrix: gates and limits there cost
/// training up to half its throughput for no p99 gain). With no bound the
/// budgets are zero (unbounded) but the hold period and default charge
/// still reach the client: the SM reservation's "inference active" and
/// its minimum estimate need them.
pub fn mps_adjust(o: &mut Output, inflight: u64) {
    match o {
        Output::Gate { open, .. } => *open = true,
        Output::Limit { beyond, .. } => *beyond = Allowance::Unlimited,
        Output::Budget { budget, .. } => {
            *budget = budget.map(|b| LocalBudget {
                idle_ns: inflight,
                active_ns: inflight,
                ..b
            });
        }
        Output::Marks { .. } | Output::Estimate { .. } => {}
    }
}

/// The control block's form of a local bound (`None`: zeros, no bound).
#[must_use]
pub fn budgets_of(b: Option<LocalBudget>) -> Budgets {
    b.map_or(Budgets::default(), |b| Budgets {
        idle_ns: b.idle_ns,
        active_ns: b.active_ns,
        default_est_ns: b.default_est_ns,
        hold_ns: b.hold_ns,
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    allowance: Allowance,
    /// The client's `launches` as read before its last drain.
    launches: u64,
    /// What we last stored (`None`: nothing yet; the block starts unlimited).
    stored: Option<u64>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            allowance: Allowance::Unlimited,
            launches: 0,
            stored: None,
        }
    }
}

/// Every client's allowance and counter; see the module docs.
#[derive(Debug, Default)]
pub struct Limits {
    by_client: BTreeMap<u64, Entry>,
}

/// The absolute limit for a counter of `launches` and `allowance`.
#[must_use]
pub fn limit_of(launches: u64, allowance: Allowance) -> u64 {
    match allowance {
        Allowance::Unlimited => LAUNCH_UNLIMITED,
        Allowance::Launches(n) => launches.saturating_add(n),
    }
}

impl Limits {
    /// Client `id`'s counter as read now: call just before draining its ring.
    pub fn observe(&mut self, id: u64, cb: &ControlBlock) {
        self.by_client.entry(id).or_default().launches = cb.launches();
    }

    /// The scheduler's new allowance for `id`.
    pub fn set(&mut self, id: u64, allowance: Allowance) {
        self.by_client.entry(id).or_default().allowance = allowance;
    }

    /// `id` left.
    pub fn forget(&mut self, id: u64) {
        self.by_client.remove(&id);
    }

    /// The limit `id` should have now (`None`: not tracked).
    #[must_use]
    pub fn limit(&self, id: u64) -> Option<u64> {
        self.by_client
            .get(&id)
            .map(|e| limit_of(e.launches, e.allowance))
    }

    /// Store every limit that changed into its client's control block
    /// (`control` finds it; `None`: the client has no ring, skip). Returns
    /// how many stores raised a limit (and woke the client's waiters).
    pub fn store<'a>(&mut self, mut control: impl FnMut(u64) -> Option<&'a ControlBlock>) -> usize {
        let mut raised = 0;
        for (&id, e) in &mut self.by_client {
            let limit = limit_of(e.launches, e.allowance);
            if e.stored == Some(limit) || (e.stored.is_none() && limit == LAUNCH_UNLIMITED) {
                continue;
            }
            let Some(cb) = control(id) else { continue };
            e.stored = Some(limit);
            match cb.set_launch_limit(limit) {
                Ok(true) => raised += 1,
                Ok(false) => {}
                Err(err) => debug!(
                    client = id,
                    "FUTEX_WAKE after raising the launch limit failed: {err}"
                ),
            }
        }
        raised
    }
}

/// Apply the scheduler's outputs in `out` (drained) to the clients' control
/// blocks (`control` finds one; `None`: the client has no ring, skip) and
/// estimate tables (`estimates`): estimates, local budgets, mark intervals
/// and launch limits first (so a gate that opens finds its limit in place),
/// then gate changes. Returns how many gates it opened.
pub fn apply<'a>(
    out: &mut Vec<Output>,
    limits: &mut Limits,
    control: impl Fn(u64) -> Option<&'a ControlBlock>,
    estimates: impl Fn(u64) -> Option<&'a EstimateTable>,
    mps_inflight: impl Fn(u64) -> Option<u64>,
) -> usize {
    for o in out.iter_mut() {
        // Tandem over MPS: a training client that joined at low priority is
        // never held by a gate or a launch limit; its local bound is
        // `[mps] training_inflight_ns`, idle and active alike.
        if let Some(inflight) = o.client().and_then(&mps_inflight) {
            mps_adjust(o, inflight);
        }
    }
    for o in out.iter() {
        match *o {
            Output::Limit { client, beyond } => limits.set(client, beyond),
            Output::Marks { client, every_ns } => {
                if let Some(cb) = control(client) {
                    cb.set_mark_every_ns(every_ns);
                }
            }
            Output::Budget { client, budget } => {
                if let Some(cb) = control(client) {
                    cb.set_budgets(budgets_of(budget));
                }
            }
            Output::Estimate { client, key, ns } => {
                if let (Some(t), Ok(key)) = (estimates(client), u32::try_from(key)) {
                    // A full probe window leaves the key to the default charge.
                    let _ = t.publish(key, ns);
                }
            }
            Output::Gate { .. } => {}
        }
    }
    limits.store(&control);
    let mut opened = 0;
    for o in out.drain(..) {
        let Output::Gate { client, open } = o else {
            continue;
        };
        let Some(cb) = control(client) else {
            continue;
        };
        if open {
            opened += 1;
            if let Err(e) = cb.open_gate() {
                debug!(client, "FUTEX_WAKE after opening the gate failed: {e}");
            }
        } else {
            cb.close_gate();
        }
    }
    opened
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_proto::ring::control_block;
    use tandem_proto::{Consumer, Mapping, RingLayout};

    #[test]
    fn over_mps_training_is_bounded_by_its_inflight_alone_and_keeps_its_hold() {
        let adjusted = |inflight| {
            let mut o = Output::Budget {
                client: 1,
                budget: Some(LocalBudget {
                    idle_ns: 4_000_000,
                    active_ns: 500_000,
                    default_est_ns: 50_000,
                    hold_ns: 1_000_000,
                }),
            };
            mps_adjust(&mut o, inflight);
            let Output::Budget {
                budget: Some(got), ..
            } = o
            else {
                panic!("{o:?}")
            };
            got
        };
        let got = adjusted(2_000_000);
        assert_eq!(
            (got.idle_ns, got.active_ns, got.hold_ns),
            (2_000_000, 2_000_000, 1_000_000)
        );
        let cb = budgets_of(Some(adjusted(0)));
        assert!(!cb.bounded(), "no in-flight bound: {cb:?}");
        assert_eq!(cb.hold_ns, 1_000_000, "the hold still reaches the shim");
        let mut gate = Output::Gate {
            client: 1,
            open: false,
        };
        mps_adjust(&mut gate, 0);
        assert_eq!(
            gate,
            Output::Gate {
                client: 1,
                open: true
            }
        );
    }

    #[test]
    fn limits_follow_the_counter_and_the_allowance() {
        let layout = RingLayout::new(16).unwrap();
        let m = Mapping::anonymous_shared(layout.region_len()).unwrap();
        let _c = Consumer::init(&m, layout, 7).unwrap();
        let cb = control_block(&m, layout).unwrap();
        let mut l = Limits::default();
        // Unlimited and never stored: nothing is written.
        l.observe(7, cb);
        assert_eq!(l.store(|_| Some(cb)), 0);
        assert_eq!(cb.launch_limit(), LAUNCH_UNLIMITED);
        // 3 launches started, 2 more allowed: limit 5.
        for _ in 0..3 {
            cb.count_launch();
        }
        l.observe(7, cb);
        l.set(7, Allowance::Launches(2));
        assert_eq!(l.store(|_| Some(cb)), 0, "unlimited -> 5 is no raise");
        assert_eq!(cb.launch_limit(), 5);
        assert_eq!(l.limit(7), Some(5));
        // The client used them; read again with the same allowance: raised.
        cb.count_launch();
        cb.count_launch();
        assert!(!cb.launch_allowed());
        l.observe(7, cb);
        assert_eq!(l.store(|_| Some(cb)), 1);
        assert_eq!(cb.launch_limit(), 7);
        assert!(cb.launch_allowed());
        // Unchanged: no store, no wake.
        assert_eq!(l.store(|_| Some(cb)), 0);
        // The gate closes: allowance 0 takes back what is unused, never what
        // was counted.
        l.set(7, Allowance::Launches(0));
        assert_eq!(l.store(|_| Some(cb)), 0);
        assert_eq!(cb.launch_limit(), 5);
        assert!(!cb.launch_allowed());
        l.set(7, Allowance::Unlimited);
        assert_eq!(l.store(|_| Some(cb)), 1, "lifting wakes");
        assert_eq!(cb.launch_limit(), LAUNCH_UNLIMITED);
        // A client without a ring is skipped; a forgotten one is gone.
        l.set(8, Allowance::Launches(1));
        assert_eq!(l.store(|id| (id == 7).then_some(cb)), 0);
        l.forget(8);
        assert_eq!(l.limit(8), None);
        assert_eq!(limit_of(u64::MAX, Allowance::Launches(9)), u64::MAX);
    }
}
