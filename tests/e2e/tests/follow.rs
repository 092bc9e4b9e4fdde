//! Follow mode end to end: `follower` processes (tests/hosts/follower.c) under
//! the shim with `TANDEM_FOLLOW=on`, the real tandemd brokering the regions'
//! descriptors, and the fake driver's VMM (memfd-backed: a followed region
//! really is the sharer's memory, and a read-only mapping really is read-only).

use std::time::Duration;

use serde_json::Value;
use tandem_e2e::coord::{client_by_pid, client_env, kv, poll, spawn_host, Proc, Tandemd, TestDir};
use tandem_e2e::Env;

const MIB: u64 = 1 << 20;
const REGION_MIB: u64 = 4;
const WAIT: Duration = Duration::from_secs(60);

// The C API's codes (tandem_proto::follow::api, include/tandem.h).
use tandem_proto::follow::api;

fn env(dir: &TestDir, class: &str) -> Env {
    client_env(&dir.socket())
        .var("TANDEM_FOLLOW", "on")
        .var("TANDEM_CLASS", class)
}

fn spawn(role: &str, name: &str, env: &Env, extra: &[&str]) -> Proc {
    let mib = REGION_MIB.to_string();
    let mut args = vec![role, "--name", name, "--mib", &mib];
    args.extend_from_slice(extra);
    spawn_host("follower", &args, env)
}

/// The `rc=` of the process's first line starting with `prefix`.
fn first_rc(p: &mut Proc, prefix: &str) -> (i64, bool) {
    let l = p.wait_line(prefix, WAIT);
    let m = kv(&l);
    let rc = m["rc"].parse().unwrap_or_else(|_| panic!("{l}"));
    (rc, m.get("allocated").map(String::as_str) == Some("1"))
}

/// Sends `cmd` and returns the answer: the next new line starting with `prefix`.
#[track_caller]
fn ask(p: &mut Proc, cmd: &str, prefix: &str) -> String {
    p.ask(cmd, prefix, WAIT)
}

