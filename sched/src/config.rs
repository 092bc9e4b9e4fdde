//! `[scheduler]` in `tandemd.toml`: the policy's parameters, their documented
//! defaults and their validation.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Largest value any duration parameter may take (10 s): larger values are
/// surely typos, and keeping every time below this keeps the arithmetic far
/// from overflow.
pub const MAX_PARAM_NS: u64 = 10_000_000_000;
/// Smallest non-zero `mark_every_ns` (50 us): each mark costs the client a
/// driver call and the shim a poll, and marks closer than the shim's poll
/// interval (about 200 us) measure little more.
pub const MIN_MARK_EVERY_NS: u64 = 50_000;

/// The scheduler's parameters (`[scheduler]` in `tandemd.toml`). Every field
/// is optional in the file; [`SchedConfig::default`] gives the documented
/// defaults. See the [module docs](super) for how each one is used.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedConfig {
    /// Whether the policy closes gates at all. `false`: every gate stays open
    /// (tandem only observes); estimates and request statistics are still kept.
    /// Default `true`.
    pub enabled: bool,
    /// Estimated training work (ns of GPU time) that may be queued on a GPU
    /// while no inference request is active there, shared equally by the
    /// training clients of that GPU. This is what a newly arriving inference
    /// request can find ahead of it. Default 4 ms.
    pub idle_budget_ns: u64,
    /// The same while an inference request is active on the GPU: the bound on
    /// what inference queues behind. The starting value; the SLO loop moves it
    /// within `min_active_budget_ns ..= max_active_budget_ns`. Default 500 us.
    pub active_budget_ns: u64,
    /// Lower end of the SLO adaptation range. Default 100 us.
    pub min_active_budget_ns: u64,
    /// Upper end of the SLO adaptation range. Default 4 ms.
    pub max_active_budget_ns: u64,
    /// An inference launch after at least this long with no launch or sync of
    /// that client begins a request (clients that do not use the explicit
    /// `tandem_request_begin`/`end`). Default 2 ms.
    pub request_idle_gap_ns: u64,
    /// An inference job keeps its GPU "active" this long after its last
    /// launch and after a request ended, covering CPU gaps between the
    /// kernels and phases of one request and between back-to-back requests
    /// (the shims' board uses the same hold). Default 1 ms, from the
    /// GPU-sharing model's matrix (`results/sim/`: 200 us kept 0.03 more
    /// training and let p99 drift up to 0.08x higher).
    pub request_hold_ns: u64,
    /// Estimated duration of a kernel never measured. Default 50 us.
    pub default_kernel_ns: u64,
    /// Training clients are asked to place a completion mark after a launch
    /// at most this often ([`crate::Output::Marks`]); each completed
    /// mark measures the launches before it, so durations are learned
    /// without waiting for a sync. 0: no marks. Inference clients, and every
    /// client while `enabled = false`, are asked for none. 0 or
    /// [`MIN_MARK_EVERY_NS`]..=[`MAX_PARAM_NS`]. Default 500 us.
    pub mark_every_ns: u64,
    /// Scheduler v3's SM reservation (issue 23): with
    /// [`SpatialMode::Auto`], a training job that joined MPS below normal
    /// priority masks its launches off part of the GPU's SMs while inference
    /// is active there, where its driver allows it (the shim probes, and
    /// runs unmasked with one log line where it does not). Default
    /// [`SpatialMode::Off`] until a GPU run has shown the mechanism.
    pub spatial: SpatialMode,
    /// The most of the GPU's TPCs left to inference while it is active
    /// (above 0, at most 0.5): tandemd leaves as many as inference's kernels
    /// are wide ([`crate::reserve`]), up to this. Default 0.25, the
    /// GPU-sharing model's cap.
    pub spatial_reserve: f64,
    /// Training launches whose blocks hold their SMs shorter than this (the
    /// kernel's estimate over its waves,
    /// `tandem_proto::spatial::block_ns`) are not masked: their blocks give
    /// their SMs back within that time, to inference first under MPS client
    /// priority. 0..=[`MAX_PARAM_NS`]; 0: every launch. Default 100 us, the
    /// model's `min_block_ns`.
    pub spatial_min_kernel_ns: u64,
    /// Training launches whose blocks hold their SMs at least this long
    /// carry the mask while inference is idle too, as long as an inference
    /// client is on the GPU: launched in inference's idle gap, such a
    /// kernel's resident blocks would hold every SM when its next request
    /// comes (in the GPU-sharing model, A100 BERT beside Whisper training:
    /// 5.33x to 3.61x p99 at 500 us, BENCHMARKS.md). 0: off, the mask only
    /// while inference is active. 0..=[`MAX_PARAM_NS`]. Default 0 until a
    /// GPU run has shown the reservation.
    pub spatial_standing_kernel_ns: u64,
    /// `[[scheduler.slo]]`: p99 latency targets for inference jobs, first
    /// matching entry wins ([`SchedConfig::slo_for`]). Default: none.
    pub slo: Vec<SloRule>,
}

