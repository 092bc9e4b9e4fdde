//! The registry of shared regions: a pure state machine (messages in,
//! answers out, time injected; no IO, no logging) that holds each region's
//! fd and who maps it. The daemon's side ([`crate::daemon`]'s `follow_io`)
//! sends the answers and logs.
//!
//! A region lives under (follow group, GPU key, name): only clients of the
//! same group on the same GPU find it. It belongs to the client that shared
//! it and dies with it (UNSHARE, a re-SHARE of the name, or the client
//! leaving), closing tandemd's fd; what followers already mapped stays
//! mapped, and stays counted in their `mapped_bytes` until they UNMAP or
//! leave. Every message is checked here; what does not fit is refused with
//! a status (or ignored and counted), never a panic.
//!
//! After a restart a follower reports what it still maps (mapped from an
//! earlier tandemd) with HELD: the mapping is counted like one made by MAP,
//! and linked to the region under its key (the follower is one of its
//! followers) when that region has the same length and layout, now or once
//! it is shared again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tandem_proto::follow::{Follow, FollowStatus};

use super::config::FollowLimits;

/// Refusal counter of a Follow datagram that did not decode, or an op only
/// tandemd sends.
pub const MALFORMED: &str = "malformed";
/// Refusal counter of an UNSHARE of a name the client does not share.
pub const UNOWNED_UNSHARE: &str = "unowned_unshare";

/// Every refusal counter, in the order the stats list them (each status an
/// answer can refuse with, then [`MALFORMED`] and [`UNOWNED_UNSHARE`]).
pub const REFUSALS: [&str; 9] = [
    FollowStatus::NOT_FOUND.name(),
    FollowStatus::MISMATCH.name(),
    FollowStatus::NOT_PERMITTED.name(),
    FollowStatus::NAME_TAKEN.name(),
    FollowStatus::LIMIT.name(),
    FollowStatus::NOT_READY.name(),
    FollowStatus::NO_FD.name(),
    MALFORMED,
    UNOWNED_UNSHARE,
];

/// Where a region lives.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionKey {
    /// Follow group (the trust group rule of `[[dedup.group]]`).
    pub group: String,
    /// GPU key ([`crate::clients::gpu_key`] of the device uuid).
    pub gpu: u64,
    /// Region name (printable ASCII, [`tandem_proto::follow::valid_name`]).
    pub name: Vec<u8>,
}

impl RegionKey {
    /// The key of region `name` of `group` on `gpu`.
    #[must_use]
    pub fn new(group: &str, gpu: u64, name: &[u8]) -> RegionKey {
        RegionKey {
            group: group.to_string(),
            gpu,
            name: name.to_vec(),
        }
    }

    /// The name as text (it is ASCII: names are checked when decoded).
    #[must_use]
    pub fn name_str(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// One shared region.
#[derive(Debug)]
pub struct Region {
    /// Unique in this registry: a re-SHARE of a name is a new region.
    pub id: u64,
    /// The client that shared it.
    pub owner: u64,
    /// Its pid.
    pub owner_pid: u32,
    /// Bytes.
    pub len: u64,
    /// The sharer's opaque layout tag.
    pub layout: [u8; 16],
    /// When it was shared (the caller's clock, ns).
    pub created_ns: u64,
    /// Clients that map it now.
    pub followers: BTreeSet<u64>,
    /// MAPs answered OK, in total.
    pub maps: u64,
    /// The region's shareable fd (closed when the region is dropped).
    fd: OwnedFd,
}

/// A region a follower mapped (which may be gone since), or holds from an
/// earlier tandemd (HELD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mapping {
    /// The id of the region it is linked to (the follower is one of that
    /// region's followers while it lives), or `None`: a HELD mapping that no
    /// region of this registry matched yet.
    region: Option<u64>,
    len: u64,
    layout: [u8; 16],
}

impl Mapping {
    /// Whether it is linked to region `r` (false for an unlinked one).
    fn of(&self, r: &Region) -> bool {
        self.region == Some(r.id)
    }

    /// Whether region `r` may be what this mapping holds: same length and layout.
    fn fits(&self, r: &Region) -> bool {
        self.len == r.len && self.layout == r.layout
    }
}

/// One client's part.
#[derive(Debug, Default)]
struct ClientEntry {
    /// Regions it shares.
    shares: BTreeSet<RegionKey>,
    /// Regions it mapped or holds (the region under the key then, if
    /// known, its length and layout).
    mapped: BTreeMap<RegionKey, Mapping>,
}

/// A region that went away (for the log).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    /// Where it was.
    pub key: RegionKey,
    /// Its owner.
    pub owner: u64,
    /// Bytes.
    pub len: u64,
    /// Clients that mapped it then (they keep their mapping).
    pub followers: usize,
}

