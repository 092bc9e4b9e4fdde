//! The dedup parts of the stats snapshot, read from the index: each GPU's
//! counters, each client's shared and candidate bytes, the daemon-wide totals.

use super::index::Index;
use super::stats::DedupTotals;
use crate::state::{ClientSnapshot, GpuSnapshot};

/// Fill the dedup parts of a stats snapshot from the index: `gpus[i]` is the
/// GPU whose key is `gpu_keys[i]`. Returns the daemon-wide totals.
pub fn annotate(
    index: &Index,
    enabled: bool,
    gpu_keys: &[u64],
    gpus: &mut [GpuSnapshot],
    clients: &mut [ClientSnapshot],
) -> DedupTotals {
    for (g, key) in gpus.iter_mut().zip(gpu_keys) {
        if let Some(c) = index.counters(*key) {
            g.dedup = c.snapshot();
        }
    }
    for c in clients.iter_mut() {
        if let Some(v) = index.client(c.id) {
            c.dedup.shared_bytes = v.shared_bytes;
            c.dedup.candidate_granules = v.candidates;
        }
        c.dedup.private_bytes = c.bytes_allocated.saturating_sub(c.dedup.shared_bytes);
    }
    let mut t = DedupTotals {
        enabled,
        sharing_clients: clients.iter().filter(|c| c.dedup.share_weights).count() as u64,
        ..DedupTotals::default()
    };
    for (_, c) in index.all_counters() {
        t.add(c);
    }
    t.add(index.retired_counters());
    t
}