fn field(line: &str, key: &str) -> String {
    kv(line)
        .get(key)
        .cloned()
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

fn digest(p: &mut Proc) -> String {
    let l = ask(p, "digest", "DIGEST");
    assert_eq!(field(&l, "rc"), "0", "{l}\n{p}");
    field(&l, "digest")
}

fn regions(s: &Value) -> Vec<Value> {
    s["follow"]["regions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// A training job that shares region `name`, its offer taken.
fn sharing(name: &str, dir: &TestDir) -> Proc {
    let mut p = spawn("share", name, &env(dir, "training"), &[]);
    assert_eq!(first_rc(&mut p, "SHARE").0, i64::from(api::OK), "{p}");
    p
}

/// Ends each follower (`exit`) and checks it exited cleanly.
fn exit_all(procs: &mut [&mut Proc]) {
    for p in procs.iter_mut() {
        p.send_line("exit");
        assert!(p.wait_exit(WAIT).success(), "{p}");
    }
}

/// Waits until tandemd's stats satisfy `f`.
fn wait_stats(d: &Tandemd, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    poll(WAIT, what, || {
        let s = d.try_stats()?;
        if f(&s) {
            Ok(s)
        } else {
            Err(format!("follow: {}", s["follow"]))
        }
    })
}

#[test]
fn a_follower_reads_the_sharers_live_memory_read_only_and_keeps_it_after_the_sharer_exits() {
    let dir = TestDir::new("follow-live");
    let d = Tandemd::start(&dir);
    // Filled before it is offered: no follower can see it half written.
    let mut sharer = spawn("share", "model-a", &env(&dir, "training"), &["--fill", "1"]);
    assert_eq!(
        first_rc(&mut sharer, "SHARE"),
        (i64::from(api::OK), true),
        "{sharer}"
    );
    let wrote = sharer.wait_line("WROTE", WAIT);
    assert_eq!(field(&wrote, "rc"), "0");
    let first = field(&wrote, "digest");

    let mut follower = spawn("map", "model-a", &env(&dir, "inference"), &[]);
    assert_eq!(
        first_rc(&mut follower, "MAP"),
        (i64::from(api::OK), true),
        "{follower}"
    );
    assert_eq!(
        digest(&mut follower),
        first,
        "the follower reads the sharer's bytes"
    );

    // Live: the sharer's next write is what the follower reads next.
    let second = field(&ask(&mut sharer, "write 2", "WROTE"), "digest");
    assert_ne!(second, first);
    assert_eq!(digest(&mut follower), second, "outputs track the sharer");

    // Read-only: a driver copy into it fails, and changes nothing.
    let m = ask(&mut follower, "memcpy", "MEMCPY");
    assert_ne!(field(&m, "rc"), "0", "{m}");
    assert_eq!(digest(&mut sharer), second);

    let stats = ask(&mut follower, "stats", "STATS");
    assert_eq!(field(&stats, "mapped"), (REGION_MIB * MIB).to_string());
    assert_eq!(field(&stats, "shared"), "0");
    let stats = ask(&mut sharer, "stats", "STATS");
    assert_eq!(field(&stats, "shared"), (REGION_MIB * MIB).to_string());

    let s = wait_stats(&d, "one region with one follower", |s| {
        regions(s).len() == 1 && regions(s)[0]["followers"] == 1
    });
    let r = &regions(&s)[0];
    assert_eq!(r["name"], "model-a");
    assert_eq!(r["bytes"].as_u64(), Some(REGION_MIB * MIB));
    assert_eq!(r["owner_pid"].as_u64(), Some(u64::from(sharer.pid())));
    let fc = client_by_pid(&s, follower.pid()).expect("follower registered");
    assert_eq!(
        fc["follow"]["mapped_bytes"].as_u64(),
        Some(REGION_MIB * MIB)
    );

    // The sharer exits: the region leaves tandemd, the follower keeps the
    // last weights (its imported handle keeps the memory).
    sharer.send_line("exit");
    assert!(sharer.wait_exit(WAIT).success(), "{sharer}");
    wait_stats(&d, "the region gone with its sharer", |s| {
        regions(s).is_empty()
    });
    assert_eq!(digest(&mut follower), second, "frozen at the last state");
    let mut late = spawn(
        "map",
        "model-a",
        &env(&dir, "inference"),
        &["--timeout-ms", "300"],
    );
    assert_eq!(
        first_rc(&mut late, "MAP"),
        (i64::from(api::NOT_FOUND), false),
        "{late}"
    );

    // Releasing through cuMemFree tells tandemd too.
    let f = ask(&mut follower, "cufree", "CUFREE");
    assert_eq!(field(&f, "rc"), "0", "{f}");
    assert_eq!(field(&ask(&mut follower, "stats", "STATS"), "mapped"), "0");
    wait_stats(&d, "the follower's mapped bytes released", |s| {
        client_by_pid(s, follower.pid())
            .is_some_and(|c| c["follow"]["mapped_bytes"].as_u64() == Some(0))
    });
    exit_all(&mut [&mut follower, &mut late]);
}

#[test]
fn a_follower_waits_for_a_sharer_that_starts_later_and_a_restarted_coordinator_gets_the_region_again(
) {
    let dir = TestDir::new("follow-late");
    let mut d = Tandemd::start(&dir);
    // The follower asks first, with a generous wait.
    let mut follower = spawn(
        "map",
        "model-b",
        &env(&dir, "inference"),
        &["--timeout-ms", "30000"],
    );
    poll(WAIT, "follower registered", || {
        let s = d.try_stats()?;
        client_by_pid(&s, follower.pid())
            .map(|_| ())
            .ok_or_else(|| "not yet".into())
    });
    let mut sharer = sharing("model-b", &dir);
    let wrote = field(&ask(&mut sharer, "write 5", "WROTE"), "digest");
    assert_eq!(
        first_rc(&mut follower, "MAP").0,
        i64::from(api::OK),
        "{follower}"
    );
    assert_eq!(digest(&mut follower), wrote);

    // tandemd dies and comes back: the sharer offers its region again on
    // its own, and a new follower finds it.
    d.kill9();
    let d = Tandemd::start(&dir);
    wait_stats(&d, "the region offered again", |s| {
        regions(s)
            .iter()
            .any(|r| r["name"] == "model-b" && r["owner_pid"] == u64::from(sharer.pid()))
    });
    let mut again = spawn(
        "map",
        "model-b",
        &env(&dir, "inference"),
        &["--timeout-ms", "10000"],
    );
    assert_eq!(first_rc(&mut again, "MAP").0, i64::from(api::OK), "{again}");
    // The first follower told the new tandemd of the mapping it still holds
    // (HELD): it is one of the region's followers, and its bytes are counted.
    let s = wait_stats(&d, "both followers of model-b counted", |s| {
        let first =
            client_by_pid(s, follower.pid()).and_then(|c| c["follow"]["mapped_bytes"].as_u64());
        regions(s)
            .iter()
            .any(|r| r["name"] == "model-b" && r["followers"] == 2)
            && first == Some(REGION_MIB * MIB)
    });
    let r = regions(&s)
        .into_iter()
        .find(|r| r["name"] == "model-b")
        .unwrap();
    assert_eq!(r["bytes"].as_u64(), Some(REGION_MIB * MIB));
    assert_eq!(r["maps"], 1, "a held mapping is not a map: {r}");
    assert_eq!(s["follow"]["held"], 1, "{}", s["follow"]);
    assert_eq!(
        s["follow"]["mapped_bytes"].as_u64(),
        Some(2 * REGION_MIB * MIB),
        "{}",
        s["follow"]
    );
    let third = field(&ask(&mut sharer, "write 6", "WROTE"), "digest");
    assert_eq!(digest(&mut again), third);
    assert_eq!(
        digest(&mut follower),
        third,
        "the first follower still follows"
    );
    exit_all(&mut [&mut follower, &mut sharer, &mut again]);
    wait_stats(&d, "nothing left", |s| regions(s).is_empty());
}

#[test]
fn refusals_say_why_and_a_share_always_leaves_usable_memory() {
    let dir = TestDir::new("follow-refuse");
    let d = Tandemd::start(&dir);
    // Without TANDEM_FOLLOW=on: a map is refused, a share still allocates.
    let plain = client_env(&dir.socket());
    let mut m = spawn("map", "model-c", &plain, &["--timeout-ms", "200"]);
    assert_eq!(
        first_rc(&mut m, "MAP"),
        (i64::from(api::DISABLED), false),
        "{m}"
    );
    let mut s = spawn("share", "model-c", &plain, &[]);
    assert_eq!(
        first_rc(&mut s, "SHARE"),
        (i64::from(api::DISABLED), true),
        "{s}"
    );
    let w = field(&ask(&mut s, "write 3", "WROTE"), "digest");
    assert_eq!(digest(&mut s), w, "the memory works, unshared");

    // No coordinator at all.
    let nowhere = Env::with_shim()
        .var(
            "TANDEM_SOCKET",
            dir.path().join("nobody.sock").to_str().unwrap(),
        )
        .var("TANDEM_FOLLOW", "on");
    let mut alone = spawn("share", "model-c", &nowhere, &[]);
    assert_eq!(
        first_rc(&mut alone, "SHARE"),
        (i64::from(api::NO_COORDINATOR), true),
        "{alone}"
    );

    // A real sharer; then a second one of the same name, a wrong layout, a
    // wrong size.
    let mut owner = sharing("model-c", &dir);
    let mut twin = spawn("share", "model-c", &env(&dir, "training"), &[]);
    assert_eq!(
        first_rc(&mut twin, "SHARE"),
        (i64::from(api::NAME_TAKEN), true),
        "{twin}"
    );
    let mut other = spawn(
        "map",
        "model-c",
        &env(&dir, "inference"),
        &["--layout", "layout-v2", "--timeout-ms", "200"],
    );
    assert_eq!(
        first_rc(&mut other, "MAP"),
        (i64::from(api::MISMATCH), false),
        "{other}"
    );
    let mut small = spawn_host(
        "follower",
        &[
            "map",
            "--name",
            "model-c",
            "--mib",
            "2",
            "--timeout-ms",
            "200",
        ],
        &env(&dir, "inference"),
    );
    assert_eq!(
        first_rc(&mut small, "MAP"),
        (i64::from(api::MISMATCH), false),
        "{small}"
    );
    let st = d.stats();
    let refusals = &st["follow"]["refusals"];
    assert!(
        refusals["mismatch"].as_u64() >= Some(2) && refusals["name_taken"].as_u64() >= Some(1),
        "{}",
        st["follow"]
    );
    assert_eq!(regions(&st).len(), 1, "{}", st["follow"]);
    exit_all(&mut [
        &mut m, &mut s, &mut alone, &mut owner, &mut twin, &mut other, &mut small,
    ]);
}

#[test]
fn a_kernel_writing_followed_weights_stops_only_the_follower_and_says_why() {
    let dir = TestDir::new("follow-kernel");
    let _d = Tandemd::start(&dir);
    let mut sharer = sharing("model-d", &dir);
    let wrote = field(&ask(&mut sharer, "write 9", "WROTE"), "digest");
    let mut follower = spawn("map", "model-d", &env(&dir, "inference"), &[]);
    assert_eq!(
        first_rc(&mut follower, "MAP").0,
        i64::from(api::OK),
        "{follower}"
    );
    let k = ask(&mut follower, "kernel", "KERNEL");
    assert!(
        field(&k, "launch") != "0" || field(&k, "sync") != "0",
        "a kernel wrote into read-only memory: {k}"
    );
    poll(WAIT, "the one-line cause", || {
        let e = follower.stderr();
        (e.contains("CUDA_ERROR_ILLEGAL_ADDRESS") && e.contains("TANDEM_FOLLOW=on"))
            .then_some(())
            .ok_or(e)
    });
    assert_eq!(
        digest(&mut sharer),
        wrote,
        "the sharer's weights are untouched"
    );
    follower.send_line("exit");
    follower.wait_exit(WAIT);
    sharer.send_line("exit");
    assert!(sharer.wait_exit(WAIT).success(), "{sharer}");
}

#[test]
fn a_region_offered_while_no_coordinator_runs_is_offered_when_one_starts() {
    let dir = TestDir::new("follow-before");
    let mut sharer = spawn("share", "model-e", &env(&dir, "training"), &["--fill", "4"]);
    assert_eq!(
        first_rc(&mut sharer, "SHARE"),
        (i64::from(api::NO_COORDINATOR), true),
        "{sharer}"
    );
    let wrote = field(&sharer.wait_line("WROTE", WAIT), "digest");
    let d = Tandemd::start(&dir);
    wait_stats(&d, "the region offered to the new tandemd", |s| {
        regions(s)
            .iter()
            .any(|r| r["name"] == "model-e" && r["owner_pid"] == u64::from(sharer.pid()))
    });
    let mut follower = spawn("map", "model-e", &env(&dir, "inference"), &[]);
    assert_eq!(
        first_rc(&mut follower, "MAP").0,
        i64::from(api::OK),
        "{follower}"
    );
    assert_eq!(digest(&mut follower), wrote);
    // Freed from a thread with no current context (a garbage collector's):
    // released in the region's own context, and withdrawn from tandemd.
    let f = ask(&mut sharer, "threadfree", "THREADFREE");
    assert_eq!(
        field(&f, "rc"),
        i64::from(api::OK).to_string(),
        "{f}\n{sharer}"
    );
    assert_eq!(field(&ask(&mut sharer, "stats", "STATS"), "shared"), "0");
    wait_stats(&d, "the freed region withdrawn", |s| regions(s).is_empty());
    assert_eq!(
        digest(&mut follower),
        wrote,
        "the follower keeps its mapping"
    );
    exit_all(&mut [&mut follower, &mut sharer]);
}

/// A follower's registration, seen in tandemd's stats.
fn registered(d: &Tandemd, p: &Proc) {
    poll(WAIT, "registered", || {
        let s = d.try_stats()?;
        client_by_pid(&s, p.pid())
            .map(|_| ())
            .ok_or_else(|| "not yet".into())
    });
}

/// A refusal is final: a name refused as taken is dropped, so a restarted
/// tandemd is not offered it unasked (where it would hand the refused job's
/// memory to followers under the name the program was told it did not get).
#[test]
fn a_name_refused_as_taken_is_not_offered_again_to_a_restarted_coordinator() {
    let dir = TestDir::new("follow-refused");
    let mut d = Tandemd::start(&dir);
    let mut owner = sharing("model-x", &dir);
    let mut twin = spawn("share", "model-x", &env(&dir, "training"), &[]);
    let (rc, allocated) = first_rc(&mut twin, "SHARE");
    assert_eq!(
        (rc, allocated),
        (i64::from(api::NAME_TAKEN), true),
        "{twin}"
    );
    assert_eq!(field(&ask(&mut owner, "free", "FREE"), "rc"), "0");
    wait_stats(&d, "the owner's region withdrawn", |s| {
        regions(s).is_empty()
    });

    d.kill9();
    let d = Tandemd::start(&dir);
    registered(&d, &twin);
    // The twin's re-offer would come at its registration: give it time to.
    std::thread::sleep(Duration::from_millis(500));
    let s = d.stats();
    assert!(regions(&s).is_empty(), "{}", s["follow"]);
    let mut f = spawn(
        "map",
        "model-x",
        &env(&dir, "inference"),
        &["--timeout-ms", "200"],
    );
    let (rc, _) = first_rc(&mut f, "MAP");
    assert_ne!(rc, i64::from(api::OK), "the refused memory was mapped: {f}");
    exit_all(&mut [&mut owner, &mut twin, &mut f]);
}

/// A map granted after its caller gave up is undone: the follower maps
/// nothing, so tandemd must not count it as a follower.
#[test]
fn a_map_granted_after_it_timed_out_is_not_counted() {
    let dir = TestDir::new("follow-latemap");
    let mut d = Tandemd::start(&dir);
    let mut sharer = sharing("model-y", &dir);
    let mut f = spawn(
        "map",
        "model-y",
        &env(&dir, "inference").log("debug"),
        &["--timeout-ms", "300", "--wait-go"],
    );
    f.wait_line("READY", WAIT);
    registered(&d, &f);
    d.signal(libc::SIGSTOP);
    f.send_line("go");
    let rc = first_rc(&mut f, "MAP");
    d.signal(libc::SIGCONT);
    assert_eq!(rc, (i64::from(api::TIMEOUT), false), "{f}");
    // tandemd granted the map (counted in `maps`) and then took it back.
    wait_stats(&d, "the late map granted and undone", |s| {
        let counted = client_by_pid(s, f.pid()).and_then(|c| c["follow"]["mapped_bytes"].as_u64());
        let followers = regions(s).first().map(|r| r["followers"].clone());
        s["follow"]["maps"] == 1 && counted == Some(0) && followers == Some(Value::from(0))
    });
    assert!(f.stderr().contains("(unmapped)"), "{f}");
    exit_all(&mut [&mut sharer, &mut f]);
}

/// A region freed while its offer's answer is late is withdrawn all the
/// same: followers never map memory its owner freed.
#[test]
fn a_region_freed_before_its_offer_was_answered_is_withdrawn() {
    let dir = TestDir::new("follow-lateshare");
    let mut d = Tandemd::start(&dir);
    let mut sharer = spawn("share", "model-z", &env(&dir, "training"), &["--wait-go"]);
    sharer.wait_line("READY", WAIT);
    registered(&d, &sharer);
    d.signal(libc::SIGSTOP);
    sharer.send_line("go");
    // The offer waits out its 5 s for the stopped tandemd.
    let (rc, allocated) = first_rc(&mut sharer, "SHARE");
    assert_eq!((rc, allocated), (i64::from(api::TIMEOUT), true), "{sharer}");
    assert_eq!(field(&ask(&mut sharer, "free", "FREE"), "rc"), "0");
    d.signal(libc::SIGCONT);
    // tandemd takes the SHARE, then the UNSHARE the free posted behind it.
    let s = wait_stats(&d, "the offer taken and withdrawn", |s| {
        s["follow"]["shares"] == 1 && regions(s).is_empty()
    });
    assert!(regions(&s).is_empty(), "{}", s["follow"]);
    let mut f = spawn(
        "map",
        "model-z",
        &env(&dir, "inference"),
        &["--timeout-ms", "200"],
    );
    let (rc, _) = first_rc(&mut f, "MAP");
    assert_ne!(rc, i64::from(api::OK), "freed memory was mapped: {f}");
    exit_all(&mut [&mut sharer, &mut f]);
}

/// A fork child does not keep the shared region's exported descriptor,
/// which would keep the memory alive for the child's life.
#[test]
fn a_fork_child_drops_its_copy_of_a_shared_regions_descriptor() {
    let dir = TestDir::new("follow-fork");
    let _d = Tandemd::start(&dir);
    let mut sharer = sharing("model-w", &dir);
    // The fake driver's VMM memory is memfds named fakecuda-vmm.
    let vmm_fds = |pid: u32| -> usize {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter(|e| {
                        std::fs::read_link(e.path())
                            .is_ok_and(|l| l.to_string_lossy().contains("fakecuda-vmm"))
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    let parent = vmm_fds(sharer.pid());
    assert!(
        parent >= 1,
        "the region's descriptors are not memfds any more"
    );
    let l = ask(&mut sharer, "fork", "FORKED");
    let child: u32 = field(&l, "pid").parse().unwrap();
    poll(Duration::from_secs(10), "the child's copy closed", || {
        let n = vmm_fds(child);
        (n < parent)
            .then_some(())
            .ok_or(format!("child {n}, parent {parent}"))
    });
    // SAFETY: kill(2) on the child this test made, still a child of the host.
    unsafe { libc::kill(child as i32, libc::SIGKILL) };
    sharer.send_line("exit");
    assert!(sharer.wait_exit(WAIT).success(), "{sharer}");
}
