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
         Model, not GPU: `scripts/sim` ({matrix} matrix, {wall_s:.0} s on this machine). Sources of the \
         traces per row; every figure a median over the seeds with min-max.\n\
         `tandem` is scheduler v2 (the shims' local bound on the GPU board, v1's gates and limits \
         behind it) over time-slicing; `tandem_mps` is tandem over MPS: training at client priority 1, \
         no gate or launch limit, the `[mps]` in-flight bound (2 ms). Scheduler defaults as shipped.\n\
         {params}\n\n\
         | inference | training | mode | p50 ms | p99 ms | p99 ratio (min-max) | train fraction (min-max) | source |\n\
         | --- | --- | --- | ---: | ---: | ---: | ---: | --- |\n"
    );
    for r in rows {
        s += &format!(
            "| {} | {} | {} | {} | {} | {} ({}-{}) | {} ({}-{}) | {} |\n",
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
            r.source
        );
    }
    s += "\n## Calibration against the H100 measurements (DESIGN.md, \"Facts\")\n\n\
          | pair | mode | model p99 ratio | measured | model train fraction | measured | in range |\n\
          | --- | --- | ---: | ---: | ---: | ---: | --- |\n";
    for c in fits {
        s += &format!(
            "| {}:resnet50_train | {} | {} | {} | {} | {} | {} |\n",
            c.inference,
            c.mode,
            f(c.model_ratio),
            c.measured_ratio,
            f(c.model_fraction),
            c.measured_fraction,
            if c.ok { "yes" } else { "no" }
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
