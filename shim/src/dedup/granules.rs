//! What dedup knows about this process's memory: the dedup-backed allocations,
//! their 2 MiB granules, and when a granule's content counts as stable enough
//! to be offered for merging. Pure data and rules; the driver work is in
//! `merge`.

use std::collections::BTreeMap;

use crate::types::CUmemGenericAllocationHandle;

/// When a granule may become a merge candidate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Consecutive checks that must see the same hash.
    pub stable_checks: u32,
}

/// What a new hash observation asks the caller to tell the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Nothing,
    /// Send a CANDIDATE with this hash.
    Candidate([u8; 16]),
    /// The content changed after a CANDIDATE went out: send a WITHDRAW (CHANGED).
    Withdraw,
}

/// The content history of one private granule.
///
/// A granule becomes a candidate only when (1) it was written by a driver copy
/// (weights arrive by host-to-device or device-to-device copies; memory only
/// kernels ever wrote is never offered), (2) its hash was the same at
/// `stable_checks` consecutive checks, (3) the program launched kernels between
/// the first and the last of those checks (so activation memory had the chance
/// to change: a job that sits idle after loading proves nothing), and (4) it is
/// not uniform (all-equal words: never-written or filled buffers look the same
/// in every job without being weights).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stability {
    hash: Option<[u8; 16]>,
    same: u32,
    kernels_at_first: u64,
    /// A CANDIDATE with `hash` went out on the current session.
    pub sent: bool,
}

impl Stability {
    /// Folds in one check: `hash` of the content now, whether it is uniform, the
    /// process's kernel count now, and whether a driver copy ever wrote it.
    pub fn observe(
        &mut self,
        hash: [u8; 16],
        uniform: bool,
        kernels_now: u64,
        written_by_copy: bool,
        rule: Rule,
    ) -> Verdict {
        if self.hash == Some(hash) {
            self.same = self.same.saturating_add(1);
        } else {
            let was_sent = self.sent;
            *self = Stability {
                hash: Some(hash),
                same: 1,
                kernels_at_first: kernels_now,
                sent: false,
            };
            if was_sent {
                return Verdict::Withdraw;
            }
        }
        if !self.sent
            && written_by_copy
            && !uniform
            && self.same >= rule.stable_checks.max(1)
            && kernels_now > self.kernels_at_first
        {
            self.sent = true;
            return Verdict::Candidate(hash);
        }
        Verdict::Nothing
    }

    /// The candidate of `hash` did not go out: the next pass offers it
    /// again (nothing changes if the content moved on meanwhile).
    pub fn unsend(&mut self, hash: [u8; 16]) {
        if self.sent && self.hash == Some(hash) {
            self.sent = false;
        }
    }

    /// The hash the last candidate was sent with, if one is out.
    pub fn sent_hash(&self) -> Option<[u8; 16]> {
        if self.sent {
            self.hash
        } else {
            None
        }
    }

    /// Starts over (content replaced, e.g. after copy-on-write).
    pub fn reset(&mut self) {
        *self = Stability::default();
    }
}

/// What backs a granule's address now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backing {
    /// This process's own physical memory, read-write.
    Private(CUmemGenericAllocationHandle),
    /// A shared read-only copy. `handle` is this process's reference to it (its
    /// own published handle, or an imported one). `orphan`: the coordinator
    /// that knew this copy is gone (restart): still correct, no longer counted.
    /// `own`: this process published it (its own memory, frozen read-only).
    Shared {
        handle: CUmemGenericAllocationHandle,
        shared_id: u64,
        orphan: bool,
        own: bool,
    },
}

/// One granule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Granule {
    pub backing: Backing,
    /// A driver copy (HtoD, DtoD, generic memcpy) wrote into it at least once.
    pub written_by_copy: bool,
    pub track: Stability,
}

impl Granule {
    pub fn private(h: CUmemGenericAllocationHandle) -> Granule {
        Granule {
            backing: Backing::Private(h),
            written_by_copy: false,
            track: Stability::default(),
        }
    }

    pub fn shared_id(&self) -> Option<u64> {
        match self.backing {
            Backing::Shared { shared_id, .. } => Some(shared_id),
            Backing::Private(_) => None,
        }
    }
}

