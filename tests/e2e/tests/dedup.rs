//! Weight dedup end to end: replica processes (tests/hosts/replica.c) under the
//! shim with `TANDEM_SHARE_WEIGHTS=on`, the real tandemd brokering, the fake
//! driver's VMM (memfd-backed: shared copies really are shared memory, and a
//! read-only mapping really is read-only).
//!
//! Every replica's digest covers every output it computed, before and after
//! merging; it must equal the digest of a run with no shim at all. Leaks are
//! checked where they would show: tandemd's open descriptors (one per shared
//! copy it holds) and its `dedup_shared_copies`.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tandem_e2e::coord::{
    client_by_pid, client_env, default_config, poll, spawn_host, Proc, Tandemd, TestDir,
};
use tandem_e2e::Env;

const MIB: u64 = 1 << 20;
/// Weights of each replica: 4 granules.
const WEIGHTS_MIB: u64 = 8;
const WAIT: Duration = Duration::from_secs(60);

/// Replicas run as training: on the machines CI runs on, the old cgroup
/// parser read every process as in a container, so they always ran as
/// training; with that fixed they would claim inference as host root, and
/// `two_hundred_start_stop_cycles_leak_nothing` then sometimes sees a short
/// replica wait 30 s for a merge that never comes (cycles 8 and 87 of two
/// runs). Pinned until that is understood (noted on issue 26).
fn replica_env(dir: &TestDir) -> Env {
    client_env(&dir.socket())
        .var("TANDEM_CLASS", "training")
        .var("TANDEM_SHARE_WEIGHTS", "on")
        .var("TANDEM_DEDUP_SCAN_MS", "20")
        .var("TANDEM_DEDUP_STABLE_CHECKS", "2")
}

