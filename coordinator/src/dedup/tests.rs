//! Unit tests of the index: one conversation at a time, the whole state
//! audited after every step.

use tandem_proto::dedup::{Dedup, DedupOp, DedupStatus, WithdrawReason};

use super::index::{Index, IndexConfig};
use super::outcome::{Action, Refusal, RefusalKind};

const L: u64 = 2 << 20;
const S: u64 = 1_000_000_000;
const GPU: u64 = 7;

struct T {
    ix: Index,
    now: u64,
}

fn h(n: u8) -> [u8; 16] {
    [n; 16]
}

fn cand(g: u64, hash: u8) -> Dedup {
    let mut d = Dedup::new(DedupOp::Candidate, g, L);
    d.hash = h(hash);
    d
}

fn reply(op: DedupOp, g: u64, s: u64, status: DedupStatus) -> Dedup {
    let mut d = Dedup::new(op, g, L);
    d.shared_id = s;
    d.status = status.0;
    d
}

fn withdraw(g: u64, s: u64, why: WithdrawReason) -> Dedup {
    let mut d = Dedup::new(DedupOp::Withdraw, g, L);
    d.shared_id = s;
    d.status = why.0;
    d
}

fn publish(client: u64, g: u64, s: u64, hash: u8) -> Action {
    let mut msg = Dedup::new(DedupOp::Publish, g, L);
    msg.shared_id = s;
    msg.hash = h(hash);
    Action::SendPublish { client, msg }
}

fn offer(client: u64, g: u64, s: u64, hash: u8) -> Action {
    let mut msg = Dedup::new(DedupOp::Offer, g, L);
    msg.shared_id = s;
    msg.hash = h(hash);
    Action::SendOffer { client, msg }
}

fn forget(client: u64, g: u64, s: u64) -> Action {
    let mut msg = Dedup::new(DedupOp::Forget, g, L);
    msg.shared_id = s;
    Action::SendForget { client, msg }
}

fn close(s: u64) -> Action {
    Action::CloseShared { shared_id: s }
}

impl T {
    fn with(max: usize) -> T {
        T {
            ix: Index::new(IndexConfig {
                granule_len: L,
                timeout_ns: 5 * S,
                max_entries_per_client: max,
            }),
            now: 1,
        }
    }

    fn new() -> T {
        T::with(1000)
    }

    /// Clients 1..=n in group "g", on GPU [`GPU`].
    fn clients(n: u64) -> T {
        let mut t = T::new();
        for c in 1..=n {
            t.join(c, "g", GPU);
        }
        t
    }

    fn join(&mut self, c: u64, group: &str, gpu: u64) {
        self.ix.join(c, group);
        let mut out = Vec::new();
        self.ix.set_gpu(self.now, c, gpu, &mut out);
        assert!(out.is_empty());
    }

    fn step(&mut self, c: u64, m: Dedup, fd: bool) -> (Result<(), Refusal>, Vec<Action>) {
        let mut out = Vec::new();
        let r = self.ix.handle(self.now, c, &m, fd, &mut out);
        self.ix
            .audit()
            .unwrap_or_else(|e| panic!("after {m:?} from {c}: {e}"));
        (r, out)
    }

    /// A step that must be accepted; its actions.
    fn ok(&mut self, c: u64, m: Dedup, fd: bool) -> Vec<Action> {
        let (r, out) = self.step(c, m, fd);
        assert_eq!(r, Ok(()), "{m:?} from {c}");
        out
    }

    /// A step that must be refused and change nothing but a counter.
    fn refused(&mut self, c: u64, m: Dedup, fd: bool) -> Refusal {
        let before = self.ix.fingerprint();
        let (r, out) = self.step(c, m, fd);
        assert!(out.is_empty(), "{m:?}: {out:?}");
        assert_eq!(self.ix.fingerprint(), before, "{m:?} changed the state");
        r.expect_err("refused")
    }

