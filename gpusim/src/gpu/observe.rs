//! The engine's side of the wait observer ([`crate::attribution`]): it is
//! given the engine's state before each change.

use super::{Gpu, Ns};
use crate::attribution::Attribution;

impl Gpu {
    /// Start charging waits to `a` ([`Attribution`]).
    pub fn observe(&mut self, a: Attribution) {
        self.attribution = Some(Box::new(a));
    }

    /// The observer given to [`Gpu::observe`], with what it counted.
    pub fn take_attribution(&mut self) -> Option<Attribution> {
        self.attribution.take().map(|a| *a)
    }

    /// Account for the time since the last call (the state unchanged since).
    pub(super) fn attribute(&mut self, now: Ns) {
        let Some(a) = self.attribution.as_deref_mut() else {
            return;
        };
        let kernels: Vec<(usize, u64, u32, bool)> = self
            .kernels
            .iter()
            .flatten()
            .map(|k| (k.client, k.token, k.held, k.pending > 0))
            .collect();
        let slicer = self.slicer.as_ref();
        a.account(now, &kernels, self.clients.len(), |c| {
            slicer.is_none_or(|s| s.runs(c))
        });
    }
}
