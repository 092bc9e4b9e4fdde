//! The region's layout: the header, where the control block, the records
//! and the estimate table lie for a given capacity ([`RingLayout`]), the
//! checks both ends make before they touch a region, and the typed views of
//! the control block and the estimate table inside it.

use core::mem::{align_of, offset_of, size_of};

use crate::control::ControlBlock;
use crate::error::{Error, Result};
use crate::estimates::EstimateTable;
use crate::record::RECORD_SIZE;
use crate::shm::Mapping;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

pub use crate::magic::{MAX_CAPACITY, MIN_CAPACITY, RING_MAGIC};
/// Version of the region layout (header, control block, record). Bump on any change.
pub const RING_LAYOUT_VERSION: u32 = 4;
/// A sensible default capacity: 32768 records, 2 MiB.
pub const DEFAULT_CAPACITY: u32 = 1 << 15;
/// Alignment the region's base address must have.
pub const REGION_ALIGN: usize = 128;

/// The ring header at offset 0 of the region.
///
/// Every field, padding included, is an atomic: the other process may write
/// any byte of it at any time, and a `&RingHeader` must stay sound when it does.
#[repr(C, align(128))]
pub struct RingHeader {
    // ---- line 0: written once by the coordinator at init, then read-only ----
    pub(crate) magic: AtomicU64,
    pub(crate) layout_version: AtomicU32,
    pub(crate) record_size: AtomicU32,
    pub(crate) capacity: AtomicU32,
    pub(crate) control_offset: AtomicU32,
    pub(crate) records_offset: AtomicU32,
    pub(crate) reserved0: AtomicU32,
    pub(crate) region_len: AtomicU64,
    pub(crate) pad0: [AtomicU64; 11],
    // ---- line 1: producer (shim) writes ----
    pub(crate) head: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    pub(crate) dropped_busy: AtomicU64,
    pub(crate) pad1: [AtomicU64; 13],
    // ---- line 2: consumer (coordinator) writes ----
    pub(crate) tail: AtomicU64,
    pub(crate) pad2: [AtomicU64; 15],
}

/// Size of [`RingHeader`] in bytes.
pub const RING_HEADER_SIZE: usize = 384;

const _: () = {
    assert!(size_of::<RingHeader>() == RING_HEADER_SIZE);
    assert!(align_of::<RingHeader>() == 128);
    assert!(offset_of!(RingHeader, magic) == 0);
    assert!(offset_of!(RingHeader, layout_version) == 8);
    assert!(offset_of!(RingHeader, record_size) == 12);
    assert!(offset_of!(RingHeader, capacity) == 16);
    assert!(offset_of!(RingHeader, control_offset) == 20);
    assert!(offset_of!(RingHeader, records_offset) == 24);
    assert!(offset_of!(RingHeader, reserved0) == 28);
    assert!(offset_of!(RingHeader, region_len) == 32);
    assert!(offset_of!(RingHeader, pad0) == 40);
    assert!(offset_of!(RingHeader, head) == 128);
    assert!(offset_of!(RingHeader, dropped_full) == 136);
    assert!(offset_of!(RingHeader, dropped_busy) == 144);
    assert!(offset_of!(RingHeader, pad1) == 152);
    assert!(offset_of!(RingHeader, tail) == 256);
    assert!(offset_of!(RingHeader, pad2) == 264);
    // Control block follows the header and keeps the 128-byte rhythm.
    assert!(RING_HEADER_SIZE.is_multiple_of(128));
    assert!(crate::control::CONTROL_BLOCK_SIZE.is_multiple_of(128));
};

/// Byte offset of the control block in the region.
pub const CONTROL_OFFSET: usize = RING_HEADER_SIZE;
/// Byte offset of the first record slot in the region.
pub const RECORDS_OFFSET: usize = CONTROL_OFFSET + crate::control::CONTROL_BLOCK_SIZE;

/// The geometry of one ring region, computed identically on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingLayout {
    pub(super) capacity: u32,
}

impl RingLayout {
    /// The layout for `capacity` records (a power of two in
    /// [`MIN_CAPACITY`]..=[`MAX_CAPACITY`]).
    pub const fn new(capacity: u32) -> Result<RingLayout> {
        if capacity < MIN_CAPACITY || capacity > MAX_CAPACITY || !capacity.is_power_of_two() {
            return Err(Error::BadCapacity {
                capacity: capacity as u64,
            });
        }
        Ok(RingLayout { capacity })
    }

    /// Capacity in records.
    #[must_use]
    pub const fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Byte offset of the control block.
    #[must_use]
    pub const fn control_offset(&self) -> usize {
        CONTROL_OFFSET
    }

    /// Byte offset of the first record slot.
    #[must_use]
    pub const fn records_offset(&self) -> usize {
        RECORDS_OFFSET
    }

