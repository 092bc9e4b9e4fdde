//! Failure modes: no real driver behind the shim, calls before cuInit.

use tandem_e2e::{exit, run_host, Env};

const MISSING: &str = "/nonexistent/tandem-e2e/libcuda.so.1";

#[test]
fn missing_real_driver_gives_303_and_one_message() {
    // The linked host's libcuda.so.1 is the one the shim would have loaded.
    for (name, args) in [("linked", &[][..]), ("linked", &["ptds"][..])] {
        let out = run_host(
            name,
            args,
            &Env::with_shim().var("TANDEM_REAL_LIBCUDA", MISSING),
        );
        assert!(!out.timed_out, "{out}");
        assert_eq!(
            out.code(),
            Some(exit::CUDA),
            "host must see a CUDA error, not crash: {out}"
        );
        let errs = out.lines("CUDA_ERROR");
        assert_eq!(errs.len(), 1, "{out}");
        assert!(
            errs[0].split_whitespace().nth(2) == Some("303"),
            "want CUDA_ERROR_SHARED_OBJECT_INIT_FAILED (303): {out}"
        );
        let msgs = out.stderr_lines("tandem: cannot load the real CUDA driver");
        assert_eq!(msgs.len(), 1, "want exactly one message: {out}");
    }
}

/// Every host first checks that a call before cuInit gives
/// CUDA_ERROR_NOT_INITIALIZED (it exits 3 otherwise); here explicitly, with
/// and without the shim.
#[test]
fn calls_before_cu_init_are_not_initialized() {
    for env in [Env::fake_only(), Env::with_shim()] {
        let out = run_host("linked", &[], &env);
        out.assert_ok();
        assert!(out.lines("CUDA_ERROR").is_empty(), "{out}");
    }
}

#[test]
fn bad_usage_is_reported() {
    let out = run_host("gpa", &["v3"], &Env::fake_only());
    out.assert_code(exit::USAGE);
}

/// A program that dlopen()s "libcuda.so.1" itself while TANDEM_REAL_LIBCUDA
/// names a missing file has loaded a driver the shim does not know: the shim
/// may either fail its hooks (303) or hand that library's symbols back
/// untouched (the job runs, un-intercepted). Either way: no crash, no hang,
/// exactly one message, and if the job ran, its data are right.
#[test]
fn missing_real_driver_with_a_dlopened_libcuda_fails_open_or_303() {
    for (name, args) in [("dlopen", &[][..]), ("gpa", &["v2", "12000", "0"][..])] {
        let plain = run_host(name, args, &Env::fake_only());
        plain.assert_ok();
        let out = run_host(
            name,
            args,
            &Env::with_shim().var("TANDEM_REAL_LIBCUDA", MISSING),
        );
        assert!(!out.timed_out && out.code().is_some(), "{out}");
        let msgs = out.stderr_lines("tandem: cannot load the real CUDA driver");
        assert_eq!(msgs.len(), 1, "want exactly one message: {out}");
        if out.code() == Some(exit::CUDA) {
            let errs = out.lines("CUDA_ERROR");
            assert!(errs[0].split_whitespace().nth(2) == Some("303"), "{out}");
        } else {
            assert!(out.lines("DATA_ERROR").is_empty(), "{out}");
            assert_eq!(out.result(), plain.result(), "{out}");
        }
    }
}
