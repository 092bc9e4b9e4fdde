//! The per-client single-producer/single-consumer ring in shared memory.
//!
//! # Region layout
//!
//! One shared region (a sealed memfd created by the coordinator) holds, in order:
//!
//! | offset | size            | what |
//! |-------:|----------------:|------|
//! | 0      | 128             | [`RingHeader`] line 0: magic, layout version, geometry (written once at init) |
//! | 128    | 128             | [`RingHeader`] line 1: `head`, drop counters (producer writes) |
//! | 256    | 128             | [`RingHeader`] line 2: `tail` (consumer writes) |
//! | 384    | 256             | [`ControlBlock`] (gate, heartbeat; client counters) |
//! | 640    | `capacity * 64` | the [`Record`] slots |
//!
//! [`RingLayout`] computes these numbers so both sides agree.
//!
//! # Protocol
//!
//! `head` and `tail` are free-running `u64` counts of records pushed and
//! popped; the slot of position `p` is `p & (capacity - 1)`. Only the producer
//! (the shim) writes `head`, only the consumer (the coordinator) writes `tail`.
//! Each side keeps its own authoritative copy of its index and of the capacity
//! and never re-reads them from shared memory, so a peer scribbling on the
//! header cannot steer either side out of bounds.
//!
//! Records are copied in and out as eight relaxed 64-bit atomic accesses:
//! these compile to plain moves, and they make a concurrent write by a
//! misbehaving peer a defined (if garbage-producing) race rather than UB.
//!
//! The producer never blocks: when the ring is full [`Producer::push`] bumps a
//! drop counter and returns `false`. The consumer treats everything in the
//! region as untrusted: impossible indices, a changed magic or geometry, or a
//! tail it did not write are reported as typed [`Error`]s, never as panics or
//! out-of-bounds reads.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::mem::{align_of, offset_of, size_of};

use crate::control::ControlBlock;
use crate::error::{Error, Result};
use crate::estimates::EstimateTable;
use crate::record::{Record, RECORD_SIZE, RECORD_WORDS};
use crate::shm::Mapping;
use crate::sync::{AtomicU32, AtomicU64, AtomicU8, Ordering};

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
    capacity: u32,
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
struct Raw {
    header: *const RingHeader,
    slots: *const AtomicU64,
}

/// Check that `base..base+len` can hold `layout`, returning typed pointers.
fn raw_parts(base: *mut u8, len: usize, layout: &RingLayout) -> Result<Raw> {
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
fn validate_header(h: &RingHeader, layout: &RingLayout) -> Result<()> {
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
    /// Records dropped because another thread held the producer ([`SyncProducer`]).
    pub dropped_busy: u64,
}

// ------------------------------------------------------------------------
// Producer
// ------------------------------------------------------------------------

/// The shim's end of the ring. Wait-free: [`push`](Producer::push) is a few
/// atomic operations and one 64-byte write, never blocks, never allocates,
/// never makes a system call.
///
/// `Producer` needs `&mut self`; a process with several launching threads
/// wraps it in a [`SyncProducer`].
pub struct Producer<'a> {
    header: *const RingHeader,
    slots: *const AtomicU64,
    mask: u64,
    capacity: u64,
    /// Authoritative next position to write (shared `head` is only published).
    head: u64,
    /// Last tail read from shared memory; refreshed only when the ring looks full.
    cached_tail: u64,
    _region: PhantomData<&'a Mapping>,
}

// SAFETY: a Producer only touches the region through atomics and its own
// fields; moving it to another thread is fine. It is not Sync (push takes &mut).
unsafe impl Send for Producer<'_> {}

