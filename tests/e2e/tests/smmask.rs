//! The fake driver's side of issue 23's SM reservation: its launch-callback table and a shared
//! device that places kernels on its 132 SMs (`FAKECUDA_SHARED_DEVICE` with
//! `FAKECUDA_SHARED_SMS=1`), driven by the `smmask` host (tests/hosts/smmask.c), which writes a
//! TPC mask into each launch's descriptor from the callback as tandem's shim is to. Two
//! processes in turn on one device file: a long "training" kernel over every SM it may use,
//! then a narrow "inference" kernel.

use std::path::PathBuf;

use tandem_e2e::{run_host, Env, HostOutput};

/// A fresh device file for one test.
fn device(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tandem-smmask-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

fn env(dev: &std::path::Path) -> Env {
    Env::fake_only()
        .var("FAKECUDA_SHARED_DEVICE", dev.to_str().expect("UTF-8 path"))
        .var("FAKECUDA_SHARED_SMS", "1")
}

/// The host's LAUNCH line as numbers.
fn launch(out: &HostOutput) -> std::collections::BTreeMap<String, i64> {
    out.assert_ok();
    let line = out
        .lines("LAUNCH")
        .pop()
        .unwrap_or_else(|| panic!("no LAUNCH: {out}"));
    line.split_whitespace()
        .filter_map(|t| {
            let (k, v) = t.split_once('=')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

/// Training masked off TPCs 0-7 (SMs 0-15) runs only on SMs 16-131; an inference kernel
/// launched while it runs starts at once on the SMs it left. Unmasked, the same inference
/// kernel waits for training's end.
#[test]
fn a_reservation_lets_inference_start_at_once_and_training_never_runs_on_it() {
    let dev = device("masked");
    let e = env(&dev);
    let train = launch(&run_host(
        "smmask",
        &["--blocks", "1000", "--us", "10000000", "--off-tpcs", "8"],
        &e,
    ));
    assert_eq!(train["masked"], 1, "{train:?}");
    assert_eq!(train["version"], 0x40);
    assert_eq!(train["sms"], 132 - 16, "{train:?}");
    assert_eq!(train["first_sm"], 16, "never on the reserved SMs");
    let infer = launch(&run_host("smmask", &["--blocks", "8", "--us", "1000"], &e));
    assert_eq!(infer["sms"], 8);
    assert!(infer["first_sm"] < 16, "{infer:?}");
    assert!(
        infer["start_ns"] < train["end_ns"],
        "inference ran beside training: {infer:?} {train:?}"
    );
    assert!(
        infer["start_ns"] - infer["t_ns"] < 1_000_000_000,
        "started at its launch, not after training: {infer:?}"
    );
    let _ = std::fs::remove_file(&dev);

    let dev = device("unmasked");
    let e = env(&dev);
    let train = launch(&run_host(
        "smmask",
        &["--blocks", "1000", "--us", "10000000"],
        &e,
    ));
    assert_eq!((train["masked"], train["sms"]), (0, 132));
    let infer = launch(&run_host("smmask", &["--blocks", "8", "--us", "1000"], &e));
    assert_eq!(
        infer["start_ns"], train["end_ns"],
        "without the reservation inference waits for training's blocks"
    );
    let _ = std::fs::remove_file(&dev);
}

/// What a shim's probe must treat as absent: no callback table, and a descriptor version
/// whose layout it does not know (the host leaves it alone, the kernel runs unmasked).
#[test]
fn a_missing_table_and_an_unknown_descriptor_leave_launches_unmasked() {
    let dev = device("failopen");
    let out = run_host(
        "smmask",
        &["--off-tpcs", "8"],
        &env(&dev).var("FAKECUDA_LAUNCH_CALLBACKS", "0"),
    );
    out.assert_code(2);
    assert!(
        out.stdout
            .contains("ERROR cuGetExportTable(&table, CALLBACK_TABLE) rc=801"),
        "{out}"
    );
    let old = launch(&run_host(
        "smmask",
        &["--off-tpcs", "8"],
        &env(&dev).var("FAKECUDA_QMD_VERSION", "0x06"),
    ));
    assert_eq!((old["version"], old["masked"], old["sms"]), (6, 0, 132));
    let _ = std::fs::remove_file(&dev);
}
