//! `[scheduler]` in `tandemd.toml`: the policy's parameters, their documented
//! defaults and their validation.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Largest value any duration parameter may take (10 s): larger values are
/// surely typos, and keeping every time below this keeps the arithmetic far
/// from overflow.
pub const MAX_PARAM_NS: u64 = 10_000_000_000;

/// The scheduler's parameters (`[scheduler]` in `tandemd.toml`). Every field
/// is optional in the file; [`SchedConfig::default`] gives the documented
/// defaults. See the [module docs](super) for how each one is used.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A request keeps its GPU in the "active" state this long after it ended,
    /// covering short CPU gaps between the phases of one request. Default 200 us.
    pub request_hold_ns: u64,
    /// Estimated duration of a kernel never measured. Default 50 us.
    pub default_kernel_ns: u64,
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
            request_hold_ns: 200_000,
            default_kernel_ns: 50_000,
        }
    }
}

/// A [`SchedConfig`] that cannot be used: which field (its key inside
/// `[scheduler]`) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedConfigError {
    /// The key inside `[scheduler]`, e.g. `"idle_budget_ns"`.
    pub field: &'static str,
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
    /// Checks serde cannot express: every duration in range, and
    /// `min_active_budget_ns <= active_budget_ns <= max_active_budget_ns`.
    pub fn validate(&self) -> Result<(), SchedConfigError> {
        let ranged: [(&'static str, u64, u64); 7] = [
            ("idle_budget_ns", self.idle_budget_ns, 1),
            ("active_budget_ns", self.active_budget_ns, 1),
            ("min_active_budget_ns", self.min_active_budget_ns, 1),
            ("max_active_budget_ns", self.max_active_budget_ns, 1),
            ("request_idle_gap_ns", self.request_idle_gap_ns, 1),
            ("request_hold_ns", self.request_hold_ns, 0),
            ("default_kernel_ns", self.default_kernel_ns, 1),
        ];
        for (field, v, lo) in ranged {
            if v < lo || v > MAX_PARAM_NS {
                return Err(SchedConfigError {
                    field,
                    problem: format!("{v} is out of range: use {lo} to {MAX_PARAM_NS} (ns)"),
                });
            }
        }
        if self.min_active_budget_ns > self.max_active_budget_ns {
            return Err(SchedConfigError {
                field: "min_active_budget_ns",
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
                field: "active_budget_ns",
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
                field: "idle_budget_ns",
                problem: format!(
                    "{} is smaller than max_active_budget_ns ({}): training must get at least as \
                     much room while no inference request is active as while one is",
                    self.idle_budget_ns, self.max_active_budget_ns
                ),
            });
        }
        Ok(())
    }
}
