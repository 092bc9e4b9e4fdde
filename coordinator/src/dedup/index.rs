//! The content index: a pure state machine (events in, [`Action`]s out,
//! time injected in nanoseconds; no fds, no IO) that drives the dedup
//! conversation of [`tandem_proto::dedup`] for every sharing client.
//!
//! Candidates match on (trust group, GPU, len, hash). The second candidate of
//! a key makes tandemd ask the oldest one to PUBLISH a shared copy; once it
//! answers PUBLISHED OK (with the fd, which the daemon then keeps) every other
//! candidate of the key gets an OFFER, and so does any later one. A shared
//! copy is closed when no granule maps it and no offer of it is outstanding.
//! Every message is checked against this state; what does not fit is a
//! [`Refusal`] (counted, state unchanged), never a panic.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tandem_proto::dedup::{Dedup, DedupOp};

use super::entries::{ClientEntry, Granule, KeyEntry, SharedCopy};
use super::outcome::{Action, Refusal, RefusalKind};
use super::stats::GpuCounters;

pub use super::entries::{Hash, GRANULE_LEN};

/// The index's limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexConfig {
    /// The only granule length accepted in a CANDIDATE.
    pub granule_len: u64,
    /// How long a PUBLISH or OFFER may stay unanswered, ns.
    pub timeout_ns: u64,
    /// Entries (granules, refused contents, expired offers) tracked per client.
    pub max_entries_per_client: usize,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            granule_len: GRANULE_LEN,
            timeout_ns: u64::from(super::groups::DEFAULT_TIMEOUT_MS) * 1_000_000,
            max_entries_per_client: super::groups::DEFAULT_MAX_CANDIDATES as usize,
        }
    }
}

/// A read-only view of one shared copy (stats, tests).
#[derive(Debug)]
pub struct SharedView<'a> {
    /// The shared id.
    pub id: u64,
    /// Trust group.
    pub group: &'a str,
    /// GPU key.
    pub gpu: u64,
    /// Granule length.
    pub len: u64,
    /// Content hash.
    pub hash: Hash,
    /// PUBLISHED OK arrived.
    pub published: bool,
    /// (client, granule) mapping it.
    pub holders: &'a BTreeSet<(u64, u64)>,
    /// (client, granule) offered it, not answered yet.
    pub offers: &'a BTreeSet<(u64, u64)>,
}

/// One client's figures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientView<'a> {
    /// Trust group.
    pub group: &'a str,
    /// GPU key, once known.
    pub gpu: Option<u64>,
    /// Bytes of its granules mapping a shared copy.
    pub shared_bytes: u64,
    /// Its granules pending, publishing or offered.
    pub candidates: u64,
}

/// The index (see the module docs).
#[derive(Debug)]
pub struct Index {
    pub(super) cfg: IndexConfig,
    groups: HashMap<String, u32>,
    pub(super) group_names: Vec<String>,
    pub(super) clients: BTreeMap<u64, ClientEntry>,
    pub(super) keys: HashMap<super::entries::Key, KeyEntry>,
    pub(super) shared: BTreeMap<u64, SharedCopy>,
    /// (deadline, client, granule) of every Publishing and Offered granule.
    pub(super) timers: BTreeSet<(u64, u64, u64)>,
    pub(super) next_shared: u64,
    pub(super) next_seq: u64,
    pub(super) gpus: BTreeMap<u64, GpuCounters>,
    /// The counts of GPUs whose counters were dropped to keep [`Self::gpus`]
    /// bounded ([`MAX_GPU_COUNTERS`]), so the daemon-wide totals never go
    /// back; their gauges (shared bytes and copies) are zero (no copy was
    /// on them).
    retired: GpuCounters,
}

/// Most GPUs with counters: tandemd's GPU table's bound (`MAX_GPUS`, GPUs a
/// client is on) and key 0 (clients without a GPU). A client reporting
/// made-up GPUs, each with a dedup message, added one each, for good.
pub const MAX_GPU_COUNTERS: usize = crate::clients::MAX_GPUS + 1;

impl Index {
    /// An empty index.
    #[must_use]
    pub fn new(cfg: IndexConfig) -> Self {
        Index {
            cfg,
            groups: HashMap::new(),
            group_names: Vec::new(),
            clients: BTreeMap::new(),
            keys: HashMap::new(),
            shared: BTreeMap::new(),
            timers: BTreeSet::new(),
            next_shared: 1,
            next_seq: 0,
            gpus: BTreeMap::new(),
            retired: GpuCounters::default(),
        }
    }

    /// New limits (deadlines already set keep their time).
    pub fn set_config(&mut self, cfg: IndexConfig) {
        self.cfg = cfg;
    }

    /// The limits in force.
    #[must_use]
    pub fn config(&self) -> &IndexConfig {
        &self.cfg
    }

