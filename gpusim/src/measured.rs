//! GPU measurements that replace fitted parameters: the time-slice length
//! and the context-switch cost `scripts/gpu/trace_capture.py` measures on a
//! GPU (prove's stage 3, part 1), committed as `timeslice.json` beside the captured
//! traces (`tests/traces/`), and the share of SMs that saturate DRAM
//! `scripts/gpu/engine_rules.py` measures (prove's `engine_rules` stage,
//! part 4), committed as `engine_rules.json` there ([`ENGINE_FILE`]), with
//! the GPU time of an empty kernel queued back to back (the launch floor)
//! and the interference a compute kernel on SMs of its own meets beside
//! another on the rest (the neighbours part).
//! `tandem-sim` applies them before any `--set`, and the matrix's report
//! says which parameters came from a GPU.
//!
//! The file is the capture's own output: `{"skipped": null | "why",
//! "timeslice": {"median_ns": …, "n": …} | null, "switch": {…} | null}`.
//! A skipped measurement, or a figure with no samples, leaves the fitted
//! value; a figure outside what a GPU's scheduler can plausibly do is an
//! error (a broken measurement must not quietly refit the model).

use std::path::Path;

use serde_json::Value;

use crate::params::Params;

/// The file's name in the traces folder.
pub const FILE: &str = "timeslice.json";
/// Plausible time slices: NVIDIA's configurable levels run from 2 to 30 ms.
const SLICE_RANGE_NS: (f64, f64) = (100_000.0, 1_000_000_000.0);
/// Plausible switch costs.
const SWITCH_RANGE_NS: (f64, f64) = (0.0, 10_000_000.0);

/// The engine-rules measurement's file name in the traces folder.
pub const ENGINE_FILE: &str = "engine_rules.json";
/// Plausible shares of the SMs that saturate DRAM: a few SMs at the least.
const SATURATING_RANGE: (f64, f64) = (0.02, 1.0);
/// Plausible GPU times of an empty kernel queued back to back.
const FLOOR_RANGE_NS: (f64, f64) = (100.0, 50_000.0);
/// Plausible slowdowns of a kernel beside another on other SMs.
const NEIGHBOUR_RANGE: (f64, f64) = (0.5, 5.0);

/// Whether `gpu`, a driver's name for a GPU (`NVIDIA H200`,
/// `NVIDIA A100-SXM4-40GB`), is a `model` (`h100`, `a100`, `h200`): one of
/// its words is that model (so a GH200 is neither an H100 nor an H200).
#[must_use]
pub fn names_model(gpu: &str, model: &str) -> bool {
    gpu.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w.eq_ignore_ascii_case(model))
}

/// The models of one die: the H100 and the H200 are both GH100 (132 SMs,
/// the same clocks and driver), with HBM3 and HBM3e.
const GH100: [&str; 2] = ["h100", "h200"];

/// Whether `gpu` has `model`'s die: a property of the die and its driver
/// (the time slice, the launch floor, the neighbours' slowdown) measured on
/// one stands for the other; a DRAM figure does not.
fn same_die(gpu: &str, model: &str) -> bool {
    names_model(gpu, model) || (GH100.contains(&model) && GH100.iter().any(|m| names_model(gpu, m)))
}

/// Each device set's parameters with what a GPU measured applied, and what
/// was applied (`h100` for the H100's, `h200` for the H200's).
#[derive(Clone, Debug)]
pub struct Sets {
    pub h100: Params,
    pub h200: Params,
    /// The A100 carries the H100's time slice, switch and launch floor
    /// ([`Params::a100_over`]): no A100 measurement exists.
    pub a100: Params,
    pub applied_h100: Vec<String>,
    pub applied_h200: Vec<String>,
}

/// The sets' parameters: the fitted ones, with the measurements under `dir`
/// (if any) applied to each set as [`apply`] says.
///
/// # Errors
/// As [`apply`].
pub fn sets(dir: Option<&Path>) -> Result<Sets, String> {
    let mut h100 = Params::calibrated();
    let applied_h100 = match dir {
        Some(d) => apply(&mut h100, d, "h100")?,
        None => Vec::new(),
    };
    let mut h200 = Params::h200_over(&h100);
    let applied_h200 = match dir {
        Some(d) => apply(&mut h200, d, "h200")?,
        None => Vec::new(),
    };
    Ok(Sets {
        a100: Params::a100_over(&h100),
        h100,
        h200,
        applied_h100,
        applied_h200,
    })
}