impl<'a> Producer<'a> {
    /// Attach to a region the coordinator initialised, checking the header
    /// against `layout` (computed from the Welcome message).
    pub fn attach(region: &'a Mapping, layout: RingLayout) -> Result<Producer<'a>> {
        // SAFETY: a Mapping is a live shared mapping of `len()` bytes that
        // outlives 'a; the region is only accessed through atomics.
        unsafe { Self::attach_raw(region.as_ptr(), region.len(), layout) }
    }

    /// Attach to a raw region.
    ///
    /// # Safety
    /// `base..base+len` must be a mapping that stays valid (not unmapped or
    /// remapped) for `'a`, and that nothing accesses except through this
    /// crate's ring and control-block types (i.e. with atomics). There must
    /// be at most one live producer for the region.
    pub unsafe fn attach_raw(
        base: *mut u8,
        len: usize,
        layout: RingLayout,
    ) -> Result<Producer<'a>> {
        let raw = raw_parts(base, len, &layout)?;
        // SAFETY: `raw.header` is aligned and in bounds (checked by raw_parts)
        // and valid for 'a by the caller's contract; RingHeader is all atomics.
        let h = unsafe { &*raw.header };
        validate_header(h, &layout)?;
        // The producer's index is authoritative from here on. Take the
        // published head as the start (0 for a fresh ring) and assume nothing
        // has been consumed past it.
        let head = h.head.load(Ordering::Relaxed);
        let capacity = u64::from(layout.capacity);
        Ok(Producer {
            header: raw.header,
            slots: raw.slots,
            mask: capacity - 1,
            capacity,
            head,
            cached_tail: head.wrapping_sub(capacity),
            _region: PhantomData,
        })
    }

    #[inline(always)]
    fn header(&self) -> &RingHeader {
        // SAFETY: validated at attach; valid for 'a; all fields are atomics.
        unsafe { &*self.header }
    }

    /// Push one record. Returns `false` (and counts a drop) if the ring is full.
    #[inline]
    pub fn push(&mut self, record: &Record) -> bool {
        let head = self.head;
        if head.wrapping_sub(self.cached_tail) >= self.capacity {
            // Acquire pairs with the consumer's Release store of `tail`: once
            // we observe tail = t, the consumer has finished copying every
            // slot below t, so overwriting them cannot tear a record it is
            // still reading. A garbage tail (ahead of head, or far behind)
            // makes the difference >= capacity and we drop; the write index
            // below is masked with our own capacity, so no tail value can
            // send us out of bounds.
            self.cached_tail = self.header().tail.load(Ordering::Acquire);
            if head.wrapping_sub(self.cached_tail) >= self.capacity {
                // Relaxed: a statistic; nothing is published through it.
                self.header().dropped_full.fetch_add(1, Ordering::Relaxed);
                return false;
            }
        }
        let words = record.to_words();
        let first = (head & self.mask) as usize * RECORD_WORDS;
        for (i, w) in words.iter().enumerate() {
            // SAFETY: `first + i < capacity * RECORD_WORDS` because the slot
            // index is masked by `capacity - 1`, and the slots area
            // (`capacity * 64` bytes from RECORDS_OFFSET) was bounds-checked
            // at attach. Relaxed is enough: the Release store of `head` below
            // orders these stores before the record becomes visible.
            unsafe { (*self.slots.add(first + i)).store(*w, Ordering::Relaxed) };
        }
        self.head = head.wrapping_add(1);
        // Release: publishes the slot contents written above to a consumer
        // that Acquire-loads `head` and sees this value.
        self.header().head.store(self.head, Ordering::Release);
        true
    }

    /// Free slots right now (refreshes the cached tail: one Acquire load).
    pub fn free_slots(&mut self) -> u64 {
        self.cached_tail = self.header().tail.load(Ordering::Acquire);
        self.capacity
            .saturating_sub(self.head.wrapping_sub(self.cached_tail))
    }

