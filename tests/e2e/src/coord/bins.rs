//! The coordinator's binaries and its default config, built beside the shim.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::artifacts;

/// The coordinator's binaries, built by [`coordinator_bins`].
#[derive(Debug)]
pub struct CoordBins {
    /// `target/<profile>/tandemd`
    pub tandemd: PathBuf,
    /// `target/<profile>/tandemctl`
    pub tandemctl: PathBuf,
}

/// `cargo build ARGS` with the same cargo, target dir and profile as the
/// shim and fake driver of [`artifacts`]; returns those artifacts.
fn build_beside_the_shim(args: &[&str]) -> &'static crate::Artifacts {
    let a = artifacts();
    let profile = a
        .profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .expect("profile dir name");
    crate::cargo_build(&a.target_dir, profile, args);
    a
}

/// Builds (once per process) `tandemd` and `tandemctl` with the same cargo,
/// target dir and profile as the running test, next to `libtandem.so` (which
/// `tandemctl run` looks for beside itself). Also builds the shim and the
/// fake driver ([`artifacts`]).
pub fn coordinator_bins() -> &'static CoordBins {
    static BINS: OnceLock<CoordBins> = OnceLock::new();
    BINS.get_or_init(|| {
        let a = build_beside_the_shim(&["-p", "tandem-coordinator", "--bins"]);
        let bins = CoordBins {
            tandemd: a.profile_dir.join("tandemd"),
            tandemctl: a.profile_dir.join("tandemctl"),
        };
        for p in [&bins.tandemd, &bins.tandemctl] {
            assert!(
                p.is_file(),
                "`cargo build -p tandem-coordinator --bins` succeeded but {} does not exist \
                 (coordinator/src/bin/ must define tandemd and tandemctl)",
                p.display()
            );
        }
        bins
    })
}

/// Builds (once per process) the model's `tandem-sim`, which tandemd runs
/// for `/predict` (found through `$TANDEM_SIM`).
pub fn tandem_sim() -> &'static Path {
    static SIM: OnceLock<PathBuf> = OnceLock::new();
    SIM.get_or_init(|| {
        let a = build_beside_the_shim(&["-p", "tandem-gpusim", "--bin", "tandem-sim"]);
        let p = a.profile_dir.join("tandem-sim");
        assert!(p.is_file(), "{} was not built", p.display());
        p
    })
}

/// `tandemd --print-default-config` (cached): the documented defaults, used as
/// every test's config file so no test depends on /etc/tandem/tandemd.toml.
pub fn default_config() -> &'static str {
    static CFG: OnceLock<String> = OnceLock::new();
    CFG.get_or_init(|| {
        let bins = coordinator_bins();
        let out = Command::new(&bins.tandemd)
            .arg("--print-default-config")
            .env_remove("TANDEM_SOCKET")
            .env_remove("TANDEM_LOG")
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", bins.tandemd.display()));
        assert!(
            out.status.success(),
            "tandemd --print-default-config failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("default config is UTF-8")
    })
}

/// `config` (the default, or one derived from it) with completion marks
/// turned off: `[scheduler] mark_every_ns = 0` and `[trace] mark_every_ns
/// = 0` in place of the default's values; panics if those lines are not
/// there.
#[track_caller]
pub fn without_marks(config: &str) -> String {
    let off = config.replacen("\nmark_every_ns = 500000\n", "\nmark_every_ns = 0\n", 1);
    assert_ne!(
        off, config,
        "the config sets the default [scheduler] mark_every_ns"
    );
    let off2 = off.replacen("\nmark_every_ns = 1000000\n", "\nmark_every_ns = 0\n", 1);
    assert_ne!(
        off2, off,
        "the config sets the default [trace] mark_every_ns"
    );
    off2
}