/// Daemon-wide counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Counters {
    /// SHAREs answered OK.
    pub shares: u64,
    /// MAPs answered OK (and delivered).
    pub maps: u64,
    /// UNMAPs that dropped a mapping.
    pub unmaps: u64,
    /// HELDs recorded (mappings reported again after a restart; not maps).
    pub held: u64,
    /// Refusals by name (every one of [`REFUSALS`], 0 included).
    pub refusals: BTreeMap<&'static str, u64>,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            shares: 0,
            maps: 0,
            unmaps: 0,
            held: 0,
            refusals: REFUSALS.iter().map(|&n| (n, 0)).collect(),
        }
    }
}

/// One client's figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientView {
    /// Regions it shares.
    pub regions: usize,
    /// Bytes of the regions it shares.
    pub shared_bytes: u64,
    /// Bytes of the regions it maps (those gone since, and those reported
    /// by HELD, included).
    pub mapped_bytes: u64,
}

/// See the module docs.
#[derive(Debug, Default)]
pub struct Regions {
    limits: FollowLimits,
    regions: BTreeMap<RegionKey, Region>,
    clients: HashMap<u64, ClientEntry>,
    next_id: u64,
    counters: Counters,
}

impl Regions {
    /// An empty registry.
    #[must_use]
    pub fn new(limits: FollowLimits) -> Self {
        Regions {
            limits,
            ..Regions::default()
        }
    }

    /// A new configuration: applies to later messages; regions stay.
    pub fn set_limits(&mut self, limits: FollowLimits) {
        self.limits = limits;
    }

    /// The limits in force.
    #[must_use]
    pub fn limits(&self) -> FollowLimits {
        self.limits
    }

    /// SHARE from `client` (pid `pid`, follow group `group` when granted,
    /// GPU key `gpu` when its Device arrived) with the fd that came with it.
    /// Returns the answer (SHARED); the fd is kept on OK, else closed.
    ///
    /// On OK every client's unlinked mapping (reported by HELD) under the
    /// same key with the region's length and layout is linked to the new
    /// region: the client becomes one of its followers. After a restart this
    /// cannot tell whether the region shared again is the very memory the
    /// follower holds; it normally is, since a sharer offers its regions to a
    /// new tandemd again unasked, and a name is shared by one job at a time.
    pub fn share(
        &mut self,
        now_ns: u64,
        client: u64,
        pid: u32,
        group: Option<&str>,
        gpu: Option<u64>,
        req: &Follow,
        fd: Option<OwnedFd>,
    ) -> Follow {
        let Some(fd) = fd else {
            return self.refuse(req, FollowStatus::NO_FD);
        };
        let Some(gpu) = gpu else {
            drop(fd);
            return self.refuse(req, FollowStatus::NOT_READY);
        };
        let Some(group) = group.filter(|_| self.limits.enabled) else {
            drop(fd);
            return self.refuse(req, FollowStatus::NOT_PERMITTED);
        };
        let key = RegionKey::new(group, gpu, req.name());
        let replacing = match self.regions.get(&key) {
            Some(r) if r.owner != client => {
                drop(fd);
                return self.refuse(req, FollowStatus::NAME_TAKEN);
            }
            Some(_) => true,
            None => false,
        };
        let shares = self.clients.get(&client).map_or(0, |e| e.shares.len());
        if !replacing && shares >= self.limits.max_regions_per_client {
            drop(fd);
            return self.refuse(req, FollowStatus::LIMIT);
        }
        self.next_id += 1;
        let mut region = Region {
            id: self.next_id,
            owner: client,
            owner_pid: pid,
            len: req.len,
            layout: req.layout,
            created_ns: now_ns,
            followers: BTreeSet::new(),
            maps: 0,
            fd,
        };
        // Mappings reported by HELD before this region came: linked now.
        for (&c, e) in &mut self.clients {
            if let Some(m) = e
                .mapped
                .get_mut(&key)
                .filter(|m| m.region.is_none() && m.fits(&region))
            {
                m.region = Some(region.id);
                region.followers.insert(c);
            }
        }
        // A replaced region is dropped here (its fd closed); its followers
        // keep their mappings of it.
        drop(self.regions.insert(key.clone(), region));
        self.clients.entry(client).or_default().shares.insert(key);
        self.counters.shares += 1;
        req.answer(FollowStatus::OK)
    }

