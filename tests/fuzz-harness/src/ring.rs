//! The ring's consumer (tandemd's side) reading a ring and control block
//! that the other process may scribble on at will, beside an honest
//! producer and the control block's gate and limit operations.
//!
//! Input: byte 0 picks the capacity (16, 32 or 64 records); then a program
//! of operations, one byte each plus operands: push, pop, drain, write any
//! 64-bit word of the region (header, control block or slots), gate and
//! limit operations, re-attach the producer, read the statistics.
//!
//! Oracle: nothing panics; a drain never returns more than a ring's worth;
//! while nobody has written the header or the slots behind the protocol's
//! back, the consumer never errs and sees exactly the records the producer
//! accepted, in order, and the drop counter equals the pushes refused.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tandem_proto::record::EventKind;
use tandem_proto::ring::{control_block, RING_HEADER_SIZE};
use tandem_proto::{Consumer, Mapping, Producer, Record, RingLayout};

use crate::input::Input;

fn rec(seq: u64) -> Record {
    let mut r = Record::new(EventKind::LAUNCH, seq);
    r.func_id = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    r
}

/// One input.
pub fn run(data: &[u8]) {
    let mut u = Input::new(data);
    let layout = RingLayout::new(16 << (u.u8() % 3)).expect("16..64 are valid");
    let m = Mapping::anonymous_shared(layout.region_len()).expect("mmap");
    let mut c = Consumer::init(&m, layout, 7).expect("init");
    let mut p = Producer::attach(&m, layout).expect("attach to a fresh ring");
    let cb = control_block(&m, layout).expect("control block");
    let words = m.len() / 8;
    let header_words = RING_HEADER_SIZE / 8;
    let control_words = layout.records_offset() / 8;
    let cap = u64::from(layout.capacity());
    // The records accepted and not yet consumed, while the ring is honest.
    let mut expect: VecDeque<u64> = VecDeque::new();
    let mut honest = true;
    let mut seq = 0u64;
    let mut refused = 0u64;
    while let Some(op) = u.op() {
        match op % 10 {
            0 => {
                seq += 1;
                if p.push(&rec(seq)) {
                    expect.push_back(seq);
                } else {
                    refused += 1;
                    if honest {
                        assert_eq!(
                            expect.len() as u64,
                            cap,
                            "an honest ring drops only when full"
                        );
                    }
                }
            }
            1 => match c.pop() {
                Ok(got) if honest => {
                    assert_eq!(got.map(|r| r.ts_ns), expect.pop_front(), "FIFO")
                }
                Ok(_) => {}
                Err(e) => {
                    assert!(!honest, "an honest ring errs: {e}");
                }
            },
            2 => {
                let mut got = Vec::new();
                match c.drain(|r| got.push(r.ts_ns)) {
                    Ok(n) => {
                        assert_eq!(n, got.len());
                        assert!(n as u64 <= cap, "a drain is at most a ring's worth");
                        if honest {
                            let want: Vec<u64> = expect.drain(..).collect();
                            assert_eq!(
                                got, want,
                                "a drain returns every accepted record, in order"
                            );
                        }
                    }
                    Err(e) => assert!(!honest, "an honest ring errs: {e}"),
                }
            }
            3 => {
                let idx = usize::from(u.u16()) % words;
                let v = u.u64();
                // SAFETY: idx < len/8 words of a live, 8-aligned mapping that
                // is only ever accessed through atomics.
                let w = unsafe { &*m.as_ptr().cast::<AtomicU64>().add(idx) };
                w.store(v, Ordering::Relaxed);
                // The control block is not part of the ring's protocol.
                if idx < header_words || idx >= control_words {
                    honest = false;
                }
            }
            4 => {
                let allowed = cb.launch_allowed();
                if allowed {
                    cb.count_launch();
                }
            }
            5 => {
                let limit = u.u64();
                let _ = cb.set_launch_limit(limit);
            }
            6 => {
                match u.u8() % 3 {
                    0 => cb.close_gate(),
                    1 => {
                        let _ = cb.open_gate();
                    }
                    _ => {
                        let _ = cb.wait_launch(Duration::ZERO, Duration::ZERO);
                    }
                }
                let _ = (
                    cb.client_counters(),
                    cb.gate(),
                    cb.heartbeat(),
                    cb.launches(),
                );
            }
            7 => {
                // A shim re-attaching (after exec, or a second mapping).
                match Producer::attach(&m, layout) {
                    Ok(np) => {
                        if honest {
                            assert_eq!(np.pushed(), p.pushed());
                        }
                        p = np;
                    }
                    Err(e) => assert!(!honest, "an honest ring refuses attach: {e}"),
                }
            }
            8 => {
                let _ = (p.free_slots(), p.stats(), c.stats(), c.check_header());
            }
            _ => cb.beat(),
        }
    }
    if honest {
        let s = c.stats();
        assert_eq!(s.dropped_full, refused, "every refused push is counted");
        assert_eq!(p.pushed(), c.consumed() + expect.len() as u64);
    }
}