    /// Capacity in records.
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Records pushed so far (the producer's own head).
    #[must_use]
    pub fn pushed(&self) -> u64 {
        self.head
    }

    /// Current counters as seen from the producer side.
    #[must_use]
    pub fn stats(&self) -> RingStats {
        let h = self.header();
        RingStats {
            head: self.head,
            tail: h.tail.load(Ordering::Relaxed),
            dropped_full: h.dropped_full.load(Ordering::Relaxed),
            dropped_busy: h.dropped_busy.load(Ordering::Relaxed),
        }
    }
}

/// A [`Producer`] that many threads may push through (`&self`).
///
/// A tiny try-lock serialises pushes. A thread that finds it held spins a
/// bounded number of times ([`SyncProducer::SPIN_LIMIT`], well under a
/// microsecond in practice) and then drops its record, counting it in
/// `dropped_busy`: a push never waits unboundedly and never sleeps.
///
/// After `fork`, call [`SyncProducer::disable`] in the child (e.g. from a
/// `pthread_atfork` child handler): the child must not write the parent's ring.
pub struct SyncProducer<'a> {
    inner: UnsafeCell<Producer<'a>>,
    state: AtomicU8,
    /// Copy of the producer's header pointer, for counting busy drops without
    /// touching `inner` (which another thread may hold exclusively).
    header: *const RingHeader,
}

const FREE: u8 = 0;
const BUSY: u8 = 1;
const DISABLED: u8 = 2;

// SAFETY: `inner` is only accessed by the thread that moved `state` from FREE
// to BUSY (an Acquire CAS), which gives it exclusive access until it stores
// FREE with Release; Producer itself is Send. `header` points at atomics only.
unsafe impl Sync for SyncProducer<'_> {}
// SAFETY: Producer is Send, and `header` points at atomics valid for 'a.
unsafe impl Send for SyncProducer<'_> {}

impl<'a> SyncProducer<'a> {
    /// How many times a contended push re-tries the lock before dropping.
    pub const SPIN_LIMIT: u32 = 256;

    /// Wrap a producer.
    #[must_use]
    pub fn new(producer: Producer<'a>) -> Self {
        SyncProducer {
            header: producer.header,
            inner: UnsafeCell::new(producer),
            state: AtomicU8::new(FREE),
        }
    }

    /// Push one record; `false` if it was dropped (ring full, producer busy
    /// past the spin limit, or disabled).
    #[inline]
    pub fn push(&self, record: &Record) -> bool {
        let mut spins = 0u32;
        loop {
            // Acquire: see the previous holder's updates to the Producer.
            match self
                .state
                .compare_exchange_weak(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => break,
                Err(DISABLED) => return false,
                Err(_) => {
                    spins += 1;
                    if spins >= Self::SPIN_LIMIT {
                        // SAFETY: `header` was validated when the Producer
                        // attached and stays valid for 'a; RingHeader is all atomics.
                        unsafe { &*self.header }
                            .dropped_busy
                            .fetch_add(1, Ordering::Relaxed);
                        return false;
                    }
                    core::hint::spin_loop();
                }
            }
        }
        // SAFETY: we hold the lock (state BUSY set by our CAS), so this is the
        // only live reference to the Producer.
        let ok = unsafe { (*self.inner.get()).push(record) };
        // Release: hand our Producer updates to the next holder.
        self.state.store(FREE, Ordering::Release);
        ok
    }

    /// Permanently stop pushing (returns `false` without counting). Safe to
    /// call from a `fork` child handler even if the lock was held at fork time.
    pub fn disable(&self) {
        self.state.store(DISABLED, Ordering::Release);
    }

    /// Whether [`disable`](Self::disable) was called.
    #[must_use]
    pub fn is_disabled(&self) -> bool {
        self.state.load(Ordering::Relaxed) == DISABLED
    }

    /// Take the producer back out.
    #[must_use]
    pub fn into_inner(self) -> Producer<'a> {
        self.inner.into_inner()
    }
}

// ------------------------------------------------------------------------
// Consumer
// ------------------------------------------------------------------------