    /// MAP from `client`. Returns the answer (MAPPED) and, on OK, the
    /// region's fd to attach (the send dups it).
    pub fn map(
        &mut self,
        client: u64,
        group: Option<&str>,
        gpu: Option<u64>,
        req: &Follow,
    ) -> (Follow, Option<BorrowedFd<'_>>) {
        let Some(group) = group.filter(|_| self.limits.enabled) else {
            return (self.refuse(req, FollowStatus::NOT_PERMITTED), None);
        };
        let Some(gpu) = gpu else {
            return (self.refuse(req, FollowStatus::NOT_READY), None);
        };
        let key = RegionKey::new(group, gpu, req.name());
        let Some(r) = self.regions.get_mut(&key) else {
            return (self.refuse(req, FollowStatus::NOT_FOUND), None);
        };
        if r.len != req.len || r.layout != req.layout {
            return (self.refuse(req, FollowStatus::MISMATCH), None);
        }
        // The owner may map its own region: it is one more follower.
        r.followers.insert(client);
        r.maps += 1;
        let mapping = Mapping {
            region: Some(r.id),
            len: r.len,
            layout: r.layout,
        };
        self.counters.maps += 1;
        self.clients
            .entry(client)
            .or_default()
            .mapped
            .insert(key.clone(), mapping);
        let fd = self.regions.get(&key).map(|r| r.fd.as_fd());
        (req.answer(FollowStatus::OK), fd)
    }

    /// HELD from `client`: it still maps region `req.name()` (`len` bytes
    /// with `layout`), mapped from an earlier tandemd. Recorded like a
    /// mapping made by MAP (counted in its mapped bytes, replacing an earlier
    /// one of the name), but not counted as a map: linked to the region under
    /// its key when that region has the same length and layout, else kept
    /// unlinked until one is shared ([`share`](Self::share)). No answer is
    /// sent; a refusal is only counted. Returns whether it was linked, or the
    /// refusal: NOT_PERMITTED (not granted, or follow mode off), NOT_READY
    /// (GPU unknown yet), LIMIT (the client already has
    /// `4 * max_regions_per_client` mappings: a MAP needs a live region and
    /// is bounded by the shares, a HELD is not).
    pub fn held(
        &mut self,
        client: u64,
        group: Option<&str>,
        gpu: Option<u64>,
        req: &Follow,
    ) -> Result<bool, FollowStatus> {
        let Some(group) = group.filter(|_| self.limits.enabled) else {
            self.count_refusal(FollowStatus::NOT_PERMITTED.name());
            return Err(FollowStatus::NOT_PERMITTED);
        };
        let Some(gpu) = gpu else {
            self.count_refusal(FollowStatus::NOT_READY.name());
            return Err(FollowStatus::NOT_READY);
        };
        let key = RegionKey::new(group, gpu, req.name());
        let (count, replacing) = self.clients.get(&client).map_or((0, false), |e| {
            (e.mapped.len(), e.mapped.contains_key(&key))
        });
        if !replacing && count >= self.held_bound() {
            self.count_refusal(FollowStatus::LIMIT.name());
            return Err(FollowStatus::LIMIT);
        }
        let mut mapping = Mapping {
            region: None,
            len: req.len,
            layout: req.layout,
        };
        let e = self.clients.entry(client).or_default();
        // A second HELD (or one after a MAP) of the name replaces the first.
        if let Some(old) = e.mapped.remove(&key) {
            if let Some(r) = self.regions.get_mut(&key).filter(|r| old.of(r)) {
                r.followers.remove(&client);
            }
        }
        if let Some(r) = self.regions.get_mut(&key).filter(|r| mapping.fits(r)) {
            mapping.region = Some(r.id);
            r.followers.insert(client);
        }
        e.mapped.insert(key, mapping);
        self.counters.held += 1;
        Ok(mapping.region.is_some())
    }

    /// The most mappings a client may have for a HELD to be recorded.
    fn held_bound(&self) -> usize {
        self.limits.max_regions_per_client.saturating_mul(4)
    }

    /// The MAPPED OK `answer` to `client` (of `group` on `gpu`) could not be
    /// sent: the client never got the fd, so it maps nothing, and the map is
    /// not counted.
    pub fn undelivered_map(&mut self, client: u64, group: &str, gpu: u64, answer: &Follow) {
        let key = RegionKey::new(group, gpu, answer.name());
        let Some(m) = self
            .clients
            .get_mut(&client)
            .and_then(|e| e.mapped.remove(&key))
        else {
            return;
        };
        if let Some(r) = self.regions.get_mut(&key).filter(|r| m.of(r)) {
            r.followers.remove(&client);
            r.maps = r.maps.saturating_sub(1);
        }
        self.counters.maps = self.counters.maps.saturating_sub(1);
        self.prune(client);
    }

