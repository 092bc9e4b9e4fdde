//! The ring's single-producer / single-consumer protocol (`proto/src/ring/`)
//! under loom: every interleaving of the shim pushing and tandemd popping,
//! within the preemption bound, and every value the protocol's relaxed and
//! acquire loads may see.

mod common;

use std::sync::Arc;

use common::{model, rec, ring, seq_of};
use loom::thread;
use tandem_models::ring::SyncProducer;

/// Wrap-around: with the ring's indices two short of its end, the producer
/// pushes four records (slots 14, 15, 0, 1) while the consumer pops. Every
/// push finds room (the ring never had more than 4 of 16 slots in use), and
/// the consumer sees the four records whole and in order. Guards the
/// Release store of `head` after the slot's words (a consumer that sees the
/// new head must see the record) and the masked slot index.
#[test]
fn wrap_around_delivers_whole_records_in_order() {
    model("wrap_around_delivers_whole_records_in_order", || {
        let mut r = ring(16);
        let mut p = r.producer.take().expect("producer");
        for s in 0..14 {
            assert!(p.push(&rec(s)));
        }
        assert_eq!(r.consumer.drain(|_| ()).expect("drain"), 14);
        let keep = r.map.clone();
        let shim = thread::spawn(move || {
            let _keep = keep;
            for s in 14..18 {
                assert!(p.push(&rec(s)), "a push refused with free slots");
            }
        });
        let mut got = Vec::new();
        for _ in 0..2 {
            match r.consumer.pop().expect("an honest ring") {
                Some(rec) => got.push(seq_of(&rec)),
                None => thread::yield_now(),
            }
        }
        shim.join().expect("shim");
        r.consumer
            .drain(|rec| got.push(seq_of(rec)))
            .expect("an honest ring");
        assert_eq!(got, [14, 15, 16, 17]);
        assert_eq!(r.consumer.stats().dropped_full, 0);
    });
}

/// A full ring: the producer tries two more pushes while the consumer pops
/// one record. A push either lands in the slot the consumer freed, never
/// over a record still unread or being read, or is dropped and counted; the
/// consumer ends with every record accepted, whole and in order, and the
/// drop counter equals the pushes refused. Guards the full check, the
/// Acquire load of `tail` before a slot is reused, the consumer's reading a
/// slot before it publishes `tail` past it, and the drop counter.
#[test]
fn full_ring_drops_are_counted_and_never_overwrite() {
    model("full_ring_drops_are_counted_and_never_overwrite", || {
        let mut r = ring(16);
        let mut p = r.producer.take().expect("producer");
        for s in 0..16 {
            assert!(p.push(&rec(s)));
        }
        let keep = r.map.clone();
        let shim = thread::spawn(move || {
            let _keep = keep;
            (16..18).filter(|&s| p.push(&rec(s))).collect::<Vec<u64>>()
        });
        let first = r
            .consumer
            .pop()
            .expect("an honest ring")
            .expect("a full ring has a record");
        assert_eq!(seq_of(&first), 0);
        let accepted = shim.join().expect("shim");
        let mut got = Vec::new();
        r.consumer
            .drain(|rec| got.push(seq_of(rec)))
            .expect("an honest ring");
        let want: Vec<u64> = (1..16).chain(accepted.iter().copied()).collect();
        assert_eq!(got, want, "every accepted record, in order");
        assert!(accepted.len() <= 1, "one slot was freed");
        assert_eq!(
            r.consumer.stats().dropped_full,
            2 - accepted.len() as u64,
            "drops counted"
        );
    });
}

/// Two threads share a `SyncProducer`, as the shim's launching thread and
/// its watcher do: the launching thread pushes two records (`push`), the
/// watcher one (`push_patient`), each waiting for the other where it finds
/// the lock held (loom preempts a holder anywhere in its critical section).
/// No record is dropped or torn, each thread's arrive in its order, and
/// nothing is counted busy. Guards the contended path's retries: a waiter
/// takes the lock only once its holder let go (one that entered early wrote
/// over the holder's slot, which this model catches), and gives up only
/// past its bound. (The Producer's own fields are plain memory, which loom
/// does not model: the lock's Acquire / Release pairing is argued in
/// `producer.rs`, not checked here.)
#[test]
fn sync_producer_shared_by_two_threads_loses_nothing() {
    model("sync_producer_shared_by_two_threads_loses_nothing", || {
        let mut r = ring(16);
        let sp = Arc::new(SyncProducer::new(r.producer.take().expect("producer")));
        // Creates the loom atomic of the lock's word on this thread, before
        // the watcher's starts (as `ring` does for the records' words).
        assert!(!sp.is_disabled());
        let (keep, watcher_sp) = (r.map.clone(), Arc::clone(&sp));
        let watcher = thread::spawn(move || {
            let _keep = keep;
            assert!(watcher_sp.push_patient(&rec(100)), "the watcher's dropped");
        });
        assert!(sp.push(&rec(0)), "a launch dropped");
        assert!(sp.push(&rec(1)), "a launch dropped");
        watcher.join().expect("watcher");
        let mut got = Vec::new();
        r.consumer
            .drain(|rec| got.push(seq_of(rec)))
            .expect("an honest ring");
        let launches: Vec<u64> = got.iter().copied().filter(|&s| s < 100).collect();
        assert_eq!(launches, [0, 1], "the launching thread's, in order");
        assert_eq!(got.len(), 3, "every record: {got:?}");
        let st = r.consumer.stats();
        assert_eq!((st.dropped_busy, st.dropped_full), (0, 0));
    });
}
