//! Every committed seed (`fuzz/seeds/TARGET/`) and every crash input found
//! and fixed (`fuzz/regressions/TARGET/`) through its target's body, on the
//! stable compiler: a fixed crash that comes back fails here, in `cargo
//! test`, not only under `scripts/fuzz`.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.expect("read_dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

#[test]
fn every_target_has_seeds_and_they_replay() {
    for (name, run) in tandem_fuzz_harness::TARGETS {
        let seeds = inputs(&fuzz_dir().join("seeds").join(name));
        assert!(!seeds.is_empty(), "no seeds for {name}");
        for s in seeds {
            run(&std::fs::read(&s).expect("read seed"));
        }
    }
}

#[test]
fn fixed_crashes_stay_fixed() {
    let mut n = 0;
    for (name, run) in tandem_fuzz_harness::TARGETS {
        for c in inputs(&fuzz_dir().join("regressions").join(name)) {
            eprintln!("replaying {}", c.display());
            run(&std::fs::read(&c).expect("read crash input"));
            n += 1;
        }
    }
    eprintln!("{n} crash inputs replayed");
}

/// Each committed `wire` seed, whole datagram or framed body, decodes as the
/// message its name says (`board-body`: Board): every decoder's success path
/// is in the corpus from the first input, and a body mode that cannot frame
/// a type (as when it took the code `% 10` and so never reached Board, 10)
/// fails here.
#[test]
fn every_wire_seed_decodes_as_the_message_it_is_named_for() {
    let seeds = inputs(&fuzz_dir().join("seeds").join("wire"));
    let mut types = std::collections::BTreeSet::new();
    for s in &seeds {
        let stem = s.file_stem().and_then(|n| n.to_str()).expect("seed name");
        let (name, _mode) = stem.rsplit_once('-').expect("NAME-MODE");
        let want: String = name
            .split('_')
            .map(|w| w[..1].to_uppercase() + &w[1..])
            .collect();
        let data = std::fs::read(s).expect("read seed");
        assert_eq!(
            tandem_fuzz_harness::wire::decoded_type(&data),
            Some(want.as_str()),
            "{}",
            s.display()
        );
        types.insert(want);
    }
    assert_eq!(types.len(), 10, "a seed of each message type: {types:?}");
}
