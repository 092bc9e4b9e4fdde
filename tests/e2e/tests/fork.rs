//! fork(): the child's shim counts restart at zero, each process's counts
//! match what it itself did, the child's exit()-time counts line is its own,
//! and neither process disturbs the other's data.

use tandem_e2e::{assert_counts_consistent, run_host, workload_kernels, Env, HostOutput};

#[track_caller]
fn check_forked(out: &HostOutput) {
    out.assert_ok();
    let results = out.results();
    let roles: Vec<&str> = results.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(roles, ["parent-1", "child", "parent-2"], "{out}");
    assert!(
        results.iter().all(|(h, _)| *h == results[0].0),
        "results differ across fork: {out}"
    );
    assert!(out.stdout.contains("CHILD exited=1 code=0"), "{out}");
    assert_counts_consistent(out, "child", workload_kernels());
    assert_counts_consistent(out, "parent-2", 2 * workload_kernels());
}

#[test]
fn fork_without_shim() {
    for path in ["linked", "dlopen", "gpa"] {
        check_forked(&run_host("forked", &[path], &Env::fake_only()));
    }
}

#[test]
fn fork_child_counts_restart_with_shim() {
    for path in ["linked", "dlopen", "gpa"] {
        let out = run_host("forked", &[path], &Env::with_shim());
        check_forked(&out);
        let pre = out.records("PRE_FORK_HOOKS");
        assert_eq!(pre.len(), 1, "{out}");
        assert_ne!(pre[0].get("cuLaunchKernel"), "0", "{out}");
        // The child's hook counts equal its own calls (restart at zero):
        let child_hook = out.counts("HOOK", "child");
        let child_fake = out.counts("FAKE", "child");
        assert_eq!(
            child_hook.get("cuLaunchKernel"),
            child_fake.get("cuLaunchKernel"),
            "{out}"
        );
    }
}

#[test]
fn exit_counts_lines_are_per_process() {
    let out = run_host("forked", &["linked"], &Env::with_shim().log("debug"));
    check_forked(&out);
    let pid = |role: &str| -> u32 {
        out.records("PID")
            .into_iter()
            .find(|r| r.head.first().is_some_and(|h| h == role))
            .and_then(|r| r.head.get(1).and_then(|p| p.parse().ok()))
            .unwrap_or_else(|| panic!("no PID {role}: {out}"))
    };
    let (parent, child) = (pid("parent"), pid("child"));
    let lines = out.tandem_counts();
    assert_eq!(lines.len(), 2, "want one counts line per process: {out}");
    let get = |p: u32| {
        lines
            .iter()
            .find(|(q, _)| *q == p)
            .map(|(_, m)| m.clone())
            .unwrap_or_else(|| panic!("no counts line for pid {p}: {out}"))
    };
    // HOOK child is counted from zero (restart) and HOOK parent-2 from the start.
    assert_eq!(get(child), out.counts("HOOK", "child"), "child: {out}");
    assert_eq!(get(parent), out.counts("HOOK", "parent-2"), "parent: {out}");
}
