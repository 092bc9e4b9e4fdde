//! Follow-mode figures in `GET /stats`: the top-level `"follow"` object (the
//! regions, bytes, counters) and each client's `"follow"`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `"follow"` at the top of `GET /stats`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct FollowTotals {
    /// `[follow] enabled`.
    pub enabled: bool,
    /// Every live region, in (group, GPU, name) order.
    pub regions: Vec<RegionStats>,
    /// Bytes of the live regions.
    pub shared_bytes: u64,
    /// Bytes followers map (regions gone since included): device memory
    /// follow mode saves, since a follower holds no copy.
    pub mapped_bytes: u64,
    /// SHAREs answered OK since start.
    pub shares: u64,
    /// MAPs answered OK since start.
    pub maps: u64,
    /// UNMAPs that dropped a mapping since start.
    pub unmaps: u64,
    /// HELDs recorded since start: mappings followers reported again after
    /// a restart (not maps).
    pub held: u64,
    /// Refused or ignored messages by reason (a status name, `malformed`,
    /// `unowned_unshare`), every reason listed.
    pub refusals: BTreeMap<String, u64>,
}

/// One region of [`FollowTotals::regions`].
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RegionStats {
    /// Its name.
    pub name: String,
    /// Its follow group.
    pub group: String,
    /// Its GPU's uuid (`GPU-...`), null if tandemd cannot name it.
    pub gpu: Option<String>,
    /// The device ordinal its owner reported for that GPU, if any.
    pub gpu_ordinal: Option<u32>,
    /// The client that shared it.
    pub owner: u64,
    /// That client's pid.
    pub owner_pid: u32,
    /// Its size.
    pub bytes: u64,
    /// Clients that map it now.
    pub followers: u64,
    /// MAPs of it answered OK, in total.
    pub maps: u64,
}

/// One client's `"follow"` in `GET /stats`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClientFollow {
    /// The client was granted follow mode (its Welcome carried the flag).
    pub granted: bool,
    /// Its follow group (null when not granted).
    pub group: Option<String>,
    /// Bytes of the regions it shares.
    pub shared_bytes: u64,
    /// Bytes of the regions it maps (regions gone since, and mappings it
    /// reported with HELD after a restart, included).
    pub mapped_bytes: u64,
}
