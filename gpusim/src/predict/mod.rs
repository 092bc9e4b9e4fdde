//! `tandem-sim predict`: what the jobs on one GPU and a candidate would see
//! if the candidate joined them, in each sharing mode, from their traces
//! (issue 25). Every figure is a **prediction** of the calibrated model
//! ([`crate::params::MODEL_VERSION`]), not a measurement.
//!
//! The inputs are the traces of the jobs already on the GPU and the
//! candidate's (each an inference request or a training step, with the
//! job's class; an inference job's request rate, else half load as the
//! matrix takes it: 0.5 over its alone service time), the device, and each
//! job's SLO: an inference p99 at most `p99_ratio` times its alone p99
//! (default 1.10) and, where tandemd's configuration has one, an absolute
//! p99 in ms; a training job keeping at least `kept` of its alone
//! throughput (default 0.90).
//!
//! The run is the matrix's, generalised to every job of the GPU at once:
//! each job alone (time-slicing, nothing beside it) for its baseline, then
//! all of them together in each mode, paired by seed, for fewer seeds and a
//! shorter window than the matrix ([`Settings::interactive`]). A job meets
//! its SLO in a mode if its **worst** seed does (the matrix's rule).
//!
//! # The verdict
//!
//! A mode *fits* when every job (those on the GPU and the candidate) meets
//! its SLO in it. The verdict is over the modes tandemd can run today
//! (`plain`, `tandem`, `mps`, `mps_lowprio`, `tandem_mps`; the
//! `tandem_spatial` candidate is predicted and shown but not counted):
//!
//! * **fits**: some mode without MPS fits (`plain` or `tandem`): the
//!   candidate can join on the GPU as it runs without MPS;
//! * **fits only over MPS**: no mode without MPS fits, but one over MPS
//!   does (`mps`, `mps_lowprio` or `tandem_mps`): the GPU must run MPS;
//! * **does not fit**: no mode fits.

mod load;
mod render;
mod run;
mod why;

#[cfg(test)]
mod tests;

pub mod cli;

use serde::Serialize;

pub use self::load::{class, class_name, file as load_file, parse as parse_trace};
pub use self::render::human;
pub use self::run::predict;
pub use self::why::WhyEntry;

use crate::matrix::Device;
use crate::params::Params;
use crate::trace::Trace;

/// One job's SLO.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Slo {
    /// Inference: p99 at most this times the job's alone p99.
    pub p99_ratio: f64,
    /// Inference: p99 at most this many ms (tandemd's `[[scheduler.slo]]`
    /// target for the job), if it has one.
    pub p99_ms: Option<f64>,
    /// Training: at least this share of its alone throughput.
    pub kept: f64,
}

/// The default SLO: inference p99 within 1.10x of alone, training keeping 0.90.
pub const DEFAULT_SLO: Slo = Slo {
    p99_ratio: 1.10,
    p99_ms: None,
    kept: 0.90,
};

/// One job of a prediction.
#[derive(Clone, Debug)]
pub struct JobInput {
    /// How it is named in the output (a file, or `client 7`).
    pub label: String,
    /// What it does.
    pub trace: Trace,
    /// Inference: requests per second (`None`: half load).
    pub rate_per_s: Option<f64>,
    /// Its SLO.
    pub slo: Slo,
}

/// How the model is run.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The GPU.
    pub device: Device,
    /// The model's parameters for it.
    pub params: Params,
    /// Seeds (one run per seed per mode).
    pub seeds: Vec<u64>,
    /// Warm-up left out, ns.
    pub warmup_ns: u64,
    /// Shortest measured window, ns.
    pub window_ns: u64,
    /// Requests the slowest inference job should see in the window.
    pub min_requests: u64,
    /// Longest window, ns.
    pub max_window_ns: u64,
    /// Worker threads.
    pub threads: usize,
    /// Modes besides alone.
    pub modes: Vec<String>,
    /// Attribute the waits (`--why`).
    pub why: bool,
    /// What GPU measurements `params` carry, one phrase each (`--measured`;
    /// empty: the fitted parameters only).
    pub measured: Vec<String>,
    /// Predict once more with every inference job's kernels
    /// [`STEEPNESS_SCALE`] times as long (`--steepness`): how far an error of
    /// that size in a trace's kernel times (a capture's, say) moves the
    /// answer. Twice the run time.
    pub steepness: bool,
}

/// The kernel-time scale of the `--steepness` run: 2%, about what a live
/// capture's kernel sums err by on the fake driver (docs/traces.md).
pub const STEEPNESS_SCALE: f64 = 1.02;

/// The modes a prediction runs, and whether each needs MPS.
pub const MODES: [(&str, bool); 6] = [
    ("plain", false),
    ("tandem", false),
    ("mps", true),
    ("mps_lowprio", true),
    ("tandem_mps", true),
    ("tandem_spatial", true),
];

/// What a mode is, for every job of the GPU.
#[must_use]
pub fn note(mode: &str) -> &'static str {
    match mode {
        "plain" => "time-slicing, no MPS",
        "tandem" => "tandem v2 over time-slicing (scheduler defaults)",
        "mps" => "MPS, every client at default priority",
        "mps_lowprio" => "MPS, training at CUDA_MPS_CLIENT_PRIORITY=1",
        "tandem_mps" => "tandem v2 over MPS, training at client priority 1",
        "tandem_spatial" => "scheduler v3 candidate over MPS (SM masks for training): not in tandemd yet, not counted in the verdict",
        _ => "",
    }
}

/// Modes predicted but not counted in the verdict (not in tandemd yet).
pub const NOT_COUNTED: [&str; 1] = ["tandem_spatial"];

