//! The three ways a program reaches the driver (linked symbols, dlopen+dlsym,
//! cuGetProcAddress) give the same results, and with the shim preloaded every
//! hooked entry point is the shim's hook, counted once per call.

use tandem_e2e::{
    assert_counts_consistent, run_both, run_host, workload_kernels, Env, FAKE_OBJ, SHIM_OBJ,
};

#[test]
fn all_resolution_paths_compute_the_same_result_with_and_without_shim() {
    let runs: &[(&str, &[&str])] = &[
        ("linked", &[]),
        ("linked", &["ptds"]),
        ("dlopen", &[]),
        ("gpa", &["v2", "12000", "0"]),
        ("gpa", &["v2", "12000", "1"]),
        ("gpa", &["v2", "12000", "2"]),
        ("gpa", &["v1", "12000", "0"]),
        ("gpa", &["v2", "13000", "2"]),
    ];
    let mut results = Vec::new();
    for (name, args) in runs {
        let (plain, shim) = run_both(name, args, workload_kernels());
        results.push((format!("{name} {args:?}"), plain.result(), shim.result()));
    }
    let first = results[0].1.clone();
    for (what, plain, shim) in &results {
        assert_eq!(plain, &first, "{what}: RESULT differs from linked");
        assert_eq!(shim, &first, "{what}: RESULT with shim differs from linked");
    }
}

#[test]
fn dlsym_on_the_driver_handle_gives_hooks_for_hooked_symbols_only() {
    let out = run_host("dlopen", &[], &Env::with_shim());
    out.assert_ok();
    let resolved = out.records("RESOLVE");
    assert!(!resolved.is_empty(), "no RESOLVE lines: {out}");
    for r in resolved {
        let sym = r.get("as");
        let want = if out.is_hooked(sym) {
            SHIM_OBJ
        } else {
            FAKE_OBJ
        };
        assert_eq!(r.get("obj"), want, "dlsym(handle, {sym}): {r:?}\n{out}");
        if out.is_hooked(sym) {
            assert_eq!(r.get("sym"), sym, "hook exported under another name: {r:?}");
        }
    }
}

#[test]
fn linked_symbols_bind_to_the_shim_when_preloaded() {
    let out = run_host("linked", &[], &Env::with_shim());
    out.assert_ok();
    for r in out.records("RESOLVE") {
        let sym = r.get("as");
        let want = if out.is_hooked(sym) {
            SHIM_OBJ
        } else {
            FAKE_OBJ
        };
        assert_eq!(r.get("obj"), want, "linked {sym}: {r:?}\n{out}");
    }
}

/// The fake's own cuGetProcAddress picks the variant the real driver would.
#[test]
fn fake_cu_get_proc_address_picks_the_expected_variant() {
    for flags in ["0", "1", "2"] {
        let out = run_host("gpa", &["v2", "12000", flags], &Env::fake_only());
        out.assert_ok();
        let gpa = out.records("GPA");
        assert!(!gpa.is_empty(), "no GPA lines: {out}");
        for r in gpa {
            assert_eq!(r.get("rc"), "0", "{r:?}");
            assert_eq!(r.get("status"), "0", "{r:?}");
            assert_eq!(r.get("obj"), FAKE_OBJ, "{r:?}");
            assert_eq!(r.get("sym"), r.get("want"), "flags {flags}: {r:?}\n{out}");
        }
    }
}

/// Through the shim, cuGetProcAddress gives the shim's hook of exactly the
/// variant the driver would have picked; other names come back untouched.
#[test]
fn shim_cu_get_proc_address_returns_the_hook_of_the_right_variant() {
    for (entry, flags) in [("v2", "0"), ("v2", "2"), ("v1", "1"), ("v1", "2")] {
        let out = run_host("gpa", &[entry, "12000", flags], &Env::with_shim());
        out.assert_ok();
        assert_counts_consistent(&out, "main", workload_kernels());
        for r in out.records("GPA") {
            let want = r.get("want");
            assert_eq!(r.get("rc"), "0", "{r:?}\n{out}");
            if entry == "v2" {
                assert_eq!(r.get("status"), "0", "{r:?}");
            }
            if out.is_hooked(want) {
                assert_eq!(
                    r.get("obj"),
                    SHIM_OBJ,
                    "{entry} flags {flags}: {r:?}\n{out}"
                );
                assert_eq!(r.get("sym"), want, "{entry} flags {flags}: {r:?}\n{out}");
            } else {
                assert_eq!(
                    r.get("obj"),
                    FAKE_OBJ,
                    "{entry} flags {flags}: {r:?}\n{out}"
                );
                assert_eq!(r.get("sym"), want, "{entry} flags {flags}: {r:?}\n{out}");
            }
        }
    }
}

#[test]
fn dlsym_of_cu_get_proc_address_on_the_handle_is_the_hook() {
    for entry in ["v1", "v2"] {
        let out = run_host("gpa", &[entry, "12000", "0"], &Env::with_shim());
        out.assert_ok();
        let e = out.records("ENTRY");
        assert_eq!(e.len(), 1, "{out}");
        assert_eq!(e[0].get("obj"), SHIM_OBJ, "{out}");
    }
}

