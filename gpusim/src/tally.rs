//! The A100 measurements of the Tally artifact: 12 (inference, training)
//! pairs, each run alone and in five sharing modes.
//!
//! Source: repository `tally-project/tally-bench`, file
//! `tally_results/priority-aware-perf.csv` at commit `5b72ee85` ("update",
//! 2024-11-02; the same file is `tally_results_demo/priority-aware-perf.csv`
//! since commit `6073880`, "rename"), and `single-job-perf.csv` beside it.
//! Each pair has three rows there (Tally at two preemption-latency limits
//! and its space-sharing variant); the one used here is the **default
//! configuration** (`preemption_latency_limit` 0.0316, `use_space_share`
//! FALSE, `disable_transformation` False), the first of the three. Every
//! baseline column (MPS, MPS + priority, time-slicing, TGS) is the same in
//! the three rows.
//!
//! # What the numbers mean (read from the repository's code)
//!
//! * **Latency is service time, not arrival to result.** The server loop
//!   (`python/workloads/common/infer_monitor.py`, `ServerInferMonitor`)
//!   times each request from its own begin to its end; when a request is
//!   late it starts at once after the previous one, and when it is early the
//!   loop busy-waits for the arrival. Queueing is not in the latency.
//! * **Load 0.5**: arrivals are Poisson at `0.5 / q` per second, `q` the
//!   shortest request latency seen during warm-up
//!   (`python/bench_utils/utils.py`, `get_possion_arrival_trace`).
//! * **The alone baseline is the single-stream run** (requests back to back):
//!   `python/bench_utils/parse.py` maps the `server_load_0.5` key to
//!   `infer_single-stream_1` for `high_priority_orig_*`. The server run alone
//!   at load 0.5 is in `single-job-perf.csv`: average 4.033 ms (BERT) and
//!   1989.191 ms (Llama-2-7B) against the single-stream 4.05 and 1963.886.
//! * **Time-slicing** is the `default` result set: both processes on the GPU
//!   with no MPS daemon (`parse.py`: `time_slicing_run_res =
//!   baseline_res.get(key)`).
//! * **Throughputs** are fractions of the job alone, iterations over elapsed
//!   time, rounded to 0.01 (`parse.py`, `compute_relative_tp`). The artifact
//!   publishes no absolute training throughput: `single-job-perf.csv` has
//!   `original_throughput = 1` for every job. It does publish each job's
//!   mean GPU utilisation alone (nvidia-smi, sampled every 0.2 s), in
//!   [`GPU_UTIL_ALONE`].

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
}

/// Mean GPU utilisation of each job alone (`single-job-perf.csv`, column
/// `gpu_util`, %): nvidia-smi's share of time at least one kernel ran.
pub const GPU_UTIL_ALONE: [(&str, f64); 8] = [
    ("whisper_large_v3_b16", 49.994),
    ("resnet50_b128", 99.506),
    ("pointnet_b128", 93.23),
    ("pegasus_x_base_b4", 89.767),
    ("gpt2_large_b1", 89.45),
    ("bert_b32", 98.041),
    // The single-stream runs (requests back to back).
    ("llama2_7b_ort", 90.847),
    ("bert_ort", 89.08),
];

/// The server run alone at load 0.5 (`single-job-perf.csv`,
/// `original_avg_latency` of the `server_load_0.5` rows), mean ms.
pub const SERVER_ALONE_AVG_MS: [(&str, f64); 2] =
    [("llama2_7b_ort", 1989.191), ("bert_ort", 4.033)];

