//! Who a job waits for: an optional observer of the engine
//! ([`crate::gpu::Gpu::observe`]) that charges
//! each job's waiting time for SMs to the other jobs' kernels that hold
//! them (`tandem-sim predict --why`).
//!
//! The engine's state only changes at [`crate::gpu::Gpu::submit`] and
//! [`crate::gpu::Gpu::advance`],
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

use crate::Ns;

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

    /// Accounts for `[last call, now)`, over which the engine's state was:
    /// `kernels`, each running kernel's (client, token, SMs held, blocks
    /// pending); `clients` of them; `runs(c)`, whether client `c` may run
    /// (time-slicing: holds the GPU).
    pub(crate) fn account(
        &mut self,
        now: Ns,
        kernels: &[(usize, u64, u32, bool)],
        clients: usize,
        runs: impl Fn(usize) -> bool,
    ) {
        let (a, b) = (self.last.max(self.from), now.min(self.to));
        self.last = now;
        if b <= a {
            return;
        }
        let dt = (b - a) as f64;
        for v in 0..clients {
            if !kernels.iter().any(|&(c, _, _, pending)| c == v && pending) {
                continue;
            }
            *self.waited.entry(v).or_default() += dt;
            let held: u32 = kernels.iter().filter(|k| k.0 != v).map(|k| k.2).sum();
            if held > 0 {
                for &(c, token, h, _) in kernels.iter().filter(|k| k.0 != v && k.2 > 0) {
                    *self
                        .waits
                        .entry((v, Culprit::Kernel(c, token)))
                        .or_default() += dt * f64::from(h) / f64::from(held);
                }
            } else if !runs(v) {
                *self.waits.entry((v, Culprit::Timeslice)).or_default() += dt;
            }
        }
    }
}