    /// A step that must be counted as a late answer and do nothing.
    fn late(&mut self, c: u64, m: Dedup, fd: bool) {
        let (r, out) = self.step(c, m, fd);
        assert!(out.is_empty(), "{m:?}: {out:?}");
        assert_eq!(r.map_err(|e| e.kind()), Err(RefusalKind::Late), "{m:?}");
    }

    fn leave(&mut self, c: u64) -> Vec<Action> {
        let mut out = Vec::new();
        self.ix.leave(self.now, c, &mut out);
        self.ix.audit().unwrap();
        out
    }

    fn tick(&mut self, at: u64) -> Vec<Action> {
        self.now = at;
        let mut out = Vec::new();
        self.ix.tick(at, &mut out);
        self.ix.audit().unwrap();
        out
    }

    fn k(&self) -> super::stats::GpuCounters {
        self.ix.counters(GPU).cloned().unwrap_or_default()
    }

    /// Publish by `c` answered OK: the actions after AdoptFd.
    fn published_ok(&mut self, c: u64, g: u64, s: u64) -> Vec<Action> {
        let out = self.ok(c, reply(DedupOp::Published, g, s, DedupStatus::OK), true);
        assert_eq!(out.first(), Some(&Action::AdoptFd { shared_id: s }));
        out[1..].to_vec()
    }
}

#[test]
fn no_publish_until_two_candidates_match_on_group_gpu_len_and_hash() {
    let mut t = T::new();
    t.join(1, "a", 1);
    t.join(2, "b", 1); // other group
    t.join(3, "a", 2); // other gpu
    t.join(4, "a", 1);
    assert!(t.ok(1, cand(0x10, 1), false).is_empty());
    assert!(t.ok(2, cand(0x10, 1), false).is_empty());
    assert!(t.ok(3, cand(0x10, 1), false).is_empty());
    assert!(t.ok(4, cand(0x20, 2), false).is_empty(), "other hash");
    // Another len is never a candidate at all.
    let mut odd = cand(0x30, 1);
    odd.len = L / 2;
    assert_eq!(t.refused(4, odd, false), Refusal::WrongLen(L / 2));
    // The same group, gpu, len and hash: the oldest candidate publishes.
    assert_eq!(t.ok(4, cand(0x40, 1), false), vec![publish(1, 0x10, 1, 1)]);
    assert_eq!(t.ix.client(1).unwrap().candidates, 1);
}

#[test]
fn offers_only_after_published_ok_then_merges_count() {
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 9), false);
    assert_eq!(t.ok(2, cand(0x20, 9), false), vec![publish(1, 0x10, 1, 9)]);
    assert!(
        t.ok(3, cand(0x30, 9), false).is_empty(),
        "no offer before PUBLISHED"
    );
    t.now += 1_000;
    assert_eq!(
        t.published_ok(1, 0x10, 1),
        vec![offer(2, 0x20, 1, 9), offer(3, 0x30, 1, 9)]
    );
    assert_eq!((t.k().shared_copies, t.k().saved_bytes), (1, 0));
    t.now += 3_000_000;
    assert!(t
        .ok(2, reply(DedupOp::Result, 0x20, 1, DedupStatus::OK), false)
        .is_empty());
    assert_eq!(
        (t.k().merges, t.k().saved_bytes, t.k().shared_bytes),
        (1, L, L)
    );
    assert_eq!(t.k().latency().max, Some(3.0), "offer sent -> RESULT OK");
    t.ok(3, reply(DedupOp::Result, 0x30, 1, DedupStatus::OK), false);
    assert_eq!((t.k().merges, t.k().saved_bytes), (2, 2 * L));
    assert_eq!(
        t.ix.client(1).unwrap().shared_bytes,
        L,
        "the publisher holds it too"
    );
    assert_eq!(t.ix.client(3).unwrap().shared_bytes, L);
    // A later candidate of the same content gets an offer at once.
    t.join(4, "g", GPU);
    assert_eq!(t.ok(4, cand(0x40, 9), false), vec![offer(4, 0x40, 1, 9)]);
}