/// One dedup-backed allocation: `span` bytes reserved at `base` (the requested
/// size rounded up to the granule), one physical handle per granule.
#[derive(Debug)]
pub struct Alloc {
    pub base: u64,
    pub granule_len: u64,
    pub granules: Vec<Granule>,
}

impl Alloc {
    pub fn span(&self) -> u64 {
        self.granule_len * self.granules.len() as u64
    }

    /// Indices of the granules `[addr, addr + len)` touches.
    pub fn touched(&self, addr: u64, len: u64) -> core::ops::Range<usize> {
        let end = addr.saturating_add(len.max(1)).min(self.base + self.span());
        let start = addr.max(self.base);
        if start >= end {
            return 0..0;
        }
        let first = ((start - self.base) / self.granule_len) as usize;
        let last = ((end - 1 - self.base) / self.granule_len) as usize;
        first..last + 1
    }
}

/// Every dedup-backed allocation of the process, by base address.
#[derive(Debug, Default)]
pub struct Table {
    allocs: BTreeMap<u64, Alloc>,
}

impl Table {
    pub const fn new() -> Table {
        Table {
            allocs: BTreeMap::new(),
        }
    }

    pub fn insert(&mut self, a: Alloc) {
        self.allocs.insert(a.base, a);
    }

    pub fn remove(&mut self, base: u64) -> Option<Alloc> {
        self.allocs.remove(&base)
    }

    pub fn is_empty(&self) -> bool {
        self.allocs.is_empty()
    }

    /// The allocation containing `addr`.
    pub fn containing(&mut self, addr: u64) -> Option<&mut Alloc> {
        let (_, a) = self.allocs.range_mut(..=addr).next_back()?;
        (addr < a.base + a.span()).then_some(a)
    }

    /// Whether `base` is the start of one of our allocations.
    pub fn owns_base(&self, base: u64) -> bool {
        self.allocs.contains_key(&base)
    }

    /// The granule whose address is exactly `va`.
    pub fn granule(&mut self, va: u64) -> Option<&mut Granule> {
        let a = self.containing(va)?;
        let off = va - a.base;
        if !off.is_multiple_of(a.granule_len) {
            return None;
        }
        a.granules.get_mut((off / a.granule_len) as usize)
    }

    /// Calls `f` with every allocation overlapping `[addr, addr + len)` and the
    /// range of its granules touched (no allocation: copy hooks call this).
    pub fn for_each_overlapping(
        &mut self,
        addr: u64,
        len: u64,
        mut f: impl FnMut(&mut Alloc, core::ops::Range<usize>),
    ) {
        let end = addr.saturating_add(len.max(1));
        // The allocation that may start before `addr`, then those starting inside.
        if let Some((_, a)) = self.allocs.range_mut(..=addr).next_back() {
            let r = a.touched(addr, len);
            if !r.is_empty() {
                f(a, r);
            }
        }
        for (_, a) in self.allocs.range_mut(addr.saturating_add(1)..end) {
            let r = a.touched(addr, len);
            if !r.is_empty() {
                f(a, r);
            }
        }
    }

    pub fn allocs_mut(&mut self) -> impl Iterator<Item = &mut Alloc> {
        self.allocs.values_mut()
    }