/// `[scheduler] spatial`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpatialMode {
    /// No reservation.
    #[default]
    Off,
    /// The reservation where the driver allows it.
    Auto,
}

/// Largest p99 target (ms) a `[[scheduler.slo]]` entry may set (10 s).
pub const MAX_SLO_P99_MS: f64 = 10_000.0;

tandem_ident::rule! {
    /// One `[[scheduler.slo]]` entry: a p99 request-latency target for the
    /// inference jobs it matches. A job matches when every criterion the
    /// entry names matches (any value of a list does); an entry that names
    /// none matches every job (a default, when it comes last). Identity is
    /// the kernel's (SO_PEERCRED, /proc), never the job's claim.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct SloRule {
        /// The target, ms (0 < p99_ms <= 10000).
        pub p99_ms: f64,
    }
}

impl SloRule {
    /// Whether a job of `uid`, running `exe`, in `cgroup`, matches.
    #[must_use]
    pub fn matches(&self, uid: u32, exe: Option<&str>, cgroup: Option<&str>) -> bool {
        self.matcher().matches(uid, exe, cgroup)
    }

    /// The target in ns.
    #[must_use]
    pub fn p99_ns(&self) -> u64 {
        (self.p99_ms * 1e6).round().clamp(1.0, MAX_PARAM_NS as f64) as u64
    }
}

/// Which `[[scheduler.slo]]` entry gave a job its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SloMatch {
    /// Index of the entry (0-based, in file order).
    pub rule: usize,
    /// Its target, ns.
    pub p99_ns: u64,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            enabled: true,
            idle_budget_ns: 4_000_000,
            active_budget_ns: 500_000,
            min_active_budget_ns: 100_000,
            max_active_budget_ns: 4_000_000,
            request_idle_gap_ns: 2_000_000,
            request_hold_ns: 1_000_000,
            default_kernel_ns: 50_000,
            mark_every_ns: 500_000,
            spatial: SpatialMode::Off,
            spatial_reserve: 0.25,
            spatial_min_kernel_ns: 100_000,
            spatial_standing_kernel_ns: 0,
            slo: Vec::new(),
        }
    }
}

/// A [`SchedConfig`] that cannot be used: which field (its key inside
/// `[scheduler]`) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedConfigError {
    /// The key inside `[scheduler]`, e.g. `"idle_budget_ns"`, or
    /// `"slo[2].p99_ms"` for an entry of `[[scheduler.slo]]`.
    pub field: String,
    /// What is wrong, for a human.
    pub problem: String,
}

impl fmt::Display for SchedConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "scheduler.{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for SchedConfigError {}

