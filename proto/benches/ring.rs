//! Ring throughput: records/s for one producer.
//!
//! * `spsc_with_consumer`: one producer pushing into a ring that a consumer
//!   thread drains concurrently; the producer re-tries when the ring is full,
//!   so the number is the sustained lossless rate (records delivered per second).
//! * `push_only`: the cost of `push` alone into a ring with room (the ring is
//!   emptied outside the timed section).
//! * `push_full`: the cost of a push that drops (ring full).
//! * `sync_push_only`: `push` through the multi-thread wrapper (`SyncProducer`),
//!   uncontended.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tandem_proto::ring::{Consumer, Producer, RingLayout, SyncProducer};
use tandem_proto::{EventKind, Mapping, Record};

fn record(i: u64) -> Record {
    let mut r = Record::new(EventKind::LAUNCH, i);
    r.func_id = 0xDEAD_BEEF;
    r.stream = 0x7f00_0000_1000;
    r.set_dims([128, 1, 1], [256, 1, 1]);
    r
}

fn spsc_with_consumer(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    let layout = RingLayout::new(tandem_proto::ring::DEFAULT_CAPACITY).unwrap();
    let map: &'static Mapping = Box::leak(Box::new(
        Mapping::anonymous_shared(layout.region_len()).unwrap(),
    ));
    let consumer = Consumer::init(map, layout, 1).unwrap();
    let mut producer = Producer::attach(map, layout).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let consumed = Arc::new(AtomicU64::new(0));
    let t = {
        let (stop, consumed) = (Arc::clone(&stop), Arc::clone(&consumed));
        let mut consumer = consumer;
        std::thread::spawn(move || {
            let mut sum = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = consumer.drain(|r| sum = sum.wrapping_add(r.ts_ns)).unwrap();
                if n == 0 {
                    std::hint::spin_loop();
                } else {
                    consumed.fetch_add(n as u64, Ordering::Release);
                }
            }
            std::hint::black_box(sum);
        })
    };
    g.bench_function("spsc_with_consumer", |b| {
        b.iter_custom(|iters| {
            let target = consumed.load(Ordering::Acquire) + iters;
            let start = Instant::now();
            for i in 0..iters {
                let r = record(i);
                while !producer.push(&r) {
                    std::hint::spin_loop();
                }
            }
            while consumed.load(Ordering::Acquire) < target {
                std::hint::spin_loop();
            }
            start.elapsed()
        });
    });
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
    g.finish();
}

fn push_only(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    let layout = RingLayout::new(tandem_proto::ring::DEFAULT_CAPACITY).unwrap();
    let map = Mapping::anonymous_shared(layout.region_len()).unwrap();
    let mut consumer = Consumer::init(&map, layout, 1).unwrap();
    let mut producer = Producer::attach(&map, layout).unwrap();
    let cap = u64::from(layout.capacity());
    g.bench_function("push_only", |b| {
        b.iter_custom(|iters| {
            timed_pushes(iters, cap, &mut consumer, |i| producer.push(&record(i)))
        });
    });
    g.bench_function("push_full_drop", |b| {
        for i in 0..cap {
            producer.push(&record(i));
        }
        b.iter(|| std::hint::black_box(producer.push(std::hint::black_box(&record(1)))));
        consumer.drain(|_| ()).unwrap();
    });
    let sp = SyncProducer::new(producer);
    g.bench_function("sync_push_only", |b| {
        b.iter_custom(|iters| timed_pushes(iters, cap, &mut consumer, |i| sp.push(&record(i))));
    });
    g.finish();
}

criterion_group!(benches, spsc_with_consumer, push_only);
criterion_main!(benches);

/// Times `iters` pushes in batches of at most `cap` (the ring's capacity), the
/// consumer draining between batches outside the timed part, so no push drops.
fn timed_pushes(
    iters: u64,
    cap: u64,
    consumer: &mut Consumer<'_>,
    mut push: impl FnMut(u64) -> bool,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(cap);
        let start = Instant::now();
        for i in 0..n {
            std::hint::black_box(push(i));
        }
        total += start.elapsed();
        consumer
            .drain(|r| {
                std::hint::black_box(r);
            })
            .unwrap();
        left -= n;
    }
    total
}