/// The 12 pairs, default configuration, in the CSV's row order.
pub const PAIRS: [TallyPair; 12] = [
    TallyPair {
        csv_row: 33,
        inference: "llama2_7b_ort",
        training: "whisper_large_v3_b16",
        alone: Alone {
            avg_ms: 1963.886,
            p90_ms: 1970.355,
            p95_ms: 1975.84,
            p99_ms: 1982.652,
        },
        modes: [
            Cell {
                p99_ms: 2013.816,
                avg_ms: 1998.51,
                inference_tput: 1.0,
                train_kept: 0.52,
            },
            Cell {
                p99_ms: 3546.247,
                avg_ms: 3325.675,
                inference_tput: 0.99,
                train_kept: 0.99,
            },
            Cell {
                p99_ms: 3380.507,
                avg_ms: 3069.252,
                inference_tput: 1.0,
                train_kept: 0.96,
            },
            Cell {
                p99_ms: 4039.677,
                avg_ms: 3120.819,
                inference_tput: 0.99,
                train_kept: 0.72,
            },
            Cell {
                p99_ms: 3400.672,
                avg_ms: 2681.757,
                inference_tput: 1.0,
                train_kept: 0.68,
            },
        ],
    },
    TallyPair {
        csv_row: 27,
        inference: "llama2_7b_ort",
        training: "resnet50_b128",
        alone: Alone {
            avg_ms: 1963.886,
            p90_ms: 1970.355,
            p95_ms: 1975.84,
            p99_ms: 1982.652,
        },
        modes: [
            Cell {
                p99_ms: 2025.393,
                avg_ms: 1997.829,
                inference_tput: 1.0,
                train_kept: 0.37,
            },
            Cell {
                p99_ms: 2566.643,
                avg_ms: 2535.965,
                inference_tput: 1.0,
                train_kept: 0.74,
            },
            Cell {
                p99_ms: 2512.709,
                avg_ms: 2480.039,
                inference_tput: 1.0,
                train_kept: 0.74,
            },
            Cell {
                p99_ms: 4549.336,
                avg_ms: 4531.198,
                inference_tput: 0.87,
                train_kept: 0.5,
            },
            Cell {
                p99_ms: 2422.889,
                avg_ms: 2373.335,
                inference_tput: 1.0,
                train_kept: 0.75,
            },
        ],
    },
    TallyPair {
        csv_row: 21,
        inference: "llama2_7b_ort",
        training: "pointnet_b128",
        alone: Alone {
            avg_ms: 1963.886,
            p90_ms: 1970.355,
            p95_ms: 1975.84,
            p99_ms: 1982.652,
        },
        modes: [
            Cell {
                p99_ms: 2059.17,
                avg_ms: 2001.557,
                inference_tput: 1.0,
                train_kept: 0.4,
            },
            Cell {
                p99_ms: 2915.043,
                avg_ms: 2847.565,
                inference_tput: 1.0,
                train_kept: 0.8,
            },
            Cell {
                p99_ms: 2776.06,
                avg_ms: 2723.664,
                inference_tput: 1.0,
                train_kept: 0.79,
            },
            Cell {
                p99_ms: 4280.417,
                avg_ms: 4197.436,
                inference_tput: 0.94,
                train_kept: 0.5,
            },
            Cell {
                p99_ms: 2783.717,
                avg_ms: 2683.876,
                inference_tput: 1.0,
                train_kept: 0.75,
            },
        ],
    },
    TallyPair {
        csv_row: 15,
        inference: "llama2_7b_ort",
        training: "pegasus_x_base_b4",
        alone: Alone {
            avg_ms: 1963.886,
            p90_ms: 1970.355,
            p95_ms: 1975.84,
            p99_ms: 1982.652,
        },
        modes: [
            Cell {
                p99_ms: 2012.672,
                avg_ms: 1989.654,
                inference_tput: 1.0,
                train_kept: 0.46,
            },
            Cell {
                p99_ms: 4442.112,
                avg_ms: 4383.393,
                inference_tput: 0.9,
                train_kept: 0.85,
            },
            Cell {
                p99_ms: 3646.015,
                avg_ms: 3583.218,
                inference_tput: 1.0,
                train_kept: 0.81,
            },
            Cell {
                p99_ms: 3543.865,
                avg_ms: 3412.645,
                inference_tput: 1.0,
                train_kept: 0.47,
            },
            Cell {
                p99_ms: 3498.714,
                avg_ms: 3408.329,
                inference_tput: 1.0,
                train_kept: 0.79,
            },
        ],
    },
    TallyPair {
        csv_row: 9,
        inference: "llama2_7b_ort",
        training: "gpt2_large_b1",
        alone: Alone {
            avg_ms: 1963.886,
            p90_ms: 1970.355,
            p95_ms: 1975.84,
            p99_ms: 1982.652,
        },
        modes: [
            Cell {
                p99_ms: 2035.348,
                avg_ms: 2006.038,
                inference_tput: 1.0,
                train_kept: 0.47,
            },
            Cell {
                p99_ms: 4252.638,
                avg_ms: 4191.625,
                inference_tput: 0.94,
                train_kept: 0.84,
            },
            Cell {
                p99_ms: 3574.84,
                avg_ms: 3513.134,
                inference_tput: 1.0,
                train_kept: 0.81,
            },
            Cell {
                p99_ms: 3504.699,
                avg_ms: 3431.265,
                inference_tput: 1.0,
                train_kept: 0.47,
            },
            Cell {
                p99_ms: 3505.977,
                avg_ms: 3431.399,
                inference_tput: 1.0,
                train_kept: 0.79,
            },
        ],
    },
    TallyPair {
        csv_row: 3,
        inference: "llama2_7b_ort",
        training: "bert_b32",
        alone: Alone {
            avg_ms: 1963.886,
            p90_ms: 1970.355,
            p95_ms: 1975.84,
            p99_ms: 1982.652,
        },
        modes: [
            Cell {
                p99_ms: 2011.985,
                avg_ms: 1985.256,
                inference_tput: 1.0,
                train_kept: 0.48,
            },
            Cell {
                p99_ms: 6994.107,
                avg_ms: 6939.101,
                inference_tput: 0.57,
                train_kept: 0.92,
            },
            Cell {
                p99_ms: 4844.567,
                avg_ms: 4724.447,
                inference_tput: 0.83,
                train_kept: 0.85,
            },
            Cell {
                p99_ms: 4236.93,
                avg_ms: 4199.638,
                inference_tput: 0.94,
                train_kept: 0.47,
            },
            Cell {
                p99_ms: 4609.803,
                avg_ms: 4510.036,
                inference_tput: 0.87,
                train_kept: 0.84,
            },
        ],
    },
    TallyPair {
        csv_row: 30,
        inference: "bert_ort",
        training: "whisper_large_v3_b16",
        alone: Alone {
            avg_ms: 4.05,
            p90_ms: 4.066,
            p95_ms: 4.076,
            p99_ms: 4.098,
        },
        modes: [
            Cell {
                p99_ms: 4.339,
                avg_ms: 4.086,
                inference_tput: 1.0,
                train_kept: 0.49,
            },
            Cell {
                p99_ms: 48.26,
                avg_ms: 7.221,
                inference_tput: 0.94,
                train_kept: 1.0,
            },
            Cell {
                p99_ms: 23.81,
                avg_ms: 6.657,
                inference_tput: 0.98,
                train_kept: 0.96,
            },
            Cell {
                p99_ms: 11.171,
                avg_ms: 6.605,
                inference_tput: 0.98,
                train_kept: 0.73,
            },
            Cell {
                p99_ms: 20.955,
                avg_ms: 5.397,
                inference_tput: 1.0,
                train_kept: 0.7,
            },
        ],
    },
    TallyPair {
        csv_row: 24,
        inference: "bert_ort",
        training: "resnet50_b128",
        alone: Alone {
            avg_ms: 4.05,
            p90_ms: 4.066,
            p95_ms: 4.076,
            p99_ms: 4.098,
        },
        modes: [
            Cell {
                p99_ms: 4.504,
                avg_ms: 4.167,
                inference_tput: 1.0,
                train_kept: 0.37,
            },
            Cell {
                p99_ms: 9.024,
                avg_ms: 5.952,
                inference_tput: 0.99,
                train_kept: 0.78,
            },
            Cell {
                p99_ms: 8.921,
                avg_ms: 5.892,
                inference_tput: 0.99,
                train_kept: 0.77,
            },
            Cell {
                p99_ms: 11.196,
                avg_ms: 10.983,
                inference_tput: 0.74,
                train_kept: 0.56,
            },
            Cell {
                p99_ms: 7.449,
                avg_ms: 5.049,
                inference_tput: 1.0,
                train_kept: 0.79,
            },
        ],
    },
    TallyPair {
        csv_row: 18,
        inference: "bert_ort",
        training: "pointnet_b128",
        alone: Alone {
            avg_ms: 4.05,
            p90_ms: 4.066,
            p95_ms: 4.076,
            p99_ms: 4.098,
        },
        modes: [
            Cell {
                p99_ms: 4.411,
                avg_ms: 4.161,
                inference_tput: 1.0,
                train_kept: 0.39,
            },
            Cell {
                p99_ms: 16.954,
                avg_ms: 7.134,
                inference_tput: 0.94,
                train_kept: 0.84,
            },
            Cell {
                p99_ms: 15.25,
                avg_ms: 6.73,
                inference_tput: 0.97,
                train_kept: 0.82,
            },
            Cell {
                p99_ms: 11.163,
                avg_ms: 9.981,
                inference_tput: 0.81,
                train_kept: 0.56,
            },
            Cell {
                p99_ms: 14.411,
                avg_ms: 5.954,
                inference_tput: 0.99,
                train_kept: 0.79,
            },
        ],
    },
    TallyPair {
        csv_row: 12,
        inference: "bert_ort",
        training: "pegasus_x_base_b4",
        alone: Alone {
            avg_ms: 4.05,
            p90_ms: 4.066,
            p95_ms: 4.076,
            p99_ms: 4.098,
        },
        modes: [
            Cell {
                p99_ms: 4.491,
                avg_ms: 4.209,
                inference_tput: 1.0,
                train_kept: 0.44,
            },
            Cell {
                p99_ms: 17.143,
                avg_ms: 10.889,
                inference_tput: 0.74,
                train_kept: 0.9,
            },
            Cell {
                p99_ms: 15.518,
                avg_ms: 9.078,
                inference_tput: 0.86,
                train_kept: 0.88,
            },
            Cell {
                p99_ms: 11.123,
                avg_ms: 7.803,
                inference_tput: 0.91,
                train_kept: 0.51,
            },
            Cell {
                p99_ms: 15.142,
                avg_ms: 7.797,
                inference_tput: 0.91,
                train_kept: 0.84,
            },
        ],
    },
    TallyPair {
        csv_row: 6,
        inference: "bert_ort",
        training: "gpt2_large_b1",
        alone: Alone {
            avg_ms: 4.05,
            p90_ms: 4.066,
            p95_ms: 4.076,
            p99_ms: 4.098,
        },
        modes: [
            Cell {
                p99_ms: 4.284,
                avg_ms: 4.127,
                inference_tput: 1.0,
                train_kept: 0.46,
            },
            Cell {
                p99_ms: 21.891,
                avg_ms: 10.359,
                inference_tput: 0.78,
                train_kept: 0.88,
            },
            Cell {
                p99_ms: 20.967,
                avg_ms: 9.076,
                inference_tput: 0.86,
                train_kept: 0.86,
            },
            Cell {
                p99_ms: 11.204,
                avg_ms: 7.898,
                inference_tput: 0.91,
                train_kept: 0.51,
            },
            Cell {
                p99_ms: 20.149,
                avg_ms: 8.085,
                inference_tput: 0.9,
                train_kept: 0.85,
            },
        ],
    },
    TallyPair {
        csv_row: 0,
        inference: "bert_ort",
        training: "bert_b32",
        alone: Alone {
            avg_ms: 4.05,
            p90_ms: 4.066,
            p95_ms: 4.076,
            p99_ms: 4.098,
        },
        modes: [
            Cell {
                p99_ms: 4.368,
                avg_ms: 4.118,
                inference_tput: 1.0,
                train_kept: 0.46,
            },
            Cell {
                p99_ms: 27.376,
                avg_ms: 16.592,
                inference_tput: 0.49,
                train_kept: 0.94,
            },
            Cell {
                p99_ms: 18.051,
                avg_ms: 12.728,
                inference_tput: 0.64,
                train_kept: 0.91,
            },
            Cell {
                p99_ms: 11.206,
                avg_ms: 10.174,
                inference_tput: 0.8,
                train_kept: 0.53,
            },
            Cell {
                p99_ms: 16.379,
                avg_ms: 11.133,
                inference_tput: 0.73,
                train_kept: 0.88,
            },
        ],
    },
];

