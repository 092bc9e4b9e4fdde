//! What the models share: a region for one execution, records whose every
//! word depends on their sequence number (a torn or stale record shows), and
//! the model's bound.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use tandem_models::record::{EventKind, Record};
use tandem_models::ring::{Consumer, Producer, RingLayout};
use tandem_models::shm::Mapping;
use tandem_models::sync::{AtomicU64, Ordering};

/// Run model `name` under loom over every interleaving (no preemption
/// bound unless `LOOM_MAX_PREEMPTIONS` sets one: these models are small
/// enough to explore exhaustively in about a second) and print how many
/// executions that took.
pub fn model<F: Fn() + Sync + Send + 'static>(name: &str, f: F) {
    let b = loom::model::Builder::new();
    let bound = b.preemption_bound;
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = runs.clone();
    b.check(move || {
        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom: {name}: {} executions ({})",
        runs.load(std::sync::atomic::Ordering::Relaxed),
        bound.map_or("exhaustive".to_string(), |b| format!(
            "at most {b} preemptions"
        ))
    );
}

/// Record number `seq`: each of its eight words is a function of `seq`.
pub fn rec(seq: u64) -> Record {
    let mut r = Record::new(EventKind::LAUNCH, seq);
    r.shared_mem_bytes = seq as u32 ^ 0x5A5A;
    r.stream = seq.wrapping_mul(3) + 1;
    r.func_id = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    r.bytes = !seq;
    r.addr = seq ^ 0xDEAD_BEEF_0000;
    r.grid_x = seq as u32 + 7;
    r.block_x = seq as u16 + 9;
    r
}

/// The sequence number of `r`, after checking every word agrees with it.
pub fn seq_of(r: &Record) -> u64 {
    let want = rec(r.ts_ns);
    assert_eq!(*r, want, "a torn or stale record");
    r.ts_ns
}

/// A fresh ring of `capacity` records, its consumer (tandemd) and producer
/// (the shim), for one execution. The producer may move to another thread.
pub struct Ring {
    // Declared first, dropped first: both point into `map`.
    pub producer: Option<Producer<'static>>,
    pub consumer: Consumer<'static>,
    pub map: Arc<Mapping>,
}

pub fn ring(capacity: u32) -> Ring {
    let layout = RingLayout::new(capacity).expect("layout");
    let map = Arc::new(Mapping::anonymous_shared(layout.region_len()).expect("mmap"));
    // SAFETY: the mapping lives in an Arc that every holder of the consumer
    // or the producer also holds (the Ring, or the thread the producer moved
    // to keeps a clone), and it is only accessed through atomics.
    let consumer = unsafe { Consumer::init_raw(map.as_ptr(), map.len(), layout, 1) }.expect("init");
    // SAFETY: as above; the only producer of the region.
    let producer =
        unsafe { Producer::attach_raw(map.as_ptr(), map.len(), layout) }.expect("attach");
    // Create the loom atomic of every record word now, on this thread, so
    // both sides' threads start after every creation (loom would otherwise
    // flag a word the consumer reads before it learnt of its creation).
    let first = map
        .as_ptr()
        .wrapping_add(layout.records_offset())
        .cast::<AtomicU64>();
    for i in 0..layout.capacity() as usize * 8 {
        // SAFETY: inside the slots area of the live mapping, 8-aligned.
        unsafe { &*first.add(i) }.load(Ordering::Relaxed);
    }
    Ring {
        producer: Some(producer),
        consumer,
        map,
    }
}