    /// UNSHARE from `client`: its regions of that name go (fds closed).
    /// Ignored, and counted as [`UNOWNED_UNSHARE`], when it shares none.
    pub fn unshare(&mut self, client: u64, req: &Follow) -> Vec<Gone> {
        let keys: Vec<RegionKey> = self
            .clients
            .get(&client)
            .map(|e| {
                e.shares
                    .iter()
                    .filter(|k| k.name == req.name())
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        if keys.is_empty() {
            self.count_refusal(UNOWNED_UNSHARE);
            return Vec::new();
        }
        let mut gone = Vec::with_capacity(keys.len());
        for k in keys {
            if let Some(e) = self.clients.get_mut(&client) {
                e.shares.remove(&k);
            }
            gone.extend(self.remove(k));
        }
        self.prune(client);
        gone
    }

    /// UNMAP from `client`: it no longer maps region `name` (whether or not
    /// the region still exists). Returns whether it mapped it.
    pub fn unmap(&mut self, client: u64, req: &Follow) -> bool {
        let Some(e) = self.clients.get_mut(&client) else {
            return false;
        };
        let keys: Vec<RegionKey> = e
            .mapped
            .keys()
            .filter(|k| k.name == req.name())
            .cloned()
            .collect();
        for k in &keys {
            let Some(m) = e.mapped.remove(k) else {
                continue;
            };
            if let Some(r) = self.regions.get_mut(k).filter(|r| m.of(r)) {
                r.followers.remove(&client);
            }
            self.counters.unmaps += 1;
        }
        self.prune(client);
        !keys.is_empty()
    }

    /// `client` is gone: its regions go (fds closed), and so do its
    /// mappings. Returns the regions removed.
    pub fn leave(&mut self, client: u64) -> Vec<Gone> {
        let Some(e) = self.clients.remove(&client) else {
            return Vec::new();
        };
        for (k, m) in &e.mapped {
            if let Some(r) = self.regions.get_mut(k).filter(|r| m.of(r)) {
                r.followers.remove(&client);
            }
        }
        e.shares
            .into_iter()
            .filter_map(|k| self.remove(k))
            .collect()
    }

    /// Count a Follow datagram that did not decode, or an op only tandemd sends.
    pub fn malformed(&mut self) {
        self.count_refusal(MALFORMED);
    }

    /// The regions, in key order.
    pub fn regions(&self) -> impl Iterator<Item = (&RegionKey, &Region)> {
        self.regions.iter()
    }

    /// The region under `key`.
    #[must_use]
    pub fn region(&self, key: &RegionKey) -> Option<&Region> {
        self.regions.get(key)
    }

    /// One client's figures (zero for a client unknown here).
    #[must_use]
    pub fn client(&self, client: u64) -> ClientView {
        let Some(e) = self.clients.get(&client) else {
            return ClientView::default();
        };
        ClientView {
            regions: e.shares.len(),
            shared_bytes: e
                .shares
                .iter()
                .filter_map(|k| self.regions.get(k))
                .map(|r| r.len)
                .sum(),
            mapped_bytes: e.mapped.values().map(|m| m.len).sum(),
        }
    }

    /// Bytes of every live region.
    #[must_use]
    pub fn shared_bytes(&self) -> u64 {
        self.regions.values().map(|r| r.len).sum()
    }

    /// Bytes every follower maps (what follow mode saves: a follower holds
    /// no copy), mappings of regions gone since included.
    #[must_use]
    pub fn mapped_bytes(&self) -> u64 {
        self.clients
            .values()
            .flat_map(|e| e.mapped.values())
            .map(|m| m.len)
            .sum()
    }

    /// The counters.
    #[must_use]
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Region fds this registry holds open (one per live region).
    #[must_use]
    pub fn held_fds(&self) -> usize {
        self.regions.len()
    }

    /// Clients with a share or a mapping here.
    #[must_use]
    pub fn known_clients(&self) -> usize {
        self.clients.len()
    }

    fn refuse(&mut self, req: &Follow, status: FollowStatus) -> Follow {
        self.count_refusal(status.name());
        req.answer(status)
    }

    fn count_refusal(&mut self, name: &'static str) {
        *self.counters.refusals.entry(name).or_insert(0) += 1;
    }

    /// Remove the region under `k` (its fd closed), if any.
    fn remove(&mut self, k: RegionKey) -> Option<Gone> {
        let r = self.regions.remove(&k)?;
        Some(Gone {
            owner: r.owner,
            len: r.len,
            followers: r.followers.len(),
            key: k,
        })
    }

    /// Forget `client`'s entry once it holds nothing.
    fn prune(&mut self, client: u64) {
        if self
            .clients
            .get(&client)
            .is_some_and(|e| e.shares.is_empty() && e.mapped.is_empty())
        {
            self.clients.remove(&client);
        }
    }
}

#[cfg(test)]
mod audit;
