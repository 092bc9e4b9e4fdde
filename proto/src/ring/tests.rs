//! The ring's tests: layout numbers, region checks, FIFO order and exact
//! drop counts across threads, and a consumer that survives a garbage header.

use super::*;
use crate::error::Error;
use crate::record::{EventKind, Record};
use crate::shm::Mapping;
use crate::sync::{AtomicU64, Ordering};
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

/// More pushing threads than cores, on one `SyncProducer`: the scheduler
/// preempts threads while they hold its lock, as it preempts the shim's
/// launching thread or its watcher on a busy node. A contended push must
/// wait for the lock's holder to run again (boundedly) rather than drop:
/// every record arrives and none is counted busy. Each thread pushes in a
/// tight loop, so it holds the lock much of the time and is preempted
/// there often: with the old spin-then-drop, 2 cores and 4 threads dropped
/// 13,000-18,000 of 400,000. The threads push with `push_patient` (a bound
/// of at least 50 ms) so that a CI machine's load cannot fail the test;
/// `push` waits the same way with a shorter bound (see `LAUNCH_NAPS`).
#[test]
fn sync_producer_oversubscribed_drops_nothing() {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let threads = cores + 2;
    const PER: u64 = 100_000;
    let cap = (threads * PER).next_power_of_two() as u32;
    let (m, layout) = region(cap);
    let mut c = Consumer::init(&m, layout, 1).unwrap();
    let sp = SyncProducer::new(Producer::attach(&m, layout).unwrap());
    let accepted: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let sp = &sp;
                s.spawn(move || {
                    (0..PER)
                        .filter(|i| sp.push_patient(&rec((t << 40) | i)))
                        .count()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap() as u64).sum()
    });
    let st = c.stats();
    assert_eq!((st.dropped_busy, st.dropped_full), (0, 0), "{st:?}");
    assert_eq!(accepted, threads * PER);
    let mut last = vec![None::<u64>; threads as usize];
    let got = c
        .drain(|r| {
            let (t, i) = ((r.ts_ns >> 40) as usize, r.ts_ns & ((1 << 40) - 1));
            assert!(last[t].is_none_or(|l| l < i), "thread {t}'s order");
            last[t] = Some(i);
            check(r, r.ts_ns);
        })
        .unwrap();
    assert_eq!(got as u64, accepted);
}