/// Applies `dir/timeslice.json` and `dir/engine_rules.json` to `params`, the
/// parameters of the set of GPU `model` (`h100`, `h200`): a figure measured
/// on another GPU is applied only where it is the die's and that GPU has
/// `model`'s die ([`names_model`]; a file that names no GPU is taken as
/// this one's). Returns what it changed, one phrase per parameter, and a
/// phrase per figure it left for being another GPU's (empty: no file, a
/// skipped measurement, or no samples).
///
/// # Errors
/// A file that does not parse, a dry run's figures, or a figure outside
/// the plausible range.
pub fn apply(params: &mut Params, dir: &Path, model: &str) -> Result<Vec<String>, String> {
    let mut applied = Vec::new();
    for (file, apply) in [
        (
            FILE,
            apply_json_for as fn(&mut Params, &str, Option<&str>) -> Result<Vec<String>, String>,
        ),
        (ENGINE_FILE, apply_engine_rules_json_for),
    ] {
        let path = dir.join(file);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        applied.extend(
            apply(params, &text, Some(model)).map_err(|e| format!("{}: {e}", path.display()))?,
        );
    }
    Ok(applied)
}

/// [`apply`] on `engine_rules.json`'s text: the streaming copy's
/// `bandwidth.findings.share_of_sms_for_90pct` (the fewest SMs that pulled
/// 90% of its best bandwidth, over the GPU's) becomes
/// `dram_saturating_share`, and `launch_floor.findings.empty_back_to_back_ns`
/// (an empty kernel's GPU time queued back to back) `kernel_floor_ns`, and
/// the neighbours' compute loop on SMs of its own, slowed beside a copy or
/// a compute loop on the others, `interference` ([`neighbour_interference`]).
/// A part that did not run (or, for the floor, was host-bound; for the
/// neighbours, could not show the two sides kept apart) leaves its value.
///
/// # Errors
/// Not a JSON object, a dry run's file (the fake driver's figures measure
/// nothing), a figure that is not a number or is implausible (a share
/// outside (0.02, 1], a floor outside 100 ns to 50 us); then nothing is
/// applied.
pub fn apply_engine_rules_json(params: &mut Params, text: &str) -> Result<Vec<String>, String> {
    apply_engine_rules_json_for(params, text, None)
}

/// [`apply_engine_rules_json`] for the set of GPU `model` (`None`: the
/// GPU the file was measured on): the DRAM share only if the file's GPU
/// (`gpu`, else `bandwidth.device`) is that model, the launch floor and the
/// neighbours' interference if it has that model's die.
///
/// # Errors
/// As [`apply_engine_rules_json`].
pub fn apply_engine_rules_json_for(
    params: &mut Params,
    text: &str,
    model: Option<&str>,
) -> Result<Vec<String>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !v.is_object() {
        return Err("not a JSON object".into());
    }
    if v["dry_run"].as_bool() == Some(true) {
        return Err("a dry run's figures (the fake driver's) measure nothing about a GPU".into());
    }
    let gpu = v["gpu"].as_str().or(v["bandwidth"]["device"].as_str());
    let (own, die) = match (model, gpu) {
        (Some(m), Some(g)) => (names_model(g, m), same_die(g, m)),
        _ => (true, true),
    };
    let share = figure(
        &v["bandwidth"]["findings"]["share_of_sms_for_90pct"],
        "bandwidth.findings.share_of_sms_for_90pct",
        |x| x > SATURATING_RANGE.0 && x <= SATURATING_RANGE.1,
        "(0.02, 1]",
    )?;
    let floor = figure(
        &v["launch_floor"]["findings"]["empty_back_to_back_ns"],
        "launch_floor.findings.empty_back_to_back_ns",
        |x| (FLOOR_RANGE_NS.0..=FLOOR_RANGE_NS.1).contains(&x),
        "100-50000 ns",
    )?;
    let interference = neighbour_interference(&v["neighbours"]["findings"])?;
    let mut applied = Vec::new();
    let other = |what: &str| {
        format!(
            "{what} not applied: measured on {:?}, another GPU{}",
            gpu.unwrap_or("?"),
            if die { "'s DRAM" } else { "" }
        )
    };
    match interference {
        Some((x, worst)) if die => {
            params.gpu.interference = x;
            applied.push(format!(
                "interference {x:.3} (compute on SMs of its own, {worst:.2}x beside the rest)"
            ));
        }
        Some(_) => applied.push(other("interference")),
        None => {}
    }
    match share {
        Some(x) if own => {
            params.gpu.dram_saturating_share = x;
            applied.push(format!("DRAM saturated by {:.0}% of the SMs", x * 100.0));
        }
        Some(_) => applied.push(other("DRAM saturation")),
        None => {}
    }
    match floor {
        Some(ns) if die => {
            params.kernel_floor_ns = ns.round() as u64;
            applied.push(format!("launch floor {:.2} us", ns / 1e3));
        }
        Some(_) => applied.push(other("launch floor")),
        None => {}
    }
    Ok(applied)
}

