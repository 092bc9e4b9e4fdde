//! The calibration check: that it runs on the model's real inputs, and that
//! it catches what it is for.

use super::*;
use crate::matrix::{run_matrix, MatrixCfg};

fn traces() -> &'static std::path::Path {
    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/traces"))
}

fn reduced(device: Device) -> Vec<Row> {
    let sets = crate::measured::sets(Some(traces())).unwrap();
    let params = match device {
        Device::H100 => sets.h100,
        Device::A100 => sets.a100,
        Device::H200 => sets.h200,
    };
    run_matrix(&reduced_matrix(device, params), Some(traces())).unwrap()
}

/// What `scripts/test` runs: every measured point in the baseline modes
/// (one seed), with the model's inputs as `scripts/sim` uses them. A change
/// to the engine, the jobs, the parameters or those inputs that moves a
/// point outside its tolerance, unexcused, fails here.
#[test]
fn every_measured_point_is_reproduced_or_excused() {
    // The H100 set. The A100 set's points are reported by `scripts/sim`
    // (matrix.md, holdout.md) and join this test once the model
    // reproduces them (issue 22 is open until then).
    let rows = reduced(Device::H100);
    let (fits, bad) = check(&rows);
    let expected = targets()
        .iter()
        .filter(|t| {
            rows.iter()
                .any(|r| r.set == t.device.name() && r.inference == t.inference)
        })
        .count();
    assert_eq!(fits.len(), expected);
    assert!(bad.is_empty(), "calibration broken:\n{}", bad.join("\n"));
}

#[test]
fn breaking_one_parameter_breaks_the_calibration() {
    // The H100 points only (fast): the block dispatcher's arrival order
    // turned off takes MPS at batch 32 below its measured 2.0x.
    let mut params = Device::H100.params();
    params.gpu.fifo_dispatch = false;
    let rows = run_matrix(
        &MatrixCfg {
            pairs: vec![("resnet50_b32".into(), "resnet50_train".into())],
            modes: vec!["mps".into()],
            ..reduced_matrix(Device::H100, params)
        },
        Some(traces()),
    )
    .unwrap();
    let (_, bad) = check(&rows);
    assert!(
        bad.iter()
            .any(|b| b.contains("resnet50_b32 resnet50_train mps: p99 ratio")),
        "{bad:?}"
    );
}

/// The A100's fitted interference (`synthetic_a100::A100_INTERFERENCE`):
/// two fit-set points it brings inside their tolerance, which fall outside
/// without it (the trainers keep 0.12 too much beside Llama-2).
#[test]
fn a100_interference_brings_the_llama_mps_priority_points_in() {
    let run = |interference: f64| {
        let mut params = Device::A100.params();
        params.gpu.interference = interference;
        let rows = run_matrix(
            &MatrixCfg {
                pairs: vec![
                    ("llama2_7b_ort".into(), "pegasus_x_base_b4".into()),
                    ("llama2_7b_ort".into(), "gpt2_large_b1".into()),
                ],
                modes: vec!["mps_lowprio".into()],
                ..reduced_matrix(Device::A100, params)
            },
            Some(traces()),
        )
        .unwrap();
        check(&rows)
    };
    let (fits, bad) = run(Device::A100.params().gpu.interference);
    assert_eq!(fits.len(), 2, "{fits:?}");
    assert!(bad.is_empty(), "fitted: {bad:?}");
    let (_, bad) = run(0.0);
    for train in ["pegasus_x_base_b4", "gpt2_large_b1"] {
        assert!(
            bad.iter()
                .any(|b| b.contains(train) && b.contains("training fraction")),
            "without interference, {train}: {bad:?}"
        );
    }
}

/// The A100 points carry Tally's mean-latency ratio beside the p99 (its
/// CSV's `avg` over the alone run's), the H100's none; the model's rows
/// carry their own, paired by seed like the p99 (1 exactly alone), and the
/// calibration table shows both.
#[test]
fn mean_ratios_are_carried_beside_the_p99_and_shown() {
    let t = targets();
    let ts = t
        .iter()
        .find(|t| t.inference == "bert_ort" && t.training == "resnet50_b128" && t.mode == "plain")
        .unwrap();
    // Tally's CSV: 10.983 ms avg time-sliced over 4.05 ms alone.
    assert_eq!(ts.mean_ratio, Some(2.71));
    assert!(t
        .iter()
        .all(|t| t.mean_ratio.is_some() == (t.device == Device::A100)));
    let rows = run_matrix(
        &MatrixCfg {
            pairs: vec![("resnet50_b4".into(), "resnet50_train".into())],
            modes: vec!["alone".into(), "plain".into()],
            ..reduced_matrix(Device::H100, Device::H100.params())
        },
        Some(traces()),
    )
    .unwrap();
    assert_eq!(rows[0].mean_ratio, Some(1.0));
    let plain = rows[1].mean_ratio.unwrap();
    assert!(plain > 1.5, "time-slicing's mean ratio {plain}");
    let (fits, bad) = check(&rows);
    let table = crate::report::markdown(&rows, &fits, &bad, "test", 0.0, &[]);
    assert!(table.contains("| model mean ratio | measured |"), "{table}");
    assert!(
        table.contains(&format!("| {plain:.2} | - | fit |")),
        "{table}"
    );
}

fn row(set: &str, inf: &str, train: &str, mode: &str, p99: f64, kept: f64) -> Row {
    Row {
        set: set.into(),
        inference: inf.into(),
        training: train.into(),
        mode: mode.into(),
        p99_ratio: Some(p99),
        train_fraction: Some(kept),
        reps: 1,
        source: "synthetic".into(),
        model_version: "test".into(),
        ..Row::default()
    }
}

