//! The Tally artifact's 12 pairs, default configuration, as published
//! (the source and what each column means: [`super`]'s documentation), and
//! the look-up by the jobs' names.

use super::types::{Alone, Cell, TallyPair};

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
