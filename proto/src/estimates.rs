//! Kernel duration estimates, published by tandemd to one client and read by
//! its shim on the launch path, so that the shim can weigh each launch before
//! it starts it ("size-aware admission", see [`crate::control`]).
//!
//! A kernel is identified by its *key*: the function's stable id together
//! with its grid ([`kernel_key`]), because one cuBLAS or cuDNN kernel used at
//! several layer shapes runs for very different times. tandemd's scheduler
//! keys its estimates the same way (its drain computes the key from each
//! LAUNCH record's `func_id` and grid), so what it learns is what it
//! publishes.
//!
//! # Layout
//!
//! [`ESTIMATE_ENTRIES`] 8-byte atomic entries at
//! [`RingLayout::estimates_offset`](crate::ring::RingLayout::estimates_offset)
//! of the client's region. Entry = `key << 32 | ns` (`ns` saturated at
//! `u32::MAX`, about 4.3 s); 0 is an empty entry (keys are never 0). One
//! 8-byte store publishes a key and its value together, so a reader never
//! sees one without the other. Open addressing: a key lives in one of the
//! [`PROBE`] entries from `key % ESTIMATE_ENTRIES`; the coordinator is the
//! only writer, and a key that finds no room there is not published (the
//! shim then charges the control block's `default_est_ns`).
//!
//! The table is the client's claim only in the sense that the shim reads it;
//! tandemd writes it and never reads it back.

use core::sync::atomic::{AtomicU64, Ordering};

/// Entries in a client's estimate table.
pub const ESTIMATE_ENTRIES: usize = 1024;
/// Bytes of the table.
pub const ESTIMATES_LEN: usize = ESTIMATE_ENTRIES * 8;
/// Entries a key may occupy, from its home entry on.
pub const PROBE: usize = 8;

/// The key of a launch of function `func_id` with grid `grid`: a 32-bit
/// mix, never 0. Graph launches use the graph exec's id and a zero grid.
#[inline(always)]
#[must_use]
pub const fn kernel_key(func_id: u64, grid: [u32; 3]) -> u32 {
    // splitmix64 finaliser over the id and the packed grid.
    let mut z = func_id
        ^ (grid[0] as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ((grid[1] as u64) << 32 | grid[2] as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let k = (z ^ (z >> 32)) as u32;
    if k == 0 {
        1
    } else {
        k
    }
}

/// A client's estimate table, as mapped.
#[repr(C, align(128))]
pub struct EstimateTable {
    entries: [AtomicU64; ESTIMATE_ENTRIES],
}

const _: () = assert!(core::mem::size_of::<EstimateTable>() == ESTIMATES_LEN);

#[inline(always)]
const fn home(key: u32) -> usize {
    key as usize % ESTIMATE_ENTRIES
}

impl EstimateTable {
    /// The published estimate of `key`, ns (at most [`PROBE`] Relaxed loads;
    /// usually one).
    #[inline(always)]
    #[must_use]
    pub fn lookup(&self, key: u32) -> Option<u64> {
        let h = home(key);
        for i in 0..PROBE {
            let e = self.entries[(h + i) % ESTIMATE_ENTRIES].load(Ordering::Relaxed);
            if e == 0 {
                return None;
            }
            if (e >> 32) as u32 == key {
                return Some(e & 0xFFFF_FFFF);
            }
        }
        None
    }

    /// Publish `ns` for `key` (coordinator; the only writer). `false` when
    /// the key's probe window is full of other keys (not published).
    pub fn publish(&self, key: u32, ns: u64) -> bool {
        if key == 0 {
            return false;
        }
        let packed = (u64::from(key) << 32) | ns.clamp(1, u64::from(u32::MAX));
        let h = home(key);
        for i in 0..PROBE {
            let slot = &self.entries[(h + i) % ESTIMATE_ENTRIES];
            let e = slot.load(Ordering::Relaxed);
            if e == 0 || (e >> 32) as u32 == key {
                slot.store(packed, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Keys published (a statistic; coordinator side).
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.load(Ordering::Relaxed) != 0)
            .count()
    }

    /// Whether nothing is published.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Box<EstimateTable> {
        Box::new(EstimateTable {
            entries: [const { AtomicU64::new(0) }; ESTIMATE_ENTRIES],
        })
    }

    #[test]
    fn keys_tell_grids_apart_and_are_never_zero() {
        let a = kernel_key(42, [64, 1, 1]);
        assert_ne!(a, kernel_key(42, [128, 1, 1]));
        assert_ne!(a, kernel_key(42, [64, 2, 1]));
        assert_ne!(a, kernel_key(42, [64, 1, 2]));
        assert_ne!(a, kernel_key(43, [64, 1, 1]));
        assert_eq!(a, kernel_key(42, [64, 1, 1]));
        let mut seen = std::collections::HashSet::new();
        for f in 0..200u64 {
            for g in [1u32, 2, 4, 80, 132, 1024] {
                let k = kernel_key(f, [g, 1, 1]);
                assert_ne!(k, 0);
                seen.insert(k);
            }
        }
        assert_eq!(seen.len(), 1200, "no collisions among 1200 small keys");
    }

    #[test]
    fn published_estimates_are_found_and_updated_in_place() {
        let t = table();
        let k = kernel_key(7, [32, 1, 1]);
        assert_eq!(t.lookup(k), None);
        assert!(t.publish(k, 250_000));
        assert_eq!(t.lookup(k), Some(250_000));
        assert!(t.publish(k, 300_000));
        assert_eq!(t.lookup(k), Some(300_000));
        assert_eq!(t.len(), 1);
        assert!(t.publish(kernel_key(8, [1, 1, 1]), 10 * 1_000_000_000));
        assert_eq!(
            t.lookup(kernel_key(8, [1, 1, 1])),
            Some(u64::from(u32::MAX)),
            "saturated, not wrapped"
        );
        assert!(!t.publish(0, 5));
    }

    #[test]
    fn a_full_probe_window_refuses_and_lookups_stay_bounded() {
        let t = table();
        // PROBE keys sharing one home entry fill its window.
        let keys: Vec<u32> = (1..)
            .map(|i: u32| i * ESTIMATE_ENTRIES as u32 + 5)
            .take(PROBE + 1)
            .collect();
        for &k in &keys[..PROBE] {
            assert!(t.publish(k, u64::from(k)));
        }
        assert!(!t.publish(keys[PROBE], 1), "no room in its window");
        assert_eq!(t.lookup(keys[PROBE]), None);
        for &k in &keys[..PROBE] {
            assert_eq!(t.lookup(k), Some(u64::from(k)));
        }
    }
}
