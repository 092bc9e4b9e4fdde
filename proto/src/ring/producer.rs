//! The shim's end of the ring: [`Producer`], wait-free and allocation-free,
//! and [`SyncProducer`], which lets several launching threads share it.

use core::cell::UnsafeCell;
use core::marker::PhantomData;

use crate::error::Result;
use crate::record::{Record, RECORD_WORDS};
use crate::shm::Mapping;
use crate::sync::{AtomicU64, AtomicU8, Ordering};

use super::layout::{raw_parts, validate_header, RingHeader, RingLayout, RingStats};

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
