//! The shim's end of the ring: [`Producer`], wait-free and allocation-free,
//! and [`SyncProducer`], which lets several launching threads share it.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::time::Duration;

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
/// A tiny try-lock serialises pushes; an uncontended push is one CAS more
/// than [`Producer::push`]. A thread that finds the lock held spins
/// ([`SyncProducer::SPIN_LIMIT`] times: a holder that is running lets go
/// within that). A holder that does not is almost always one the scheduler
/// preempted inside its few-nanosecond critical section (on a busy node, a
/// thread pushing often is preempted there many times a second), and it
/// runs again only once it gets a CPU: the waiter then gives up its own
/// ([`YIELD_LIMIT`](SyncProducer::YIELD_LIMIT) `sched_yield`s, which hand
/// the CPU to a holder queued on it), then naps ([`NAP`](SyncProducer::NAP)
/// at a time, which idles the CPU so the kernel pulls a holder queued on
/// another one), up to a bound: [`push`](SyncProducer::push) (a launching
/// thread) naps at most [`LAUNCH_NAPS`](SyncProducer::LAUNCH_NAPS) times
/// (at least 5 ms), [`push_patient`](SyncProducer::push_patient) (a thread
/// off the launch path, such as the shim's watcher) at most
/// [`PATIENT_NAPS`](SyncProducer::PATIENT_NAPS) times (at least 50 ms). Past
/// its bound a push drops its record, counting it in `dropped_busy`: a push
/// never waits unboundedly, and a preempted holder no longer costs a record.
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
    /// How many times a contended push re-tries the lock spinning before it
    /// yields the CPU.
    pub const SPIN_LIMIT: u32 = 256;
    /// How many times it then re-tries after a `sched_yield`, before napping.
    pub const YIELD_LIMIT: u32 = 16;
    /// One nap (a sleep of at least this long) between tries after that.
    pub const NAP: Duration = Duration::from_micros(50);
    /// Naps a launching thread's push ([`push`](Self::push)) takes at most
    /// before it drops: at least 5 ms in all (longer only as the kernel
    /// oversleeps), about a scheduler time slice on a loaded machine. On
    /// the 2-core VM, 4 threads pushing in a tight loop (each preempted
    /// inside the lock many times a second) needed up to 86 naps at the
    /// worst, most of those it waited between 33 and 45.
    pub const LAUNCH_NAPS: u32 = 100;
    /// Naps [`push_patient`](Self::push_patient) takes at most: at least 50 ms.
    pub const PATIENT_NAPS: u32 = 1000;

    /// Wrap a producer.
    #[must_use]
    pub fn new(producer: Producer<'a>) -> Self {
        SyncProducer {
            header: producer.header,
            inner: UnsafeCell::new(producer),
            state: AtomicU8::new(FREE),
        }
    }

    /// Push one record from a launching thread; `false` if it was dropped
    /// (ring full, lock held past [`LAUNCH_NAPS`](Self::LAUNCH_NAPS) naps,
    /// or disabled). Uncontended: one CAS, the push, one store.
    #[inline]
    pub fn push(&self, record: &Record) -> bool {
        self.push_within(record, Self::LAUNCH_NAPS)
    }

    /// Push one record from a thread that may wait longer for the lock (off
    /// the launch path): as [`push`](Self::push), with up to
    /// [`PATIENT_NAPS`](Self::PATIENT_NAPS) naps.
    pub fn push_patient(&self, record: &Record) -> bool {
        self.push_within(record, Self::PATIENT_NAPS)
    }

    #[inline(always)]
    fn push_within(&self, record: &Record, naps: u32) -> bool {
        // Acquire: see the previous holder's updates to the Producer.
        match self
            .state
            .compare_exchange_weak(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
        {
            Ok(_) => {}
            Err(DISABLED) => return false,
            Err(_) => {
                if !self.lock_contended(naps) {
                    return false;
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

    /// The lock was held (or the CAS failed spuriously): spin, yield, nap,
    /// up to `naps` naps. `true` once this thread holds the lock; `false`
    /// if the producer is disabled, or the lock stayed held past the bound
    /// (counted as a busy drop).
    #[cold]
    #[inline(never)]
    fn lock_contended(&self, naps: u32) -> bool {
        let tries = Self::SPIN_LIMIT + Self::YIELD_LIMIT + naps;
        for attempt in 1..=tries {
            if attempt < Self::SPIN_LIMIT {
                crate::sync::spin_loop();
            } else if attempt < Self::SPIN_LIMIT + Self::YIELD_LIMIT {
                crate::sync::yield_now();
            } else {
                crate::sync::nap(Self::NAP);
            }
            // Acquire: as in push_within.
            match self
                .state
                .compare_exchange_weak(FREE, BUSY, Ordering::Acquire, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(DISABLED) => return false,
                Err(_) => {}
            }
        }
        // SAFETY: `header` was validated when the Producer attached and
        // stays valid for 'a; RingHeader is all atomics.
        unsafe { &*self.header }
            .dropped_busy
            .fetch_add(1, Ordering::Relaxed);
        false
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
