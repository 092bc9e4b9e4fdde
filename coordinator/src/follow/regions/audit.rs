//! The registry's consistency check, run by the tests after every step.

use std::collections::BTreeSet;

use super::Regions;

impl Regions {
    /// Check the registry's own consistency (tests): every region is listed
    /// by its owner and every listing has its region; a region's followers
    /// are exactly the clients whose mapping links to it; a linked mapping's
    /// region is the one under its key or one since gone; an unlinked
    /// mapping fits no region under its key (it would have been linked).
    pub(crate) fn audit(&self) {
        for (k, r) in &self.regions {
            assert!((1..=self.next_id).contains(&r.id), "region id of {k:?}");
            let owner = self.clients.get(&r.owner);
            assert!(
                owner.is_some_and(|e| e.shares.contains(k)),
                "region {k:?} not listed by its owner {}",
                r.owner
            );
            let linked: BTreeSet<u64> = self
                .clients
                .iter()
                .filter(|(_, e)| e.mapped.get(k).is_some_and(|m| m.of(r)))
                .map(|(&c, _)| c)
                .collect();
            assert_eq!(r.followers, linked, "followers of {k:?}");
        }
        for (c, e) in &self.clients {
            assert!(
                !e.shares.is_empty() || !e.mapped.is_empty(),
                "empty entry of {c} kept"
            );
            for k in &e.shares {
                assert_eq!(self.regions.get(k).map(|r| r.owner), Some(*c), "{k:?}");
            }
            for (k, m) in &e.mapped {
                let here = self.regions.get(k);
                match m.region {
                    Some(id) => {
                        assert!((1..=self.next_id).contains(&id), "{c} maps {k:?}");
                        // Ids only grow: a gone region's is below its successor's.
                        if let Some(r) = here {
                            assert!(id <= r.id, "{c} maps {k:?}: id {id} after {}", r.id);
                        }
                        assert!(
                            self.regions.iter().all(
                                |(k2, r2)| r2.id != id || (k2 == k && r2.followers.contains(c))
                            ),
                            "{c} maps {k:?}, linked to region {id} elsewhere or not following it"
                        );
                    }
                    None => assert!(
                        !here.is_some_and(|r| m.fits(r)),
                        "{c} holds {k:?} unlinked though the region there fits"
                    ),
                }
            }
        }
    }
}
