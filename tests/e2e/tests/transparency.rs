//! With no coordinator the shim is invisible: same outputs, nothing on
//! stderr unless asked, and the exit-time counts line (TANDEM_LOG=debug)
//! agrees with tandem_hook_count.

use tandem_e2e::{run_host, workload_kernels, Env};

const HOSTS: &[(&str, &[&str])] = &[
    ("linked", &[]),
    ("dlopen", &[]),
    ("gpa", &["v2", "12000", "2"]),
    ("gpa", &["v1", "11030", "0"]),
    ("threads", &["5"]),
    ("forked", &["gpa"]),
    ("rtld_next", &[]),
];

#[test]
fn outputs_unchanged_by_the_shim() {
    for (name, args) in HOSTS {
        let plain = run_host(name, args, &Env::fake_only());
        let shim = run_host(name, args, &Env::with_shim());
        plain.assert_ok();
        shim.assert_ok();
        assert_eq!(plain.results(), shim.results(), "{name}:\n{plain}\n{shim}");
    }
}

#[test]
fn stderr_is_empty_without_tandem_log() {
    for (name, args) in HOSTS {
        let out = run_host(name, args, &Env::with_shim());
        out.assert_ok();
        assert_eq!(out.stderr, "", "stderr not empty: {out}");
        let off = run_host(name, args, &Env::with_shim().log("off"));
        off.assert_ok();
        assert_eq!(
            off.stderr, "",
            "stderr not empty with TANDEM_LOG=off: {off}"
        );
    }
}

#[test]
fn debug_exit_counts_line_matches_hook_counts() {
    for (name, args) in [("linked", &[][..]), ("gpa", &["v2", "12000", "2"][..])] {
        let out = run_host(name, args, &Env::with_shim().log("debug"));
        out.assert_ok();
        let lines = out.tandem_counts();
        assert_eq!(lines.len(), 1, "want one counts line: {out}");
        let (_, counts) = &lines[0];
        // HOOK main = nonzero tandem_hook_count deltas from a zero start.
        assert_eq!(counts, &out.counts("HOOK", "main"), "{out}");
        assert!(
            counts.get("cuLaunchKernelEx").copied().unwrap_or(0) > 0
                || counts.get("cuLaunchKernelEx_ptsz").copied().unwrap_or(0) > 0,
            "{out}"
        );
    }
}

#[test]
fn no_coordinator_anywhere_is_fine() {
    let dir = tandem_e2e::artifacts()
        .profile_dir
        .join("e2e/empty-runtime-dir");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let envs = [
        Env::with_shim()
            .unset("TANDEM_SOCKET")
            .var("XDG_RUNTIME_DIR", dir.to_str().expect("utf-8 path")),
        Env::with_shim().var("TANDEM_SOCKET", "/nonexistent/tandem/tandemd.sock"),
        Env::with_shim().var("TANDEM_CLASS", "inference"),
        Env::with_shim().var("TANDEM_CLASS", "training"),
    ];
    let plain = run_host("linked", &[], &Env::fake_only());
    plain.assert_ok();
    for env in envs {
        let out = run_host("linked", &[], &env);
        out.assert_ok();
        tandem_e2e::assert_counts_consistent(&out, "main", workload_kernels());
        assert_eq!(out.result(), plain.result());
    }
}