#[test]
fn two_granules_of_one_client_may_match() {
    let mut t = T::clients(1);
    t.ok(1, cand(0x10, 3), false);
    assert_eq!(t.ok(1, cand(0x20, 3), false), vec![publish(1, 0x10, 1, 3)]);
    assert_eq!(t.published_ok(1, 0x10, 1), vec![offer(1, 0x20, 1, 3)]);
    t.ok(1, reply(DedupOp::Result, 0x20, 1, DedupStatus::OK), false);
    assert_eq!(t.k().saved_bytes, L);
    // The same granule twice is not a match: it is already tracked.
    assert_eq!(
        t.refused(1, cand(0x20, 3), false),
        Refusal::AlreadyTracked(0x20)
    );
}

#[test]
fn failed_publish_hands_over_to_the_next_candidate() {
    let mut t = T::clients(4);
    t.ok(1, cand(0x10, 5), false);
    t.ok(2, cand(0x20, 5), false);
    t.ok(3, cand(0x30, 5), false);
    // status != OK
    let out = t.ok(
        1,
        reply(DedupOp::Published, 0x10, 1, DedupStatus::DRIVER_ERROR),
        false,
    );
    assert_eq!(out, vec![publish(2, 0x20, 2, 5)], "next oldest, new id");
    assert_eq!(t.k().publish_failures, 1);
    assert!(
        t.ix.client(1).unwrap().candidates == 0,
        "publisher's candidate dropped"
    );
    // OK without an fd is a failure too; one candidate left: it waits.
    let out = t.ok(
        2,
        reply(DedupOp::Published, 0x20, 2, DedupStatus::OK),
        false,
    );
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(t.k().publish_failures, 2);
    // A fourth candidate: the waiting one publishes.
    assert_eq!(t.ok(4, cand(0x40, 5), false), vec![publish(3, 0x30, 3, 5)]);
    // The publisher answering for another granule fails its publish (and is counted).
    let r = t.step(3, reply(DedupOp::Published, 0x99, 3, DedupStatus::OK), true);
    assert!(matches!(r.0, Err(Refusal::NotAsked { .. })), "{r:?}");
    assert!(r.1.is_empty(), "{r:?}");
    assert_eq!((t.k().publish_failures, t.k().protocol_errors), (3, 1));
    assert_eq!(t.ix.client(4).unwrap().candidates, 1, "the last one waits");
}

#[test]
fn mismatch_is_counted_and_never_offered_again() {
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 4), false);
    t.ok(2, cand(0x20, 4), false);
    t.published_ok(1, 0x10, 1);
    t.ok(
        2,
        reply(DedupOp::Result, 0x20, 1, DedupStatus::MISMATCH),
        false,
    );
    assert_eq!(
        (t.k().mismatches, t.k().merges, t.k().saved_bytes),
        (1, 0, 0)
    );
    assert_eq!(t.ix.client(2).unwrap().candidates, 0);
    // The same granule with the same hash: ignored, never re-offered.
    assert_eq!(
        t.refused(2, cand(0x20, 4), false),
        Refusal::RefusedContent(0x20)
    );
    assert_eq!(t.k().candidates_ignored, 1);
    // Another hash for that granule, or another granule, is fine.
    assert!(t.ok(2, cand(0x20, 6), false).is_empty());
    assert_eq!(t.ok(3, cand(0x30, 4), false), vec![offer(3, 0x30, 1, 4)]);
    // Freeing the granule forgets the refusal (new memory at that address).
    t.ok(2, withdraw(0x20, 0, WithdrawReason::FREED), false);
    assert_eq!(t.ok(2, cand(0x20, 4), false), vec![offer(2, 0x20, 1, 4)]);
}

