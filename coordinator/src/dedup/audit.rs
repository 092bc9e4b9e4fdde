//! Test-only consistency checks of the index: every record agrees with
//! every other (both directions) and the counters agree with the records.

use std::collections::BTreeMap;

use super::entries::Granule;
use super::index::Index;
use super::stats::GpuCounters;

impl Index {
    /// Every cross-reference and derived counter, or what is wrong.
    pub(crate) fn audit(&self) -> Result<(), String> {
        let mut timers = 0usize;
        for (&c, e) in &self.clients {
            let (mut shared_bytes, mut candidates) = (0, 0);
            for (&g, st) in &e.granules {
                let place = format!("client {c} granule {g:#x} {st:?}");
                let same_place =
                    |k: &super::entries::Key| k.group == e.group && Some(k.gpu) == e.gpu;
                match *st {
                    Granule::Pending { key, seq } => {
                        candidates += 1;
                        let ke = self.keys.get(&key).ok_or(format!("{place}: no key"))?;
                        if ke.pending.get(&seq) != Some(&(c, g)) {
                            return Err(format!("{place}: not in its key's pending list"));
                        }
                        if !same_place(&key) {
                            return Err(format!("{place}: key of another group or gpu"));
                        }
                    }
                    Granule::Publishing {
                        key,
                        shared,
                        deadline,
                    } => {
                        candidates += 1;
                        timers += 1;
                        let sc = self
                            .shared
                            .get(&shared)
                            .ok_or(format!("{place}: no copy"))?;
                        if sc.published || sc.publisher != (c, g) || sc.key != key {
                            return Err(format!("{place}: copy disagrees {sc:?}"));
                        }
                        if self.keys.get(&key).and_then(|k| k.publishing) != Some(shared) {
                            return Err(format!("{place}: key not publishing it"));
                        }
                        if !self.timers.contains(&(deadline, c, g)) || !same_place(&key) {
                            return Err(format!("{place}: no timer, or wrong place"));
                        }
                    }
                    Granule::Offered {
                        shared, deadline, ..
                    } => {
                        candidates += 1;
                        timers += 1;
                        let sc = self
                            .shared
                            .get(&shared)
                            .ok_or(format!("{place}: no copy"))?;
                        if !sc.published || !sc.offers.contains(&(c, g)) || !same_place(&sc.key) {
                            return Err(format!("{place}: copy disagrees {sc:?}"));
                        }
                        if !self.timers.contains(&(deadline, c, g)) {
                            return Err(format!("{place}: no timer"));
                        }
                    }
                    Granule::Holder { shared, len } => {
                        shared_bytes += len;
                        let sc = self
                            .shared
                            .get(&shared)
                            .ok_or(format!("{place}: no copy"))?;
                        if !sc.published
                            || !sc.holders.contains(&(c, g))
                            || sc.key.len != len
                            || !same_place(&sc.key)
                        {
                            return Err(format!("{place}: copy disagrees {sc:?}"));
                        }
                    }
                }
            }
            if (shared_bytes, candidates) != (e.shared_bytes, e.candidates) {
                return Err(format!(
                    "client {c}: shared_bytes/candidates {}/{} but granules say {shared_bytes}/{candidates}",
                    e.shared_bytes, e.candidates
                ));
            }
        }
        if timers != self.timers.len() {
            return Err(format!(
                "{} timers for {timers} publishing/offered granules",
                self.timers.len()
            ));
        }
        let granule = |c: u64, g: u64| self.clients.get(&c).and_then(|e| e.granules.get(&g));
        for (key, ke) in &self.keys {
            if ke.pending.is_empty() && ke.publishing.is_none() && ke.shared.is_none() {
                return Err(format!("empty key kept: {key:?}"));
            }
            if ke.shared.is_some() && !ke.pending.is_empty() {
                return Err(format!(
                    "candidates pending on a shared key: {key:?} {ke:?}"
                ));
            }
            for (&seq, &(c, g)) in &ke.pending {
                if granule(c, g) != Some(&Granule::Pending { key: *key, seq }) {
                    return Err(format!("pending ({c}, {g:#x}) is not a pending granule"));
                }
            }
            for s in ke.publishing.iter().chain(ke.shared.iter()) {
                if self.shared.get(s).is_none_or(|sc| sc.key != *key) {
                    return Err(format!("key {key:?} names copy {s} of another key"));
                }
            }
        }
        let mut want: BTreeMap<u64, GpuCounters> = BTreeMap::new();
        for (&s, sc) in &self.shared {
            let ke = self.keys.get(&sc.key).ok_or(format!("copy {s}: no key"))?;
            let named = if sc.published {
                ke.shared
            } else {
                ke.publishing
            };
            if named != Some(s) {
                return Err(format!("copy {s} not named by its key {ke:?}"));
            }
            if sc.published && sc.holders.is_empty() && sc.offers.is_empty() {
                return Err(format!("copy {s} unmapped and not offered, yet open"));
            }
            for &(c, g) in &sc.holders {
                if !matches!(granule(c, g), Some(Granule::Holder { shared, .. }) if *shared == s) {
                    return Err(format!("copy {s}: holder ({c}, {g:#x}) does not hold it"));
                }
            }
            for &(c, g) in &sc.offers {
                if !matches!(granule(c, g), Some(Granule::Offered { shared, .. }) if *shared == s) {
                    return Err(format!("copy {s}: offer ({c}, {g:#x}) is not offered it"));
                }
            }
            if sc.published {
                let w = want.entry(sc.key.gpu).or_default();
                w.shared_copies += 1;
                w.shared_bytes += sc.key.len;
                w.saved_bytes += (sc.holders.len() as u64).saturating_sub(1) * sc.key.len;
            }
        }
        for (&gpu, k) in &self.gpus {
            let w = want.remove(&gpu).unwrap_or_default();
            if (k.saved_bytes, k.shared_bytes, k.shared_copies)
                != (w.saved_bytes, w.shared_bytes, w.shared_copies)
            {
                return Err(format!(
                    "gpu {gpu}: saved/shared/copies {}/{}/{} but copies say {}/{}/{}",
                    k.saved_bytes,
                    k.shared_bytes,
                    k.shared_copies,
                    w.saved_bytes,
                    w.shared_bytes,
                    w.shared_copies
                ));
            }
        }
        if let Some((gpu, _)) = want.iter().find(|(_, w)| w.shared_copies > 0) {
            return Err(format!("gpu {gpu} has copies but no counters"));
        }
        Ok(())
    }

    /// Everything but the counters, in a stable order (to show a refused
    /// message changed nothing).
    pub(crate) fn fingerprint(&self) -> String {
        let mut keys: Vec<String> = self.keys.iter().map(|k| format!("{k:?}")).collect();
        keys.sort();
        format!(
            "{:?}\n{keys:?}\n{:?}\n{:?}\n{}",
            self.clients, self.shared, self.timers, self.next_shared
        )
    }
}
