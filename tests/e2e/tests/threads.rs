//! Many threads resolving the driver concurrently (linked, dlopen, three
//! cuGetProcAddress flavours) and running the workload at once: per-thread
//! results agree by resolution path, totals of own calls, fake calls and hook
//! counts agree, and the fake executed exactly N x 15 kernels.

use tandem_e2e::{run_both, workload_kernels};

#[test]
fn concurrent_threads_mixed_resolution() {
    for n in [5u64, 20] {
        let arg = n.to_string();
        let (plain, shim) = run_both("threads", &[&arg], n * workload_kernels());
        for out in [&plain, &shim] {
            let threads = out.records("THREAD");
            assert_eq!(threads.len() as u64, n, "{out}");
            for t in threads {
                assert_eq!(t.get("rc"), "0", "{out}");
            }
        }
    }
}

#[test]
fn threads_result_matches_single_thread_hosts_per_path() {
    // Thread i % 5 == 0 uses seed 1 like the single-run hosts.
    let (plain, _) = run_both("threads", &["5"], 5 * workload_kernels());
    let linked = tandem_e2e::run_host("linked", &[], &tandem_e2e::Env::fake_only());
    linked.assert_ok();
    let t0 = plain
        .records("THREAD")
        .into_iter()
        .find(|r| r.head.first().is_some_and(|h| h == "0"))
        .expect("THREAD 0 line");
    assert_eq!(t0.get("result"), linked.result(), "{plain}\n{linked}");
}
