//! The GPU a set of pairs runs on: its jobs, their synthetic traces, and
//! where a job's trace comes from.

use std::path::Path;

use serde::Serialize;

use crate::params::Params;
use crate::trace::Trace;

/// The H100 set's inference jobs: (name, requests per second; `None`: half
/// load). `bert_b8_graph` is `bert_b8` launched as one CUDA graph per
/// request with no host gaps, GPU-bound, as vLLM and TensorRT serve.
pub const INFERENCE: [(&str, Option<f64>); 4] = [
    ("resnet50_b4", Some(100.0)),
    ("resnet50_b32", Some(40.0)),
    ("bert_b8", None),
    ("bert_b8_graph", None),
];
/// The H100 set's training jobs.
pub const TRAINING: [&str; 2] = ["resnet50_train", "gpt2_train"];
/// The A100 set's inference jobs (Tally's, at load 0.5), and BERT launched
/// as CUDA graphs.
pub const A100_INFERENCE: [(&str, Option<f64>); 3] = [
    ("bert_ort", None),
    ("llama2_7b_ort", None),
    ("bert_ort_graph", None),
];
/// The A100 set's training jobs (Tally's).
pub const A100_TRAINING: [&str; 6] = crate::synthetic_a100::TRAINING_JOBS;

/// The GPU a set of pairs runs on, with its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// H100 SXM 80GB: the project's own measurements (DESIGN.md "Facts").
    H100,
    /// A100: Tally's published pairs (DESIGN.md "Facts from peers").
    A100,
    /// H200 SXM 141GB, the GPU the project's device windows lend: the H100's
    /// die with HBM3e ([`Params::h200_over`]), the H100 set's jobs. Nothing
    /// measured on it yet, so no calibration point: its rows are
    /// predictions made before the first run (`results/sim/h200/`), which
    /// prove part 1's co-location then checks. Not in [`Device::ALL`].
    H200,
}

impl Device {
    /// Both, in report order.
    pub const ALL: [Device; 2] = [Device::H100, Device::A100];

    /// The model's parameters for this GPU.
    #[must_use]
    pub fn params(self) -> Params {
        match self {
            Device::H100 => Params::calibrated(),
            Device::A100 => Params::a100(),
            Device::H200 => Params::h200_over(&Params::calibrated()),
        }
    }

    /// Its compute capability's major version (9 for the H100 and H200, 8
    /// for the A100): what green contexts' partition steps follow.
    #[must_use]
    pub fn compute_major(self) -> u32 {
        match self {
            Device::H100 | Device::H200 => 9,
            Device::A100 => 8,
        }
    }

    /// `h100`, `a100` or `h200`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Device::H100 => "h100",
            Device::A100 => "a100",
            Device::H200 => "h200",
        }
    }

    /// Whether a trace captured on `gpu` (its `device`: the driver's name
    /// for the GPU, e.g. `NVIDIA H200`, `NVIDIA A100-SXM4-40GB`) describes
    /// this device's jobs: one word of the name is this device's model
    /// (`h100`, `a100`, `h200`), so a GH200 is none of them. A kernel's time
    /// is its GPU's: an H200's memory-bound kernels run about 1.4x faster
    /// than an H100's, and an H100's calibration replayed with them would
    /// be refitted to the wrong GPU. A fake driver's or the CPU's trace
    /// names none of them.
    #[must_use]
    pub fn captured_on(self, gpu: &str) -> bool {
        crate::measured::names_model(gpu, self.name())
    }

    /// The device named `name` ([`name`](Self::name)'s inverse).
    #[must_use]
    pub fn named(name: &str) -> Option<Device> {
        [Device::H100, Device::A100, Device::H200]
            .into_iter()
            .find(|d| d.name() == name)
    }

    /// Its inference jobs.
    #[must_use]
    pub fn inference(self) -> &'static [(&'static str, Option<f64>)] {
        match self {
            Device::H100 | Device::H200 => &INFERENCE,
            Device::A100 => &A100_INFERENCE,
        }
    }

    /// Its training jobs.
    #[must_use]
    pub fn training(self) -> &'static [&'static str] {
        match self {
            Device::H100 | Device::H200 => &TRAINING,
            Device::A100 => &A100_TRAINING,
        }
    }

    /// Whether the set's measurements time a request from its start to its
    /// result (the Tally artifact's `infer_monitor.py`: queueing left out)
    /// rather than from its arrival (the H100 benchmark, colocation.py).
    #[must_use]
    pub fn service_latency(self) -> bool {
        self == Device::A100
    }

    /// Every (inference, training) pair of the set.
    #[must_use]
    pub fn pairs(self) -> Vec<(String, String)> {
        self.inference()
            .iter()
            .flat_map(|(i, _)| {
                self.training()
                    .iter()
                    .map(move |t| ((*i).to_string(), (*t).to_string()))
            })
            .collect()
    }

    /// A synthetic trace of one of its jobs (`<job>_graph`: the job as CUDA
    /// graphs).
    #[must_use]
    pub fn synthetic(self, p: &Params, job: &str) -> Option<Trace> {
        if let Some(base) = job.strip_suffix("_graph") {
            return self
                .synthetic(p, base)
                .map(|t| crate::synthetic::as_graph(&t, job, p));
        }
        match self {
            Device::H100 | Device::H200 => crate::synthetic::job(p, job),
            Device::A100 => crate::synthetic_a100::job(p, job),
        }
    }
}

/// The prefix of the note a synthetic trace carries when a measured file
/// for its job was there but captured on another GPU.
pub const NOT_THIS_GPU: &str = "measured file not used: ";

/// A job's trace: the measured one under `traces_dir` (`<job>.json`) if
/// there is one and it was captured on this device
/// ([`Device::captured_on`]), else the synthetic one (whose notes then end
/// with a line that starts [`NOT_THIS_GPU`] and says why).
///
/// # Errors
/// A measured trace that does not parse.
pub fn load_trace(
    device: Device,
    params: &Params,
    traces_dir: Option<&Path>,
    job: &str,
) -> Result<Trace, String> {
    let mut elsewhere = None;
    if let Some(dir) = traces_dir {
        let path = dir.join(format!("{job}.json"));
        if let Ok(text) = std::fs::read_to_string(&path) {
            let t = Trace::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
            if device.captured_on(&t.device) {
                return Ok(crate::footprint::resolve_occupancy(t, &params.gpu.sm));
            }
            elsewhere = Some(format!(
                "{NOT_THIS_GPU}{} was captured on {:?}, not an {}",
                path.display(),
                t.device,
                device.name().to_ascii_uppercase()
            ));
        }
    }
    let mut t = device
        .synthetic(params, job)
        .ok_or_else(|| format!("unknown {} job {job}", device.name()))?;
    if let Some(why) = elsewhere {
        t.notes = format!("{}\n{why}", t.notes);
    }
    Ok(t)
}