impl Settings {
    /// An interactive answer: 2 seeds, 0.5 s of warm-up, a window of 4 s
    /// stretched for 300 requests of the slowest inference job up to 20 s.
    #[must_use]
    pub fn interactive(device: Device) -> Settings {
        Settings {
            device,
            params: device.params(),
            seeds: vec![1, 2],
            warmup_ns: 500_000_000,
            window_ns: 4_000_000_000,
            min_requests: 300,
            max_window_ns: 20_000_000_000,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get().min(8)),
            modes: MODES.iter().map(|(m, _)| (*m).to_string()).collect(),
            why: false,
            measured: Vec::new(),
            steepness: false,
        }
    }
}

/// Why a prediction could not be made: one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PredictError(pub String);

impl std::fmt::Display for PredictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PredictError {}

/// One job in the answer.
#[derive(Clone, Debug, Serialize)]
pub struct JobOut {
    /// Its label.
    pub label: String,
    /// The trace's job name.
    pub job: String,
    /// `inference` or `training`.
    pub class: &'static str,
    /// Whether it is the candidate (else it is on the GPU already).
    pub candidate: bool,
    /// Inference: the request rate used, req/s.
    pub rate_rps: Option<f64>,
    /// Whether the rate was half load (none was given).
    pub rate_is_half_load: bool,
    /// Inference: predicted p99 alone, ms (median over seeds).
    pub predicted_alone_p99_ms: Option<f64>,
    /// Training: predicted steps/s alone (median over seeds).
    pub predicted_alone_steps_per_s: Option<f64>,
    /// Its predicted share of the GPU's SM capacity alone (median over
    /// seeds): its blocks' SM-time over SMs x window.
    pub predicted_alone_gpu_share: f64,
    /// Its SLO.
    pub slo: Slo,
}

/// One job in one mode.
#[derive(Clone, Debug, Serialize)]
pub struct JobMode {
    /// Its label.
    pub label: String,
    /// Inference: predicted p99 over alone (median over seeds).
    pub predicted_p99_ratio: Option<f64>,
    /// Inference: the worst seed's.
    pub predicted_p99_ratio_worst: Option<f64>,
    /// Inference, with `--steepness`: the p99 ratio (median over seeds) had
    /// every inference job's kernels run [`STEEPNESS_SCALE`] times as long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_p99_ratio_if_kernels_2pct_longer: Option<f64>,
    /// Inference: predicted p99, ms (median over seeds).
    pub predicted_p99_ms: Option<f64>,
    /// Inference: the worst seed's, ms.
    pub predicted_p99_ms_worst: Option<f64>,
    /// Inference: requests never served in the window and its drain.
    pub unfinished_requests: usize,
    /// Training: predicted share of its alone throughput kept (median).
    pub predicted_kept: Option<f64>,
    /// Training: the worst seed's.
    pub predicted_kept_worst: Option<f64>,
    /// Whether its worst seed meets its SLO.
    pub meets_slo: bool,
    /// What misses, if it does not.
    pub miss: Option<String>,
}

/// One mode.
#[derive(Clone, Debug, Serialize)]
pub struct ModeOut {
    /// Its name (the matrix's).
    pub mode: String,
    /// What it is.
    pub note: &'static str,
    /// Whether it needs MPS.
    pub mps: bool,
    /// Whether the verdict counts it.
    pub counted: bool,
    /// Every job meets its SLO.
    pub fits: bool,
    /// Each job.
    pub jobs: Vec<JobMode>,
    /// With `--why`: the kernels that carry the predicted delay, top five.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<Vec<WhyEntry>>,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// Always `prediction`: these are the model's figures, not measurements.
    pub kind: &'static str,
    /// The model's version.
    pub model_version: &'static str,
    /// The device set (`h100`, `a100`).
    pub device: &'static str,
    /// `fits`, `fits only over MPS` or `does not fit`.
    pub verdict: &'static str,
    /// The counted modes that fit.
    pub fitting_modes: Vec<String>,
    /// The jobs.
    pub jobs: Vec<JobOut>,
    /// What the jobs take of the GPU alone, and the most training any mode
    /// can keep beside the inference jobs' loads.
    pub capacity: Capacity,
    /// Each mode.
    pub modes: Vec<ModeOut>,
    /// Seeds run.
    pub seeds: usize,
    /// Warm-up, s.
    pub warmup_s: f64,
    /// Measured window, s.
    pub window_s: f64,
    /// Wall time of the prediction, s.
    pub wall_s: f64,
    /// Threads used.
    pub threads: usize,
    /// The parameters measured on a GPU (`--measured`); empty: all fitted.
    pub measured_params: Vec<String>,
}

/// The GPU's SM capacity the jobs take alone (medians over seeds).
#[derive(Clone, Debug, Serialize)]
pub struct Capacity {
    /// The inference jobs' shares, together.
    pub inference_share: f64,
    /// The training jobs', together.
    pub training_share: f64,
    /// The most of their throughput the training jobs can keep together
    /// (weighted by their shares) in any mode that serves the inference
    /// jobs' loads, whatever its latency: `(1 - inference_share) /
    /// training_share`, the worst seed's; none without training. The model
    /// makes no SM capacity, so no scheduler in it does better.
    pub training_kept_at_most: Option<f64>,
}

/// The verdict over the counted modes that fit (see the module docs).
#[must_use]
pub fn verdict(fitting: &[String]) -> &'static str {
    let mps = |m: &str| MODES.iter().find(|(n, _)| *n == m).is_some_and(|x| x.1);
    if fitting.iter().any(|m| !mps(m)) {
        "fits"
    } else if fitting.is_empty() {
        "does not fit"
    } else {
        "fits only over MPS"
    }
}
