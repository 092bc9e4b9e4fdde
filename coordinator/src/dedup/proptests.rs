//! Property tests: random conversations of 3 to 5 clients in 2 trust groups
//! on 2 GPUs over a few hashes, with random answers, lies, withdrawals,
//! deaths and time jumps, against the invariants of the index.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use tandem_proto::dedup::{Dedup, DedupOp};

use super::index::{Index, IndexConfig};
use super::outcome::Action;

const L: u64 = 2 << 20;
const TIMEOUT: u64 = 5_000_000_000;

#[derive(Clone, Debug)]
enum Op {
    /// Client, granule, hash.
    Candidate(usize, u8, u8),
    /// Answer the picked outstanding PUBLISH: status, fd attached.
    Published(usize, u16, bool),
    /// Answer the picked outstanding OFFER: status, elapsed.
    Result(usize, u16),
    /// Client withdraws a granule: (granule, from its holdings?, reason).
    Withdraw(usize, u8, bool, u16),
    /// Any well-formed message with made-up ids: client, op, granule, shared, status.
    Lie(usize, u16, u8, u64, u16),
    /// The client dies.
    Leave(usize),
    /// The client says it is on another GPU.
    Gpu(usize, u8),
    /// Time passes (ns).
    Jump(u64),
    /// The daemon could not send the picked PUBLISH (true) or OFFER.
    Undelivered(bool, usize),
}

fn op(n: usize) -> impl Strategy<Value = Op> {
    let c = 0..n;
    prop_oneof![
        8 => (c.clone(), 0u8..4, 0u8..3).prop_map(|(c, g, h)| Op::Candidate(c, g, h)),
        4 => (any::<usize>(), prop_oneof![3 => Just(0u16), 1 => 1u16..=4], prop::bool::weighted(0.9))
            .prop_map(|(p, s, fd)| Op::Published(p, s, fd)),
        5 => (any::<usize>(), prop_oneof![3 => Just(0u16), 1 => 1u16..=4])
            .prop_map(|(p, s)| Op::Result(p, s)),
        3 => (c.clone(), 0u8..4, any::<bool>(), 1u16..=3)
            .prop_map(|(c, g, held, r)| Op::Withdraw(c, g, held, r)),
        2 => (c.clone(), 1u16..=6, 0u8..5, 0u64..8, 0u16..=4)
            .prop_map(|(c, o, g, s, st)| Op::Lie(c, o, g, s, st)),
        1 => c.clone().prop_map(Op::Leave),
        1 => (c, 0u8..2).prop_map(|(c, g)| Op::Gpu(c, g)),
        2 => prop_oneof![0u64..1_000_000, 4_000_000_000u64..6_000_000_000].prop_map(Op::Jump),
        1 => (any::<bool>(), any::<usize>()).prop_map(|(p, i)| Op::Undelivered(p, i)),
    ]
}

/// (group, gpu) per client, then the ops.
fn case() -> impl Strategy<Value = (Vec<(u8, u8)>, Vec<Op>)> {
    prop::collection::vec((0u8..2, 0u8..2), 3..=5).prop_flat_map(|cl| {
        let n = cl.len();
        (Just(cl), prop::collection::vec(op(n), 1..250))
    })
}

fn granule(g: u8) -> u64 {
    0x7f00_0000_0000 + u64::from(g) * L
}

/// What the fake shims and the daemon saw of the conversation.
#[derive(Default)]
struct World {
    /// Client id -> (group name, gpu key) now.
    place: BTreeMap<u64, (String, u64)>,
    gone: BTreeSet<u64>,
    /// PUBLISHes and OFFERs sent and not yet answered: (client, msg).
    publishes: Vec<(u64, Dedup)>,
    offers: Vec<(u64, Dedup)>,
    /// Shared id -> (group, gpu, hash) of the PUBLISH that allocated it.
    copies: BTreeMap<u64, (String, u64, [u8; 16])>,
    /// Shared id -> (client, granule) asked to publish it.
    asked: BTreeMap<u64, (u64, u64)>,
    adopted: BTreeSet<u64>,
    closed: BTreeSet<u64>,
    /// What each client believes it holds: (client, granule, shared).
    holds: BTreeSet<(u64, u64, u64)>,
}

