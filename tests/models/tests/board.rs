//! The GPU board (`proto/src/board.rs`) under loom: concurrent claims of a
//! GPU's slot, the shims' request counts and
//! bumps as a training shim reads them, and tandemd's repair of the count a
//! dead client left, each racing the others in every interleaving and with
//! every value the board's relaxed and acquire loads may return.
//!
//! The processes are threads here; each has its own view of the board
//! (`Board::from_raw`, the header checked) of the one shared mapping, taken
//! before the threads start, as is a shim's slot (found when it learns its
//! GPU): what races is what the shims and tandemd do after.

mod common;

use common::{board, model, NodeBoard};
use loom::thread;
use tandem_models::board::BOARD_SLOTS;

const GPU: u64 = 7;
const OTHER_GPU: u64 = 9;

/// tandemd claims GPU 7's slot (a client reported GPU 7) while another
/// claimer claims it too and a third claims GPU 9's. Only tandemd claims,
/// from one thread, but a job with a writable mapping could claim beside
/// it. Both claims of GPU 7 return the same slot, GPU 9 gets another, and
/// the board ends with exactly one slot per GPU, each holding its key.
/// Guards the compare-and-swap from 0 (a load-then-store claim lets two
/// GPUs take one slot) and the "already mine" answer when the swap fails
/// on the same key (without it a second claimer takes a second slot: the
/// look-up a claim starts with may load a stale 0, which this model found
/// when that answer was missing).
#[test]
fn concurrent_claims_of_a_gpu_agree_on_one_slot() {
    model("concurrent_claims_of_a_gpu_agree_on_one_slot", || {
        let nb = board();
        let claimer = |gpu: u64| {
            let map = nb.map.clone();
            let b = NodeBoard::view(&map);
            thread::spawn(move || {
                let _keep = map;
                b.claim(gpu)
            })
        };
        let shim = claimer(GPU);
        let other = claimer(OTHER_GPU);
        let by_tandemd = nb.board.claim(GPU).expect("a free slot");
        let by_shim = shim.join().expect("shim").expect("a free slot");
        let other = other.join().expect("shim").expect("a free slot");
        assert_eq!(by_shim, by_tandemd, "two slots for one GPU");
        assert_ne!(other, by_tandemd, "one slot for two GPUs");
        let b = nb.board;
        assert_eq!(b.slot(by_tandemd).expect("slot").gpu(), GPU);
        assert_eq!(b.slot(other).expect("slot").gpu(), OTHER_GPU);
        let claimed: Vec<u64> = (0..BOARD_SLOTS)
            .map(|i| b.slot(i).expect("slot").gpu())
            .filter(|&g| g != 0)
            .collect();
        assert_eq!(claimed.len(), 2, "slots claimed: {claimed:?}");
        assert_eq!(b.find(GPU), Some(by_tandemd));
        assert_eq!(b.find(OTHER_GPU), Some(other));
    });
}

/// Two inference shims on one GPU each begin an explicit request (count it
/// open, then bump) while a training shim reads the slot as its launch path
/// does: `seq` (Acquire), then `open` (Relaxed). Whatever bumps it sees, it
/// sees the requests they announced: `open >= seq`. Guards the Release bump
/// after the count, the reader's Acquire load of `seq`, and the order
/// inside `begin_request` (count, then bump).
#[test]
fn a_reader_that_sees_a_bump_sees_the_request_it_announced() {
    model(
        "a_reader_that_sees_a_bump_sees_the_request_it_announced",
        || {
            let nb = board();
            // tandemd claimed the slot at the GPU's first client.
            let i = nb.board.claim(GPU).expect("a free slot");
            let inference = || {
                let map = nb.map.clone();
                // Its slot, resolved when it learnt its GPU.
                let b = NodeBoard::view(&map);
                let s = b.slot(b.claim(GPU).expect("the slot")).expect("slot");
                thread::spawn(move || {
                    let _keep = map;
                    s.begin_request();
                })
            };
            let (a, c) = (inference(), inference());
            // The training shim: a read-only view, its slot found.
            let view = NodeBoard::view(&nb.map);
            let s = view.slot(view.find(GPU).expect("claimed")).expect("slot");
            let seq = s.seq();
            let open = s.open();
            assert!(open >= seq, "saw {seq} bumps but only {open} open requests");
            a.join().expect("shim");
            c.join().expect("shim");
            let s = nb.board.slot(i).expect("slot");
            assert_eq!((s.seq(), s.open()), (2, 2));
        },
    );
}

/// What a repair racing a live request saw: the count tandemd read right
/// after its repair, the count the live shim read during its request, and
/// the slot's count and sequence once both are done.
struct Repaired {
    seen: u64,
    during: u64,
    open: u64,
    seq: u64,
}

/// A dead client left `counted` requests counted on GPU 7's slot; tandemd
/// repairs `repair` of them (`end_requests`, from the client's control
/// block) while a live inference shim on the same GPU begins and ends one.
fn repair_beside_a_live_request(counted: u64, repair: u64) -> Repaired {
    let nb = board();
    let i = nb.board.claim(GPU).expect("a free slot");
    let s = nb.board.slot(i).expect("slot");
    for _ in 0..counted {
        s.begin_request();
    }
    let map = nb.map.clone();
    let s2 = NodeBoard::view(&map).slot(i).expect("slot");
    let live = thread::spawn(move || {
        let (_keep, s) = (map, s2);
        s.begin_request();
        let during = s.open();
        s.end_request();
        during
    });
    nb.board.end_requests(i, repair);
    let seen = s.open();
    let during = live.join().expect("shim");
    Repaired {
        seen,
        during,
        open: s.open(),
        seq: s.seq(),
    }
}

/// A client that died with two requests open is repaired by tandemd while a
/// live inference shim on the same GPU begins and ends a request, and
/// tandemd then reads the count as a training shim would, racing the live
/// shim. The repair never uncounts the live request (between its begin and
/// its end the shim sees at least its own request open), no read sees more
/// than the three requests ever open, and the count ends at exactly zero.
/// Guards the repair's single read-modify-write: a load then a store loses
/// the live shim's begin or end.
#[test]
fn a_repair_never_uncounts_a_live_request() {
    model("a_repair_never_uncounts_a_live_request", || {
        let r = repair_beside_a_live_request(2, 2);
        assert!(
            r.during >= 1,
            "the live request was uncounted: open {}",
            r.during
        );
        assert!(
            r.seen <= 3 && r.during <= 3,
            "open {} / {}: more than ever began",
            r.seen,
            r.during
        );
        assert_eq!(r.open, 0, "every request ended");
        assert_eq!(r.seq, 4, "two bumps each for the dead and the live");
    });
}

/// A repair that overstates what its client left (the client died after
/// counting a request in its control block but before counting it on the
/// board, or lied there: three claimed, one counted) races a live shim's
/// request. The count floors at zero: no reader ever sees it wrap, and it
/// ends at zero, not below. Guards the saturating subtraction in
/// `end_requests` (and so in every `end_request`).
#[test]
fn an_overstated_repair_stops_at_zero() {
    model("an_overstated_repair_stops_at_zero", || {
        let r = repair_beside_a_live_request(1, 3);
        assert!(
            r.seen <= 2 && r.during <= 2,
            "open {} / {}: wrapped below zero",
            r.seen,
            r.during
        );
        assert_eq!(r.open, 0);
    });
}