/// The engine's `interference` from the neighbours' findings, with the
/// slowdown it comes from. The engine slows a block dispatched beside other
/// clients by `1 + interference x (their share of the SMs)` wherever it
/// lands (docs/MODEL.md row 15); the neighbours measure that where it is
/// purest: the compute loop, which pulls no DRAM (row 7 has no part in it),
/// on SMs no other block shares (no co-residence), beside the aggressor's
/// share of the SMs. The worse of its two slowdowns (beside a copy, beside
/// compute) gives it, at least 0. `None` without the findings, or unless
/// they show the two sides kept to SMs of their own (`disjoint`).
///
/// # Errors
/// A slowdown or an SM count that is not a number or is implausible.
fn neighbour_interference(f: &Value) -> Result<Option<(f64, f64)>, String> {
    if f.is_null() || f["disjoint"].as_bool() != Some(true) {
        return Ok(None);
    }
    let slowdown = |key: &str| {
        figure(
            &f[key],
            &format!("neighbours.findings.{key}"),
            |x| (NEIGHBOUR_RANGE.0..=NEIGHBOUR_RANGE.1).contains(&x),
            "0.5-5",
        )
    };
    let slowdowns = [slowdown("burn_beside_copy")?, slowdown("burn_beside_burn")?];
    let Some(worst) = slowdowns.into_iter().flatten().reduce(f64::max) else {
        return Ok(None);
    };
    let sms = |key: &str| {
        figure(
            &f[key],
            &format!("neighbours.findings.{key}"),
            |x| x >= 1.0,
            "1 or more",
        )?
        .ok_or(format!("neighbours.findings.{key} is missing"))
    };
    let (victim, aggressor) = (sms("victim_sms")?, sms("aggressor_sms")?);
    let share = aggressor / (victim + aggressor);
    Ok(Some((((worst - 1.0) / share).max(0.0), worst)))
}

/// A measured figure at `v`: `None` when absent, else a number `plausible`
/// accepts.
fn figure(
    v: &Value,
    name: &str,
    plausible: impl Fn(f64) -> bool,
    range: &str,
) -> Result<Option<f64>, String> {
    if v.is_null() {
        return Ok(None);
    }
    let x = v.as_f64().ok_or(format!("{name} is not a number"))?;
    if !plausible(x) {
        return Err(format!(
            "{name} = {x} is outside {range}: not a plausible measurement"
        ));
    }
    Ok(Some(x))
}

/// [`apply`] on the file's text.
///
/// # Errors
/// As [`apply`].
pub fn apply_json(params: &mut Params, text: &str) -> Result<Vec<String>, String> {
    apply_json_for(params, text, None)
}

/// [`apply_json`] for the set of GPU `model` (`None`: the GPU the file was
/// measured on): the slice and the switch are the driver's and the die's,
/// so they apply where the file's `gpu` has `model`'s die.
///
/// # Errors
/// As [`apply_json`].
pub fn apply_json_for(
    params: &mut Params,
    text: &str,
    model: Option<&str>,
) -> Result<Vec<String>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !v.is_object() {
        return Err("not a JSON object".into());
    }
    if !v["skipped"].is_null() {
        return Ok(Vec::new());
    }
    if let (Some(m), Some(g)) = (model, v["gpu"].as_str()) {
        if !same_die(g, m) {
            return Ok(vec![format!(
                "time slice not applied: measured on {g:?}, another GPU"
            )]);
        }
    }
    let mut applied = Vec::new();
    if let Some(ns) = median(&v, "timeslice", SLICE_RANGE_NS)? {
        params.timeslice_ns = ns;
        applied.push(format!("timeslice {:.2} ms", ns as f64 / 1e6));
    }
    if let Some(ns) = median(&v, "switch", SWITCH_RANGE_NS)? {
        params.switch_ns = ns;
        applied.push(format!("context switch {:.1} us", ns as f64 / 1e3));
    }
    Ok(applied)
}

