//! The index's state records: the match key, one granule's state, and the
//! per-client, per-key and per-shared-copy entries.

use std::collections::{BTreeMap, BTreeSet};

use tandem_proto::dedup::{Dedup, DedupOp};

/// The granule size the shim uses (the VMM allocation granularity).
pub const GRANULE_LEN: u64 = 2 << 20;

/// A 128-bit content hash (a hint, never proof).
pub type Hash = [u8; 16];

/// (trust group, GPU, len, hash): candidates match only on all four.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Key {
    pub(super) group: u32,
    pub(super) gpu: u64,
    pub(super) len: u64,
    pub(super) hash: Hash,
}

/// One granule of one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Granule {
    /// A candidate waiting for a match (`seq` orders the key's pending list).
    Pending { key: Key, seq: u64 },
    /// Asked to PUBLISH `shared`.
    Publishing {
        key: Key,
        shared: u64,
        deadline: u64,
    },
    /// Sent an OFFER of `shared` at `sent_at`.
    Offered {
        shared: u64,
        deadline: u64,
        sent_at: u64,
    },
    /// Maps `shared` (merged, or its publisher).
    Holder { shared: u64, len: u64 },
}

#[derive(Debug)]
pub(super) struct ClientEntry {
    pub(super) group: u32,
    pub(super) gpu: Option<u64>,
    pub(super) granules: BTreeMap<u64, Granule>,
    /// (granule, hash) that failed a comparison: never offered again.
    pub(super) refused: BTreeSet<(u64, Hash)>,
    /// (granule, shared) of PUBLISH and OFFER given up while the client may
    /// still answer (its answer is then late, not a lie).
    pub(super) expired: BTreeSet<(u64, u64)>,
    pub(super) shared_bytes: u64,
    pub(super) candidates: u64,
}

impl ClientEntry {
    pub(super) fn new(group: u32) -> Self {
        ClientEntry {
            group,
            gpu: None,
            granules: BTreeMap::new(),
            refused: BTreeSet::new(),
            expired: BTreeSet::new(),
            shared_bytes: 0,
            candidates: 0,
        }
    }

    pub(super) fn tracked(&self) -> usize {
        self.granules.len() + self.refused.len() + self.expired.len()
    }

    pub(super) fn remove(&mut self, g: u64) -> Option<Granule> {
        let old = self.granules.remove(&g)?;
        match old {
            Granule::Holder { len, .. } => self.shared_bytes -= len,
            _ => self.candidates -= 1,
        }
        Some(old)
    }

    pub(super) fn set(&mut self, g: u64, st: Granule) {
        self.remove(g);
        match st {
            Granule::Holder { len, .. } => self.shared_bytes += len,
            _ => self.candidates += 1,
        }
        self.granules.insert(g, st);
    }

    pub(super) fn forget_refused(&mut self, g: u64) -> bool {
        let hit: Vec<(u64, Hash)> = self
            .refused
            .range((g, [0u8; 16])..=(g, [0xffu8; 16]))
            .copied()
            .collect();
        for k in &hit {
            self.refused.remove(k);
        }
        !hit.is_empty()
    }

    pub(super) fn has_refused(&self, g: u64) -> bool {
        self.refused
            .range((g, [0u8; 16])..=(g, [0xffu8; 16]))
            .next()
            .is_some()
    }

    /// Forget the given-up requests about granule `g`; whether there were any.
    pub(super) fn forget_expired(&mut self, g: u64) -> bool {
        let hit: Vec<(u64, u64)> = self
            .expired
            .range((g, 0)..=(g, u64::MAX))
            .copied()
            .collect();
        for k in &hit {
            self.expired.remove(k);
        }
        !hit.is_empty()
    }
}

#[derive(Debug, Default)]
pub(super) struct KeyEntry {
    /// Candidates waiting, oldest first: seq -> (client, granule).
    pub(super) pending: BTreeMap<u64, (u64, u64)>,
    pub(super) publishing: Option<u64>,
    pub(super) shared: Option<u64>,
}

#[derive(Debug)]
pub(super) struct SharedCopy {
    pub(super) key: Key,
    pub(super) publisher: (u64, u64),
    /// PUBLISHED OK arrived: tandemd holds the fd.
    pub(super) published: bool,
    pub(super) holders: BTreeSet<(u64, u64)>,
    pub(super) offers: BTreeSet<(u64, u64)>,
}

/// A tandemd -> shim message about `key`.
pub(super) fn msg(op: DedupOp, granule: u64, shared: u64, key: &Key) -> Dedup {
    Dedup {
        op,
        status: 0,
        granule,
        shared_id: shared,
        len: key.len,
        hash: key.hash,
        elapsed_ns: 0,
    }
}