#[test]
fn a_point_outside_its_tolerance_fails_unless_excused_and_excuses_are_few() {
    let b32 = |p99| row("h100", "resnet50_b32", "resnet50_train", "mps", p99, 0.94);
    // 2.0 measured: 1.6-2.5 passes, 1.5 does not.
    assert!(check_with(&[b32(2.4)], "").1.is_empty());
    let (_, bad) = check_with(&[b32(1.5)], "");
    assert_eq!(bad.len(), 1, "{bad:?}");
    // Training within 0.07.
    let mut r = b32(2.0);
    r.train_fraction = Some(0.86);
    assert_eq!(check_with(&[r], "").1.len(), 1);
    // Named in the exceptions, with a cause: excused, and the cause shown.
    let ex = "# comment\nh100 resnet50_b32 resnet50_train mps: a cause\n";
    let (fits, bad) = check_with(&[b32(1.5)], ex);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(fits[0].exception.as_deref(), Some("a cause"));
    // A range point: 0.7-1.6 measured, 0.56-2.0 passes.
    let lo = row(
        "h100",
        "resnet50_b4",
        "resnet50_train",
        "mps_lowprio",
        1.9,
        0.95,
    );
    assert!(check_with(&[lo], "").1.is_empty());
    // No cause, an unknown point, or more than four: refused.
    assert!(exceptions("h100 resnet50_b32 resnet50_train mps:").is_err());
    assert!(exceptions("h100 nope resnet50_train mps: x").is_err());
    let five: String = targets()[..5]
        .iter()
        .map(|t| format!("{}: c\n", t.key()))
        .collect();
    let (_, bad) = check_with(&[b32(2.0)], &five);
    assert!(bad.iter().any(|b| b.contains("at most 4")), "{bad:?}");
}

#[test]
fn the_committed_exceptions_file_parses_within_its_limit() {
    let e = exceptions(EXCEPTIONS).unwrap();
    assert!(e.len() <= MAX_EXCEPTIONS, "{e:?}");
}

#[test]
fn a100_lowprio_must_be_slow_on_most_pairs_and_the_order_of_merit_holds() {
    let lows: Vec<Row> = targets()
        .iter()
        .filter(|t| t.device == Device::A100 && t.mode == "mps_lowprio")
        .map(|t| {
            row(
                "a100",
                t.inference,
                t.training,
                t.mode,
                1.1,
                t.train_fraction.mid(),
            )
        })
        .collect();
    let (_, bad) = check_with(&lows, "");
    assert!(
        bad.iter().any(|b| b.contains("on 0 of 12 pairs")),
        "{bad:?}"
    );
    let pair = [
        row("h100", "x", "y", "mps", 1.5, 0.9),
        row("h100", "x", "y", "mps_lowprio", 3.0, 0.9),
        row("h100", "x", "y", "plain", 2.0, 0.99),
    ];
    let bad = order_of_merit(&pair);
    assert!(
        bad.iter().any(|b| b.contains("mps_lowprio p99 ratio")),
        "{bad:?}"
    );
    assert!(bad.iter().any(|b| b.contains("less than plain")), "{bad:?}");
}

#[test]
fn the_targets_are_the_h100_points_and_tallys_three_modes_of_twelve_pairs() {
    let t = targets();
    assert_eq!(t.len(), 6 + 36);
    for mode in ["mps", "mps_lowprio", "plain"] {
        let n = t
            .iter()
            .filter(|x| x.device == Device::A100 && x.mode == mode)
            .count();
        assert_eq!(n, 12, "{mode}");
    }
    // DESIGN.md's figures, to its two decimals.
    let get = |i: &str, tr: &str, m: &str| {
        t.iter()
            .find(|x| x.inference == i && x.training == tr && x.mode == m)
            .map(|x| (x.p99_ratio, x.train_fraction))
            .unwrap()
    };
    assert_eq!(
        get("bert_ort", "resnet50_b128", "mps_lowprio"),
        (Measured::Point(2.18), Measured::Point(0.77))
    );
    assert_eq!(
        get("llama2_7b_ort", "bert_b32", "plain"),
        (Measured::Point(2.14), Measured::Point(0.47))
    );
}

#[test]
fn the_matrix_table_carries_tallys_and_tgss_measured_rows_beside_the_models() {
    let rows = [
        row("a100", "bert_ort", "resnet50_b128", "mps", 2.0, 0.8),
        row("a100", "bert_ort", "resnet50_b128", "mps_lowprio", 1.5, 0.8),
        row("a100", "bert_ort_graph", "resnet50_b128", "mps", 2.0, 0.8),
        row("h100", "resnet50_b4", "resnet50_train", "mps", 1.4, 0.97),
    ];
    let md = crate::report::markdown(&rows, &[], &[], "test", 0.0, &[]);
    let p = crate::tally::pair("bert_ort", "resnet50_b128").unwrap();
    for (m, name) in [
        (crate::tally::mode::TALLY, "tally (measured)"),
        (crate::tally::mode::TGS, "tgs (measured)"),
    ] {
        let lines: Vec<&str> = md.lines().filter(|l| l.contains(name)).collect();
        // Once, after the pair's last model row; none for pairs the
        // artifact did not measure (the graph job, the H100 set).
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        let want = format!(
            "| {:.2} | {:.2} | - |",
            p.p99_ratio(m),
            p.modes[m].train_kept
        );
        assert!(lines[0].contains(&want), "{} lacks {want}", lines[0]);
        let at = md.find(lines[0]).unwrap();
        assert!(md.find("| mps_lowprio |").unwrap() < at);
        assert!(at < md.find("bert_ort_graph").unwrap());
    }
}
