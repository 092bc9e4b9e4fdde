//! cuGetProcAddress with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (2)
//! reaches the `_ptsz`/`_ptds` variants, DEFAULT (0) and LEGACY_STREAM (1)
//! the legacy ones — in the fake driver's own counts, and with the shim in
//! between in the shim's counts too.

use tandem_e2e::{
    assert_counts_consistent, run_both, run_host, workload_kernels, Env, HostOutput,
    PER_THREAD_PAIRS, SHIM_OBJ,
};

#[track_caller]
fn assert_reached(out: &HostOutput, per_thread: bool) {
    let fake = out.counts("FAKE", "main");
    for (legacy, pt) in PER_THREAD_PAIRS {
        let (want, not) = if per_thread {
            (pt, legacy)
        } else {
            (legacy, pt)
        };
        assert!(
            fake.get(*want).copied().unwrap_or(0) > 0,
            "{want} never reached in the fake driver: {out}"
        );
        assert_eq!(fake.get(*not), None, "{not} reached: {out}");
    }
    if out.has_counts("HOOK", "main") {
        let hook = out.counts("HOOK", "main");
        for (legacy, pt) in PER_THREAD_PAIRS {
            let (want, not) = if per_thread {
                (pt, legacy)
            } else {
                (legacy, pt)
            };
            // cuEventRecord is not hooked.
            if tandem_e2e::is_hooked(want) {
                assert_eq!(hook.get(*want), fake.get(*want), "{want}: {out}");
            }
            assert_eq!(hook.get(*not), None, "{not} counted by the shim: {out}");
        }
    }
}

#[test]
fn flags_2_reaches_per_thread_variants() {
    for entry in ["v1", "v2"] {
        let (plain, shim) = run_both("gpa", &[entry, "12000", "2"], workload_kernels());
        assert_reached(&plain, true);
        assert_reached(&shim, true);
    }
}

#[test]
fn flags_0_and_1_reach_legacy_variants() {
    for flags in ["0", "1"] {
        let (plain, shim) = run_both("gpa", &["v2", "12000", flags], workload_kernels());
        assert_reached(&plain, false);
        assert_reached(&shim, false);
    }
}

#[test]
fn linked_per_thread_symbols_are_counted_as_such() {
    let (plain, shim) = run_both("linked", &["ptds"], workload_kernels());
    assert_reached(&plain, true);
    assert_reached(&shim, true);
    let (plain, shim) = run_both("linked", &[], workload_kernels());
    assert_reached(&plain, false);
    assert_reached(&shim, false);
}

/// Per-thread variants appear at 7000: asked at 6050 with flags 2, the legacy
/// cuLaunchKernel (4000) is the answer, and the shim must hook that one.
#[test]
fn per_thread_flag_below_7000_gives_legacy() {
    for env in [Env::fake_only(), Env::with_shim()] {
        let out = run_host("gpa", &["v2", "6050", "2"], &env);
        out.assert_ok();
        assert!(out.stdout.contains("WORKLOAD skipped"), "{out}");
        let r = out.record("GPA", "cuLaunchKernel");
        assert_eq!(r.get("rc"), "0", "{out}");
        assert_eq!(r.get("sym"), "cuLaunchKernel", "{out}");
        if env.has_shim() {
            assert_eq!(r.get("obj"), SHIM_OBJ, "{out}");
        }
        let m = out.record("GPA", "cuMemcpyHtoD");
        assert_eq!(m.get("sym"), "cuMemcpyHtoD_v2", "{out}");
        assert_counts_consistent(&out, "main", 0);
    }
}