/// The coordinator's end of the ring. Treats the whole region as untrusted.
pub struct Consumer<'a> {
    header: *const RingHeader,
    slots: *const AtomicU64,
    layout: RingLayout,
    mask: u64,
    capacity: u64,
    /// Authoritative next position to read.
    tail: u64,
    /// Publish `tail` at least this often inside a long drain.
    publish_every: u64,
    _region: PhantomData<&'a Mapping>,
}

// SAFETY: a Consumer only touches the region through atomics and its own
// fields; moving it to another thread is fine. It is not Sync (pop takes &mut).
unsafe impl Send for Consumer<'_> {}

impl<'a> Consumer<'a> {
    /// Initialise a fresh region (header and control block) for `layout` and
    /// return its consumer. The coordinator calls this on the region it just
    /// created, before sending the fd to the client.
    pub fn init(region: &'a Mapping, layout: RingLayout, client_id: u64) -> Result<Consumer<'a>> {
        // SAFETY: a Mapping is a live shared mapping of `len()` bytes that
        // outlives 'a; the region is only accessed through atomics.
        unsafe { Self::init_raw(region.as_ptr(), region.len(), layout, client_id) }
    }

    /// Initialise a raw region; see [`Consumer::init`].
    ///
    /// # Safety
    /// Same contract as [`Producer::attach_raw`]; there must be at most one
    /// live consumer for the region.
    pub unsafe fn init_raw(
        base: *mut u8,
        len: usize,
        layout: RingLayout,
        client_id: u64,
    ) -> Result<Consumer<'a>> {
        let raw = raw_parts(base, len, &layout)?;
        // SAFETY: aligned, in bounds, valid for 'a (caller); all atomics.
        let h = unsafe { &*raw.header };
        h.layout_version
            .store(RING_LAYOUT_VERSION, Ordering::Relaxed);
        h.record_size.store(RECORD_SIZE as u32, Ordering::Relaxed);
        h.capacity.store(layout.capacity, Ordering::Relaxed);
        h.control_offset
            .store(CONTROL_OFFSET as u32, Ordering::Relaxed);
        h.records_offset
            .store(RECORDS_OFFSET as u32, Ordering::Relaxed);
        h.reserved0.store(0, Ordering::Relaxed);
        h.region_len
            .store(layout.region_len() as u64, Ordering::Relaxed);
        h.head.store(0, Ordering::Relaxed);
        h.dropped_full.store(0, Ordering::Relaxed);
        h.dropped_busy.store(0, Ordering::Relaxed);
        h.tail.store(0, Ordering::Relaxed);
        // SAFETY: the control block lies inside the checked region at an
        // offset that is a multiple of 128; it is all atomics.
        let control = unsafe { &*base.add(CONTROL_OFFSET).cast::<ControlBlock>() };
        control.init(client_id);
        // Release: the magic is written last, so anyone who Acquire-loads it
        // sees a complete header. (The fd is also sent only after this.)
        h.magic.store(RING_MAGIC, Ordering::Release);
        let capacity = u64::from(layout.capacity);
        Ok(Consumer {
            header: raw.header,
            slots: raw.slots,
            layout,
            mask: capacity - 1,
            capacity,
            tail: 0,
            publish_every: (capacity / 4).max(1),
            _region: PhantomData,
        })
    }

    #[inline(always)]
    fn header(&self) -> &RingHeader {
        // SAFETY: checked at init; valid for 'a; all fields are atomics.
        unsafe { &*self.header }
    }

    /// Verify the parts of the header that must never change, and that the
    /// shared tail is still the one we wrote.
    pub fn check_header(&self) -> Result<()> {
        validate_header(self.header(), &self.layout)?;
        let found = self.header().tail.load(Ordering::Relaxed);
        if found != self.tail {
            return Err(Error::TailTampered {
                expected: self.tail,
                found,
            });
        }
        Ok(())
    }