fn median(v: &Value, key: &str, (lo, hi): (f64, f64)) -> Result<Option<u64>, String> {
    let m = &v[key];
    if m.is_null() {
        return Ok(None);
    }
    let x = m["median_ns"]
        .as_f64()
        .ok_or_else(|| format!("{key}.median_ns is not a number"))?;
    if !(lo..=hi).contains(&x) {
        return Err(format!(
            "{key}.median_ns = {x} ns is outside {lo}-{hi} ns: not a plausible measurement"
        ));
    }
    Ok(Some(x.round() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_replaces_the_fitted_slice_and_switch() {
        let mut p = Params::calibrated();
        let got = apply_json(
            &mut p,
            r#"{"skipped": null, "timeslice": {"n": 40, "median_ns": 2000000.4},
                "switch": {"n": 39, "median_ns": 31000}, "spin_ms": 300}"#,
        )
        .unwrap();
        assert_eq!((p.timeslice_ns, p.switch_ns), (2_000_000, 31_000));
        assert_eq!(got, vec!["timeslice 2.00 ms", "context switch 31.0 us"]);
        // Everything else stays fitted.
        let mut q = Params::calibrated();
        q.timeslice_ns = p.timeslice_ns;
        q.switch_ns = p.switch_ns;
        assert_eq!(p, q);
    }

    #[test]
    fn skipped_or_empty_measurements_leave_the_fit() {
        let fitted = Params::calibrated();
        for text in [
            r#"{"skipped": "the timeslice microbenchmark needs a GPU"}"#,
            r#"{"skipped": null, "timeslice": null, "switch": null}"#,
        ] {
            let mut p = fitted.clone();
            assert_eq!(apply_json(&mut p, text).unwrap(), Vec::<String>::new());
            assert_eq!(p, fitted, "{text}");
        }
        let mut p = fitted.clone();
        let got = apply_json(
            &mut p,
            r#"{"skipped": null, "timeslice": null, "switch": {"median_ns": 20000}}"#,
        )
        .unwrap();
        assert_eq!(got, vec!["context switch 20.0 us"]);
        assert_eq!(p.timeslice_ns, fitted.timeslice_ns);
    }

    #[test]
    fn implausible_or_malformed_measurements_are_errors() {
        let mut p = Params::calibrated();
        for text in [
            r#"{"skipped": null, "timeslice": {"median_ns": 50}}"#,
            r#"{"skipped": null, "switch": {"median_ns": 20000000}}"#,
            r#"{"skipped": null, "timeslice": {"median_ns": "2ms"}}"#,
            "[1, 2]",
            "not json",
        ] {
            assert!(apply_json(&mut p, text).is_err(), "{text}");
        }
        assert_eq!(p, Params::calibrated(), "nothing applied on an error");
    }

    #[test]
    fn the_copys_saturating_share_becomes_the_engines_and_nothing_else_moves() {
        let mut p = Params::calibrated();
        let got = apply_engine_rules_json(
            &mut p,
            r#"{"dry_run": false, "bandwidth": {"findings": {"best_gb_per_s": 3000.0,
                "sms_for_90pct": 64, "share_of_sms_for_90pct": 0.485}}, "mps": {}}"#,
        )
        .unwrap();
        assert_eq!(got, vec!["DRAM saturated by 48% of the SMs"]);
        let mut q = Params::calibrated();
        q.gpu.dram_saturating_share = 0.485;
        assert_eq!(p, q);
        // No bandwidth part: nothing; a dry run's or a broken figure: errors.
        let fitted = Params::calibrated();
        let mut p = fitted.clone();
        let none = r#"{"dry_run": false, "bandwidth": {"error": "no GPU"}}"#;
        assert_eq!(
            apply_engine_rules_json(&mut p, none).unwrap(),
            Vec::<String>::new()
        );
        for text in [
            r#"{"dry_run": true, "bandwidth": {"findings": {"share_of_sms_for_90pct": 0.5}}}"#,
            r#"{"bandwidth": {"findings": {"share_of_sms_for_90pct": 0.008}}}"#,
            r#"{"bandwidth": {"findings": {"share_of_sms_for_90pct": 1.5}}}"#,
            r#"{"bandwidth": {"findings": {"share_of_sms_for_90pct": "half"}}}"#,
            "[]",
        ] {
            assert!(apply_engine_rules_json(&mut p, text).is_err(), "{text}");
        }
        assert_eq!(p, fitted, "nothing applied on an error");
    }

    #[test]
    fn the_empty_kernels_back_to_back_time_becomes_the_launch_floor() {
        let mut p = Params::calibrated();
        let got = apply_engine_rules_json(
            &mut p,
            r#"{"dry_run": false, "bandwidth": {"error": "no GPU"},
                "launch_floor": {"findings": {"empty_back_to_back_ns": 1800.4, "gap_ns": 900}}}"#,
        )
        .unwrap();
        assert_eq!(got, vec!["launch floor 1.80 us"]);
        let mut q = Params::calibrated();
        q.kernel_floor_ns = 1800;
        assert_eq!(p, q);
        // Host-bound bursts report no floor: nothing changes.
        let fitted = Params::calibrated();
        let mut p = fitted.clone();
        let host = r#"{"launch_floor": {"findings": {"host_bound": true}}}"#;
        assert!(apply_engine_rules_json(&mut p, host).unwrap().is_empty());
        // A broken floor refuses the file, the copy's good share included.
        let broken = r#"{"bandwidth": {"findings": {"share_of_sms_for_90pct": 0.5}},
            "launch_floor": {"findings": {"empty_back_to_back_ns": 20}}}"#;
        assert!(apply_engine_rules_json(&mut p, broken).is_err());
        assert_eq!(p, fitted, "nothing applied on an error");
    }

    /// An engine-rules file with the neighbours' findings `f` (JSON).
    fn with_neighbours(f: &str) -> String {
        format!(r#"{{"dry_run": false, "neighbours": {{"findings": {f}}}}}"#)
    }

    #[test]
    fn compute_slowed_on_sms_of_its_own_becomes_the_engines_interference() {
        let mut p = Params::calibrated();
        let text = with_neighbours(
            r#"{"copy_beside_copy": 1.6, "copy_beside_burn": 1.0, "burn_beside_copy": 1.07,
                "burn_beside_burn": 1.035, "disjoint": true, "victim_sms": 16,
                "aggressor_sms": 112}"#,
        );
        let got = apply_engine_rules_json(&mut p, &text).unwrap();
        // The worse slowdown, 1.07x, beside 112 of 128 SMs: 0.07 / 0.875.
        assert_eq!(
            got,
            vec!["interference 0.080 (compute on SMs of its own, 1.07x beside the rest)"]
        );
        assert!(
            (p.gpu.interference - 0.08).abs() < 1e-12,
            "{}",
            p.gpu.interference
        );
        let mut q = Params::calibrated();
        q.gpu.interference = p.gpu.interference;
        assert_eq!(p, q, "nothing else moves: the copy's slowdown is row 7's");
        // Faster beside the rest (noise): no interference, not a negative one.
        let mut p = Params::calibrated();
        p.gpu.interference = 0.5;
        let faster = with_neighbours(
            r#"{"burn_beside_copy": 0.98, "burn_beside_burn": 0.99, "disjoint": true,
                "victim_sms": 16, "aggressor_sms": 112}"#,
        );
        apply_engine_rules_json(&mut p, &faster).unwrap();
        assert_eq!(p.gpu.interference, 0.0);
    }

    #[test]
    fn neighbours_that_shared_sms_or_are_implausible_change_nothing() {
        let fitted = Params::calibrated();
        let mut p = fitted.clone();
        for disjoint in ["false", "null"] {
            let text = with_neighbours(&format!(
                r#"{{"burn_beside_copy": 1.5, "disjoint": {disjoint}, "victim_sms": 16,
                    "aggressor_sms": 112}}"#
            ));
            assert!(apply_engine_rules_json(&mut p, &text).unwrap().is_empty());
        }
        for f in [
            r#"{"burn_beside_copy": 9.0, "disjoint": true, "victim_sms": 16, "aggressor_sms": 112}"#,
            r#"{"burn_beside_copy": "x", "disjoint": true, "victim_sms": 16, "aggressor_sms": 112}"#,
            r#"{"burn_beside_copy": 1.1, "disjoint": true, "victim_sms": 0, "aggressor_sms": 112}"#,
            r#"{"burn_beside_copy": 1.1, "disjoint": true, "aggressor_sms": 112}"#,
        ] {
            assert!(
                apply_engine_rules_json(&mut p, &with_neighbours(f)).is_err(),
                "{f}"
            );
        }
        assert_eq!(p, fitted, "nothing applied");
    }

    /// The lent GPU is an H200: what it measured of the die (the slice, the
    /// launch floor) stands for the H100 too, its DRAM's saturation only for
    /// the H200 set; a fake driver's slice, or another die's, for neither.
    #[test]
    fn each_set_takes_its_own_gpus_dram_figure_and_its_dies_others() {
        let dir = std::env::temp_dir().join(format!("gpusim-sets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fitted = sets(None).unwrap();
        let write = |file: &str, text: &str| std::fs::write(dir.join(file), text).unwrap();
        write(
            FILE,
            r#"{"skipped": null, "gpu": "NVIDIA H200", "timeslice": {"median_ns": 2e6}}"#,
        );
        write(
            ENGINE_FILE,
            r#"{"bandwidth": {"device": "NVIDIA H200",
                "findings": {"share_of_sms_for_90pct": 0.4}},
                "launch_floor": {"findings": {"empty_back_to_back_ns": 1800}}}"#,
        );
        let s = sets(Some(&dir)).unwrap();
        for p in [&s.h100, &s.h200, &s.a100] {
            assert_eq!((p.timeslice_ns, p.kernel_floor_ns), (2_000_000, 1_800));
        }
        assert_eq!(s.h200.gpu.dram_saturating_share, 0.4);
        assert_eq!(
            s.h100.gpu.dram_saturating_share,
            fitted.h100.gpu.dram_saturating_share
        );
        assert!(s
            .applied_h100
            .iter()
            .any(|p| p.starts_with("DRAM saturation not applied")));
        // An H100's DRAM share is not the H200's either.
        write(
            ENGINE_FILE,
            r#"{"gpu": "NVIDIA H100 80GB HBM3",
                "bandwidth": {"findings": {"share_of_sms_for_90pct": 0.3}}}"#,
        );
        let s = sets(Some(&dir)).unwrap();
        assert_eq!(s.h100.gpu.dram_saturating_share, 0.3);
        assert_eq!(
            s.h200.gpu.dram_saturating_share,
            fitted.h200.gpu.dram_saturating_share
        );
        // No Hopper's slice: the fitted one stays everywhere.
        std::fs::remove_file(dir.join(ENGINE_FILE)).unwrap();
        for gpu in ["fake (TANDEM_GPU_FAKE=1)", "NVIDIA A100-SXM4-40GB"] {
            write(
                FILE,
                &format!(
                    r#"{{"skipped": null, "gpu": "{gpu}", "timeslice": {{"median_ns": 2e6}}}}"#
                ),
            );
            let s = sets(Some(&dir)).unwrap();
            assert_eq!(s.h100.timeslice_ns, fitted.h100.timeslice_ns, "{gpu}");
            assert_eq!(s.h200.timeslice_ns, fitted.h200.timeslice_ns, "{gpu}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_file_is_no_change() {
        let dir = std::env::temp_dir().join(format!("gpusim-measured-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = Params::calibrated();
        assert_eq!(apply(&mut p, &dir, "h100").unwrap(), Vec::<String>::new());
        std::fs::write(
            dir.join(FILE),
            r#"{"skipped": null, "timeslice": {"median_ns": 3e6}}"#,
        )
        .unwrap();
        assert_eq!(
            apply(&mut p, &dir, "h100").unwrap(),
            vec!["timeslice 3.00 ms"]
        );
        assert_eq!(p.timeslice_ns, 3_000_000);
        std::fs::write(
            dir.join(ENGINE_FILE),
            r#"{"bandwidth": {"findings": {"share_of_sms_for_90pct": 0.5}}}"#,
        )
        .unwrap();
        assert_eq!(
            apply(&mut p, &dir, "h100").unwrap(),
            vec!["timeslice 3.00 ms", "DRAM saturated by 50% of the SMs"]
        );
        assert_eq!(p.gpu.dram_saturating_share, 0.5);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
