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
//! * **MPS + priority** gave the training process `CUDA_MPS_CLIENT_PRIORITY=1`
//!   and the inference process `2` (`python/bench_utils/bench.py`,
//!   `run_benchmark_suite`: `set_priority(1)` on the training benchmark,
//!   `set_priority(2)` on the inference one; `launch_benchmark` writes the
//!   benchmark's priority into the variable when MPS + priority is on). The
//!   MPS documentation names the values 0 (normal) and 1 (below normal).
//!   If the driver reads 2 as below normal, both clients ran at the same
//!   priority and these rows measure MPS at two equal priorities, not
//!   training below inference; that would explain why priority barely moves
//!   them. No GPU run has said which: `scripts/gpu/engine_rules.py` (prove
//!   part 4) measures it.
//! * **Throughputs** are fractions of the job alone, iterations over elapsed
//!   time, rounded to 0.01 (`parse.py`, `compute_relative_tp`). The artifact
//!   publishes no absolute training throughput: `single-job-perf.csv` has
//!   `original_throughput = 1` for every job. It does publish each job's
//!   mean GPU utilisation alone (nvidia-smi, sampled every 0.2 s), in
//!   [`GPU_UTIL_ALONE`].

mod pairs;
mod types;

pub use self::pairs::{pair, PAIRS};
pub use self::types::{mode, Alone, Cell, TallyPair};

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
