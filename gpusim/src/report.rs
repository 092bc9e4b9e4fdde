//! The matrix's outputs: `matrix.json` and `matrix.md`.

use serde::Serialize;

use crate::calibration::Fit;
use crate::matrix::Row;
use crate::params::MODEL_VERSION;

/// `matrix.json`: the rows, the calibration fit and what was wrong.
#[derive(Serialize)]
pub struct Doc<'a> {
    /// The model's version.
    pub model_version: &'a str,
    /// `full` or `reduced`.
    pub matrix: &'a str,
    /// Every row.
    pub rows: &'a [Row],
    /// The calibration fit.
    pub calibration: &'a [Fit],
    /// Broken calibration rules (empty: calibrated).
    pub calibration_failures: &'a [String],
    /// Parameters taken from a GPU measurement (`crate::measured`), one
    /// phrase each; empty: all fitted or assumed.
    pub measured_params: &'a [String],
}

fn f(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.2}"))
}

/// The published systems' measured figures for a pair of Tally's A100 set
/// (the artifact's Tally default configuration and TGS), as reference rows
/// beside the model's: whether tandem beats the free baseline and the best
/// published system reads from one table.
fn reference_rows(r: &Row) -> String {
    let Some(p) = crate::tally::pair(&r.inference, &r.training) else {
        return String::new();
    };
    [
        (crate::tally::mode::TALLY, "tally (measured)"),
        (crate::tally::mode::TGS, "tgs (measured)"),
    ]
    .iter()
    .map(|&(m, name)| {
        let c = &p.modes[m];
        format!(
            "| {} | {} | {} | {name} | - | {:.2} | {:.2} | {:.2} | - | measured: Tally artifact, A100 (`gpusim/src/tally.rs`) |\n",
            r.set,
            r.inference,
            r.training,
            c.p99_ms,
            p.p99_ratio(m),
            c.train_kept
        )
    })
    .collect()
}

/// The markdown table.
#[must_use]
pub fn markdown(
    rows: &[Row],
    fits: &[Fit],
    bad: &[String],
    matrix: &str,
    wall_s: f64,
    measured: &[String],
) -> String {
    let params = if measured.is_empty() {
        "Time slice and context switch: fitted (no GPU measurement in the traces folder yet)."
            .to_string()
    } else {
        format!(
            "Measured on a GPU (`{}` in the traces folder): {}; every other parameter as in \
             `gpusim/src/params.rs`.",
            crate::measured::FILE,
            measured.join(", ")
        )
    };
    let mut s = format!(
        "# Co-location matrix in the GPU-sharing model ({MODEL_VERSION})\n\n\
         Model, not GPU: every figure here is a prediction of the model, `scripts/sim` ({matrix} \
         matrix, {wall_s:.0} s on this machine). Sources of the traces per row. Ratios are paired: \
         each seed's p99 over the same seed's alone p99, and training kept the same way; each cell \
         gives the median over the seeds and the min-max (the worst seed decides whether a pair \
         meets the goal: p99 <= 1.10x with training >= 0.90).\n\
         `tandem` is scheduler v2 (the shims' local bound on the GPU board, v1's gates and limits \
         behind it) over time-slicing; `tandem_mps` is tandem over MPS: training at client priority 1, \
         no gate or launch limit, the `[mps]` in-flight bound (2 ms). Scheduler defaults as shipped.\n\
         {params}\n\n\
         | set | inference | training | mode | p50 ms | p99 ms | p99 ratio (min-max) | train fraction (min-max) | requests | source |\n\
         | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n"
    );
    for (k, r) in rows.iter().enumerate() {
        let last_of_pair = rows.get(k + 1).is_none_or(|n| {
            (n.set.as_str(), n.inference.as_str(), n.training.as_str())
                != (r.set.as_str(), r.inference.as_str(), r.training.as_str())
        });
        s += &format!(
            "| {} | {} | {} | {} | {} | {} | {} ({}-{}) | {} ({}-{}) | {} | {} |\n",
            r.set,
            r.inference,
            r.training,
            r.mode,
            f(r.p50_ms),
            f(r.p99_ms),
            f(r.p99_ratio),
            f(r.p99_ratio_min),
            f(r.p99_ratio_max),
            f(r.train_fraction),
            f(r.train_fraction_min),
            f(r.train_fraction_max),
            r.requests,
            r.source
        );
        if last_of_pair && r.set == "a100" {
            s += &reference_rows(r);
        }
    }
    s += "\n## Calibration, pair by pair (DESIGN.md: the H100 \"Facts\" and Tally's A100 pairs)\n\n\
          Tolerance: p99 ratio within a factor 1.25 of the measured one, training within 0.07; \
          `plain` is time-slicing; `fit` marks the points the model was fitted on (the others are \
          held out: `holdout.md`). The mean latency's ratio (model, measured where the source \
          has it) is no tolerance: beside the p99 it tells a tail the model lacks from a body it \
          gets wrong.\n\n\
          | set | pair | mode | model p99 ratio | measured | model train fraction | measured | model mean ratio | measured | fit | in tolerance |\n\
          | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n";
    for c in fits {
        let verdict = match (&c.exception, c.ok) {
            (_, true) => "yes".to_string(),
            (Some(cause), false) => format!("no, excused: {cause}"),
            (None, false) => "no".to_string(),
        };
        s += &format!(
            "| {} | {}:{} | {} | {} | {} | {} | {} | {} | {} | {} | {verdict} |\n",
            c.set,
            c.inference,
            c.training,
            c.mode,
            f(c.model_ratio),
            c.measured_ratio,
            f(c.model_fraction),
            c.measured_fraction,
            f(c.model_mean_ratio),
            f(c.measured_mean_ratio),
            if c.fitted { "fit" } else { "held out" },
        );
    }
    if bad.is_empty() {
        s += "\nEvery calibration rule holds.\n";
    } else {
        s += "\nCalibration rules broken:\n\n";
        for b in bad {
            s += &format!("- {b}\n");
        }
    }
    s
}
