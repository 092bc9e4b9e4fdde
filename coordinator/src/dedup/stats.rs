//! Dedup accounting: per-GPU counters and merge latencies kept by the index,
//! and their JSON shapes in `GET /stats` ([`super::report`] fills them in).
//!
//! The counters are declared once, in the `counters!` invocation below: it
//! makes [`GpuCounters`] (what the index counts), [`GpuDedupStats`] (their
//! `dedup_*` fields in a GPU of `GET /stats`), [`DedupTotals`] (their sum
//! over GPUs) and the code that copies and adds them.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Merges whose latency is kept (the window of the percentiles).
pub const LATENCY_WINDOW: usize = 1024;

/// Declares the dedup counters: `name / json_name: doc`, in the order the
/// JSON shows them.
macro_rules! counters {
    ($($(#[doc = $doc:literal])* $name:ident / $json:ident,)*) => {
        /// What the index counts per GPU (GPU key 0: clients whose Device is
        /// not known yet, and clients that were never given the share flag).
        #[derive(Clone, Debug, Default, PartialEq)]
        pub struct GpuCounters {
            $($(#[doc = $doc])* pub $name: u64,)*
            latencies_ns: VecDeque<u64>,
        }

        /// The dedup fields of one GPU in `GET /stats` (flattened into the GPU).
        #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
        #[serde(default)]
        pub struct GpuDedupStats {
            $($(#[doc = $doc])* pub $json: u64,)*
            /// Offer sent to RESULT OK, last 1024 merges.
            pub dedup_merge_latency_ms: MergeLatency,
        }

        /// Daemon-wide dedup figures (`"dedup"` at the top of `GET /stats`):
        /// the sum over GPUs, plus what could not be put on a GPU
        /// (`protocol_errors` also counts messages from clients without a
        /// GPU or the share flag).
        #[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
        #[serde(default)]
        pub struct DedupTotals {
            /// `[dedup] enabled`.
            pub enabled: bool,
            /// Clients registered now with the share flag.
            pub sharing_clients: u64,
            $($(#[doc = $doc])* #[doc = ""] #[doc = "Summed over GPUs."] pub $name: u64,)*
        }

        impl GpuCounters {
            /// The JSON shape.
            #[must_use]
            pub fn snapshot(&self) -> GpuDedupStats {
                GpuDedupStats {
                    $($json: self.$name,)*
                    dedup_merge_latency_ms: self.latency(),
                }
            }
        }

        impl DedupTotals {
            /// Add one GPU's counters.
            pub fn add(&mut self, c: &GpuCounters) {
                $(self.$name += c.$name;)*
            }
        }

        impl GpuCounters {
            /// Add the counts of a GPU whose counters are dropped (its
            /// merge latencies go with it).
            pub fn retire(&mut self, c: &GpuCounters) {
                $(self.$name += c.$name;)*
            }
        }
    };
}

counters! {
    /// Device bytes saved: sum over live shared copies of (holders - 1) * len.
    saved_bytes / dedup_saved_bytes,
    /// Bytes in live shared copies (sum of their len).
    shared_bytes / dedup_shared_bytes,
    /// Live shared copies (tandemd holds their fd).
    shared_copies / dedup_shared_copies,
    /// Granules merged (RESULT OK).
    merges / dedup_merges,
    /// Copy-on-write breaks: holders that left a shared copy by writing.
    cow_breaks / dedup_cow_breaks,
    /// Byte comparisons that found different content (RESULT MISMATCH).
    mismatches / dedup_mismatches,
    /// PUBLISH that failed (status, no fd, timeout, not delivered, a lie).
    publish_failures / dedup_publish_failures,
    /// OFFER that failed (GONE, DRIVER_ERROR, DECLINED, timeout, not delivered).
    offer_failures / dedup_offer_failures,
    /// Dedup messages that contradicted tandemd's state (ignored).
    protocol_errors / dedup_protocol_errors,
    /// Answers that came after their PUBLISH or OFFER was given up.
    late_replies / dedup_late_replies,
    /// Candidates ignored (no Device yet, per-client limit, refused content).
    candidates_ignored / dedup_candidates_ignored,
}

impl GpuCounters {
    /// Record one merge's latency (offer sent to RESULT OK).
    pub fn record_latency(&mut self, ns: u64) {
        if self.latencies_ns.len() == LATENCY_WINDOW {
            self.latencies_ns.pop_front();
        }
        self.latencies_ns.push_back(ns);
    }

    /// p50 / p99 / max of the last [`LATENCY_WINDOW`] merges.
    #[must_use]
    pub fn latency(&self) -> MergeLatency {
        let mut v: Vec<u64> = self.latencies_ns.iter().copied().collect();
        v.sort_unstable();
        let ms = |ns: u64| ns as f64 / 1e6;
        let rank = |q: f64| {
            // Nearest rank: the smallest value with at least q of the samples at or below it.
            let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
            ms(v[i])
        };
        if v.is_empty() {
            return MergeLatency::default();
        }
        MergeLatency {
            p50: Some(rank(0.50)),
            p99: Some(rank(0.99)),
            max: v.last().copied().map(ms),
        }
    }
}

/// Merge latency percentiles, ms (null until a merge happened).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MergeLatency {
    /// Median.
    pub p50: Option<f64>,
    /// 99th percentile.
    pub p99: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
}

/// One client's dedup view (`"dedup"` of a client in `GET /stats`).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClientDedup {
    /// The client was given the share flag.
    pub share_weights: bool,
    /// Its trust group (null when it does not share).
    pub trust_group: Option<String>,
    /// Bytes of its granules that map a shared copy (its own published ones included).
    pub shared_bytes: u64,
    /// Its granules tracked as candidates (pending, publishing, offered).
    pub candidate_granules: u64,
    /// `bytes_allocated` minus `shared_bytes` (saturating).
    pub private_bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_percentiles_over_a_bounded_window() {
        let mut c = GpuCounters::default();
        assert_eq!(c.latency(), MergeLatency::default());
        for i in 1..=100u64 {
            c.record_latency(i * 1_000_000);
        }
        let l = c.latency();
        assert_eq!(l.p50, Some(50.0));
        assert_eq!(l.p99, Some(99.0));
        assert_eq!(l.max, Some(100.0));
        // The window forgets the oldest samples.
        for _ in 0..LATENCY_WINDOW {
            c.record_latency(2_000_000);
        }
        let l = c.latency();
        assert_eq!((l.p50, l.p99, l.max), (Some(2.0), Some(2.0), Some(2.0)));
    }

    #[test]
    fn totals_add_up() {
        let a = GpuCounters {
            merges: 2,
            saved_bytes: 10,
            protocol_errors: 1,
            ..GpuCounters::default()
        };
        let mut t = DedupTotals::default();
        t.add(&a);
        t.add(&a);
        assert_eq!((t.merges, t.saved_bytes, t.protocol_errors), (4, 20, 2));
    }
}