#[test]
fn failed_results_drop_the_granule_and_close_an_unused_copy_once() {
    for status in [
        DedupStatus::GONE,
        DedupStatus::DRIVER_ERROR,
        DedupStatus::DECLINED,
    ] {
        let mut t = T::clients(3);
        t.ok(1, cand(0x10, 4), false);
        t.ok(2, cand(0x20, 4), false);
        t.ok(3, cand(0x30, 4), false);
        t.published_ok(1, 0x10, 1);
        // The publisher leaves: the copy lives on while offers are out.
        assert!(t
            .ok(1, withdraw(0x10, 1, WithdrawReason::FREED), false)
            .is_empty());
        assert!(t
            .ok(2, reply(DedupOp::Result, 0x20, 1, status), false)
            .is_empty());
        assert_eq!(t.k().offer_failures, 1, "{}", status.name());
        // The last outstanding offer fails: closed, exactly once.
        assert_eq!(
            t.ok(3, reply(DedupOp::Result, 0x30, 1, status), false),
            vec![close(1)]
        );
        assert_eq!((t.k().shared_copies, t.k().shared_bytes), (0, 0));
        // Anything naming the closed copy now is late, and closes nothing.
        t.late(3, reply(DedupOp::Result, 0x30, 1, DedupStatus::OK), false);
        t.late(1, withdraw(0x10, 1, WithdrawReason::FREED), false);
    }
}

#[test]
fn withdraw_for_every_reason() {
    let mut t = T::clients(4);
    // Pending, CHANGED: it leaves the pending list (no publish on the next match).
    t.ok(1, cand(0x10, 1), false);
    t.ok(1, withdraw(0x10, 0, WithdrawReason::CHANGED), false);
    assert!(t.ok(2, cand(0x20, 1), false).is_empty());
    // Publishing, FREED: the next candidate publishes instead.
    t.ok(3, cand(0x30, 1), false);
    t.ok(4, cand(0x40, 1), false);
    assert_eq!(
        t.ok(2, withdraw(0x20, 0, WithdrawReason::FREED), false),
        vec![publish(3, 0x30, 2, 1)]
    );
    assert_eq!(t.k().publish_failures, 0, "a withdrawal is not a failure");
    assert_eq!(t.published_ok(3, 0x30, 2), vec![offer(4, 0x40, 2, 1)]);
    // Offered, CHANGED: the offer is dropped; a late answer is counted late.
    t.ok(4, withdraw(0x40, 0, WithdrawReason::CHANGED), false);
    assert_eq!(t.k().offer_failures, 0);
    t.late(4, reply(DedupOp::Result, 0x40, 2, DedupStatus::GONE), false);
    // Holders: COPY_ON_WRITE counts a cow break; FREED and CHANGED do not.
    t.ok(1, cand(0x11, 1), false);
    t.ok(2, cand(0x21, 1), false);
    t.ok(4, cand(0x41, 1), false);
    for (c, g) in [(1, 0x11), (2, 0x21), (4, 0x41)] {
        t.ok(c, reply(DedupOp::Result, g, 2, DedupStatus::OK), false);
    }
    assert_eq!(t.k().saved_bytes, 3 * L);
    t.ok(1, withdraw(0x11, 2, WithdrawReason::COPY_ON_WRITE), false);
    assert_eq!((t.k().cow_breaks, t.k().saved_bytes), (1, 2 * L));
    t.ok(2, withdraw(0x21, 2, WithdrawReason::CHANGED), false);
    t.ok(3, withdraw(0x30, 2, WithdrawReason::FREED), false);
    assert_eq!((t.k().cow_breaks, t.k().saved_bytes), (1, 0));
    assert_eq!(
        t.ok(4, withdraw(0x41, 2, WithdrawReason::FREED), false),
        vec![close(2)]
    );
    for c in 1..=4 {
        assert!(t.leave(c).is_empty());
    }
    assert!(t.ix.is_empty());
}

