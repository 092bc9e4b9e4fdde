//! What one pair of the artifact holds: the inference job alone and each
//! sharing mode's figures ([`super`]'s documentation says what they mean).

/// The inference job's latencies alone (single-stream), ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Alone {
    /// Mean (`high_priority_orig_avg_latency`).
    pub avg_ms: f64,
    /// 90th percentile (`high_priority_orig_90th_latency`).
    pub p90_ms: f64,
    /// 95th percentile (`high_priority_orig_95th_latency`).
    pub p95_ms: f64,
    /// 99th percentile (`high_priority_orig_99th_latency`).
    pub p99_ms: f64,
}

/// One pair in one sharing mode.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Inference 99th-percentile latency, ms (`high_priority_<mode>_99th_latency`).
    pub p99_ms: f64,
    /// Inference mean latency, ms (`high_priority_<mode>_avg_latency`).
    pub avg_ms: f64,
    /// Inference requests served over alone (`high_priority_<mode>_throughput`).
    pub inference_tput: f64,
    /// Training throughput over alone (`best_effort_<mode>_throughput`).
    pub train_kept: f64,
}

/// Index of a mode in [`TallyPair::modes`].
pub mod mode {
    /// Tally's priority scheduler (default configuration).
    pub const TALLY: usize = 0;
    /// MPS, both clients at default priority.
    pub const MPS: usize = 1;
    /// MPS, training at low client priority.
    pub const MPS_PRIORITY: usize = 2;
    /// Plain time-slicing (no MPS).
    pub const TIME_SLICING: usize = 3;
    /// TGS.
    pub const TGS: usize = 4;
    /// The modes' names, in index order (the CSV's column infixes).
    pub const NAMES: [&str; 5] = ["tally", "mps", "mps_priority", "time_slicing", "tgs"];
}

/// One (inference, training) pair of the artifact.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TallyPair {
    /// The row's index (the CSV's first, unnamed column).
    pub csv_row: u32,
    /// The inference job, as [`crate::synthetic_a100::job`] names it
    /// (`bert_ort`: `onnxruntime_bert_infer_server_load_0.5_1`;
    /// `llama2_7b_ort`: `onnxruntime_llama-2-7b_infer_server_load_0.5_1`).
    pub inference: &'static str,
    /// The training job, as [`crate::synthetic_a100::job`] names it
    /// (`resnet50_b128`: `pytorch_resnet50_train_128`, and so on).
    pub training: &'static str,
    /// The inference job alone.
    pub alone: Alone,
    /// Per mode, indexed by [`mode`].
    pub modes: [Cell; 5],
}

impl TallyPair {
    /// The inference p99 in mode `m` over the alone p99.
    #[must_use]
    pub fn p99_ratio(&self, m: usize) -> f64 {
        self.modes[m].p99_ms / self.alone.p99_ms
    }

    /// The inference mean latency in mode `m` over the alone mean.
    #[must_use]
    pub fn mean_ratio(&self, m: usize) -> f64 {
        self.modes[m].avg_ms / self.alone.avg_ms
    }
}