    /// (address, granule length) of every granule, in address order.
    pub fn granule_addresses(&self) -> Vec<(u64, u64)> {
        self.allocs
            .values()
            .flat_map(|a| {
                (0..a.granules.len())
                    .map(move |i| (a.base + i as u64 * a.granule_len, a.granule_len))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;
    const RULE: Rule = Rule { stable_checks: 3 };

    fn h(b: u8) -> [u8; 16] {
        [b; 16]
    }

    #[test]
    fn a_candidate_needs_stable_checks_kernels_in_between_and_a_copy() {
        let mut s = Stability::default();
        assert_eq!(s.observe(h(1), false, 10, true, RULE), Verdict::Nothing);
        assert_eq!(s.observe(h(1), false, 10, true, RULE), Verdict::Nothing);
        // third equal check, but no kernel ran since the first: not yet
        assert_eq!(s.observe(h(1), false, 10, true, RULE), Verdict::Nothing);
        assert_eq!(
            s.observe(h(1), false, 11, true, RULE),
            Verdict::Candidate(h(1))
        );
        // sent once only
        assert_eq!(s.observe(h(1), false, 50, true, RULE), Verdict::Nothing);
        assert_eq!(s.sent_hash(), Some(h(1)));
        // a change after sending withdraws and starts over
        assert_eq!(s.observe(h(2), false, 60, true, RULE), Verdict::Withdraw);
        assert_eq!(s.sent_hash(), None);
        assert_eq!(s.observe(h(2), false, 61, true, RULE), Verdict::Nothing);
        assert_eq!(
            s.observe(h(2), false, 62, true, RULE),
            Verdict::Candidate(h(2))
        );
    }

    #[test]
    fn a_candidate_that_did_not_go_out_is_offered_again_by_the_next_check() {
        let mut s = Stability::default();
        for k in 0..3 {
            s.observe(h(1), false, k, true, RULE);
        }
        assert_eq!(s.sent_hash(), Some(h(1)));
        s.unsend(h(1));
        assert_eq!(s.sent_hash(), None);
        assert_eq!(
            s.observe(h(1), false, 5, true, RULE),
            Verdict::Candidate(h(1))
        );
        // An unsend of content already replaced changes nothing.
        assert_eq!(s.observe(h(2), false, 6, true, RULE), Verdict::Withdraw);
        s.unsend(h(1));
        assert_eq!(s.observe(h(2), false, 7, true, RULE), Verdict::Nothing);
        assert_eq!(
            s.observe(h(2), false, 8, true, RULE),
            Verdict::Candidate(h(2))
        );
        s.unsend(h(1));
        assert_eq!(s.sent_hash(), Some(h(2)), "another hash's unsend");
    }

    #[test]
    fn uniform_or_kernel_written_memory_is_never_a_candidate() {
        let mut s = Stability::default();
        for k in 0..10 {
            assert_eq!(s.observe(h(0), true, k, true, RULE), Verdict::Nothing);
        }
        let mut s = Stability::default();
        for k in 0..10 {
            assert_eq!(s.observe(h(5), false, k, false, RULE), Verdict::Nothing);
        }
    }

    #[test]
    fn changing_content_never_becomes_a_candidate() {
        let mut s = Stability::default();
        for k in 0..20u8 {
            assert_eq!(
                s.observe(h(k % 2), false, u64::from(k), true, RULE),
                Verdict::Nothing
            );
        }
    }

    fn alloc(base: u64, n: usize) -> Alloc {
        Alloc {
            base,
            granule_len: G,
            granules: (0..n).map(|i| Granule::private(i as u64 + 1)).collect(),
        }
    }

    #[test]
    fn lookups_by_address_and_range() {
        let mut t = Table::default();
        t.insert(alloc(10 * G, 3));
        t.insert(alloc(20 * G, 2));
        assert!(t.owns_base(10 * G) && !t.owns_base(11 * G));
        assert_eq!(t.containing(12 * G + 5).map(|a| a.base), Some(10 * G));
        assert!(t.containing(13 * G).is_none(), "one past the end");
        assert!(t.containing(9 * G).is_none());
        assert_eq!(
            t.granule(11 * G).map(|g| g.backing),
            Some(Backing::Private(2))
        );
        assert!(t.granule(11 * G + 8).is_none(), "not a granule start");
        // a copy spanning the gap touches the tail of one and the head of the other
        let mut over = |addr, len| {
            let mut o = Vec::new();
            t.for_each_overlapping(addr, len, |a, r| o.push((a.base, r)));
            o
        };
        assert_eq!(
            over(12 * G + 1, 9 * G),
            vec![(10 * G, 2..3), (20 * G, 0..2)]
        );
        assert_eq!(over(13 * G, G), vec![]);
        assert_eq!(over(0, 1), vec![]);
        assert_eq!(over(10 * G, 1), vec![(10 * G, 0..1)]);
        assert_eq!(t.granule_addresses().len(), 5);
        assert!(t.remove(10 * G).is_some());
        assert!(t.containing(10 * G).is_none());
    }
}
