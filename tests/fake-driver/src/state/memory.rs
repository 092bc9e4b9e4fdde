//! Device memory as host memory: the live `cuMemAlloc*` allocations, the device's size, what
//! may touch a range, and the host pointer behind a device address.

use std::collections::BTreeMap;

use crate::types::*;

/// Default for `FAKECUDA_TOTAL_MEM`: 80 GiB.
const DEFAULT_TOTAL_MEM: u64 = 80 << 30;
/// The device's total memory: `FAKECUDA_TOTAL_MEM` (bytes) or 80 GiB.
pub fn total_mem() -> u64 {
    std::env::var("FAKECUDA_TOTAL_MEM")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_TOTAL_MEM)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// Why a range may not be touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeFault {
    /// Not inside a live allocation or mapped VMM ranges.
    Unmapped,
    /// Mapped, but without the access needed (e.g. a write into a read-only mapping).
    Protected,
}

pub struct Memory {
    /// start address -> size of every live `cuMemAlloc*` allocation.
    pub(crate) allocs: BTreeMap<u64, usize>,
}

impl Memory {
    pub const fn new() -> Self {
        Self {
            allocs: BTreeMap::new(),
        }
    }

    /// Bytes of every live `cuMemAlloc*` allocation together.
    pub fn bytes(&self) -> u64 {
        self.allocs.values().map(|&s| s as u64).sum()
    }

    /// Whether `[addr, addr + len)` lies inside one live allocation.
    pub fn contains(&self, addr: u64, len: usize) -> bool {
        let Some(end) = addr.checked_add(len as u64) else {
            return false;
        };
        match self.allocs.range(..=addr).next_back() {
            Some((&start, &size)) => end <= start.saturating_add(size as u64),
            None => false,
        }
    }
}

/// The host pointer behind a fake device address. Every address the fake hands out had its
/// provenance exposed when it was created (`expose_provenance`), so this is the matching cast.
pub fn device_ptr(addr: CUdeviceptr) -> *mut u8 {
    std::ptr::with_exposed_provenance_mut(addr as usize)
}