#[test]
fn a_copy_closes_only_without_holders_and_offers() {
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 2), false);
    t.ok(2, cand(0x20, 2), false);
    t.published_ok(1, 0x10, 1);
    t.ok(2, reply(DedupOp::Result, 0x20, 1, DedupStatus::OK), false);
    assert_eq!(t.ok(3, cand(0x30, 2), false), vec![offer(3, 0x30, 1, 2)]);
    assert!(t
        .ok(1, withdraw(0x10, 1, WithdrawReason::FREED), false)
        .is_empty());
    assert!(
        t.ok(2, withdraw(0x20, 1, WithdrawReason::FREED), false)
            .is_empty(),
        "offer out"
    );
    assert_eq!(t.k().shared_copies, 1);
    assert_eq!(
        t.ok(3, reply(DedupOp::Result, 0x30, 1, DedupStatus::OK), false),
        vec![]
    );
    assert_eq!(
        t.ok(3, withdraw(0x30, 1, WithdrawReason::FREED), false),
        vec![close(1)]
    );
    // A new candidate of that content starts over with a new id.
    t.ok(1, cand(0x12, 2), false);
    assert_eq!(t.ok(2, cand(0x22, 2), false), vec![publish(1, 0x12, 2, 2)]);
}

#[test]
fn a_client_going_away_in_every_state() {
    // Pending.
    let mut t = T::clients(2);
    t.ok(1, cand(0x10, 1), false);
    assert!(t.leave(1).is_empty());
    assert!(
        t.ok(2, cand(0x20, 1), false).is_empty(),
        "gone candidate never matches"
    );
    assert!(t.leave(2).is_empty());
    assert!(t.ix.is_empty());

    // The publisher, while publishing: the next candidate publishes.
    let mut t = T::clients(4);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    t.ok(3, cand(0x30, 1), false);
    assert_eq!(t.leave(1), vec![publish(2, 0x20, 2, 1)]);
    // A waiting candidate: it gets no offer.
    t.ok(4, cand(0x40, 1), false);
    assert!(t.leave(3).is_empty());
    assert_eq!(t.published_ok(2, 0x20, 2), vec![offer(4, 0x40, 2, 1)]);
    // Offered: its offer is no longer outstanding.
    assert!(t.leave(4).is_empty(), "the publisher still holds the copy");
    assert_eq!(t.k().shared_copies, 1);
    // Holder (the last): the copy closes.
    assert_eq!(t.leave(2), vec![close(2)]);
    assert!(t.ix.is_empty());

    // A holder among several; then an offered one as the last user.
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    t.published_ok(1, 0x10, 1);
    t.ok(2, reply(DedupOp::Result, 0x20, 1, DedupStatus::OK), false);
    t.ok(3, cand(0x30, 1), false);
    assert!(t.leave(1).is_empty());
    assert_eq!(t.k().saved_bytes, 0, "one holder left");
    assert!(t.leave(2).is_empty(), "an offer is out");
    assert_eq!(t.leave(3), vec![close(1)]);
    assert!(t.ix.is_empty());
}

