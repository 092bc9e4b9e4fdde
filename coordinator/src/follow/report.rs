//! The follow parts of the stats snapshot, read from the registry of
//! regions: each client's shared and mapped bytes, and the top-level figures.

use std::collections::HashMap;

use super::regions::Regions;
use super::stats::{FollowTotals, RegionStats};
use crate::state::ClientSnapshot;

/// What the registry knows about GPUs, to name a region's GPU.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// GPU key → uuid as shown in the stats.
    pub gpus: HashMap<u64, String>,
    /// Client → (GPU key, device ordinal) it reported.
    pub devices: HashMap<u64, (u64, u32)>,
}

/// Fill each client's follow bytes from the registry of regions and return
/// the top-level figures (`enabled`: `[follow] enabled` now).
pub fn annotate(
    regions: &Regions,
    enabled: bool,
    place: &Placement,
    clients: &mut [ClientSnapshot],
) -> FollowTotals {
    for c in clients.iter_mut() {
        let v = regions.client(c.id);
        c.follow.shared_bytes = v.shared_bytes;
        c.follow.mapped_bytes = v.mapped_bytes;
    }
    let counters = regions.counters();
    FollowTotals {
        enabled,
        regions: regions
            .regions()
            .map(|(k, r)| RegionStats {
                name: k.name_str(),
                group: k.group.clone(),
                gpu: place.gpus.get(&k.gpu).cloned(),
                // The owner's ordinal, while it is on the region's GPU.
                gpu_ordinal: place
                    .devices
                    .get(&r.owner)
                    .filter(|(key, _)| *key == k.gpu)
                    .map(|&(_, ordinal)| ordinal),
                owner: r.owner,
                owner_pid: r.owner_pid,
                bytes: r.len,
                followers: r.followers.len() as u64,
                maps: r.maps,
            })
            .collect(),
        shared_bytes: regions.shared_bytes(),
        mapped_bytes: regions.mapped_bytes(),
        shares: counters.shares,
        maps: counters.maps,
        unmaps: counters.unmaps,
        held: counters.held,
        refusals: counters
            .refusals
            .iter()
            .map(|(&k, &v)| (k.to_string(), v))
            .collect(),
    }
}
