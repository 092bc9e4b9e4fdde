//! Who a job waits for: an optional observer of the engine that charges
//! each job's waiting time for SMs to the other jobs' kernels that hold
//! them (`tandem-sim predict --why`).
//!
//! The engine's state only changes at [`Gpu::submit`] and [`Gpu::advance`],
//! so between two of those calls it is constant, and the observer accounts
//! for the interval before each call with the state as it was. A job
//! *waits* over an interval when one of its kernels has blocks not yet
//! dispatched. The interval is charged to the kernels of other jobs that
//! hold SMs then, in proportion to the SMs each holds; when no other job
//! holds any but the job may not run (time-slicing: another context's
//! slice, or a context switch), to the time-slicer. Waiting behind the
//! job's own earlier blocks is charged to no one. A block's slow-down from
//! DRAM contention or interference is not waiting and is not counted.

use std::collections::HashMap;

use super::{Gpu, Ns};

/// Whom a wait is charged to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Culprit {
    /// A kernel of another job: (that job, the token its submission carried).
    Kernel(usize, u64),
    /// The time-slicer: another context's slice or a context switch.
    Timeslice,
}

/// The observer: waiting time (ns) by (waiting job, culprit), over a window.
#[derive(Clone, Debug, Default)]
pub struct Attribution {
    from: Ns,
    to: Ns,
    last: Ns,
    /// ns of waiting, by (waiting job, culprit).
    pub waits: HashMap<(usize, Culprit), f64>,
    /// ns each job waited in all, whoever it was charged to.
    pub waited: HashMap<usize, f64>,
}

impl Attribution {
    /// An observer counting waits in `[from, to)` only.
    #[must_use]
    pub fn new(from: Ns, to: Ns) -> Attribution {
        Attribution {
            from,
            to,
            ..Attribution::default()
        }
    }

    fn account(&mut self, now: Ns, gpu: &Gpu) {
        let (a, b) = (self.last.max(self.from), now.min(self.to));
        self.last = now;
        if b <= a {
            return;
        }
        let dt = (b - a) as f64;
        let kernels = || gpu.kernels.iter().flatten();
        for v in 0..gpu.clients.len() {
            if !kernels().any(|k| k.client == v && k.pending > 0) {
                continue;
            }
            *self.waited.entry(v).or_default() += dt;
            let held: u32 = kernels().filter(|k| k.client != v).map(|k| k.held).sum();
            if held > 0 {
                for k in kernels().filter(|k| k.client != v && k.held > 0) {
                    *self
                        .waits
                        .entry((v, Culprit::Kernel(k.client, k.token)))
                        .or_default() += dt * f64::from(k.held) / f64::from(held);
                }
            } else if gpu.slicer.as_ref().is_some_and(|s| !s.runs(v)) {
                *self.waits.entry((v, Culprit::Timeslice)).or_default() += dt;
            }
        }
    }
}

impl Gpu {
    /// Start charging waits to `a` (see the module docs).
    pub fn observe(&mut self, a: Attribution) {
        self.attribution = Some(Box::new(a));
    }

    /// The observer given to [`Gpu::observe`], with what it counted.
    pub fn take_attribution(&mut self) -> Option<Attribution> {
        self.attribution.take().map(|a| *a)
    }

    /// Account for the time since the last call (state unchanged since).
    pub(super) fn attribute(&mut self, now: Ns) {
        if let Some(mut a) = self.attribution.take() {
            a.account(now, self);
            self.attribution = Some(a);
        }
    }
}
