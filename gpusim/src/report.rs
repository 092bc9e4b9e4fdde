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
            "Measured on a GPU (`{}` and `{}` in the traces folder): {}, the A100 carrying the \
             time slice, the switch and the launch floor; every other parameter as in \
             `gpusim/src/params.rs`.",
            crate::measured::FILE,
            crate::measured::ENGINE_FILE,
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
    s += &capacity(rows);
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

/// The SM-capacity bound per pair: the most training any mode can keep
/// while it serves inference's whole load ([`Row::kept_at_most`]); and
/// beside MPS + priority, where what training lost went: capacity left idle
/// (that a scheduler could still give it) or more SM-time per step (the
/// slow-downs of sharing: interference, DRAM contention).
fn capacity(rows: &[Row]) -> String {
    let alone: Vec<&Row> = rows.iter().filter(|r| r.mode == "alone").collect();
    let out_of_reach = alone
        .iter()
        .filter(|r| r.kept_at_most.is_some_and(|b| b < 0.90))
        .count();
    let mut s = format!(
        "\n## What any scheduler can keep: the SM capacity inference leaves\n\n\
         Each job's share of the GPU's SM capacity alone (the SM-time of its blocks, a block \
         that shares its SM counted at its share, over SMs x window) and the most training any \
         mode can keep while inference does its load's work: `(1 - inference's share) / \
         training's share`, worst seed. The model makes no SM capacity (a kernel on fewer SMs \
         runs longer; interference and DRAM contention only add SM-time), so no scheduler in it \
         can beat this, whatever its p99. Below 0.90 the goal (p99 <= 1.10x with training >= \
         0.90) is out of reach on that pair for every mode: {out_of_reach} of {} pairs. Beside \
         MPS + priority (medians over seeds): the GPU's capacity left idle, and training's \
         SM-time per step against alone (above 1: sharing slowed its blocks, which costs its \
         throughput that factor whatever a scheduler does while the two run at once).\n\n\
         | set | inference | training | inference's share | training's share | training kept at most | goal within reach | MPS + priority: idle | training's SM-time per step |\n\
         | --- | --- | --- | ---: | ---: | ---: | --- | ---: | ---: |\n",
        alone.len()
    );
    for a in alone {
        let lowprio = rows.iter().find(|r| {
            r.mode == "mps_lowprio"
                && (r.set.as_str(), r.inference.as_str(), r.training.as_str())
                    == (a.set.as_str(), a.inference.as_str(), a.training.as_str())
        });
        let idle = lowprio.map(|r| 1.0 - r.inference_gpu_share - r.training_gpu_share);
        let per_step = lowprio.and_then(|r| {
            let kept = r.train_fraction?;
            (kept > 0.0 && a.training_gpu_share > 0.0)
                .then(|| r.training_gpu_share / a.training_gpu_share / kept)
        });
        s += &format!(
            "| {} | {} | {} | {:.3} | {:.3} | {} | {} | {} | {} |\n",
            a.set,
            a.inference,
            a.training,
            a.inference_gpu_share,
            a.training_gpu_share,
            f(a.kept_at_most),
            match a.kept_at_most {
                Some(b) if b < 0.90 => "no",
                Some(_) => "yes",
                None => "-",
            },
            f(idle),
            per_step.map_or_else(|| "-".into(), |x| format!("{x:.2}x")),
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(inf: &str, mode: &str, shares: (f64, f64), kept: f64, bound: Option<f64>) -> Row {
        Row {
            set: "h100".into(),
            inference: inf.into(),
            training: "t".into(),
            mode: mode.into(),
            inference_gpu_share: shares.0,
            training_gpu_share: shares.1,
            train_fraction: Some(kept),
            kept_at_most: bound,
            ..Row::default()
        }
    }

    /// A pair whose bound is under 0.90 is out of reach; beside MPS +
    /// priority the table splits training's loss into idle capacity and
    /// SM-time per step (here 0.5 of 0.8 alone at 0.5 kept: 1.25x).
    #[test]
    fn the_capacity_table_says_which_pairs_are_out_of_reach_and_where_training_went() {
        let rows = [
            row("a", "alone", (0.2, 0.8), 1.0, Some(1.0)),
            row("a", "mps_lowprio", (0.2, 0.5), 0.5, Some(1.0)),
            row("b", "alone", (0.3, 0.8), 1.0, Some(0.875)),
        ];
        let s = capacity(&rows);
        assert!(s.contains("for every mode: 1 of 2 pairs"), "{s}");
        assert!(
            s.contains("| h100 | a | t | 0.200 | 0.800 | 1.00 | yes | 0.30 | 1.25x |"),
            "{s}"
        );
        assert!(
            s.contains("| h100 | b | t | 0.300 | 0.800 | 0.88 | no | - | - |"),
            "{s}"
        );
    }
}
