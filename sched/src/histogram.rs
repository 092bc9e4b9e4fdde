//! Completed requests' latencies as a Prometheus-style histogram: counts per
//! fixed bucket since the client registered, so that an operator can take
//! p99 over any window and any set of jobs (`histogram_quantile`), which the
//! scheduler's own recent-window quantiles cannot give.

/// Upper bounds of the buckets, ns (the last bucket, `+Inf`, is implicit):
/// 1 ms to 10 s, roughly 1-2.5-5 per decade.
pub const LATENCY_BUCKETS_NS: [u64; 13] = [
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Counts of request latencies per bucket.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencyHistogram {
    /// Requests whose latency was at most `LATENCY_BUCKETS_NS[i]` and more
    /// than the bucket before (not cumulative); the last entry counts those
    /// above every bound.
    pub counts: [u64; LATENCY_BUCKETS_NS.len() + 1],
    /// Sum of all latencies, ns (saturating).
    pub sum_ns: u64,
}

impl LatencyHistogram {
    /// Count one request of `ns`.
    pub fn record(&mut self, ns: u64) {
        let i = LATENCY_BUCKETS_NS.partition_point(|&b| b < ns);
        self.counts[i] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Cumulative counts (`le` each bound, then `+Inf`), as Prometheus wants.
    #[must_use]
    pub fn cumulative(&self) -> [u64; LATENCY_BUCKETS_NS.len() + 1] {
        let mut out = self.counts;
        for i in 1..out.len() {
            out[i] += out[i - 1];
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_upper_bounds_inclusive_and_cumulate() {
        let mut h = LatencyHistogram::default();
        h.record(1_000_000); // exactly 1 ms: first bucket
        h.record(1_000_001); // just above: second
        h.record(20_000_000_000); // above 10 s: +Inf
        assert_eq!(h.counts[0], 1);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[LATENCY_BUCKETS_NS.len()], 1);
        let c = h.cumulative();
        assert_eq!((c[0], c[1], c[12], c[13]), (1, 2, 2, 3));
        assert_eq!(h.sum_ns, 20_002_000_001);
    }
}
