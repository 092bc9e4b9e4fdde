//! The coordinator's end of the ring: [`Consumer`], which initialises the
//! region and reads it as untrusted.

use core::marker::PhantomData;

use crate::error::{Error, Result};
use crate::record::{Record, RECORD_WORDS};
use crate::shm::Mapping;
use crate::sync::{AtomicU64, Ordering};

use crate::control::ControlBlock;
use crate::record::RECORD_SIZE;

use super::layout::{
    raw_parts, validate_header, RingHeader, RingLayout, RingStats, CONTROL_OFFSET, RECORDS_OFFSET,
    RING_LAYOUT_VERSION, RING_MAGIC,
};

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
    /// Same contract as [`Producer::attach_raw`](super::Producer::attach_raw); there must be at most one
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