impl SchedConfig {
    /// Checks serde cannot express: every duration in range (`mark_every_ns`:
    /// 0 or at least [`MIN_MARK_EVERY_NS`]), and
    /// `min_active_budget_ns <= active_budget_ns <= max_active_budget_ns`.
    pub fn validate(&self) -> Result<(), SchedConfigError> {
        let ranged: [(&'static str, u64, u64); 9] = [
            ("idle_budget_ns", self.idle_budget_ns, 1),
            ("active_budget_ns", self.active_budget_ns, 1),
            ("min_active_budget_ns", self.min_active_budget_ns, 1),
            ("max_active_budget_ns", self.max_active_budget_ns, 1),
            ("request_idle_gap_ns", self.request_idle_gap_ns, 1),
            ("request_hold_ns", self.request_hold_ns, 0),
            ("default_kernel_ns", self.default_kernel_ns, 1),
            ("spatial_min_kernel_ns", self.spatial_min_kernel_ns, 0),
            (
                "spatial_standing_kernel_ns",
                self.spatial_standing_kernel_ns,
                0,
            ),
        ];
        for (field, v, lo) in ranged {
            if v < lo || v > MAX_PARAM_NS {
                return Err(SchedConfigError {
                    field: field.into(),
                    problem: format!("{v} is out of range: use {lo} to {MAX_PARAM_NS} (ns)"),
                });
            }
        }
        if self.mark_every_ns != 0
            && !(MIN_MARK_EVERY_NS..=MAX_PARAM_NS).contains(&self.mark_every_ns)
        {
            return Err(SchedConfigError {
                field: "mark_every_ns".into(),
                problem: format!(
                    "{} is out of range: use 0 (no completion marks) or {MIN_MARK_EVERY_NS} to \
                     {MAX_PARAM_NS} (ns)",
                    self.mark_every_ns
                ),
            });
        }
        if self.min_active_budget_ns > self.max_active_budget_ns {
            return Err(SchedConfigError {
                field: "min_active_budget_ns".into(),
                problem: format!(
                    "{} is larger than max_active_budget_ns ({})",
                    self.min_active_budget_ns, self.max_active_budget_ns
                ),
            });
        }
        if self.active_budget_ns < self.min_active_budget_ns
            || self.active_budget_ns > self.max_active_budget_ns
        {
            return Err(SchedConfigError {
                field: "active_budget_ns".into(),
                problem: format!(
                    "{} is outside min_active_budget_ns..=max_active_budget_ns ({}..={})",
                    self.active_budget_ns, self.min_active_budget_ns, self.max_active_budget_ns
                ),
            });
        }
        // Going idle must never shrink training's room: otherwise a gate would
        // have to close as time passes, with no event to say so.
        if self.idle_budget_ns < self.max_active_budget_ns {
            return Err(SchedConfigError {
                field: "idle_budget_ns".into(),
                problem: format!(
                    "{} is smaller than max_active_budget_ns ({}): training must get at least as \
                     much room while no inference request is active as while one is",
                    self.idle_budget_ns, self.max_active_budget_ns
                ),
            });
        }
        if !(self.spatial_reserve > 0.0 && self.spatial_reserve <= 0.5) {
            return Err(SchedConfigError {
                field: "spatial_reserve".into(),
                problem: format!(
                    "{} is out of range: use a share of the GPU's TPCs above 0 and at most 0.5",
                    self.spatial_reserve
                ),
            });
        }
        for (i, r) in self.slo.iter().enumerate() {
            let bad = |key: &str, problem: String| SchedConfigError {
                field: format!("slo[{i}].{key}"),
                problem,
            };
            if !(r.p99_ms > 0.0 && r.p99_ms <= MAX_SLO_P99_MS) {
                return Err(bad(
                    "p99_ms",
                    format!(
                        "{} is out of range: use a p99 target above 0 and at most {MAX_SLO_P99_MS} (ms)",
                        r.p99_ms
                    ),
                ));
            }
            if let Some(e) = r.executables.iter().find(|e| !e.starts_with('/')) {
                return Err(bad(
                    "executables",
                    format!("{e:?} is not an absolute path (executables are matched exactly, as /proc/PID/exe names them)"),
                ));
            }
            if let Some(c) = r.cgroups.iter().find(|c| !c.starts_with('/')) {
                return Err(bad(
                    "cgroups",
                    format!("{c:?} is not a cgroup path such as \"/serving.slice\""),
                ));
            }
        }
        Ok(())
    }

    /// The p99 target of a job of `uid`, running `exe`, in `cgroup`: the first
    /// `[[scheduler.slo]]` entry it matches, if any.
    #[must_use]
    pub fn slo_for(&self, uid: u32, exe: Option<&str>, cgroup: Option<&str>) -> Option<SloMatch> {
        self.slo
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(uid, exe, cgroup))
            .map(|(rule, r)| SloMatch {
                rule,
                p99_ns: r.p99_ns(),
            })
    }
}