    /// Byte offset of the estimate table ([`crate::estimates`]), right after
    /// the records (128-aligned: the records take a multiple of 1 KiB).
    #[must_use]
    pub const fn estimates_offset(&self) -> usize {
        RECORDS_OFFSET + self.capacity as usize * RECORD_SIZE
    }

    /// Total region size in bytes (what `ftruncate` sets and `fstat` must report).
    #[must_use]
    pub const fn region_len(&self) -> usize {
        self.estimates_offset() + crate::estimates::ESTIMATES_LEN
    }
}

/// Region size in bytes for a ring of `capacity` records.
pub const fn region_size(capacity: u32) -> Result<usize> {
    match RingLayout::new(capacity) {
        Ok(l) => Ok(l.region_len()),
        Err(e) => Err(e),
    }
}

/// Pointers into a validated region.
#[derive(Clone, Copy)]
pub(super) struct Raw {
    pub(super) header: *const RingHeader,
    pub(super) slots: *const AtomicU64,
}

/// Check that `base..base+len` can hold `layout`, returning typed pointers.
pub(super) fn raw_parts(base: *mut u8, len: usize, layout: &RingLayout) -> Result<Raw> {
    if !(base as usize).is_multiple_of(REGION_ALIGN) || base.is_null() {
        return Err(Error::RegionMisaligned {
            addr: base as usize,
            align: REGION_ALIGN,
        });
    }
    if len < layout.region_len() {
        return Err(Error::RegionTooSmall {
            len,
            needed: layout.region_len(),
        });
    }
    Ok(Raw {
        header: base.cast::<RingHeader>(),
        // `wrapping_add` keeps this a safe computation; it is in bounds because
        // `len >= region_len() > RECORDS_OFFSET` was checked above.
        slots: base.wrapping_add(RECORDS_OFFSET).cast::<AtomicU64>(),
    })
}

/// Read the fixed header fields and compare them with `layout`.
pub(super) fn validate_header(h: &RingHeader, layout: &RingLayout) -> Result<()> {
    let magic = h.magic.load(Ordering::Relaxed);
    if magic != RING_MAGIC {
        return Err(Error::RingMagic { found: magic });
    }
    let version = h.layout_version.load(Ordering::Relaxed);
    if version != RING_LAYOUT_VERSION {
        return Err(Error::LayoutVersion {
            ours: RING_LAYOUT_VERSION,
            theirs: version,
        });
    }
    let checks: [(&'static str, u64, u64); 5] = [
        (
            "record_size",
            RECORD_SIZE as u64,
            u64::from(h.record_size.load(Ordering::Relaxed)),
        ),
        (
            "capacity",
            u64::from(layout.capacity),
            u64::from(h.capacity.load(Ordering::Relaxed)),
        ),
        (
            "control_offset",
            CONTROL_OFFSET as u64,
            u64::from(h.control_offset.load(Ordering::Relaxed)),
        ),
        (
            "records_offset",
            RECORDS_OFFSET as u64,
            u64::from(h.records_offset.load(Ordering::Relaxed)),
        ),
        (
            "region_len",
            layout.region_len() as u64,
            h.region_len.load(Ordering::Relaxed),
        ),
    ];
    for (field, expected, found) in checks {
        if expected != found {
            return Err(Error::HeaderTampered {
                field,
                expected,
                found,
            });
        }
    }
    Ok(())
}

/// Read-only view of the ring's statistics, from either side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Records pushed (the producer's head).
    pub head: u64,
    /// Records consumed (the consumer's tail).
    pub tail: u64,
    /// Records dropped because the ring was full.
    pub dropped_full: u64,
    /// Records dropped because another thread held the producer ([`SyncProducer`](super::SyncProducer)).
    pub dropped_busy: u64,
}

/// The control block inside a region, checked against `layout`.
pub fn control_block(region: &Mapping, layout: RingLayout) -> Result<&ControlBlock> {
    let raw = raw_parts(region.as_ptr(), region.len(), &layout)?;
    // SAFETY: the region holds at least region_len() bytes (checked) and the
    // control block offset is 128-aligned from an aligned base; ControlBlock
    // is all atomics, so another process writing it is sound; the reference
    // lives no longer than `region`.
    Ok(unsafe {
        &*raw
            .header
            .cast::<u8>()
            .add(CONTROL_OFFSET)
            .cast::<ControlBlock>()
    })
}

/// The estimate table of a region created or received with `layout`
/// (checked like [`control_block`]).
pub fn estimates(region: &Mapping, layout: RingLayout) -> Result<&EstimateTable> {
    let raw = raw_parts(region.as_ptr(), region.len(), &layout)?;
    // SAFETY: the region holds at least region_len() bytes (checked), which
    // end with the table; its offset is 128-aligned from an aligned base;
    // the table is all atomics, so another process writing it is sound; the
    // reference lives no longer than `region`.
    Ok(unsafe {
        &*raw
            .header
            .cast::<u8>()
            .add(layout.estimates_offset())
            .cast::<EstimateTable>()
    })
}