/// A pair by its jobs' names.
#[must_use]
pub fn pair(inference: &str, training: &str) -> Option<&'static TallyPair> {
    PAIRS
        .iter()
        .find(|p| p.inference == inference && p.training == training)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DESIGN.md's "Facts from peers" table, copied: (inference, training,
    /// then per mode Tally, MPS, MPS + priority, time-slicing, TGS: p99
    /// ratio, training kept).
    /// (p99 ratio, training kept) in each mode.
    type Row = [(f64, f64); 5];

    const DESIGN_MD: [(&str, &str, Row); 12] = [
        (
            "llama2_7b_ort",
            "whisper_large_v3_b16",
            [
                (1.02, 0.52),
                (1.79, 0.99),
                (1.71, 0.96),
                (2.04, 0.72),
                (1.72, 0.68),
            ],
        ),
        (
            "llama2_7b_ort",
            "resnet50_b128",
            [
                (1.02, 0.37),
                (1.29, 0.74),
                (1.27, 0.74),
                (2.29, 0.50),
                (1.22, 0.75),
            ],
        ),
        (
            "llama2_7b_ort",
            "pointnet_b128",
            [
                (1.04, 0.40),
                (1.47, 0.80),
                (1.40, 0.79),
                (2.16, 0.50),
                (1.40, 0.75),
            ],
        ),
        (
            "llama2_7b_ort",
            "pegasus_x_base_b4",
            [
                (1.02, 0.46),
                (2.24, 0.85),
                (1.84, 0.81),
                (1.79, 0.47),
                (1.76, 0.79),
            ],
        ),
        (
            "llama2_7b_ort",
            "gpt2_large_b1",
            [
                (1.03, 0.47),
                (2.14, 0.84),
                (1.80, 0.81),
                (1.77, 0.47),
                (1.77, 0.79),
            ],
        ),
        (
            "llama2_7b_ort",
            "bert_b32",
            [
                (1.01, 0.48),
                (3.53, 0.92),
                (2.44, 0.85),
                (2.14, 0.47),
                (2.33, 0.84),
            ],
        ),
        (
            "bert_ort",
            "whisper_large_v3_b16",
            [
                (1.06, 0.49),
                (11.8, 1.0),
                (5.81, 0.96),
                (2.73, 0.73),
                (5.11, 0.70),
            ],
        ),
        (
            "bert_ort",
            "resnet50_b128",
            [
                (1.10, 0.37),
                (2.20, 0.78),
                (2.18, 0.77),
                (2.73, 0.56),
                (1.82, 0.79),
            ],
        ),
        (
            "bert_ort",
            "pointnet_b128",
            [
                (1.08, 0.39),
                (4.14, 0.84),
                (3.72, 0.82),
                (2.72, 0.56),
                (3.52, 0.79),
            ],
        ),
        (
            "bert_ort",
            "pegasus_x_base_b4",
            [
                (1.10, 0.44),
                (4.18, 0.90),
                (3.79, 0.88),
                (2.71, 0.51),
                (3.69, 0.84),
            ],
        ),
        (
            "bert_ort",
            "gpt2_large_b1",
            [
                (1.05, 0.46),
                (5.34, 0.88),
                (5.12, 0.86),
                (2.73, 0.51),
                (4.92, 0.85),
            ],
        ),
        (
            "bert_ort",
            "bert_b32",
            [
                (1.07, 0.46),
                (6.68, 0.94),
                (4.40, 0.91),
                (2.73, 0.53),
                (4.00, 0.88),
            ],
        ),
    ];

    #[test]
    fn the_table_gives_design_mds_ratios() {
        assert_eq!(PAIRS.len(), DESIGN_MD.len());
        for (inf, tr, want) in DESIGN_MD {
            let p = pair(inf, tr).unwrap_or_else(|| panic!("{inf} + {tr} missing"));
            for (m, (ratio, kept)) in want.into_iter().enumerate() {
                let got = p.p99_ratio(m);
                // DESIGN.md rounds to 2 decimals, 3 significant digits above 10.
                let tol = if ratio >= 10.0 { 0.05 } else { 0.005 + 1e-9 };
                assert!(
                    (got - ratio).abs() <= tol,
                    "{inf} + {tr} {}: p99 ratio {got:.3}, DESIGN.md {ratio}",
                    mode::NAMES[m]
                );
                assert!(
                    (p.modes[m].train_kept - kept).abs() < 1e-9,
                    "{inf} + {tr} {}: training kept {}, DESIGN.md {kept}",
                    mode::NAMES[m],
                    p.modes[m].train_kept
                );
            }
        }
    }

    #[test]
    fn the_alone_baselines_are_one_per_inference_job() {
        for p in &PAIRS {
            let want = match p.inference {
                "bert_ort" => (4.05, 4.098),
                "llama2_7b_ort" => (1963.886, 1982.652),
                other => panic!("unknown inference job {other}"),
            };
            assert_eq!((p.alone.avg_ms, p.alone.p99_ms), want, "{}", p.training);
            assert!(p.alone.avg_ms <= p.alone.p90_ms && p.alone.p90_ms <= p.alone.p95_ms);
            assert!(p.alone.p95_ms <= p.alone.p99_ms);
        }
    }
}
