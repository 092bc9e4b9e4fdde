//! Dedup accounting: per-GPU counters and merge latencies kept by the index,
//! and their JSON shapes in `GET /stats` ([`super::report`] fills them in).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// Merges whose latency is kept (the window of the percentiles).
pub const LATENCY_WINDOW: usize = 1024;

/// What the index counts per GPU (GPU key 0: clients whose Device is not
/// known yet, and clients that were never given the share flag).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuCounters {
    /// Granules merged (RESULT OK).
    pub merges: u64,
    /// Holders that left a shared copy by copy-on-write.
    pub cow_breaks: u64,
    /// RESULT MISMATCH.
    pub mismatches: u64,
    /// PUBLISH that failed (status, no fd, timeout, not delivered, a lie).
    pub publish_failures: u64,
    /// OFFER that failed (GONE, DRIVER_ERROR, DECLINED, timeout, not delivered).
    pub offer_failures: u64,
    /// Messages that contradicted the state (ignored).
    pub protocol_errors: u64,
    /// Answers that came after their PUBLISH or OFFER was given up.
    pub late_replies: u64,
    /// Candidates ignored (no Device yet, per-client limit, refused content).
    pub candidates_ignored: u64,
    /// Sum over live shared copies of (holders - 1) * len.
    pub saved_bytes: u64,
    /// Sum of len over live shared copies.
    pub shared_bytes: u64,
    /// Live shared copies (tandemd holds their fd).
    pub shared_copies: u64,
    latencies_ns: VecDeque<u64>,
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

    /// The JSON shape.
    #[must_use]
    pub fn snapshot(&self) -> GpuDedupStats {
        GpuDedupStats {
            dedup_saved_bytes: self.saved_bytes,
            dedup_shared_bytes: self.shared_bytes,
            dedup_shared_copies: self.shared_copies,
            dedup_merges: self.merges,
            dedup_cow_breaks: self.cow_breaks,
            dedup_mismatches: self.mismatches,
            dedup_publish_failures: self.publish_failures,
            dedup_offer_failures: self.offer_failures,
            dedup_protocol_errors: self.protocol_errors,
            dedup_late_replies: self.late_replies,
            dedup_candidates_ignored: self.candidates_ignored,
            dedup_merge_latency_ms: self.latency(),
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

/// The dedup fields of one GPU in `GET /stats` (flattened into the GPU).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct GpuDedupStats {
    /// Device bytes saved: sum over shared copies of (holders - 1) * len.
    pub dedup_saved_bytes: u64,
    /// Bytes in live shared copies.
    pub dedup_shared_bytes: u64,
    /// Live shared copies.
    pub dedup_shared_copies: u64,
    /// Granules merged.
    pub dedup_merges: u64,
    /// Copy-on-write breaks.
    pub dedup_cow_breaks: u64,
    /// Byte comparisons that found different content.
    pub dedup_mismatches: u64,
    /// Failed publishes.
    pub dedup_publish_failures: u64,
    /// Failed offers.
    pub dedup_offer_failures: u64,
    /// Dedup messages that contradicted tandemd's state.
    pub dedup_protocol_errors: u64,
    /// Answers after their deadline.
    pub dedup_late_replies: u64,
    /// Candidates ignored.
    pub dedup_candidates_ignored: u64,
    /// Offer sent to RESULT OK, last 1024 merges.
    pub dedup_merge_latency_ms: MergeLatency,
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

/// Daemon-wide dedup figures (`"dedup"` at the top of `GET /stats`): the sum
/// over GPUs, plus what could not be put on a GPU.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct DedupTotals {
    /// `[dedup] enabled`.
    pub enabled: bool,
    /// Clients registered now with the share flag.
    pub sharing_clients: u64,
    /// See [`GpuDedupStats`].
    pub saved_bytes: u64,
    /// See [`GpuDedupStats`].
    pub shared_bytes: u64,
    /// See [`GpuDedupStats`].
    pub shared_copies: u64,
    /// See [`GpuDedupStats`].
    pub merges: u64,
    /// See [`GpuDedupStats`].
    pub cow_breaks: u64,
    /// See [`GpuDedupStats`].
    pub mismatches: u64,
    /// See [`GpuDedupStats`].
    pub publish_failures: u64,
    /// See [`GpuDedupStats`].
    pub offer_failures: u64,
    /// See [`GpuDedupStats`] (plus messages from clients without a GPU or the flag).
    pub protocol_errors: u64,
    /// See [`GpuDedupStats`].
    pub late_replies: u64,
    /// See [`GpuDedupStats`].
    pub candidates_ignored: u64,
}

impl DedupTotals {
    /// Add one GPU's counters.
    pub fn add(&mut self, c: &GpuCounters) {
        self.saved_bytes += c.saved_bytes;
        self.shared_bytes += c.shared_bytes;
        self.shared_copies += c.shared_copies;
        self.merges += c.merges;
        self.cow_breaks += c.cow_breaks;
        self.mismatches += c.mismatches;
        self.publish_failures += c.publish_failures;
        self.offer_failures += c.offer_failures;
        self.protocol_errors += c.protocol_errors;
        self.late_replies += c.late_replies;
        self.candidates_ignored += c.candidates_ignored;
    }
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