fn args(requests: u32, wait_file: Option<&Path>, extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "--weights-mib",
        &WEIGHTS_MIB.to_string(),
        "--seed",
        "11",
        "--requests",
        &requests.to_string(),
        "--gap-ms",
        "2",
        "--act-mib",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(w) = wait_file {
        v.extend(["--wait-file".to_string(), w.to_str().unwrap().to_string()]);
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn spawn_replica(name: &str, requests: u32, wait_file: &Path, env: &Env, extra: &[&str]) -> Proc {
    let a = args(requests, Some(wait_file), extra);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    spawn_host(name, &a, env)
}

/// The digest of a run without the shim (what every replica must compute).
fn plain_digest(requests: u32, extra: &[&str]) -> String {
    let a = args(requests, None, extra);
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    digest_of(&tandem_e2e::unshared_replica_done(&a))
}

fn digest(p: &Proc) -> String {
    let done = p
        .lines("DONE")
        .pop()
        .unwrap_or_else(|| panic!("no DONE line:\n{}", p.stderr()));
    digest_of(&done)
}

/// The `digest=...` token of a `DONE` line.
fn digest_of(done: &str) -> String {
    done.split_whitespace()
        .find(|t| t.starts_with("digest="))
        .unwrap_or_else(|| panic!("no digest in {done:?}"))
        .to_string()
}

fn gpu(stats: &Value) -> &Value {
    &stats["gpus"][0]
}

fn gnum(stats: &Value, key: &str) -> u64 {
    gpu(stats)[key].as_u64().unwrap_or(0)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The daemon's descriptors once they hold still, before any client
/// comes: the same count on ten reads 20 ms apart (at most 3 s).
/// `Tandemd::start` returns once the stats socket answers, while the
/// daemon's other threads may still be opening theirs (all 20 within a few
/// ms of each other when the machine is quiet): one read taken then
/// counted 19 where the same start had 20 in every other run.
fn settled_fds(pid: u32) -> usize {
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut last, mut same) = (open_fds(pid), 0);
    while same < 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        let now = open_fds(pid);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

fn finish(wait_file: &Path, procs: &mut [Proc]) {
    std::fs::File::create(wait_file).unwrap();
    for p in procs.iter_mut() {
        let st = p.wait_exit(WAIT);
        assert!(st.success(), "replica failed: {st:?}\n{}", p.stderr());
    }
}

/// Waits until the GPU's saved bytes are `saved` (and its shared copies
/// `copies`, when given); returns those stats.
fn wait_saved(d: &Tandemd, what: &str, saved: u64, copies: Option<u64>) -> Value {
    poll(WAIT, what, || {
        let s = d.try_stats()?;
        let (now, c) = (
            gnum(&s, "dedup_saved_bytes"),
            gnum(&s, "dedup_shared_copies"),
        );
        if now == saved && copies.is_none_or(|want| want == c) {
            Ok(s)
        } else {
            Err(format!("saved {now} of {saved}, {c} copies: {}", gpu(&s)))
        }
    })
}

/// Waits until tandemd counts `n` of `p`'s granules as candidates.
fn wait_candidates(d: &Tandemd, p: &Proc, n: u64) {
    poll(WAIT, "the replica's candidates", || {
        let s = d.try_stats()?;
        let got = client_by_pid(&s, p.pid())
            .and_then(|c| c["dedup"]["candidate_granules"].as_u64())
            .unwrap_or(0);
        (got == n).then_some(()).ok_or(format!("{got} candidates"))
    });
}

/// Waits until tandemd holds no shared copy and its descriptors are back at `fds`.
fn assert_nothing_left(d: &Tandemd, fds: usize) {
    poll(WAIT, "every shared copy released", || {
        let s = d.try_stats()?;
        let (copies, now) = (gnum(&s, "dedup_shared_copies"), open_fds(d.pid()));
        if copies == 0 && now == fds {
            Ok(())
        } else {
            Err(format!(
                "{copies} shared copies, {now} fds (baseline {fds})"
            ))
        }
    });
}

#[test]
fn three_replicas_hold_their_weights_once_and_compute_the_same() {
    let dir = TestDir::new("dedup-three");
    let d = Tandemd::start(&dir);
    let fds = settled_fds(d.pid());
    let wf = dir.path().join("go");
    let env = replica_env(&dir);
    let mut procs: Vec<Proc> = (0..3)
        .map(|_| spawn_replica("replica", 1000, &wf, &env, &[]))
        .collect();
    // (3 - 1) replicas' weights saved, every granule merged.
    let stats = wait_saved(&d, "all weights merged", 2 * WEIGHTS_MIB * MIB, None);
    assert_eq!(gnum(&stats, "dedup_shared_copies"), WEIGHTS_MIB / 2);
    assert_eq!(gnum(&stats, "dedup_merges"), 2 * WEIGHTS_MIB / 2);
    for p in &procs {
        let c = client_by_pid(&stats, p.pid()).expect("client in stats");
        assert_eq!(c["dedup"]["shared_bytes"], WEIGHTS_MIB * MIB, "{c}");
    }
    finish(&wf, &mut procs);
    let want = plain_digest(1000, &[]);
    for p in &procs {
        assert_eq!(digest(p), want, "outputs changed by sharing");
        let shim = p.lines("SHIM").pop().unwrap();
        assert!(
            shim.contains(&format!("shared_bytes={}", WEIGHTS_MIB * MIB)),
            "{shim}"
        );
    }
    assert_nothing_left(&d, fds);
}

#[test]
fn kill_9_of_the_publisher_and_of_a_merger_and_a_coordinator_restart_leak_nothing() {
    let dir = TestDir::new("dedup-kill");
    let mut d = Tandemd::start(&dir);
    let fds = settled_fds(d.pid());
    let wf = dir.path().join("go");
    let env = replica_env(&dir);
    let granules = WEIGHTS_MIB / 2;
    // A first, alone until all its granules are candidates: the oldest
    // candidate publishes, so A publishes every shared copy.
    let mut publisher = spawn_replica("replica", 1000, &wf, &env, &[]);
    wait_candidates(&d, &publisher, granules);
    let mut procs: Vec<Proc> = (0..3)
        .map(|_| spawn_replica("replica", 1000, &wf, &env, &[]))
        .collect();
    let saved_is = |d: &Tandemd, replicas_saved: u64, copies: u64, what: &str| {
        wait_saved(d, what, replicas_saved * WEIGHTS_MIB * MIB, Some(copies))
    };
    saved_is(&d, 3, granules, "all weights merged");
    // kill -9 the publisher: the three others still hold every copy.
    publisher.kill9();
    saved_is(
        &d,
        2,
        granules,
        "the publisher's share gone, its copies kept",
    );
    // kill -9 a replica that merged.
    let mut merger = procs.remove(0);
    merger.kill9();
    saved_is(&d, 1, granules, "the merger's share gone");

    // Restart tandemd mid-run: merged memory stays mapped in the replicas
    // (orphans, uncounted); the new daemon starts with an empty index; the
    // old one's descriptors died with it.
    d.kill9();
    let d = Tandemd::start(&dir);
    // The replicas reconnect at once (each adds its connection and ring), so
    // the new daemon's count is not left to settle: it must reach the first
    // one's, and that before the first replica is back.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut fds_new = open_fds(d.pid());
    while fds_new < fds && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
        fds_new = open_fds(d.pid());
    }
    assert_eq!(
        fds_new, fds,
        "a fresh tandemd holds what the first one did at start"
    );
    for p in &procs {
        poll(WAIT, "replica re-registered", || {
            let s = d.try_stats()?;
            client_by_pid(&s, p.pid())
                .map(|_| ())
                .ok_or_else(|| "not yet".to_string())
        });
    }
    let s = d.stats();
    assert_eq!(gnum(&s, "dedup_shared_copies"), 0, "{}", gpu(&s));
    finish(&wf, &mut procs);
    let want = plain_digest(1000, &[]);
    for p in &procs {
        assert_eq!(digest(p), want, "outputs changed");
        let shim = p.lines("SHIM").pop().unwrap();
        assert!(
            shim.contains(&format!("shared_bytes={}", WEIGHTS_MIB * MIB)),
            "still mapping the shared copies after both deaths: {shim}"
        );
    }
    assert_nothing_left(&d, fds_new);
}

#[test]
fn trust_groups_keep_jobs_apart() {
    let dir = TestDir::new("dedup-groups");
    // Two copies of the replica binary: group "a" is one path, "b" the other.
    let bin = tandem_e2e::host("replica");
    let (a_bin, b_bin): (PathBuf, PathBuf) =
        (dir.path().join("replica-a"), dir.path().join("replica-b"));
    std::fs::copy(&bin, &a_bin).unwrap();
    std::fs::copy(&bin, &b_bin).unwrap();
    let config = format!(
        "{}\n[[dedup.group]]\nname = \"a\"\nexecutables = [{:?}]\n\n[[dedup.group]]\nname = \"b\"\nexecutables = [{:?}]\n",
        tandem_e2e::coord::default_config(),
        a_bin.to_str().unwrap(),
        b_bin.to_str().unwrap()
    );
    let d = Tandemd::start_with_config(&dir, &config);
    let wf = dir.path().join("go");
    let env = replica_env(&dir);
    let run = |bin: &Path| {
        let a = args(1000, Some(&wf), &[]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        Proc::spawn("replica", tandem_e2e::coord::command_at(bin, &a, &env))
    };
    let mut procs = vec![run(&a_bin), run(&b_bin)];
    // Both offer candidates, but across groups nothing merges...
    poll(WAIT, "candidates from both groups", || {
        let s = d.try_stats()?;
        let ready = procs.iter().all(|p| {
            client_by_pid(&s, p.pid())
                .is_some_and(|c| c["dedup"]["candidate_granules"].as_u64().unwrap_or(0) > 0)
        });
        ready.then_some(s).ok_or_else(|| "not yet".into())
    });
    // ...while a second job of group "a" merges with the first at once.
    procs.push(run(&a_bin));
    let s = wait_saved(&d, "group a merged", WEIGHTS_MIB * MIB, None);
    let b = client_by_pid(&s, procs[1].pid()).unwrap();
    assert_eq!(b["dedup"]["shared_bytes"], 0, "group b shared: {b}");
    assert_eq!(b["dedup"]["trust_group"], "b");
    finish(&wf, &mut procs);
    let want = plain_digest(1000, &[]);
    for p in &procs {
        assert_eq!(digest(p), want);
    }
}

#[test]
fn two_hundred_start_stop_cycles_leak_nothing() {
    let dir = TestDir::new("dedup-cycles");
    let d = Tandemd::start(&dir);
    let fds = settled_fds(d.pid());
    let wf = dir.path().join("go");
    let env = replica_env(&dir);
    // A resident replica publishes; each short-lived one merges with it, breaks
    // one granule by a copy (copy-on-write), and exits (freeing everything).
    let mut resident = spawn_replica("replica", 1_000_000, &wf, &env, &[]);
    let short_wf = dir.path().join("short-go");
    std::fs::File::create(&short_wf).unwrap();
    // Kernels must keep running while the shim scans (its stability rule), so
    // the write (which waits until something is shared) comes late.
    let extra = [
        "--gap-ms",
        "3",
        "--write-after",
        "25",
        "--write",
        "memcpy",
        "--write-when-shared",
    ];
    let want = plain_digest(30, &extra);
    for i in 0..200 {
        let mut p = spawn_replica("replica", 30, &short_wf, &env, &extra);
        let st = p.wait_exit(WAIT);
        assert!(st.success(), "cycle {i}: {st:?}\n{}", p.stderr());
        assert_eq!(digest(&p), want, "cycle {i}");
    }
    let s = poll(WAIT, "only the resident's copies left", || {
        let s = d.try_stats()?;
        let (copies, saved) = (
            gnum(&s, "dedup_shared_copies"),
            gnum(&s, "dedup_saved_bytes"),
        );
        (copies <= WEIGHTS_MIB / 2 && saved == 0)
            .then_some(s)
            .ok_or(format!("{copies} copies, {saved} saved"))
    });
    // Each short replica merged (all but possibly the first, which may have
    // published instead) and wrote into memory once something was shared.
    assert!(gnum(&s, "dedup_merges") >= 199, "{}", gpu(&s));
    assert!(gnum(&s, "dedup_cow_breaks") >= 1, "{}", gpu(&s));
    std::fs::File::create(&wf).unwrap();
    resident.kill9();
    assert_nothing_left(&d, fds);
}

/// A job that writes into merged weights with a 2D copy (`cuMemcpy2D_v2`) or
/// a pitched memset (`cuMemsetD2D32_v2`), one row in every granule, first
/// gets a private copy of what it writes (copy-on-write): the write
/// succeeds, the writer's later requests see its bytes, and the replica it
/// merged with computes exactly what an unshared run computes. The shim once
/// let these calls through to the driver unchecked, which refuses a write
/// into read-only memory (`CUDA_ERROR_INVALID_VALUE`, as on an H100): the
/// writer failed.
#[test]
fn a_2d_copy_or_pitched_memset_into_merged_weights_writes_a_private_copy() {
    // 4 MiB of weights (2 granules): the writes' rows fall in both.
    let small = ["--weights-mib", "4"];
    let want_reader = plain_digest(300, &small);
    for kind in ["memcpy2d", "memset2d"] {
        let dir = TestDir::new(&format!("dedup-{kind}"));
        let d = Tandemd::start(&dir);
        let wf = dir.path().join("go");
        let env = replica_env(&dir);
        // Late, so that kernels ran while the shims scanned (their stability
        // rule), and only once the writer maps something shared.
        let writes = [
            small[0],
            small[1],
            "--write-after",
            "200",
            "--write",
            kind,
            "--write-when-shared",
        ];
        let reader = spawn_replica("replica", 300, &wf, &env, &small);
        let mut writer = spawn_replica("replica", 300, &wf, &env, &writes);
        let wrote = writer.wait_line("WRITE", WAIT);
        assert_eq!(wrote, format!("WRITE {kind} rc=0"), "{}", writer.stderr());
        let mut procs = [reader, writer];
        finish(&wf, &mut procs);
        let [reader, writer] = &procs;
        assert_eq!(
            digest(reader),
            want_reader,
            "{kind}: the other replica's weights changed"
        );
        assert_eq!(
            digest(writer),
            plain_digest(300, &writes[..6]),
            "{kind}: the writer does not see its own write"
        );
        let shim = writer.lines("SHIM").pop().unwrap();
        let cow: u64 = shim
            .split_whitespace()
            .find_map(|t| t.strip_prefix("cow="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no cow= in {shim:?}"));
        assert!(cow >= 1, "{kind}: no copy-on-write: {shim}");
        let s = d.stats();
        assert!(gnum(&s, "dedup_cow_breaks") >= 1, "{kind}: {}", gpu(&s));
    }
}

/// A job that frees its shared weights while tandemd is not reading (its
/// socket full) still stops holding them: the WITHDRAWs wait in the shim
/// and go out, in order, once tandemd reads again, so the copies are closed
/// while the job lives on. Lost, they kept the copies open until it left.
#[test]
fn weights_freed_while_the_socket_is_full_are_released_all_the_same() {
    let dir = TestDir::new("dedup-fullsock");
    let mut d = Tandemd::start(&dir);
    let fds = settled_fds(d.pid());
    let wf = dir.path().join("go");
    let linger = dir.path().join("linger");
    let env = replica_env(&dir).log("debug");
    let mut a = spawn_replica("replica", 20, &wf, &env, &[]);
    let linger_arg = linger.to_str().unwrap();
    let b_args = ["--flood", "3000", "--linger-file", linger_arg];
    let mut b = spawn_replica("replica", 20, &wf, &env, &b_args);
    wait_saved(
        &d,
        "both replicas merged",
        WEIGHTS_MIB * MIB,
        Some(WEIGHTS_MIB / 2),
    );

    // A frees and leaves; B fills its socket with 3000 first launches' names,
    // then frees its weights, and stays.
    d.signal(libc::SIGSTOP);
    std::fs::File::create(&wf).unwrap();
    b.wait_line("FREED", WAIT);
    let st = a.wait_exit(WAIT);
    assert!(st.success(), "{st:?}\n{}", a.stderr());
    d.signal(libc::SIGCONT);

    let s = poll(WAIT, "the copies closed while B lives", || {
        let s = d.try_stats()?;
        let copies = gnum(&s, "dedup_shared_copies");
        let held = client_by_pid(&s, b.pid()).map(|c| c["dedup"]["shared_bytes"].clone());
        (copies == 0)
            .then_some(s)
            .ok_or(format!("{copies} shared copies; B holds {held:?} bytes"))
    });
    assert!(client_by_pid(&s, b.pid()).is_some(), "B is still a client");
    let err = b.stderr();
    assert!(
        err.contains("socket is full: holding messages back"),
        "the socket never filled, so nothing was held: {err}"
    );
    assert!(err.contains("held messages sent"), "{err}");
    std::fs::File::create(&linger).unwrap();
    let st = b.wait_exit(WAIT);
    assert!(st.success(), "{st:?}\n{}", b.stderr());
    assert_nothing_left(&d, fds);
}

/// Two replicas of a 512 MiB model (256 granules each) merge every granule,
/// with no publish or offer given up. The shim once read one message from
/// tandemd per turn of its watcher, between scan slices that each found
/// several candidates: the answers piled up, PUBLISHes and OFFERs were read
/// after tandemd had given up on them, and merging stopped for good (221 of
/// 256 granules after 120 s, with 35 publishes and 40 offers failed, on
/// the 2-core development VM; this test passed in 4 s there with the fix).
#[test]
fn every_granule_of_a_512_mib_model_merges() {
    const MODEL_MIB: u64 = 512;
    let dir = TestDir::new("dedup-large");
    let d = Tandemd::start(&dir);
    let wf = dir.path().join("go");
    let env = replica_env(&dir);
    // Later options override the defaults `args` puts first.
    let extra = ["--weights-mib", "512", "--gap-ms", "100"];
    let mut procs: Vec<Proc> = (0..2)
        .map(|_| spawn_replica("replica", 60, &wf, &env, &extra))
        .collect();
    let s = wait_saved(
        &d,
        "every granule merged",
        MODEL_MIB * MIB,
        Some(MODEL_MIB / 2),
    );
    for k in ["publish_failures", "offer_failures", "late_replies"] {
        assert_eq!(s["dedup"][k], 0, "{k}: {}", s["dedup"]);
    }
    finish(&wf, &mut procs);
}

/// A publisher that answers after tandemd gave its PUBLISHes up (stopped
/// past `[dedup] timeout_ms`) is told to FORGET them: it takes its frozen
/// granules back, offers them again, and the two replicas merge after all.
/// Before FORGET those granules stayed read-only under copies that never
/// existed, and nothing of either replica merged again.
#[test]
fn a_publisher_that_answers_too_late_takes_its_granules_back_and_merges_later() {
    let dir = TestDir::new("dedup-late-publish");
    let cfg = default_config().replace("\ntimeout_ms = 5000\n", "\ntimeout_ms = 300\n");
    assert_ne!(cfg, default_config(), "the default dedup timeout moved");
    let d = Tandemd::start_with_config(&dir, &cfg);
    let wf = dir.path().join("go");
    let env = replica_env(&dir).log("debug");
    let granules = WEIGHTS_MIB / 2;
    // A alone until its granules are candidates: it will be asked to publish.
    let a = spawn_replica("replica", 3000, &wf, &env, &[]);
    wait_candidates(&d, &a, granules);
    // SAFETY: kill(2) on the replica this test started.
    unsafe { libc::kill(a.pid() as i32, libc::SIGSTOP) };
    let b = spawn_replica("replica", 3000, &wf, &env, &[]);
    poll(WAIT, "A's publishes given up", || {
        let s = d.try_stats()?;
        let n = gnum(&s, "dedup_publish_failures");
        (n >= granules).then_some(()).ok_or(format!("{n} given up"))
    });
    // SAFETY: as above.
    unsafe { libc::kill(a.pid() as i32, libc::SIGCONT) };
    let s = wait_saved(
        &d,
        "the replicas merged after all",
        WEIGHTS_MIB * MIB,
        Some(granules),
    );
    assert!(gnum(&s, "dedup_late_replies") >= granules, "{}", gpu(&s));
    let mut procs = vec![a, b];
    finish(&wf, &mut procs);
    let want = plain_digest(3000, &[]);
    for p in &procs {
        assert_eq!(digest(p), want, "outputs changed");
    }
    assert!(
        procs[0].stderr().contains("is private again"),
        "A never took a granule back: {}",
        procs[0].stderr()
    );
}

/// On a GPU whose VMM granularity 2 MiB granules are not a whole number of
/// (here 4 MiB, which the fake driver reports when told), the shim backed
/// weights with granules of the GPU's size, and tandemd, whose index takes
/// 2 MiB granules only, refused every one as a protocol error, for as long
/// as the jobs ran. The shim now leaves such a GPU's allocations plain and
/// says so once: the jobs run as without sharing, and tandemd sees no
/// candidate at all.
#[test]
fn a_gpu_with_larger_vmm_granules_runs_unshared_and_says_so_once() {
    let dir = TestDir::new("dedup-granularity");
    let d = Tandemd::start(&dir);
    let wf = dir.path().join("go");
    let env = replica_env(&dir).var("FAKECUDA_VMM_GRANULARITY_MIB", "4");
    let mut procs: Vec<Proc> = (0..2)
        .map(|_| spawn_replica("replica", 200, &wf, &env, &[]))
        .collect();
    for p in &procs {
        poll(WAIT, "the replica's word on sharing", || {
            let s = d.try_stats()?;
            let errors = gnum(&s, "dedup_protocol_errors");
            if errors > 0 {
                panic!("tandemd refused {errors} dedup messages: {}", gpu(&s));
            }
            let said = p.stderr();
            said.contains("granularity")
                .then_some(())
                .ok_or_else(|| format!("stderr so far: {said}"))
        });
    }
    finish(&wf, &mut procs);
    let want = plain_digest(200, &[]);
    for p in &procs {
        assert_eq!(digest(p), want, "outputs changed");
        assert_eq!(
            p.stderr().matches("granularity").count(),
            1,
            "{}",
            p.stderr()
        );
    }
    let s = d.stats();
    assert_eq!(gnum(&s, "dedup_protocol_errors"), 0, "{}", gpu(&s));
    assert_eq!(gnum(&s, "dedup_saved_bytes"), 0, "{}", gpu(&s));
}