    /// A client given the share flag, in trust group `group`.
    pub fn join(&mut self, client: u64, group: &str) {
        if self.clients.contains_key(&client) {
            return;
        }
        let next = self.group_names.len() as u32;
        let gid = *self.groups.entry(group.to_string()).or_insert(next);
        if gid == next {
            self.group_names.push(group.to_string());
        }
        self.clients.insert(client, ClientEntry::new(gid));
    }

    /// Whether `client` was given the share flag (and is still here).
    #[must_use]
    pub fn is_joined(&self, client: u64) -> bool {
        self.clients.contains_key(&client)
    }

    /// The client's GPU (its Device message). A change of GPU drops what
    /// the client had in the index.
    pub fn set_gpu(&mut self, now: u64, client: u64, gpu: u64, out: &mut Vec<Action>) {
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        match c.gpu {
            Some(g) if g == gpu => {}
            None => c.gpu = Some(gpu),
            Some(_) => {
                let group = c.group;
                self.leave(now, client, out);
                let mut e = ClientEntry::new(group);
                e.gpu = Some(gpu);
                self.clients.insert(client, e);
            }
        }
    }

    /// The client is gone: everything of it is removed.
    pub fn leave(&mut self, now: u64, client: u64, out: &mut Vec<Action>) {
        let Some(c) = self.clients.remove(&client) else {
            return;
        };
        let mut keys = BTreeSet::new();
        let mut copies = BTreeSet::new();
        for (g, st) in c.granules {
            match st {
                Granule::Pending { key, seq } => {
                    if let Some(e) = self.keys.get_mut(&key) {
                        e.pending.remove(&seq);
                    }
                    keys.insert(key);
                }
                Granule::Publishing {
                    key,
                    shared,
                    deadline,
                } => {
                    self.timers.remove(&(deadline, client, g));
                    self.shared.remove(&shared);
                    if let Some(e) = self.keys.get_mut(&key) {
                        e.publishing = None;
                    }
                    keys.insert(key);
                }
                Granule::Offered {
                    shared, deadline, ..
                } => {
                    self.timers.remove(&(deadline, client, g));
                    if let Some(sc) = self.shared.get_mut(&shared) {
                        sc.offers.remove(&(client, g));
                    }
                    copies.insert(shared);
                }
                Granule::Holder { shared, .. } => {
                    self.remove_holder(shared, client, g);
                    copies.insert(shared);
                }
            }
        }
        for s in copies {
            self.maybe_close(s, out);
        }
        for key in keys {
            self.maybe_publish(now, key, out);
            self.cleanup_key(&key);
        }
    }

    /// A Dedup message from `client` (`fd`: one came with it).
    pub fn handle(
        &mut self,
        now: u64,
        client: u64,
        m: &Dedup,
        fd: bool,
        out: &mut Vec<Action>,
    ) -> Result<(), Refusal> {
        let Some(c) = self.clients.get(&client) else {
            self.count(0, RefusalKind::Protocol);
            return Err(Refusal::NotSharing);
        };
        let gpu = c.gpu.unwrap_or(0);
        let r = if fd && m.op != DedupOp::Published {
            Err(Refusal::FdAttached(m.op))
        } else {
            match m.op {
                DedupOp::Candidate => self.candidate(now, client, m, out),
                DedupOp::Withdraw => self.withdraw(now, client, m, out),
                DedupOp::Published => self.published(now, client, m, fd, out),
                DedupOp::Result => self.result(now, client, m, out),
                DedupOp::Publish | DedupOp::Offer | DedupOp::Forget => {
                    Err(Refusal::WrongDirection(m.op))
                }
            }
        };
        if let Err(e) = &r {
            self.count(gpu, e.kind());
        }
        r
    }

    /// A Dedup datagram that did not decode, or any Dedup message from a
    /// client without the share flag (`gpu`: its GPU, if known).
    pub fn count_protocol_error(&mut self, client: u64, gpu: Option<u64>) {
        let gpu = self
            .clients
            .get(&client)
            .and_then(|c| c.gpu)
            .or(gpu)
            .unwrap_or(0);
        self.count(gpu, RefusalKind::Protocol);
    }

    /// The daemon could not send `msg` (an action of ours) to `client`:
    /// that client failed this step. The granule is given up as on a
    /// timeout: still the client's candidate on its side, so its later
    /// WITHDRAW is expected, not a protocol error.
    pub fn undelivered(&mut self, now: u64, client: u64, m: &Dedup, out: &mut Vec<Action>) {
        let Some(c) = self.clients.get(&client) else {
            return;
        };
        match (m.op, c.granules.get(&m.granule).copied()) {
            (DedupOp::Publish, Some(Granule::Publishing { shared, .. }))
                if shared == m.shared_id =>
            {
                self.give_up_publish(now, client, m.granule, shared, out);
            }
            (DedupOp::Offer, Some(Granule::Offered { shared, .. })) if shared == m.shared_id => {
                self.drop_offer(client, m.granule, true, true, out);
            }
            _ => {}
        }
    }