/// cuGetProcAddress("cuGetProcAddress", 12000) is cuGetProcAddress_v2, the
/// shim's when preloaded, and resolving through it gives the same pointers
/// (the host checks that and runs the workload through the second set).
#[test]
fn cu_get_proc_address_through_itself() {
    for (env, obj) in [(Env::fake_only(), FAKE_OBJ), (Env::with_shim(), SHIM_OBJ)] {
        for entry in ["v1", "v2"] {
            let out = run_host("gpa", &[entry, "12000", "0"], &env);
            out.assert_ok();
            let s = &out.records("GPA_SELF")[0];
            assert_eq!(s.get("rc"), "0", "{out}");
            if entry == "v2" {
                assert_eq!(s.get("status"), "0", "{out}");
            }
            assert_eq!(s.get("obj"), obj, "{out}");
            assert_eq!(s.get("sym"), "cuGetProcAddress_v2", "{out}");
            // One lookup through the entry point per slot + the unknown name +
            // the self lookup; one per slot through the _v2 it returned.
            let own = out.counts("OWN", "main");
            let slots = out.records("GPA").len() as u64;
            let v2 = own.get("cuGetProcAddress_v2").copied().unwrap_or(0);
            if entry == "v1" {
                assert_eq!(own.get("cuGetProcAddress"), Some(&(slots + 2)), "{out}");
                assert_eq!(v2, slots, "{out}");
            } else {
                assert_eq!(v2, 2 * slots + 2, "{out}");
            }
            assert_counts_consistent(&out, "main", workload_kernels());
        }
    }
}

/// cuMemAlloc_v2 starts at 3020: asked at 3000 there is nothing to return,
/// with or without the shim (the shim must not hand out its hook). The host
/// then skips the workload and only checks the lookups' counts.
#[test]
fn version_too_old_gets_no_hook() {
    for env in [Env::fake_only(), Env::with_shim()] {
        let out = run_host("gpa", &["v2", "3000", "0"], &env);
        out.assert_ok();
        assert!(
            out.stdout.contains("WORKLOAD skipped"),
            "expected the workload to be skipped: {out}"
        );
        let alloc = out.record("GPA", "cuMemAlloc");
        assert_eq!(alloc.get("rc"), "500", "{out}");
        assert_eq!(alloc.get("status"), "2", "{out}");
        assert_eq!(alloc.get("obj"), "null", "{out}");
        let launch = out.record("GPA", "cuLaunchKernel");
        assert_eq!(launch.get("rc"), "500", "{out}");
        let init = out.record("GPA", "cuInit");
        assert_eq!(init.get("rc"), "0", "{out}");
        let obj = if env.has_shim() { SHIM_OBJ } else { FAKE_OBJ };
        assert_eq!(init.get("obj"), obj, "{out}");
        assert_counts_consistent(&out, "main", 0);
        assert!(!out.counts("FAKE", "main").contains_key("cuMemAlloc_v2"));
    }
}

#[test]
fn unknown_name_is_not_found() {
    for env in [Env::fake_only(), Env::with_shim()] {
        for entry in ["v1", "v2"] {
            let out = run_host("gpa", &[entry, "12000", "0"], &env);
            out.assert_ok();
            let u = &out.records("GPA_UNKNOWN")[0];
            assert_eq!(u.get("rc"), "500", "{out}");
            assert_eq!(u.get("pfn"), "null", "{out}");
            if entry == "v2" {
                assert_eq!(u.get("status"), "1", "{out}");
            }
        }
    }
}

/// With FAKECUDA_GPA_TRAMPOLINES=1 the driver's cuGetProcAddress returns
/// private wrappers instead of its exported symbols: the shim must still hand
/// out (and count through) its hooks.
#[test]
fn gpa_trampolines_are_still_intercepted() {
    let plain = run_host(
        "gpa",
        &["v2", "12000", "2"],
        &Env::fake_only().var("FAKECUDA_GPA_TRAMPOLINES", "1"),
    );
    plain.assert_ok();
    assert_counts_consistent(&plain, "main", workload_kernels());
    // Sanity: the knob works (pointers are not the exported symbols).
    let r = plain.record("GPA", "cuLaunchKernel");
    assert_ne!(
        r.get("sym"),
        "cuLaunchKernel_ptsz",
        "trampolines off? {plain}"
    );
    for flags in ["0", "2"] {
        let out = run_host(
            "gpa",
            &["v2", "12000", flags],
            &Env::with_shim().var("FAKECUDA_GPA_TRAMPOLINES", "1"),
        );
        out.assert_ok();
        assert_counts_consistent(&out, "main", workload_kernels());
        assert_eq!(out.result(), plain.result());
        // Unrecognised pointers were confirmed by asking the driver again.
        assert!(
            out.counts("SHIMOWN", "main").get("cuGetProcAddress_v2") > Some(&0),
            "no confirming cuGetProcAddress_v2 calls by the shim: {out}"
        );
        for r in out.records("GPA") {
            if out.is_hooked(r.get("want")) {
                assert_eq!(r.get("obj"), SHIM_OBJ, "{r:?}\n{out}");
            }
        }
    }
}
