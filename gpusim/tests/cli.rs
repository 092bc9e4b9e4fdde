//! `tandem-sim`'s command line refuses what it does not know, before any
//! work: a misspelt option, a missing or malformed value, a pair or mode no
//! device set has. Each of these once ran the whole matrix (minutes) with
//! the argument silently ignored.

use std::process::{Command, Output};

fn sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tandem-sim"))
        .args(args)
        .output()
        .expect("run tandem-sim")
}

/// Exit 2, the error line naming the problem, the usage after it, and no
/// matrix on stdout.
fn refused(args: &[&str], names: &str) {
    let out = sim(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    let first = err.lines().next().unwrap_or_default();
    assert!(first.starts_with("tandem-sim: "), "{args:?}: {err}");
    assert!(first.contains(names), "{args:?}: {first}");
    assert!(err.contains("usage: tandem-sim matrix"), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?} ran something");
}

#[test]
fn help_prints_the_usage_and_runs_nothing() {
    for args in [&["matrix", "--help"][..], &["traces", "-h"]] {
        let out = sim(args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("usage: tandem-sim matrix"), "{text}");
        assert!(text.contains("tandem-sim predict"), "{text}");
    }
}

#[test]
fn unknown_options_and_arguments_are_refused() {
    refused(
        &["matrix", "--seed", "3"],
        "unknown option --seed for matrix",
    );
    refused(
        &["traces", "--reduced"],
        "unknown option --reduced for traces",
    );
    refused(&["matrix", "stray"], "unexpected argument \"stray\"");
    refused(&["frobnicate"], "unknown command \"frobnicate\"");
}

#[test]
fn values_must_be_there_and_well_formed() {
    refused(&["matrix", "--out"], "--out needs a value");
    refused(&["matrix", "--seeds", "--reduced"], "--seeds needs a value");
    refused(
        &["matrix", "--seeds", "three"],
        "--seeds three: invalid digit",
    );
    refused(&["matrix", "--window-s", "1s"], "--window-s 1s:");
    refused(&["check-trace"], "check-trace needs its FILE first");
    refused(
        &["synthetic-trace", "--device", "a100", "bert_ort"],
        "synthetic-trace needs its JOB first",
    );
}

#[test]
fn pairs_and_modes_must_be_ones_the_model_runs() {
    refused(
        &["matrix", "--pairs", "bert_ort"],
        "--pairs bert_ort: INFERENCE:TRAINING",
    );
    refused(
        &["matrix", "--pairs", "bert_ort:nope"],
        "--pairs bert_ort:nope: not a pair of",
    );
    // A pair of the other device's set is not one of the asked device's.
    refused(
        &[
            "matrix",
            "--device",
            "h100",
            "--pairs",
            "bert_ort:resnet50_b128",
        ],
        "not a pair of h100: inference resnet50_b4",
    );
    refused(
        &["matrix", "--modes", "alone,fast"],
        "--modes: unknown mode \"fast\": one of alone, plain",
    );
}

/// A reader that has gone before the first line (`tandem-sim traces | head
/// -0`) ends the output quietly with exit 0; it once panicked ("Broken
/// pipe") on its first write.
#[test]
fn a_reader_that_has_gone_ends_the_output_quietly() {
    for args in [
        &["traces"][..],
        &["--help"],
        &["synthetic-trace", "bert_b8"],
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_tandem-sim"))
            .args(args)
            .stdout(writer)
            .output()
            .expect("run tandem-sim");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}