    /// Give up every PUBLISH and OFFER whose deadline is at or before `now`.
    pub fn tick(&mut self, now: u64, out: &mut Vec<Action>) {
        while let Some(&(deadline, client, g)) = self.timers.first() {
            if deadline > now {
                break;
            }
            self.timers.pop_first();
            let st = self
                .clients
                .get(&client)
                .and_then(|c| c.granules.get(&g))
                .copied();
            match st {
                Some(Granule::Publishing {
                    shared,
                    deadline: d,
                    ..
                }) if d == deadline => self.give_up_publish(now, client, g, shared, out),
                Some(Granule::Offered { deadline: d, .. }) if d == deadline => {
                    self.drop_offer(client, g, true, true, out);
                }
                _ => {}
            }
        }
    }

    /// Gives up `client`'s publish of granule `g` as `shared` (its deadline
    /// passed, or the PUBLISH could not be sent): a failure, and the
    /// client's later answer or WITHDRAW for it is expected, not an error.
    fn give_up_publish(
        &mut self,
        now: u64,
        client: u64,
        g: u64,
        shared: u64,
        out: &mut Vec<Action>,
    ) {
        self.publish_failed(now, shared, true, out);
        if let Some(c) = self.clients.get_mut(&client) {
            c.expired.insert((g, shared));
        }
    }

    /// When [`tick`](Self::tick) next has something to do.
    #[must_use]
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.first().map(|t| t.0)
    }

    /// Nothing tracked (counters aside).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
            && self.keys.is_empty()
            && self.shared.is_empty()
            && self.timers.is_empty()
    }

    /// One client's figures, if it shares.
    #[must_use]
    pub fn client(&self, client: u64) -> Option<ClientView<'_>> {
        let c = self.clients.get(&client)?;
        Some(ClientView {
            group: &self.group_names[c.group as usize],
            gpu: c.gpu,
            shared_bytes: c.shared_bytes,
            candidates: c.candidates,
        })
    }

    /// Counters of GPU key `gpu` (0: not attributable to a GPU).
    #[must_use]
    pub fn counters(&self, gpu: u64) -> Option<&GpuCounters> {
        self.gpus.get(&gpu)
    }

    /// Every GPU key with counters.
    pub fn all_counters(&self) -> impl Iterator<Item = (u64, &GpuCounters)> {
        self.gpus.iter().map(|(&g, c)| (g, c))
    }

    /// What GPUs whose counters were dropped had counted (in the totals).
    #[must_use]
    pub fn retired_counters(&self) -> &GpuCounters {
        &self.retired
    }

    /// Every live shared copy (publishing ones included).
    pub fn shared_copies(&self) -> impl Iterator<Item = SharedView<'_>> {
        self.shared.iter().map(|(&id, sc)| SharedView {
            id,
            group: &self.group_names[sc.key.group as usize],
            gpu: sc.key.gpu,
            len: sc.key.len,
            hash: sc.key.hash,
            published: sc.published,
            holders: &sc.holders,
            offers: &sc.offers,
        })
    }

    pub(super) fn count(&mut self, gpu: u64, kind: RefusalKind) {
        let c = self.gpu_counters(gpu);
        match kind {
            RefusalKind::Protocol => c.protocol_errors += 1,
            RefusalKind::Ignored => c.candidates_ignored += 1,
            RefusalKind::Late => c.late_replies += 1,
        }
    }

    /// GPU `gpu`'s counters, made if it has none. When [`MAX_GPU_COUNTERS`]
    /// GPUs have counters, those no client is on and no shared copy lives
    /// on are folded into the retired counts first; if none is, the count
    /// goes to key 0 (not attributable to a GPU).
    pub(super) fn gpu_counters(&mut self, gpu: u64) -> &mut GpuCounters {
        let gpu = if self.gpus.contains_key(&gpu) || self.room_for_counters() {
            gpu
        } else {
            0
        };
        self.gpus.entry(gpu).or_default()
    }

    fn room_for_counters(&mut self) -> bool {
        if self.gpus.len() < MAX_GPU_COUNTERS {
            return true;
        }
        let kept: BTreeSet<u64> = self
            .clients
            .values()
            .filter_map(|c| c.gpu)
            .chain(self.shared.values().map(|sc| sc.key.gpu))
            .chain([0])
            .collect();
        let dropped: Vec<u64> = self
            .gpus
            .keys()
            .copied()
            .filter(|g| !kept.contains(g))
            .collect();
        for g in dropped {
            if let Some(c) = self.gpus.remove(&g) {
                self.retired.retire(&c);
            }
        }
        self.gpus.len() < MAX_GPU_COUNTERS
    }

    /// A shared id that was allocated once and is gone now.
    pub(super) fn is_dead(&self, s: u64) -> bool {
        s != 0 && s < self.next_shared && !self.shared.contains_key(&s)
    }
}
