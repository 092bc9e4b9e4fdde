//! The chaos soak (`scripts/chaos` runs the full one; `cargo test` a short
//! one): 16 launchers (`tests/hosts/launcher.c`: paced launches, 500/s or
//! 20000/s, a 4 KiB allocation and free every 16 launches; rings of 16
//! records, so the fast ones drop) against a real tandemd on the fake
//! driver, a dedup group (two `replica`s of one model sharing weights) and a
//! follow region (a `follower` sharing, another mapping it) live throughout,
//! while tandemd is killed with -9 and restarted at random intervals and
//! launchers are killed with -9 at random and replaced.
//!
//! At the end it asserts, and prints:
//! * jobs that failed (a non-zero exit, or dying when nobody killed them) or
//!   hung (no exit within its bound once asked to stop): 0;
//! * the last tandemd's open fds and memfds, once every client has left,
//!   equal a fresh tandemd's before any client came;
//! * dedup's shared copies and follow's regions and followers at zero;
//! * per launcher, the records tandemd counted for its last session equal
//!   the records its shim pushed into that session's ring (attempts less
//!   the drops it counted), and the drops tandemd read equal the shim's;
//! * the follower read the sharer's bytes through every restart, and the two
//!   replicas' outputs are identical (sharing never corrupted them);
//! * how long each launcher took to rejoin a restarted tandemd (from the
//!   restart's spawn to the launcher's new id): p50 and max.
//!
//! Knobs (environment): `CHAOS_CYCLES` (default 20), `CHAOS_SEED`,
//! `CHAOS_MIN_MS` / `CHAOS_MAX_MS` (each cycle's interval, default 300-700).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tandem_e2e::coord::{
    client_env, clients, kv, kv_u64, poll, spawn_host, without_marks, Proc, Tandemd, TestDir, EXIT,
    SETTLE,
};
use tandem_e2e::Env;

const LAUNCHERS: usize = 16;
const PATHS: [&str; 4] = ["linked", "linked-ptds", "dlopen", "gpa"];
const REGION_MIB: &str = "4";

fn env_u64(k: &str, default: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// CLOCK_MONOTONIC in seconds: the clock of the launchers' `t=`.
fn mono() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// xorshift64*: the soak's choices, reproducible from CHAOS_SEED.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// (open fds, of which memfds) of a process.
fn fds(pid: u32) -> (usize, usize, Vec<String>) {
    let mut all = Vec::new();
    if let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in d.flatten() {
            let target = std::fs::read_link(e.path())
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            all.push(target);
        }
    }
    let memfds = all.iter().filter(|t| t.starts_with("/memfd:")).count();
    (all.len(), memfds, all)
}

struct Launcher {
    p: Proc,
    path: &'static str,
    /// CLOCK_MONOTONIC when spawned.
    born: f64,
    /// When the soak killed it, if it did.
    killed: Option<f64>,
}

/// A launcher on `path`: 500 launches/s, or in bursts of 20 a millisecond
/// (20000/s: more than a 16-record ring holds between two reader passes)
/// for the `gpa` path, one launcher in four.
fn launcher(env: &Env, path: &'static str) -> Launcher {
    let born = mono();
    let rate = if path == "gpa" { "20000" } else { "500" };
    let p = spawn_host(
        "launcher",
        &[
            "--path",
            path,
            "--rate",
            rate,
            "--alloc-every",
            "16",
            "--until-stdin",
        ],
        env,
    );
    Launcher {
        p,
        path,
        born,
        killed: None,
    }
}

/// (t, to) of every IDCHANGE line.
fn id_changes(p: &Proc) -> Vec<(f64, u64)> {
    p.lines("IDCHANGE ")
        .iter()
        .map(|l| {
            let m = kv(l);
            (
                m.get("t").and_then(|t| t.parse().ok()).unwrap_or(0.0),
                m.get("to").and_then(|t| t.parse().ok()).unwrap_or(0),
            )
        })
        .collect()
}

fn gpu_sum(s: &Value, key: &str) -> u64 {
    s["gpus"]
        .as_array()
        .map(|g| g.iter().filter_map(|x| x[key].as_u64()).sum())
        .unwrap_or(0)
}

