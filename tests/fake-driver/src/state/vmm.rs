//! Virtual memory state: the physical allocations (memfds), the reserved address ranges, and
//! what is mapped where with which access.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::os::fd::OwnedFd;

use super::memory::{Access, RangeFault};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Prot {
    None,
    Read,
    ReadWrite,
}

impl Prot {
    pub(crate) fn allows(self, access: Access) -> bool {
        match (self, access) {
            (Prot::None, _) => false,
            (Prot::Read, Access::Read) => true,
            (Prot::Read, Access::Write) => false,
            (Prot::ReadWrite, _) => true,
        }
    }

    pub(crate) fn to_mprotect(self) -> c_int {
        match self {
            Prot::None => libc::PROT_NONE,
            Prot::Read => libc::PROT_READ,
            Prot::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        }
    }
}

/// A physical allocation (`CUmemGenericAllocationHandle`).
pub(crate) struct Phys {
    pub(crate) fd: OwnedFd,
    pub(crate) size: usize,
    /// Imported from a shareable handle: costs this process no device memory.
    pub(crate) imported: bool,
    /// Whether it may be exported as a POSIX fd (requested at create; imports always may).
    pub(crate) exportable: bool,
    /// `cuMemRelease` was called; the memory goes when the last mapping is unmapped.
    pub(crate) released: bool,
    pub(crate) mappings: usize,
}

pub(crate) struct Mapping {
    pub(crate) size: usize,
    pub(crate) handle: u64,
    pub(crate) prot: Prot,
}

pub struct Vmm {
    pub(crate) handles: BTreeMap<u64, Phys>,
    /// start -> size of every reserved virtual range.
    pub(crate) reservations: BTreeMap<u64, usize>,
    /// start -> mapping, for every mapped piece of a reserved range.
    pub(crate) mappings: BTreeMap<u64, Mapping>,
}

impl Vmm {
    pub const fn new() -> Self {
        Self {
            handles: BTreeMap::new(),
            reservations: BTreeMap::new(),
            mappings: BTreeMap::new(),
        }
    }

    /// Checks `[addr, addr + len)` (len > 0) against the mapped ranges: it must be covered by
    /// contiguous mappings (else `Unmapped`), each allowing `access` (else `Protected`).
    pub fn check_range(&self, addr: u64, len: usize, access: Access) -> Result<(), RangeFault> {
        let end = addr.checked_add(len as u64).ok_or(RangeFault::Unmapped)?;
        let mut cur = addr;
        let mut protected = false;
        while cur < end {
            let Some((&start, m)) = self.mappings.range(..=cur).next_back() else {
                return Err(RangeFault::Unmapped);
            };
            let m_end = start.saturating_add(m.size as u64);
            if cur >= m_end {
                return Err(RangeFault::Unmapped);
            }
            protected |= !m.prot.allows(access);
            cur = m_end;
        }
        if protected {
            Err(RangeFault::Protected)
        } else {
            Ok(())
        }
    }

    /// Whether `addr` lies in a reserved virtual range (mapped or not).
    pub fn is_reserved(&self, addr: u64) -> bool {
        self.reservation_containing(addr, 1).is_some()
    }

    /// Bytes of the physical allocations this process created (`cuMemCreate`) and still
    /// references, through its handle or a mapping.
    pub fn created_bytes(&self) -> u64 {
        self.phys_bytes(false)
    }

    /// Bytes of the imported physical allocations this process still references.
    pub fn imported_bytes(&self) -> u64 {
        self.phys_bytes(true)
    }

    pub(crate) fn phys_bytes(&self, imported: bool) -> u64 {
        self.handles
            .values()
            .filter(|p| p.imported == imported)
            .map(|p| p.size as u64)
            .sum()
    }

    /// The starts of the mappings that exactly tile `[ptr, ptr + size)`, or `None`.
    pub(crate) fn whole_mappings(&self, ptr: u64, size: usize) -> Option<Vec<u64>> {
        let end = ptr.checked_add(size as u64)?;
        let mut cur = ptr;
        let mut starts = Vec::new();
        while cur < end {
            let m = self.mappings.get(&cur)?;
            starts.push(cur);
            cur = cur.checked_add(m.size as u64)?;
        }
        (size > 0 && cur == end).then_some(starts)
    }

    /// The reservation that contains `[ptr, ptr + size)`, if any.
    pub(crate) fn reservation_containing(&self, ptr: u64, size: usize) -> Option<u64> {
        let end = ptr.checked_add(size as u64)?;
        let (&start, &rsize) = self.reservations.range(..=ptr).next_back()?;
        (end <= start.saturating_add(rsize as u64)).then_some(start)
    }

    pub(crate) fn overlaps_mapping(&self, ptr: u64, size: usize) -> bool {
        let end = ptr.saturating_add(size as u64);
        if let Some((&start, m)) = self.mappings.range(..ptr).next_back() {
            if start.saturating_add(m.size as u64) > ptr {
                return true;
            }
        }
        self.mappings.range(ptr..end).next().is_some()
    }
}
