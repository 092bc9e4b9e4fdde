//! dlsym(RTLD_NEXT, ...) keeps resolving relative to its real caller when the
//! shim overrides dlsym.

use tandem_e2e::{assert_counts_consistent, run_host, workload_kernels, Env, FAKE_OBJ, SHIM_OBJ};

#[test]
fn rtld_next_from_a_library_finds_the_next_library() {
    for env in [Env::fake_only(), Env::with_shim()] {
        let out = run_host("rtld_next", &[], &env);
        out.assert_ok();
        let p = &out.records("PROBE")[0];
        assert_eq!(p.get("default"), "1", "{out}");
        assert_eq!(p.get("main_next"), "2", "{out}");
        assert_eq!(
            p.get("a_next"),
            "3",
            "RTLD_NEXT from libnexta must find libnextb's probe (2 = resolved as if \
             called from the shim): {out}"
        );
    }
}

#[test]
fn rtld_next_cu_launch_kernel_from_main_is_the_hook() {
    let out = run_host("rtld_next", &[], &Env::with_shim());
    out.assert_ok();
    let n = &out.records("NEXT")[0];
    assert_eq!(n.get("obj"), SHIM_OBJ, "{out}");
    assert_counts_consistent(&out, "main", workload_kernels());
    let hook = out.counts("HOOK", "main");
    assert!(
        hook.get("cuLaunchKernel").copied().unwrap_or(0) > 0,
        "{out}"
    );

    let plain = run_host("rtld_next", &[], &Env::fake_only());
    plain.assert_ok();
    assert_eq!(plain.records("NEXT")[0].get("obj"), FAKE_OBJ, "{plain}");
    assert_counts_consistent(&plain, "main", workload_kernels());
    assert_eq!(plain.result(), out.result());
}