#[test]
fn publish_and_offer_timeouts() {
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    t.ok(3, cand(0x30, 1), false);
    assert_eq!(t.ix.next_deadline(), Some(1 + 5 * S));
    assert!(t.tick(5 * S).is_empty(), "not yet");
    assert_eq!(t.tick(1 + 5 * S), vec![publish(2, 0x20, 2, 1)]);
    assert_eq!(t.k().publish_failures, 1);
    // The late PUBLISHED of the given-up id: late, its fd not kept, and the
    // publisher told to take its frozen granule back (once).
    let (r, out) = t.step(1, reply(DedupOp::Published, 0x10, 1, DedupStatus::OK), true);
    assert_eq!(r.map_err(|e| e.kind()), Err(RefusalKind::Late));
    assert_eq!(out, vec![forget(1, 0x10, 1)]);
    assert_eq!(t.k().late_replies, 1);
    t.late(1, reply(DedupOp::Published, 0x10, 1, DedupStatus::OK), true);
    assert_eq!(t.k().late_replies, 2);
    t.published_ok(2, 0x20, 2);
    // An unanswered offer is dropped at its deadline.
    let at = t.now + 5 * S;
    assert!(t.tick(at).is_empty(), "the publisher still holds it");
    assert_eq!(t.k().offer_failures, 1);
    assert_eq!(t.ix.next_deadline(), None);
    // Its late RESULT OK is accepted while the copy is alive.
    t.ok(3, reply(DedupOp::Result, 0x30, 2, DedupStatus::OK), false);
    assert_eq!(
        (t.k().merges, t.k().saved_bytes, t.k().late_replies),
        (1, L, 3)
    );
    // An offer whose copy dies meanwhile: the late answer is counted and ignored.
    t.ok(1, cand(0x11, 1), false);
    let at = t.now + 5 * S;
    assert!(t.tick(at).is_empty());
    t.ok(2, withdraw(0x20, 2, WithdrawReason::FREED), false);
    assert_eq!(
        t.ok(3, withdraw(0x30, 2, WithdrawReason::FREED), false),
        vec![close(2)]
    );
    t.late(1, reply(DedupOp::Result, 0x11, 2, DedupStatus::OK), false);
    assert_eq!(t.ix.client(1).unwrap().shared_bytes, 0);
    assert_eq!(t.k().late_replies, 4);
}

#[test]
fn a_late_publish_that_failed_needs_nothing_taken_back() {
    let mut t = T::clients(2);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    assert!(t.tick(1 + 5 * S).is_empty(), "no second candidate left");
    // The publisher failed anyway: it froze nothing, so it is told nothing.
    t.late(
        1,
        reply(DedupOp::Published, 0x10, 1, DedupStatus::GONE),
        false,
    );
    // tandemd never sends a FORGET to itself.
    let mut f = Dedup::new(DedupOp::Forget, 0x20, L);
    f.shared_id = 1;
    assert_eq!(
        t.refused(2, f, false).kind(),
        RefusalKind::Protocol,
        "a FORGET from a shim"
    );
}

#[test]
fn a_client_may_withdraw_what_tandemd_gave_up_on() {
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    // The publish times out; the client, unaware, withdraws its granule.
    assert!(t.tick(1 + 5 * S).is_empty(), "one candidate left: it waits");
    t.ok(1, withdraw(0x10, 0, WithdrawReason::FREED), false);
    assert_eq!(t.ok(3, cand(0x30, 1), false), vec![publish(2, 0x20, 2, 1)]);
    assert_eq!(t.published_ok(2, 0x20, 2), vec![offer(3, 0x30, 2, 1)]);
    // The offer times out; the client withdraws that granule too.
    let at = t.now + 5 * S;
    assert!(t.tick(at).is_empty());
    t.ok(3, withdraw(0x30, 0, WithdrawReason::CHANGED), false);
    // A second withdrawal of it is unknown now.
    assert_eq!(
        t.refused(3, withdraw(0x30, 0, WithdrawReason::FREED), false),
        Refusal::UnknownGranule(0x30)
    );
    assert_eq!(t.k().protocol_errors, 1);
}

