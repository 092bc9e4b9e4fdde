//! What a matrix runs: its modes, pairs, seeds and windows, and tandem's
//! settings in the `tandem*` modes.

use tandem_sched::SchedConfig;

use super::device::Device;
use crate::params::Params;
use crate::slicing::SliceCfg;
use crate::spatial::SpatialCfg;

/// Modes, in the benchmark's order: the full matrix's seven, then
/// scheduler v3's further candidates ([`CANDIDATE_MODES`]), which run only
/// when `--modes` names them.
pub const MODES: [&str; 10] = [
    "alone",
    "plain",
    "mps",
    "mps_lowprio",
    "tandem",
    "tandem_mps",
    "tandem_spatial",
    "tandem_green",
    "tandem_hold",
    "tandem_slice",
];

/// Issue 23's candidates (b), (a) + (c) and (a) + (c) + (d), each over
/// MPS with training at client priority 1 as `tandem_spatial` is
/// ([`crate::spatial`], [`crate::slicing`]).
pub const CANDIDATE_MODES: [&str; 3] = ["tandem_green", "tandem_hold", "tandem_slice"];

/// What to run.
#[derive(Clone, Debug)]
pub struct MatrixCfg {
    /// The GPU and its set of jobs.
    pub device: Device,
    /// The model's parameters.
    pub params: Params,
    /// (inference, training) pairs.
    pub pairs: Vec<(String, String)>,
    /// Modes besides `alone` (which always runs).
    pub modes: Vec<String>,
    /// One run per seed (the benchmark's repetitions).
    pub seeds: Vec<u64>,
    /// Warm-up excluded, ns.
    pub warmup_ns: u64,
    /// Measured window, ns: at least this, and long enough for
    /// `min_requests` requests, up to `max_window_ns`.
    pub window_ns: u64,
    /// Requests an inference job should see in one cell's window.
    pub min_requests: u64,
    /// Longest window a cell gets for `min_requests`, ns.
    pub max_window_ns: u64,
    /// Drain after the window, ns.
    pub drain_max_ns: u64,
    /// Worker threads.
    pub threads: usize,
    /// tandem's settings in the `tandem*` modes.
    pub tandem: TandemCfg,
}

/// tandem's settings in the model (tandemd's `[scheduler]` and `[mps]`).
#[derive(Clone, Debug)]
pub struct TandemCfg {
    /// `[scheduler]`.
    pub sched: SchedConfig,
    /// `[mps] training_inflight_ns` (0: no local bound under MPS beyond the
    /// scheduler's budgets), in `tandem_mps`.
    pub mps_inflight_ns: u64,
    /// Whether tandemd's gates and launch limits apply in `tandem_mps`.
    pub mps_v1_gates: bool,
    /// Whether they apply in `tandem` (time-slicing).
    pub v1_gates: bool,
    /// The SM-reservation candidate's settings, in `tandem_spatial` (and,
    /// with (b)'s step or (c)'s holds, in the other candidates).
    pub spatial: SpatialCfg,
    /// Candidate (d)'s slicing, in `tandem_slice`.
    pub slicing: SliceCfg,
}

impl Default for TandemCfg {
    fn default() -> Self {
        TandemCfg {
            sched: SchedConfig::default(),
            mps_inflight_ns: 2_000_000,
            mps_v1_gates: true,
            v1_gates: true,
            spatial: SpatialCfg::default(),
            slicing: SliceCfg::default(),
        }
    }
}

impl MatrixCfg {
    /// The full matrix of one device's set (the benchmark's 3 s warm-up, a
    /// window of at least 20 s and 2,000 requests up to 60 s, 3 seeds: the
    /// Llama-2 pairs, whose requests take 2 s, see about 15 per cell).
    #[must_use]
    pub fn full(device: Device, params: Params) -> MatrixCfg {
        MatrixCfg {
            device,
            params,
            pairs: device.pairs(),
            modes: MODES[1..]
                .iter()
                .filter(|m| !CANDIDATE_MODES.contains(m))
                .map(|m| (*m).to_string())
                .collect(),
            seeds: vec![1, 2, 3],
            warmup_ns: 3_000_000_000,
            window_ns: 20_000_000_000,
            min_requests: 2_000,
            max_window_ns: 60_000_000_000,
            drain_max_ns: 10_000_000_000,
            threads: 2,
            tandem: TandemCfg::default(),
        }
    }

    /// The window a cell of an inference job at `rate` req/s gets.
    #[must_use]
    pub fn window_for(&self, rate: f64) -> u64 {
        let want = (self.min_requests as f64 / rate.max(1e-9) * 1e9) as u64;
        want.clamp(self.window_ns, self.max_window_ns.max(self.window_ns))
    }
}
