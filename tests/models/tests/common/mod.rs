//! What the models share: a region for one execution, records whose every
//! word depends on their sequence number (a torn or stale record shows), and
//! the model's bound.

// Each test file uses a part of this module.
#![allow(dead_code)]

use std::sync::Arc;

use tandem_models::board::{Board, BOARD_LEN, BOARD_SLOTS};
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

/// A fresh, initialised GPU board for one execution (tandemd's, from
/// `Board::init`), and the mapping it lives in, which threads that map the
/// board again (`Board::from_raw`, as a shim does) keep alive.
pub struct NodeBoard {
    pub board: &'static Board,
    pub map: Arc<Mapping>,
}

impl NodeBoard {
    /// The board as another process maps it: the header checked again.
    pub fn view(map: &Mapping) -> &'static Board {
        // SAFETY: the caller holds an Arc of the live mapping for as long as
        // it uses the view; accessed only through atomics.
        unsafe { Board::from_raw(map.as_ptr(), map.len()) }.expect("a valid board")
    }
}

pub fn board() -> NodeBoard {
    let map = Arc::new(Mapping::anonymous_shared(BOARD_LEN).expect("mmap"));
    // SAFETY: a fresh writable shared mapping of BOARD_LEN bytes, page-aligned,
    // kept alive by the NodeBoard's Arc and by every thread's clone of it.
    let board = unsafe { Board::init(map.as_ptr(), map.len()) }.expect("init");
    // Create the loom atomic of every slot word a model may touch now, on
    // this thread, before any other starts (as for the ring's records):
    // each slot's `gpu` (a claim or find scans them), `seq` and `open`.
    for i in 0..BOARD_SLOTS {
        let s = board.slot(i).expect("slot");
        let _ = (s.gpu(), s.seq(), s.open());
    }
    NodeBoard { board, map }
}