    /// Records available to read, validating the published head.
    #[inline]
    fn available(&self) -> Result<u64> {
        // Acquire pairs with the producer's Release store of `head`: every
        // slot below the head we observe was fully written before it.
        let head = self.header().head.load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.tail);
        // A head behind our tail wraps to a huge value; a head more than a
        // full ring ahead would mean overwritten, unread records. Both are
        // impossible for an honest producer.
        if avail > self.capacity {
            return Err(Error::RingOverrun {
                head,
                tail: self.tail,
                capacity: self.capacity,
            });
        }
        Ok(avail)
    }

    /// Copy the record at position `pos` out of shared memory.
    #[inline]
    fn read_slot(&self, pos: u64) -> Record {
        let first = (pos & self.mask) as usize * RECORD_WORDS;
        let mut words = [0u64; RECORD_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            // SAFETY: masked slot index < capacity; the slots area was
            // bounds-checked at init. Relaxed suffices: the Acquire load of
            // `head` in `available` ordered the producer's writes before us.
            *w = unsafe { (*self.slots.add(first + i)).load(Ordering::Relaxed) };
        }
        Record::from_words(words)
    }

    /// Publish our tail so the producer may reuse the slots below it.
    #[inline]
    fn publish_tail(&self) {
        // Release: our reads of the consumed slots happen-before a producer
        // that Acquire-loads this tail and then overwrites those slots.
        self.header().tail.store(self.tail, Ordering::Release);
    }

    /// Pop one record, `Ok(None)` when empty. The record's fields are raw:
    /// decode its kind with [`Record::kind`].
    pub fn pop(&mut self) -> Result<Option<Record>> {
        self.check_header()?;
        if self.available()? == 0 {
            return Ok(None);
        }
        let r = self.read_slot(self.tail);
        self.tail = self.tail.wrapping_add(1);
        self.publish_tail();
        Ok(Some(r))
    }

    /// Hand every record available at entry to `f` (at most one ring's worth,
    /// so a busy producer cannot keep the consumer here forever). Returns the
    /// number of records consumed.
    pub fn drain<F: FnMut(&Record)>(&mut self, mut f: F) -> Result<usize> {
        self.check_header()?;
        let avail = self.available()?;
        let mut since_publish = 0;
        for _ in 0..avail {
            let r = self.read_slot(self.tail);
            self.tail = self.tail.wrapping_add(1);
            f(&r);
            since_publish += 1;
            if since_publish == self.publish_every {
                self.publish_tail();
                since_publish = 0;
            }
        }
        if since_publish != 0 {
            self.publish_tail();
        }
        Ok(avail as usize)
    }

    /// Capacity in records (the consumer's own copy).
    #[must_use]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Records consumed so far (the consumer's own tail).
    #[must_use]
    pub fn consumed(&self) -> u64 {
        self.tail
    }

    /// Counters from shared memory. `head` and the drop counters are written
    /// by the client: treat them as claims, not facts.
    #[must_use]
    pub fn stats(&self) -> RingStats {
        let h = self.header();
        RingStats {
            head: h.head.load(Ordering::Relaxed),
            tail: self.tail,
            dropped_full: h.dropped_full.load(Ordering::Relaxed),
            dropped_busy: h.dropped_busy.load(Ordering::Relaxed),
        }
    }

    /// The layout this consumer was initialised with.
    #[must_use]
    pub fn layout(&self) -> RingLayout {
        self.layout
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::EventKind;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn rec(seq: u64) -> Record {
        let mut r = Record::new(EventKind::LAUNCH, seq);
        r.func_id = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        r.bytes = !seq;
        r
    }

    fn check(r: &Record, seq: u64) {
        assert_eq!(r.ts_ns, seq);
        assert_eq!(r.func_id, seq.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        assert_eq!(r.bytes, !seq);
        assert_eq!(r.kind(), Ok(EventKind::LAUNCH));
    }

    fn region(cap: u32) -> (Mapping, RingLayout) {
        let layout = RingLayout::new(cap).unwrap();
        (
            Mapping::anonymous_shared(layout.region_len()).unwrap(),
            layout,
        )
    }

    #[test]
    fn layout_numbers() {
        assert_eq!(RECORDS_OFFSET, 640);
        let est = crate::estimates::ESTIMATES_LEN;
        assert_eq!(est, 8192);
        assert_eq!(region_size(16).unwrap(), 640 + 16 * 64 + est);
        assert_eq!(
            region_size(DEFAULT_CAPACITY).unwrap(),
            640 + (1 << 21) + est
        );
        assert_eq!(
            RingLayout::new(16).unwrap().estimates_offset(),
            640 + 16 * 64
        );
        for bad in [0, 1, 8, 15, 17, 1000, MAX_CAPACITY * 2, u32::MAX] {
            assert_eq!(
                RingLayout::new(bad),
                Err(Error::BadCapacity {
                    capacity: u64::from(bad)
                })
            );
        }
        assert!(RingLayout::new(MAX_CAPACITY).is_ok());
    }

    #[test]
    fn region_checks() {
        let layout = RingLayout::new(16).unwrap();
        let small = Mapping::anonymous_shared(layout.region_len() - 1).unwrap();
        assert!(matches!(
            Producer::attach(&small, layout),
            Err(Error::RegionTooSmall { .. })
        ));
        assert!(matches!(
            Consumer::init(&small, layout, 1),
            Err(Error::RegionTooSmall { .. })
        ));
        let m = Mapping::anonymous_shared(layout.region_len() + 64).unwrap();
        // SAFETY: the pointer is inside a live mapping; the call fails the
        // alignment check before touching memory.
        let r = unsafe { Consumer::init_raw(m.as_ptr().add(8), layout.region_len(), layout, 1) };
        assert!(matches!(r, Err(Error::RegionMisaligned { .. })));
        // Attaching to an uninitialised (zero) region: wrong magic.
        let (m, layout) = region(16);
        assert_eq!(
            Producer::attach(&m, layout).err(),
            Some(Error::RingMagic { found: 0 })
        );
        // Attaching with a different capacity than the region was made for.
        let _c = Consumer::init(&m, layout, 1).unwrap();
        let other = RingLayout::new(32).unwrap();
        assert!(matches!(
            Producer::attach(&m, other),
            Err(Error::RegionTooSmall { .. })
        ));
    }

    #[test]
    fn single_thread_fifo_and_full() {
        let (m, layout) = region(16);
        let mut c = Consumer::init(&m, layout, 7).unwrap();
        let mut p = Producer::attach(&m, layout).unwrap();
        assert_eq!(c.pop().unwrap(), None);
        assert_eq!(p.free_slots(), 16);
        for i in 0..16 {
            assert!(p.push(&rec(i)));
        }
        assert_eq!(p.free_slots(), 0);
        assert!(!p.push(&rec(99)));
        assert!(!p.push(&rec(99)));
        assert_eq!(p.stats().dropped_full, 2);
        assert_eq!(c.stats().dropped_full, 2);
        check(&c.pop().unwrap().unwrap(), 0);
        assert!(p.push(&rec(16)));
        let mut next = 1;
        let n = c
            .drain(|r| {
                check(r, next);
                next += 1;
            })
            .unwrap();
        assert_eq!(n, 16);
        assert_eq!(next, 17);
        assert_eq!(c.pop().unwrap(), None);
        assert_eq!(c.consumed(), 17);
        assert_eq!(p.pushed(), 17);
        // Wrap around many times.
        for i in 17..1000 {
            assert!(p.push(&rec(i)));
            check(&c.pop().unwrap().unwrap(), i);
        }
        assert_eq!(control_block(&m, layout).unwrap().client_id(), 7);
    }

    /// Consumer keeps up (producer waits for space itself): every record
    /// arrives, in order, and nothing is dropped.
    #[test]
    fn two_threads_lossless_in_order() {
        const N: u64 = 3_000_000;
        let (m, layout) = region(1024);
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        let mut p = Producer::attach(&m, layout).unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                for i in 0..N {
                    while p.free_slots() == 0 {
                        std::hint::spin_loop();
                    }
                    assert!(p.push(&rec(i)));
                }
            });
            let mut next = 0;
            while next < N {
                let n = c
                    .drain(|r| {
                        check(r, next);
                        next += 1;
                    })
                    .unwrap();
                if n == 0 {
                    std::hint::spin_loop();
                }
            }
        });
        assert_eq!(c.pop().unwrap(), None);
        assert_eq!(c.stats().dropped_full, 0);
        assert_eq!(c.consumed(), N);
    }

    /// Consumer does not keep up: the producer never blocks, the drop counter
    /// equals the number of failed pushes exactly, and the consumer sees
    /// exactly the successful pushes, in order.
    #[test]
    fn two_threads_exact_drops() {
        const N: u64 = 2_000_000;
        let (m, layout) = region(64);
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        let mut p = Producer::attach(&m, layout).unwrap();
        let done = AtomicBool::new(false);
        let (accepted, received) = std::thread::scope(|s| {
            let prod = s.spawn(|| {
                let mut accepted = Vec::with_capacity(N as usize);
                for i in 0..N {
                    if p.push(&rec(i)) {
                        accepted.push(i);
                    }
                }
                done.store(true, Ordering::Release);
                accepted
            });
            let mut received = Vec::new();
            loop {
                let finished = done.load(Ordering::Acquire);
                // Slow consumer: pull a few records at a time.
                for _ in 0..3 {
                    match c.pop().unwrap() {
                        Some(r) => received.push(r.ts_ns),
                        None => break,
                    }
                }
                if finished {
                    c.drain(|r| received.push(r.ts_ns)).unwrap();
                    break;
                }
                std::thread::yield_now();
            }
            (prod.join().unwrap(), received)
        });
        let stats = c.stats();
        assert_eq!(stats.dropped_full, N - accepted.len() as u64);
        assert!(
            stats.dropped_full > 0,
            "a 64-slot ring with a slow consumer must drop"
        );
        assert_eq!(received, accepted);
    }

    #[test]
    fn sync_producer_many_threads() {
        const THREADS: u64 = 4;
        const PER: u64 = 200_000;
        let (m, layout) = region(4096);
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        let sp = Arc::new(SyncProducer::new(Producer::attach(&m, layout).unwrap()));
        let accepted: u64 = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let sp = Arc::clone(&sp);
                    s.spawn(move || {
                        let mut ok = 0u64;
                        for i in 0..PER {
                            // seq encodes thread in the top bits
                            if sp.push(&rec((t << 40) | i)) {
                                ok += 1;
                            }
                        }
                        ok
                    })
                })
                .collect();
            let mut last = [None::<u64>; THREADS as usize];
            let mut got = 0u64;
            let mut finished = false;
            loop {
                let n = c
                    .drain(|r| {
                        let t = (r.ts_ns >> 40) as usize;
                        let i = r.ts_ns & ((1 << 40) - 1);
                        // Per-thread order is preserved.
                        assert!(last[t].is_none_or(|l| l < i));
                        last[t] = Some(i);
                        check(r, r.ts_ns);
                    })
                    .unwrap();
                got += n as u64;
                if finished && n == 0 {
                    break;
                }
                finished = handles.iter().all(|h| h.is_finished());
            }
            let accepted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(got, accepted);
            accepted
        });
        let st = c.stats();
        assert_eq!(accepted + st.dropped_full + st.dropped_busy, THREADS * PER);
        sp.disable();
        assert!(sp.is_disabled());
        assert!(!sp.push(&rec(0)));
        assert_eq!(
            c.stats(),
            st,
            "a disabled producer neither writes nor counts"
        );
    }

    /// Garbage in the header is reported as a typed error, never a panic or
    /// an out-of-bounds access.
    #[test]
    fn garbage_header_is_detected() {
        let fresh = || {
            let (m, layout) = region(16);
            (m, layout)
        };
        let hdr = |m: &Mapping| -> &RingHeader {
            // SAFETY: the mapping is aligned, at least a header long, alive
            // for the borrow, and RingHeader is all atomics.
            unsafe { &*m.as_ptr().cast::<RingHeader>() }
        };

        // head more than a ring ahead of tail
        let (m, layout) = fresh();
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        hdr(&m).head.store(17, Ordering::Relaxed);
        assert_eq!(
            c.pop(),
            Err(Error::RingOverrun {
                head: 17,
                tail: 0,
                capacity: 16
            })
        );
        // head behind tail
        hdr(&m).head.store(u64::MAX, Ordering::Relaxed);
        assert!(matches!(c.drain(|_| ()), Err(Error::RingOverrun { .. })));
        hdr(&m).head.store(16, Ordering::Relaxed); // a full ring is fine
        assert_eq!(c.drain(|_| ()), Ok(16));

        // tail overwritten (tail > head + capacity)
        let (m, layout) = fresh();
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        hdr(&m).tail.store(1 << 40, Ordering::Relaxed);
        assert_eq!(
            c.pop(),
            Err(Error::TailTampered {
                expected: 0,
                found: 1 << 40
            })
        );
        // ...and the producer facing that garbage tail drops instead of writing.
        let mut p = Producer::attach(&m, layout).unwrap();
        assert!(!p.push(&rec(1)));
        assert_eq!(p.stats().dropped_full, 1);

        // huge capacity written into the header
        let (m, layout) = fresh();
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        hdr(&m).capacity.store(u32::MAX, Ordering::Relaxed);
        assert_eq!(
            c.pop(),
            Err(Error::HeaderTampered {
                field: "capacity",
                expected: 16,
                found: u64::from(u32::MAX)
            })
        );
        assert!(matches!(
            Producer::attach(&m, layout),
            Err(Error::HeaderTampered {
                field: "capacity",
                ..
            })
        ));

        // wrong magic, wrong version, wrong region_len
        let (m, layout) = fresh();
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        hdr(&m).magic.store(0xBAD, Ordering::Relaxed);
        assert_eq!(c.pop(), Err(Error::RingMagic { found: 0xBAD }));
        hdr(&m).magic.store(RING_MAGIC, Ordering::Relaxed);
        hdr(&m).layout_version.store(9, Ordering::Relaxed);
        assert_eq!(
            c.drain(|_| ()),
            Err(Error::LayoutVersion {
                ours: RING_LAYOUT_VERSION,
                theirs: 9
            })
        );
        hdr(&m)
            .layout_version
            .store(RING_LAYOUT_VERSION, Ordering::Relaxed);
        hdr(&m).region_len.store(u64::MAX, Ordering::Relaxed);
        assert!(matches!(
            c.pop(),
            Err(Error::HeaderTampered {
                field: "region_len",
                ..
            })
        ));

        // Random garbage everywhere in the header: never panics, every call
        // returns Ok or a typed error.
        let (m, layout) = fresh();
        let mut c = Consumer::init(&m, layout, 1).unwrap();
        let words = m.as_ptr().cast::<AtomicU64>();
        let mut x: u64 = 0x1234_5678_9ABC_DEF1;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let idx = (x % (RING_HEADER_SIZE as u64 / 8)) as usize;
            // SAFETY: idx < 48 words = the header, inside the live mapping.
            unsafe { (*words.add(idx)).store(x.rotate_left(idx as u32), Ordering::Relaxed) };
            let _ = c.pop();
            let _ = c.drain(|r| {
                let _ = r.kind();
            });
        }
    }
}