fn regions(s: &Value) -> Vec<Value> {
    s["follow"]["regions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

/// The answer to a follower command: its next new line starting with `prefix`.
fn ask(p: &mut Proc, cmd: &str, prefix: &str) -> String {
    p.ask(cmd, prefix, EXIT)
}

#[test]
fn chaos_soak() {
    let cycles = env_u64("CHAOS_CYCLES", 20);
    let seed = env_u64("CHAOS_SEED", 0x7A4D_E111);
    let (lo, hi) = (env_u64("CHAOS_MIN_MS", 300), env_u64("CHAOS_MAX_MS", 700));
    let mut rng = Rng(seed | 1);
    let started = Instant::now();
    let dir = TestDir::new("chaos");
    // The smallest ring (16 records), so that a launcher's ring fills
    // whenever tandemd's reader falls behind and drops are part of what the
    // accounting checks.
    let config = without_marks(tandem_e2e::coord::default_config());
    let config = config.replacen("\nring_capacity = 32768\n", "\nring_capacity = 16\n", 1);
    assert!(
        config.contains("\nring_capacity = 16\n"),
        "the default config sets ring_capacity"
    );

    // A fresh tandemd before any client: the fds the last one must return to.
    let mut d = Tandemd::start_with_config(&dir, &config);
    let (base_fds, base_memfds, base_list) = fds(d.pid());

    let env = client_env(&dir.socket());
    let mut ls: Vec<Launcher> = (0..LAUNCHERS)
        .map(|i| launcher(&env, PATHS[i % PATHS.len()]))
        .collect();

    // The dedup group: two replicas of one model sharing weights.
    let go = dir.path().join("replicas-go");
    let requests = (cycles * 60).max(200).to_string();
    let go_s = go.to_str().expect("utf-8").to_string();
    let rep_env = env
        .clone()
        .var("TANDEM_SHARE_WEIGHTS", "on")
        .var("TANDEM_DEDUP_SCAN_MS", "20")
        .var("TANDEM_DEDUP_STABLE_CHECKS", "2");
    let rep_args = [
        "--weights-mib",
        "4",
        "--seed",
        "11",
        "--requests",
        &requests,
        "--gap-ms",
        "5",
        "--act-mib",
        "2",
        "--wait-file",
        &go_s,
    ];
    let mut replicas: Vec<Proc> = (0..2)
        .map(|_| spawn_host("replica", &rep_args, &rep_env))
        .collect();

    // The follow region: one job shares it, another maps it.
    let share_env = env
        .clone()
        .var("TANDEM_FOLLOW", "on")
        .var("TANDEM_CLASS", "training");
    let map_env = env
        .clone()
        .var("TANDEM_FOLLOW", "on")
        .var("TANDEM_CLASS", "inference");
    let mut sharer = spawn_host(
        "follower",
        &[
            "share", "--name", "chaos", "--mib", REGION_MIB, "--fill", "7",
        ],
        &share_env,
    );
    let wrote = sharer.wait_line("WROTE ", SETTLE);
    let want_digest = kv(&wrote)["digest"].clone();
    let share = sharer.wait_line("SHARE ", SETTLE);
    assert_eq!(kv(&share)["rc"], "0", "{sharer}");
    let mut mapper = spawn_host(
        "follower",
        &[
            "map",
            "--name",
            "chaos",
            "--mib",
            REGION_MIB,
            "--timeout-ms",
            "30000",
        ],
        &map_env,
    );
    let map = mapper.wait_line("MAP ", SETTLE);
    assert_eq!(kv(&map)["rc"], "0", "{mapper}");

    for l in &mut ls {
        l.p.wait_line("READY ", SETTLE);
    }

    // The soak.
    let mut restarts: Vec<f64> = Vec::new(); // spawn time of each new tandemd
    let mut kills: Vec<f64> = Vec::new(); // time each tandemd was killed
    let mut start_ms: Vec<f64> = Vec::new(); // spawn to stats answering
    let mut failed: Vec<String> = Vec::new();
    let mut follow_reads = 0u64;
    let mut replaced = 0u64;
    for _ in 0..cycles {
        let wait = Duration::from_millis(lo + rng.below(hi - lo + 1));
        let kill_at = Duration::from_millis(rng.below(wait.as_millis() as u64 + 1));
        let alive: Vec<usize> = (0..ls.len()).filter(|&i| ls[i].killed.is_none()).collect();
        let victim = (rng.below(2) == 0).then(|| alive[rng.below(alive.len() as u64) as usize]);
        let t0 = Instant::now();
        if let Some(v) = victim {
            std::thread::sleep(kill_at);
            if ls[v].p.try_wait().is_some() {
                failed.push(format!("launcher exited on its own:\n{}", ls[v].p));
            }
            ls[v].p.kill9();
            ls[v].killed = Some(mono());
            let path = ls[v].path;
            ls.push(launcher(&env, path));
            replaced += 1;
        }
        std::thread::sleep(wait.saturating_sub(t0.elapsed()));
        // The follower still reads the sharer's bytes (the mapping outlives
        // every tandemd).
        let l = ask(&mut mapper, "digest", "DIGEST");
        assert_eq!(kv(&l)["rc"], "0", "{mapper}");
        assert_eq!(kv(&l)["digest"], want_digest, "the followed region changed");
        follow_reads += 1;
        kills.push(mono());
        d.kill9();
        restarts.push(mono());
        d = Tandemd::spawn(&dir, &config);
        d.wait_ready();
        start_ms.push((mono() - restarts[restarts.len() - 1]) * 1e3);
    }
    start_ms.sort_by(f64::total_cmp);

    let soak_s = started.elapsed().as_secs_f64();
    // Every live launcher rejoins the last tandemd.
    let live: Vec<usize> = (0..ls.len()).filter(|&i| ls[i].killed.is_none()).collect();
    for &i in &live {
        if let Some(st) = ls[i].p.try_wait() {
            failed.push(format!("launcher exited ({st}) on its own:\n{}", ls[i].p));
        }
    }
    let final_stats = poll(
        SETTLE,
        "every live launcher registered with the last tandemd",
        || {
            let s = d.try_stats()?;
            let pids: Vec<u64> = clients(&s)
                .iter()
                .filter_map(|c| c["pid"].as_u64())
                .collect();
            match live
                .iter()
                .find(|&&i| !pids.contains(&u64::from(ls[i].p.pid())))
            {
                Some(&i) => Err(format!("pid {} not listed", ls[i].p.pid())),
                None => Ok(s),
            }
        },
    );
    // The follow region and its follower, re-announced to the last tandemd.
    poll(
        SETTLE,
        "the follow region and its follower in the last tandemd",
        || {
            let s = d.try_stats()?;
            let r = regions(&s);
            if r.len() == 1 && r[0]["name"] == "chaos" && r[0]["followers"] == 1 {
                Ok(())
            } else {
                Err(format!("follow: {}", s["follow"]))
            }
        },
    );
    let _ = final_stats;
    // A last stretch of work on the last tandemd, so that every launcher's
    // last session has records to account for.
    std::thread::sleep(Duration::from_secs(1));

    // Stop everything, the way a job ends: launchers at end of stdin.
    let mut hung = Vec::new();
    let mut done: BTreeMap<u32, String> = BTreeMap::new();
    for &i in &live {
        ls[i].p.close_stdin();
    }
    for &i in &live {
        let p = &mut ls[i].p;
        let deadline = Instant::now() + EXIT;
        while p.try_wait().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        match p.try_wait() {
            None => hung.push(format!("launcher pid {} did not exit", p.pid())),
            Some(st) if !st.success() => failed.push(format!("launcher {st}:\n{p}")),
            Some(_) => {
                let line = p.lines("DONE ").pop().unwrap_or_default();
                done.insert(p.pid(), line);
            }
        }
    }
    let l = ask(&mut mapper, "digest", "DIGEST");
    assert_eq!(kv(&l)["digest"], want_digest, "the followed region changed");
    follow_reads += 1;
    for (name, p) in [("mapper", &mut mapper), ("sharer", &mut sharer)] {
        p.send_line("exit");
        let st = p.wait_exit(EXIT);
        if !st.success() {
            failed.push(format!("{name} {st}:\n{p}"));
        }
    }
    std::fs::write(&go, b"go").expect("write the replicas' go file");
    let mut digests = Vec::new();
    let mut merges = 0u64;
    for r in &mut replicas {
        let st = r.wait_exit(EXIT);
        if !st.success() {
            failed.push(format!("replica {st}:\n{r}"));
            continue;
        }
        digests.push(kv(&r.wait_line("DONE ", SETTLE))["digest"].clone());
        merges += kv_u64(&r.wait_line("SHIM ", SETTLE), "merges");
    }

    // Every client has left: the last tandemd is back to a fresh one's state.
    let end = poll(
        SETTLE,
        "every client reclaimed and tandemd's fds back to baseline",
        || {
            let s = d.try_stats()?;
            if !clients(&s).is_empty() {
                return Err(format!("{} clients still listed", clients(&s).len()));
            }
            let (n, m, list) = fds(d.pid());
            if (n, m) != (base_fds, base_memfds) {
                return Err(format!(
                "fds {n} (memfds {m}), baseline {base_fds} ({base_memfds}): {list:?} vs {base_list:?}"
            ));
            }
            Ok((s, n, m))
        },
    );
    let (end_stats, end_fds, end_memfds) = end;

    // Per launcher: the last session's records, as tandemd counted them and
    // as the shim pushed them.
    let departed = end_stats["departed"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut checked = 0u64;
    let mut inexact = 0u64;
    let mut records_total = 0u64;
    let mut drops_total = 0u64;
    let mut mismatches = Vec::new();
    for (pid, line) in &done {
        let m = kv(line);
        if m.get("session_exact").map(String::as_str) != Some("1") {
            inexact += 1;
            continue;
        }
        let Some(c) = departed
            .iter()
            .find(|c| c["pid"].as_u64() == Some(u64::from(*pid)))
        else {
            mismatches.push(format!("pid {pid} not among the departed"));
            continue;
        };
        let (pushed, dropped) = (
            kv_u64(line, "session_pushed"),
            kv_u64(line, "session_dropped"),
        );
        let counted = c["records"].as_u64().unwrap_or(u64::MAX);
        let seen_drops = c["dropped"].as_u64().unwrap_or(u64::MAX);
        if c["id"].as_u64() != Some(kv_u64(line, "client_id"))
            || counted != pushed
            || seen_drops != dropped
        {
            mismatches.push(format!(
                "pid {pid}: shim pushed {pushed} dropped {dropped} (id {}); tandemd counted {counted} read {seen_drops} drops (id {})",
                m["client_id"], c["id"]
            ));
        }
        checked += 1;
        records_total += counted;
        drops_total += seen_drops;
    }

    // Rejoin times: for each restart, each launcher alive across it.
    let mut rejoin_ms: Vec<f64> = Vec::new();
    let mut slow: Vec<(f64, usize, u32, &str)> = Vec::new();
    let mut missed = 0u64;
    for (k, &s) in restarts.iter().enumerate() {
        let next_kill = kills.get(k + 1).copied().unwrap_or(f64::INFINITY);
        for l in &ls {
            if l.born >= kills[k] || l.killed.is_some_and(|t| t < next_kill) {
                continue;
            }
            match id_changes(&l.p)
                .into_iter()
                .find(|&(t, to)| to != 0 && t >= s)
            {
                Some((t, _)) if t < next_kill => {
                    rejoin_ms.push((t - s) * 1e3);
                    slow.push(((t - s) * 1e3, k, l.p.pid(), l.path));
                }
                _ => missed += 1,
            }
        }
    }
    rejoin_ms.sort_by(f64::total_cmp);
    slow.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (ms, k, pid, path) in slow.iter().take(3) {
        println!("CHAOS slowest rejoin {ms:.1} ms: restart {k}, launcher pid {pid} ({path})");
    }

    let copies = gpu_sum(&end_stats, "dedup_shared_copies");
    let follow_left = regions(&end_stats).len();
    let followers: u64 = end_stats["clients"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|x| x["follow"]["mapped_bytes"].as_u64())
                .sum()
        })
        .unwrap_or(0);
    println!(
        "CHAOS cycles={cycles} seed={seed:#x} interval_ms={lo}-{hi} seconds={:.1} (soak {soak_s:.1})",
        started.elapsed().as_secs_f64()
    );
    println!(
        "CHAOS launchers={} killed_and_replaced={replaced} jobs_failed={} jobs_hung={}",
        ls.len(),
        failed.len(),
        hung.len()
    );
    println!(
        "CHAOS tandemd_fds baseline={base_fds} end={end_fds} memfds baseline={base_memfds} end={end_memfds}"
    );
    println!(
        "CHAOS dedup_shared_copies_end={copies} replica_merges={merges} replica_digests_equal={} follow_regions_end={follow_left} follow_mapped_bytes_end={followers} follow_reads_ok={follow_reads}",
        digests.len() == 2 && digests[0] == digests[1]
    );
    println!(
        "CHAOS accounting launchers_checked={checked} inexact={inexact} mismatches={} records={records_total} drops={drops_total}",
        mismatches.len()
    );
    println!(
        "CHAOS rejoin samples={} missed_before_next_kill={missed} p50_ms={:.1} max_ms={:.1} (from the new tandemd's spawn to the launcher's new id)",
        rejoin_ms.len(),
        percentile(&rejoin_ms, 0.5),
        rejoin_ms.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "CHAOS tandemd_start p50_ms={:.1} max_ms={:.1} (spawn to its stats socket answering)",
        percentile(&start_ms, 0.5),
        start_ms.last().copied().unwrap_or(f64::NAN)
    );
    assert!(failed.is_empty(), "jobs failed:\n{}", failed.join("\n"));
    assert!(hung.is_empty(), "jobs hung: {hung:?}");
    assert!(mismatches.is_empty(), "accounting: {mismatches:#?}");
    assert!(
        checked >= live.len() as u64 / 2,
        "too few launchers checked ({checked} of {})",
        live.len()
    );
    assert_eq!(digests.len(), 2);
    assert_eq!(digests[0], digests[1], "the replicas' outputs differ");
    assert_eq!(copies, 0, "dedup shared copies left");
    assert_eq!(follow_left, 0, "follow regions left");
    assert_eq!(followers, 0, "followed bytes left");
    assert!(!rejoin_ms.is_empty(), "no rejoin measured");
}
