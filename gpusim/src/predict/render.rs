//! The human answer: every figure labelled a prediction, with the model's
//! version.

use std::fmt::Write as _;

use super::Prediction;

/// A `--steepness` change of the p99 ratio, in percent, from which the
/// answer is called steep (the kernel times changed by 2%).
const STEEP_PCT: f64 = 5.0;

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "-".to_string(), f)
}

/// The table `tandem-sim predict` prints by default.
#[must_use]
pub fn human(p: &Prediction) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "PREDICTION by the GPU-sharing model {} ({}), not a measurement: {} seed{}, {:.1} s window after {:.1} s warm-up, {:.1} s to compute on {} thread{}",
        p.model_version,
        p.device,
        p.seeds,
        if p.seeds == 1 { "" } else { "s" },
        p.window_s,
        p.warmup_s,
        p.wall_s,
        p.threads,
        if p.threads == 1 { "" } else { "s" },
    );
    if p.measured_params.is_empty() {
        let _ = writeln!(
            o,
            "parameters: fitted, none measured on a GPU (--measured DIR applies a GPU run's)"
        );
    } else {
        let _ = writeln!(
            o,
            "parameters measured on a GPU: {}",
            p.measured_params.join(", ")
        );
    }
    for j in &p.jobs {
        let role = if j.candidate {
            "candidate"
        } else {
            "on the GPU"
        };
        let what = match j.class {
            "inference" => format!(
                "{:.1} req/s{}, predicted alone p99 {} ms; SLO p99 <= {:.2}x alone{}",
                j.rate_rps.unwrap_or(0.0),
                if j.rate_is_half_load {
                    " (half load)"
                } else {
                    ""
                },
                opt(j.predicted_alone_p99_ms, |x| format!("{x:.2}")),
                j.slo.p99_ratio,
                j.slo
                    .p99_ms
                    .map_or_else(String::new, |ms| format!(" and <= {ms} ms")),
            ),
            _ => format!(
                "predicted alone {} steps/s; SLO kept >= {:.2}",
                opt(j.predicted_alone_steps_per_s, |x| format!("{x:.2}")),
                j.slo.kept
            ),
        };
        let _ = writeln!(
            o,
            "  {role:10} {} ({}, {}): {what}",
            j.label, j.job, j.class
        );
    }
    if let Some(most) = p.capacity.training_kept_at_most {
        // The training jobs keep at most `most` together (weighted), so one
        // of them keeps at most that: below their lowest SLO, one misses.
        let lowest = p
            .jobs
            .iter()
            .filter(|j| j.class == "training")
            .map(|j| j.slo.kept)
            .reduce(f64::min);
        let _ = writeln!(
            o,
            "  SM capacity alone: inference takes {:.2} of the GPU, training {:.2}: training keeps at most {most:.2} in any mode{}",
            p.capacity.inference_share,
            p.capacity.training_share,
            match lowest {
                Some(slo) if most < slo => format!(" (below its SLO {slo:.2}: no scheduler meets it)"),
                _ => String::new(),
            },
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:15} {:4} {:28} {:>21} {:>13} {:>15} {:>9}  SLO",
        "MODE", "MPS", "JOB", "PREDICTED P99 RATIO", "(WORST SEED)", "PREDICTED KEPT", "(WORST)"
    );
    for m in &p.modes {
        for (i, j) in m.jobs.iter().enumerate() {
            let (mode, mps) = if i == 0 {
                (m.mode.as_str(), if m.mps { "yes" } else { "no" })
            } else {
                ("", "")
            };
            let mut label = j.label.clone();
            if label.chars().count() > 28 {
                label = format!(
                    "...{}",
                    label
                        .chars()
                        .rev()
                        .take(25)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<String>()
                );
            }
            let _ = writeln!(
                o,
                "{mode:15} {mps:4} {label:28} {:>21} {:>13} {:>15} {:>9}  {}",
                opt(j.predicted_p99_ratio, |x| format!("{x:.2}x")),
                opt(j.predicted_p99_ratio_worst, |x| format!("{x:.2}x")),
                opt(j.predicted_kept, |x| format!("{x:.2}")),
                opt(j.predicted_kept_worst, |x| format!("{x:.2}")),
                j.miss
                    .as_deref()
                    .map_or_else(|| "meets".to_string(), |m| format!("misses: {m}")),
            );
        }
        for j in &m.jobs {
            if let (Some(a), Some(b)) = (
                j.predicted_p99_ratio,
                j.predicted_p99_ratio_if_kernels_2pct_longer,
            ) {
                let d = (b / a - 1.0) * 100.0;
                let _ = writeln!(
                    o,
                    "{:15}    {}: p99 {b:.2}x if its kernels ran 2% longer ({d:+.0}%){}",
                    "",
                    j.label,
                    if d.abs() >= STEEP_PCT {
                        ": steep, a small error in the traces' kernel times moves this answer"
                    } else {
                        ""
                    }
                );
            }
        }
        let _ = writeln!(
            o,
            "{:15} => {}{}",
            "",
            if m.fits { "fits" } else { "does not fit" },
            if m.counted {
                ""
            } else {
                " (not counted: not in tandemd yet)"
            }
        );
        if let Some(why) = &m.why {
            if why.is_empty() {
                let _ = writeln!(o, "{:15}    why: no predicted wait for SMs", "");
            }
            for (k, w) in why.iter().enumerate() {
                let _ = writeln!(
                    o,
                    "{:15}    why #{}: {} waits {:.3} ms per {} ({:.0}% of its charged wait) for {} of {}{}",
                    "",
                    k + 1,
                    w.delayed,
                    w.predicted_wait_ms_per_unit,
                    if p.jobs.iter().any(|j| j.label == w.delayed && j.class == "training") {
                        "step"
                    } else {
                        "request"
                    },
                    w.share * 100.0,
                    w.kernel,
                    w.by_job,
                    match w.launches_per_unit {
                        0 => String::new(),
                        n => format!(
                            " ({n} launch{} per {})",
                            if n == 1 { "" } else { "es" },
                            if p.jobs.iter().any(|j| j.label == w.by_job && j.class == "training") {
                                "step"
                            } else {
                                "request"
                            }
                        ),
                    },
                );
            }
        }
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "verdict (prediction, model {}): {}{}",
        p.model_version,
        p.verdict,
        if p.fitting_modes.is_empty() {
            String::new()
        } else {
            format!(" (fits in {})", p.fitting_modes.join(", "))
        }
    );
    o
}