#[test]
fn protocol_errors_are_counted_and_change_nothing() {
    let mut t = T::clients(3);
    t.join(9, "other", GPU);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false); // publish 1 asked of client 1
    let mut cases: Vec<(u64, Dedup, bool, &str)> = vec![
        (
            1,
            reply(DedupOp::Publish, 0x10, 1, DedupStatus::OK),
            false,
            "publish from a shim",
        ),
        (
            1,
            reply(DedupOp::Offer, 0x10, 1, DedupStatus::OK),
            false,
            "offer from a shim",
        ),
        (3, cand(0x30, 1), true, "fd with a candidate"),
        (1, cand(0x10, 1), false, "candidate already tracked"),
        (
            2,
            reply(DedupOp::Published, 0x10, 1, DedupStatus::OK),
            true,
            "published by another client",
        ),
        (
            1,
            reply(DedupOp::Published, 0x10, 77, DedupStatus::OK),
            true,
            "published of an unknown id",
        ),
        (
            2,
            reply(DedupOp::Result, 0x20, 1, DedupStatus::OK),
            false,
            "result before any offer",
        ),
        (
            3,
            reply(DedupOp::Result, 0x30, 77, DedupStatus::OK),
            false,
            "result of an unknown id",
        ),
        (
            3,
            withdraw(0x30, 0, WithdrawReason::FREED),
            false,
            "withdraw of an unknown granule",
        ),
        (
            3,
            withdraw(0x30, 1, WithdrawReason::COPY_ON_WRITE),
            false,
            "withdraw of a copy not held",
        ),
        (
            9,
            reply(DedupOp::Result, 0x90, 1, DedupStatus::OK),
            false,
            "result from another group",
        ),
        (42, cand(0x42, 1), false, "a client without the share flag"),
    ];
    let mut odd = cand(0x31, 1);
    odd.len = L * 2;
    cases.push((3, odd, false, "wrong len"));
    for (i, (c, m, fd, what)) in cases.into_iter().enumerate() {
        let r = t.refused(c, m, fd);
        assert_eq!(r.kind(), RefusalKind::Protocol, "{what}: {r}");
        let errors: u64 = t.ix.all_counters().map(|(_, k)| k.protocol_errors).sum();
        assert_eq!(errors, i as u64 + 1, "{what} counted once");
    }
    // A merged granule withdrawn without its shared id.
    t.published_ok(1, 0x10, 1);
    t.ok(2, reply(DedupOp::Result, 0x20, 1, DedupStatus::OK), false);
    assert_eq!(
        t.refused(2, withdraw(0x20, 0, WithdrawReason::FREED), false),
        Refusal::HeldWithoutShared(0x20)
    );
    // A second PUBLISHED for an already published copy.
    let r = t.refused(1, reply(DedupOp::Published, 0x10, 1, DedupStatus::OK), true);
    assert!(matches!(r, Refusal::NotAsked { .. }), "{r}");
    // Malformed datagrams are counted on the client's GPU.
    let before = t.k().protocol_errors;
    t.ix.count_protocol_error(3, None);
    assert_eq!(t.k().protocol_errors, before + 1);
    assert_eq!(t.k().saved_bytes, L, "state unharmed");
}

#[test]
fn candidates_before_the_device_and_over_the_limit_are_ignored() {
    let mut t = T::with(3);
    t.ix.join(1, "g");
    assert_eq!(t.refused(1, cand(0x10, 1), false), Refusal::NoDevice);
    assert_eq!(t.ix.counters(0).unwrap().candidates_ignored, 1);
    let mut out = Vec::new();
    t.ix.set_gpu(t.now, 1, GPU, &mut out);
    t.join(2, "g", GPU);
    for g in 0..3 {
        t.ok(1, cand(0x100 + g, 10 + g as u8), false);
    }
    assert_eq!(t.refused(1, cand(0x200, 1), false), Refusal::Limit);
    assert_eq!(t.k().candidates_ignored, 1);
    // Others are not limited by it; a withdrawal makes room.
    assert_eq!(
        t.ok(2, cand(0x20, 10), false),
        vec![publish(1, 0x100, 1, 10)]
    );
    t.ok(1, withdraw(0x101, 0, WithdrawReason::FREED), false);
    t.ok(1, cand(0x200, 1), false);
    assert_eq!(t.ix.client(1).unwrap().candidates, 3);
}