impl World {
    /// Check and record the actions of one step (`answer`: the message
    /// just handled, if a client sent one).
    fn actions(
        &mut self,
        out: &[Action],
        answer: Option<(u64, &Dedup, bool)>,
    ) -> Result<(), String> {
        for a in out {
            match *a {
                Action::SendPublish { client, msg } => {
                    let s = msg.shared_id;
                    if s == 0 || self.copies.contains_key(&s) {
                        return Err(format!("shared id {s} reused or 0: {a:?}"));
                    }
                    let (group, gpu) = self.place.get(&client).ok_or("publish to a gone client")?;
                    self.copies.insert(s, (group.clone(), *gpu, msg.hash));
                    self.asked.insert(s, (client, msg.granule));
                    self.publishes.push((client, msg));
                }
                Action::SendOffer { client, msg } => {
                    let s = msg.shared_id;
                    if !self.adopted.contains(&s) || self.closed.contains(&s) {
                        return Err(format!("offer of {s} not published or closed: {a:?}"));
                    }
                    let want = &self.copies[&s];
                    let (group, gpu) = self.place.get(&client).ok_or("offer to a gone client")?;
                    if (group, *gpu, msg.hash) != (&want.0, want.1, want.2) {
                        return Err(format!("offer across groups/gpus/hashes: {a:?} {want:?}"));
                    }
                    self.offers.push((client, msg));
                }
                Action::AdoptFd { shared_id: s } => {
                    let ok = matches!(answer, Some((c, m, true))
                        if m.op == DedupOp::Published && m.status == 0 && m.shared_id == s
                            && self.asked.get(&s) == Some(&(c, m.granule)));
                    if !ok || self.adopted.contains(&s) || self.closed.contains(&s) {
                        return Err(format!("fd of {s} adopted without its PUBLISHED OK"));
                    }
                    self.adopted.insert(s);
                    if let Some((c, m, _)) = answer {
                        self.holds.insert((c, m.granule, s));
                    }
                }
                Action::SendForget { client, msg } => {
                    // Only to a publisher whose PUBLISHED OK, just handled,
                    // came for a copy tandemd never kept.
                    let s = msg.shared_id;
                    let ok = matches!(answer, Some((c, m, _))
                        if c == client && m.op == DedupOp::Published && m.status == 0
                            && m.shared_id == s && m.granule == msg.granule)
                        && self.asked.get(&s) == Some(&(client, msg.granule))
                        && !self.adopted.contains(&s);
                    if !ok {
                        return Err(format!("forget without a late PUBLISHED OK: {a:?}"));
                    }
                }
                Action::CloseShared { shared_id: s } => {
                    if !self.adopted.contains(&s) || !self.closed.insert(s) {
                        return Err(format!("close of {s}: never adopted or closed twice"));
                    }
                }
            }
        }
        Ok(())
    }

    fn check(&self, ix: &Index) -> Result<(), String> {
        ix.audit()?;
        let mut saved: BTreeMap<u64, u64> = BTreeMap::new();
        for v in ix.shared_copies() {
            if self.closed.contains(&v.id) {
                return Err(format!("closed copy {} still in the index", v.id));
            }
            let (group, gpu, hash) = self.copies.get(&v.id).ok_or("copy never published")?;
            if (v.group, v.gpu, v.hash) != (group.as_str(), *gpu, *hash) {
                return Err(format!("copy {} moved: {v:?}", v.id));
            }
            if !v.published && !v.holders.is_empty() {
                return Err(format!("copy {} held before PUBLISHED OK", v.id));
            }
            for (c, _) in v.holders.iter().chain(v.offers.iter()) {
                if self.place.get(c).map(|p| (p.0.as_str(), p.1)) != Some((group.as_str(), *gpu)) {
                    return Err(format!("copy {} used by client {c} of another place", v.id));
                }
            }
            if v.published {
                *saved.entry(v.gpu).or_default() +=
                    (v.holders.len() as u64).saturating_sub(1) * v.len;
            }
        }
        for (gpu, k) in ix.all_counters() {
            let want = saved.get(&gpu).copied().unwrap_or(0);
            if k.saved_bytes != want {
                return Err(format!(
                    "gpu {gpu}: saved {} != sum (holders - 1) * len = {want}",
                    k.saved_bytes
                ));
            }
        }
        Ok(())
    }
}

fn reply(op: DedupOp, of: &Dedup, status: u16) -> Dedup {
    Dedup {
        op,
        status,
        elapsed_ns: 1000,
        ..*of
    }
}

