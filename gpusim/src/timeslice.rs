//! Plain sharing (no MPS): which context holds the GPU.
//!
//! Each process has its own context. The GPU runs one context at a time
//! ("time-slicing": NVIDIA's GPU operator and `nvidia-smi compute-policy
//! --set-timeslice` describe the mechanism; Pascal and later preempt compute
//! at instruction level, so a running kernel is stopped at the end of a
//! slice and resumed later where it stopped). The rules modelled:
//!
//! * A context that holds the GPU keeps it for one timeslice while another
//!   context has work; at the slice's end its running blocks are preempted
//!   (their remaining time is kept) and the GPU switches, which costs
//!   [`Slicer::switch_ns`] of idle GPU (saving and restoring state).
//! * A context that runs out of work yields at once: the GPU switches to a
//!   context with work (paying the switch), or idles with the last context
//!   still loaded (which then resumes without a switch cost).
//! * While no other context has work, the holder's slice is renewed: a lone
//!   job never pays for slicing.
//! * Contexts with work are served round-robin.
//!
//! This module holds the arbiter's state and its decisions; the engine
//! ([`crate::gpu`]) carries them out.

use crate::Ns;

/// What the engine must do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing changes.
    Stay,
    /// Give the GPU to this context now, without a switch (it is loaded).
    Resume(usize),
    /// Preempt the holder (if any) and switch to this context.
    SwitchTo(usize),
    /// The holder ran dry and nobody else has work: idle, keep it loaded.
    Idle,
}

/// The arbiter.
#[derive(Clone, Debug)]
pub struct Slicer {
    /// Length of one slice, ns.
    pub timeslice_ns: Ns,
    /// Idle GPU time of one context switch, ns.
    pub switch_ns: Ns,
    /// The context holding the GPU (not while switching).
    pub active: Option<usize>,
    /// The context whose state is loaded (the holder, or the last one).
    pub loaded: Option<usize>,
    /// When the holder's slice ends.
    pub slice_end: Ns,
    /// A switch in progress: (when it completes, to whom).
    pub switching: Option<(Ns, usize)>,
    /// Switches made (statistics).
    pub switches: u64,
}

impl Slicer {
    /// A fresh arbiter: nothing loaded.
    #[must_use]
    pub fn new(timeslice_ns: Ns, switch_ns: Ns) -> Slicer {
        Slicer {
            timeslice_ns,
            switch_ns,
            active: None,
            loaded: None,
            slice_end: 0,
            switching: None,
            switches: 0,
        }
    }

    /// The next context with work after `after` (round-robin), other than
    /// `after` itself.
    fn next_other(after: Option<usize>, has_work: &[bool]) -> Option<usize> {
        let n = has_work.len();
        let start = after.map_or(0, |a| a + 1);
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&c| Some(c) != after && has_work[c])
    }

    /// What to do at `now`, given which contexts have work. Called after
    /// every change; at the slice's end it preempts.
    #[must_use]
    pub fn decide(&self, now: Ns, has_work: &[bool]) -> Action {
        if self.switching.is_some() {
            return Action::Stay;
        }
        match self.active {
            None => {
                if let Some(l) = self.loaded.filter(|&l| has_work[l]) {
                    return Action::Resume(l);
                }
                match Self::next_other(self.loaded, has_work) {
                    Some(c) => Action::SwitchTo(c),
                    None => Action::Stay,
                }
            }
            Some(a) if !has_work[a] => match Self::next_other(Some(a), has_work) {
                Some(c) => Action::SwitchTo(c),
                None => Action::Idle,
            },
            Some(a) => {
                if now >= self.slice_end {
                    if let Some(c) = Self::next_other(Some(a), has_work) {
                        return Action::SwitchTo(c);
                    }
                }
                Action::Stay
            }
        }
    }

    /// The holder's slice, renewed when it ended with nobody waiting.
    pub fn renew_if_due(&mut self, now: Ns) {
        if self.active.is_some() && now >= self.slice_end {
            self.slice_end = now + self.timeslice_ns;
        }
    }

    /// Apply `Resume`.
    pub fn resume(&mut self, now: Ns, c: usize) {
        self.active = Some(c);
        self.loaded = Some(c);
        self.slice_end = now + self.timeslice_ns;
    }

    /// Apply `SwitchTo`: the GPU is idle until the returned time.
    pub fn start_switch(&mut self, now: Ns, c: usize) -> Ns {
        self.active = None;
        self.switches += 1;
        let done = now + self.switch_ns;
        self.switching = Some((done, c));
        done
    }

    /// The switch completed at `now`: `c` holds the GPU.
    pub fn finish_switch(&mut self, now: Ns) -> Option<usize> {
        let (_, c) = self.switching.take()?;
        self.resume(now, c);
        Some(c)
    }

    /// Apply `Idle`.
    pub fn idle(&mut self) {
        self.active = None;
    }

    /// Whether `c` may dispatch blocks now.
    #[must_use]
    pub fn runs(&self, c: usize) -> bool {
        self.active == Some(c)
    }

    /// The next time the arbiter itself must act (a switch completing, or
    /// the holder's slice ending while someone else waits).
    #[must_use]
    pub fn next_time(&self, has_work: &[bool]) -> Option<Ns> {
        if let Some((t, _)) = self.switching {
            return Some(t);
        }
        let a = self.active?;
        Self::next_other(Some(a), has_work).map(|_| self.slice_end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_context_never_switches_and_keeps_its_slice() {
        let mut s = Slicer::new(2_000, 100);
        assert_eq!(
            s.decide(0, &[true, false]),
            Action::SwitchTo(0),
            "nothing loaded yet"
        );
        s.resume(0, 0);
        assert_eq!(s.decide(5_000, &[true, false]), Action::Stay);
        assert_eq!(
            s.next_time(&[true, false]),
            None,
            "no slice end while alone"
        );
        assert_eq!(s.decide(5_000, &[false, false]), Action::Idle);
        s.idle();
        assert_eq!(
            s.decide(6_000, &[true, false]),
            Action::Resume(0),
            "still loaded: no switch"
        );
    }

    #[test]
    fn the_holder_is_preempted_at_the_slice_end_and_yields_when_dry() {
        let mut s = Slicer::new(2_000, 100);
        s.resume(0, 0);
        assert_eq!(
            s.decide(1_000, &[true, true]),
            Action::Stay,
            "inside the slice"
        );
        assert_eq!(s.next_time(&[true, true]), Some(2_000));
        assert_eq!(s.decide(2_000, &[true, true]), Action::SwitchTo(1));
        assert_eq!(s.start_switch(2_000, 1), 2_100);
        assert_eq!(s.decide(2_050, &[true, true]), Action::Stay, "switching");
        assert_eq!(s.finish_switch(2_100), Some(1));
        assert!(s.runs(1) && !s.runs(0));
        // Context 1 runs dry before its slice ends: it yields to 0 at once.
        assert_eq!(s.decide(2_500, &[true, false]), Action::SwitchTo(0));
        assert_eq!(s.switches, 1);
    }
}