#[test]
fn undelivered_messages_fail_that_step() {
    let mut t = T::clients(3);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    t.ok(3, cand(0x30, 1), false);
    let mut out = Vec::new();
    let p = match publish(1, 0x10, 1, 1) {
        Action::SendPublish { msg, .. } => msg,
        _ => unreachable!(),
    };
    t.ix.undelivered(t.now, 1, &p, &mut out);
    assert_eq!(out, vec![publish(2, 0x20, 2, 1)]);
    t.published_ok(2, 0x20, 2);
    let o = match offer(3, 0x30, 2, 1) {
        Action::SendOffer { msg, .. } => msg,
        _ => unreachable!(),
    };
    out.clear();
    t.ix.undelivered(t.now, 3, &o, &mut out);
    assert!(out.is_empty());
    assert_eq!((t.k().publish_failures, t.k().offer_failures), (1, 1));
    t.ix.audit().unwrap();
    assert_eq!(t.ix.client(3).unwrap().candidates, 0);
    // Neither client heard of it: each still holds its granule as a
    // candidate, and its WITHDRAW when the content changes is expected.
    for (c, g) in [(1, 0x10), (3, 0x30)] {
        assert!(t
            .ok(c, withdraw(g, 0, WithdrawReason::CHANGED), false)
            .is_empty());
    }
    t.ix.audit().unwrap();
}

#[test]
fn a_new_gpu_drops_what_the_client_had() {
    let mut t = T::clients(2);
    t.ok(1, cand(0x10, 1), false);
    t.ok(2, cand(0x20, 1), false);
    t.published_ok(1, 0x10, 1);
    let mut out = Vec::new();
    t.ix.set_gpu(t.now, 1, GPU + 1, &mut out);
    t.ix.audit().unwrap();
    assert!(out.is_empty(), "the offer to 2 is out");
    assert_eq!(t.ix.client(1).unwrap().gpu, Some(GPU + 1));
    assert_eq!(
        t.ok(
            2,
            reply(DedupOp::Result, 0x20, 1, DedupStatus::DECLINED),
            false
        ),
        vec![close(1)]
    );
}

/// A client that reports GPU after made-up GPU (a Device each) and sends
/// one dedup message on each made counters for each GPU, kept for good:
/// tandemd's memory grew with every pair of messages. The counters of GPUs
/// no client is on and no shared copy lives on are now folded into the
/// retired counts when too many GPUs have counters, and the daemon-wide
/// totals keep every count.
#[test]
fn made_up_gpus_do_not_grow_the_counters_without_bound() {
    use super::index::MAX_GPU_COUNTERS;
    let mut t = T::clients(2);
    // A real merge on GPU 7, whose counters must survive.
    t.ok(1, cand(0x10, 3), false);
    assert_eq!(t.ok(2, cand(0x20, 3), false), vec![publish(1, 0x10, 1, 3)]);
    assert_eq!(t.published_ok(1, 0x10, 1), vec![offer(2, 0x20, 1, 3)]);
    t.ok(2, reply(DedupOp::Result, 0x20, 1, DedupStatus::OK), false);
    let sent = 10 * MAX_GPU_COUNTERS as u64;
    for n in 0..sent {
        t.join(3, "g", 1000 + n);
        let mut odd = cand(0x31, 1);
        odd.len = L * 2;
        assert_eq!(t.refused(3, odd, false).kind(), RefusalKind::Protocol);
    }
    let kept = t.ix.all_counters().count();
    assert!(kept <= MAX_GPU_COUNTERS, "{kept} GPUs with counters");
    let counted: u64 =
        t.ix.all_counters()
            .map(|(_, k)| k.protocol_errors)
            .sum::<u64>()
            + t.ix.retired_counters().protocol_errors;
    assert_eq!(counted, sent, "every refusal still counted");
    let real = t.ix.counters(GPU).expect("GPU 7's counters kept");
    assert_eq!((real.merges, real.shared_copies), (1, 1));
    assert!(
        t.ix.counters(1000 + sent - 1).is_some(),
        "the client's GPU now"
    );
}