fn run(clients: &[(u8, u8)], ops: &[Op]) -> Result<(), String> {
    let mut ix = Index::new(IndexConfig {
        granule_len: L,
        timeout_ns: TIMEOUT,
        max_entries_per_client: 6,
    });
    let mut w = World::default();
    let mut now = 1u64;
    let mut out = Vec::new();
    for (i, &(group, gpu)) in clients.iter().enumerate() {
        let c = i as u64 + 1;
        let name = format!("group{group}");
        ix.join(c, &name);
        ix.set_gpu(now, c, u64::from(gpu) + 1, &mut out);
        w.place.insert(c, (name, u64::from(gpu) + 1));
    }
    for op in ops {
        now += 1000;
        ix.tick(now, &mut out);
        w.actions(&out, None)?;
        out.clear();
        let mut msg: Option<(u64, Dedup, bool)> = None;
        match *op {
            Op::Candidate(c, g, h) => {
                let mut d = Dedup::new(DedupOp::Candidate, granule(g), L);
                d.hash = [h; 16];
                msg = Some((c as u64 + 1, d, false));
            }
            Op::Published(pick, status, fd) if !w.publishes.is_empty() => {
                let (c, p) = w.publishes.remove(pick % w.publishes.len());
                msg = Some((c, reply(DedupOp::Published, &p, status), fd));
            }
            Op::Result(pick, status) if !w.offers.is_empty() => {
                let (c, o) = w.offers.remove(pick % w.offers.len());
                if status == 0 {
                    w.holds.insert((c, o.granule, o.shared_id));
                }
                msg = Some((c, reply(DedupOp::Result, &o, status), false));
            }
            Op::Withdraw(c, g, held, reason) => {
                let c = c as u64 + 1;
                let mine: Vec<(u64, u64, u64)> =
                    w.holds.iter().filter(|h| h.0 == c).copied().collect();
                let (g, s) = match (held, mine.first()) {
                    (true, Some(&(_, g, s))) => {
                        w.holds.remove(&(c, g, s));
                        (g, s)
                    }
                    _ => (granule(g), 0),
                };
                let mut d = Dedup::new(DedupOp::Withdraw, g, L);
                d.shared_id = s;
                d.status = reason;
                msg = Some((c, d, false));
            }
            Op::Lie(c, o, g, s, st) => {
                let op = DedupOp::from_u16(o).ok_or("op")?;
                let mut d = Dedup::new(op, granule(g), L);
                d.hash = [g % 3; 16];
                d.shared_id = if op == DedupOp::Candidate {
                    0
                } else {
                    s.max(1)
                };
                d.status = match op {
                    DedupOp::Withdraw => st % 3 + 1,
                    DedupOp::Published | DedupOp::Result => st,
                    _ => 0,
                };
                msg = Some((c as u64 + 1, d, op == DedupOp::Published && st == 0));
            }
            Op::Leave(c) => {
                let c = c as u64 + 1;
                ix.leave(now, c, &mut out);
                w.place.remove(&c);
                w.gone.insert(c);
                w.holds.retain(|h| h.0 != c);
                w.publishes.retain(|p| p.0 != c);
                w.offers.retain(|p| p.0 != c);
            }
            Op::Gpu(c, gpu) => {
                let c = c as u64 + 1;
                if let Some(p) = w.place.get_mut(&c) {
                    if p.1 != u64::from(gpu) + 1 {
                        w.holds.retain(|h| h.0 != c);
                    }
                    p.1 = u64::from(gpu) + 1;
                }
                ix.set_gpu(now, c, u64::from(gpu) + 1, &mut out);
            }
            Op::Jump(dt) => now += dt,
            Op::Undelivered(publish, pick) => {
                let list = if publish {
                    &mut w.publishes
                } else {
                    &mut w.offers
                };
                if !list.is_empty() {
                    let (c, m) = list.remove(pick % list.len());
                    ix.undelivered(now, c, &m, &mut out);
                }
            }
            Op::Published(..) | Op::Result(..) => {}
        }
        if let Some((c, m, fd)) = msg {
            let _ = ix.handle(now, c, &m, fd, &mut out);
            w.actions(&out, Some((c, &m, fd)))?;
        } else {
            w.actions(&out, None)?;
        }
        out.clear();
        w.check(&ix).map_err(|e| format!("after {op:?}: {e}"))?;
    }
    // Everyone leaves: every copy ever published is closed, nothing is left.
    for c in 1..=clients.len() as u64 {
        ix.leave(now, c, &mut out);
        w.place.remove(&c);
        w.actions(&out, None)?;
        out.clear();
        w.check(&ix)?;
    }
    if let Some(s) = w.adopted.difference(&w.closed).next() {
        return Err(format!("copy {s} never closed"));
    }
    if !ix.is_empty() || ix.next_deadline().is_some() {
        return Err(format!("index not empty: {}", ix.fingerprint()));
    }
    Ok(())
}

proptest! {
    // No regression files in the repository: a failure prints its case.
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Offers stay in their group and GPU and follow PUBLISHED OK; a copy is
    /// closed at most once and never named after; saved bytes add up; when
    /// every client is gone every copy is closed and the index is empty.
    #[test]
    fn invariants_hold_on_random_conversations((clients, ops) in case()) {
        run(&clients, &ops).map_err(TestCaseError::fail)?;
    }
}
