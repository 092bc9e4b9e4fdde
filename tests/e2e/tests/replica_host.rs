//! The `replica` host (tests/hosts/replica.c) on the fake driver alone, no shim: its outputs are
//! checked against a model of what it computes (the same seeded weights, sums and FNV-1a
//! digest), so the dedup tests that run it under the shim can trust a digest match.

use std::time::{Duration, Instant};

use tandem_e2e::{run_host, Env, HostOutput};

const MIB: usize = 1 << 20;
/// Bytes of the weights a `--write` touches.
const WRITE_BYTES: usize = 2 * MIB;
/// Exit status of the replica on a bad command line.
const EXIT_USAGE: i32 = 64;

/// A replica's command line.
#[derive(Clone)]
struct Args {
    weights_mib: usize,
    seed: u64,
    requests: u64,
    act_mib: usize,
    write: Option<(u64, &'static str)>,
    trace: bool,
    wait_file: Option<String>,
}

impl Args {
    fn new(weights_mib: usize, seed: u64, requests: u64) -> Self {
        Self {
            weights_mib,
            seed,
            requests,
            act_mib: 4,
            write: None,
            trace: false,
            wait_file: None,
        }
    }

    fn argv(&self) -> Vec<String> {
        let mut v: Vec<String> = [
            "--weights-mib",
            &self.weights_mib.to_string(),
            "--seed",
            &self.seed.to_string(),
            "--requests",
            &self.requests.to_string(),
            "--gap-ms",
            "1",
            "--act-mib",
            &self.act_mib.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some((k, kind)) = self.write {
            v.extend(["--write-after".into(), k.to_string()]);
            v.extend(["--write".into(), kind.to_string()]);
        }
        if let Some(p) = &self.wait_file {
            v.extend(["--wait-file".into(), p.clone()]);
        }
        if self.trace {
            v.push("--trace".into());
        }
        v
    }

    fn run(&self) -> HostOutput {
        let argv = self.argv();
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        run_host("replica", &argv, &Env::fake_only())
    }
}

fn splitmix64(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn wrapping_sum(words: &[u32]) -> u32 {
    words.iter().fold(0u32, |a, &w| a.wrapping_add(w))
}

/// What the replica computes: the `(w, a)` of every request and the final digest.
fn model(a: &Args) -> (Vec<(u32, u32)>, u64) {
    let n_w = a.weights_mib * MIB / 4;
    let n_act = (a.act_mib * MIB / 4) as u32;
    let mut rng = a.seed;
    let mut weights = Vec::with_capacity(n_w);
    while weights.len() < n_w {
        let x = splitmix64(&mut rng);
        weights.push(x as u32);
        weights.push((x >> 32) as u32);
    }
    let mut w_sum = wrapping_sum(&weights);
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    let mut reqs = Vec::new();
    for i in 0..a.requests {
        let act_sum = n_act.wrapping_mul(i as u32 + 1);
        reqs.push((w_sum, act_sum));
        digest = fnv1a(digest, &w_sum.to_ne_bytes());
        digest = fnv1a(digest, &act_sum.to_ne_bytes());
        if let Some((k, kind)) = a.write {
            if i == k {
                let mut n = WRITE_BYTES.min(n_w * 4) / 4;
                match kind {
                    "memcpy" => {
                        for (j, w) in weights[..n].iter_mut().enumerate() {
                            *w = (j as u32).wrapping_mul(0x9e37_79b9) ^ 0xa5a5_a5a5;
                        }
                    }
                    "memset" => weights[..n].fill(0xdead_beef),
                    "d2d" => {
                        n = n.min(n_act as usize);
                        weights[..n].fill(i as u32 + 1);
                    }
                    "kernel" => weights[..n].fill(7),
                    // One row per MiB (replica.c's pitched writes), in words.
                    "memcpy2d" => {
                        let (x, width) = (512 / 4, 64 * 1024 / 4);
                        for r in 0..n_w / (MIB / 4) {
                            let row = r * MIB / 4 + x;
                            for j in 0..width {
                                let k = (r * width + j) as u32;
                                weights[row + j] = k.wrapping_mul(0x9e37_79b9) ^ 0xa5a5_a5a5;
                            }
                        }
                    }
                    "memset2d" => {
                        for r in 0..n_w / (MIB / 4) {
                            let row = r * MIB / 4 + 256 / 4;
                            weights[row..row + 1024].fill(0x5eed_5eed);
                        }
                    }
                    other => panic!("unknown write kind {other}"),
                }
                w_sum = wrapping_sum(&weights);
            }
        }
    }
    (reqs, digest)
}

/// The `DONE` line's digest, after checking its request count.
#[track_caller]
fn digest(out: &HostOutput, requests: u64) -> u64 {
    let done = out.records("DONE");
    assert_eq!(done.len(), 1, "want one DONE line: {out}");
    assert_eq!(done[0].get("requests"), requests.to_string(), "{out}");
    let hex = done[0].get("digest");
    assert_eq!(hex.len(), 16, "{out}");
    u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("digest {hex:?}: {e}\n{out}"))
}

/// The `REQ i w a` lines.
#[track_caller]
fn req_lines(out: &HostOutput) -> Vec<(u64, u32, u32)> {
    out.lines("REQ ")
        .iter()
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(t.len(), 4, "bad REQ line {l:?}");
            let hex = |s: &str| u32::from_str_radix(s, 16).expect("hex word");
            (t[1].parse().expect("request index"), hex(t[2]), hex(t[3]))
        })
        .collect()
}

/// Runs `a`, asserts it succeeded and matches the model (digest, and REQ lines with --trace);
/// returns the output and the digest.
#[track_caller]
fn run_checked(a: &Args) -> (HostOutput, u64) {
    let out = a.run();
    out.assert_ok();
    let (reqs, want) = model(a);
    let got = digest(&out, a.requests);
    assert_eq!(got, want, "digest differs from the model: {out}");
    if a.trace {
        let lines = req_lines(&out);
        let want: Vec<(u64, u32, u32)> = reqs
            .iter()
            .enumerate()
            .map(|(i, &(w, act))| (i as u64, w, act))
            .collect();
        assert_eq!(lines, want, "{out}");
    }
    assert!(out.lines("ERROR").is_empty(), "{out}");
    (out, got)
}

#[test]
fn same_seed_same_digest_other_seed_other_digest() {
    let a = Args::new(4, 42, 6);
    let (first, d1) = run_checked(&a);
    let (_, d2) = run_checked(&a);
    assert_eq!(d1, d2, "two runs with one seed differ");
    let (_, d3) = run_checked(&Args::new(4, 43, 6));
    assert_ne!(d1, d3, "seeds 42 and 43 gave one digest");
    // No shim: its counters read 0; no write: no WRITE line.
    assert_eq!(
        first.lines("SHIM "),
        ["SHIM shared_bytes=0 merges=0 cow=0"],
        "{first}"
    );
    assert!(first.lines("WRITE").is_empty(), "{first}");
    assert!(
        first.lines("REQ ").is_empty(),
        "REQ lines without --trace: {first}"
    );
}

#[test]
fn trace_prints_one_req_line_per_request() {
    let mut a = Args::new(2, 7, 9);
    a.trace = true;
    a.act_mib = 1;
    let (out, _) = run_checked(&a);
    assert_eq!(req_lines(&out).len(), 9, "{out}");
    // The weights never change without a write; the activations do, every request.
    let lines = req_lines(&out);
    assert!(lines.iter().all(|&(_, w, _)| w == lines[0].1), "{out}");
    assert_eq!(lines[1].2, 2 * lines[0].2, "{out}");
}

#[test]
fn a_memcpy_write_changes_the_digest_from_that_request_on() {
    let plain = Args::new(4, 5, 8);
    let (_, d_plain) = run_checked(&plain);
    let mut w = plain.clone();
    w.write = Some((3, "memcpy"));
    w.trace = true;
    let (out, d_write) = run_checked(&w);
    assert_ne!(
        d_plain, d_write,
        "a write into the weights left the digest alone"
    );
    assert_eq!(out.lines("WRITE "), ["WRITE memcpy rc=0"], "{out}");
    let lines = req_lines(&out);
    assert!(lines[..4].iter().all(|&(_, x, _)| x == lines[0].1), "{out}");
    assert!(lines[4..].iter().all(|&(_, x, _)| x != lines[0].1), "{out}");
}

#[test]
fn every_write_kind_is_seen_by_later_requests() {
    for kind in ["memset", "d2d", "kernel", "memcpy2d", "memset2d"] {
        let mut a = Args::new(3, 11, 5);
        a.write = Some((1, kind));
        a.trace = true;
        let (out, _) = run_checked(&a);
        // Plain memory is writable, so even the kernel write succeeds without the shim.
        assert_eq!(out.lines("WRITE "), [format!("WRITE {kind} rc=0")], "{out}");
    }
    // A d2d write from a smaller activation buffer copies only that much.
    let mut a = Args::new(4, 11, 3);
    a.act_mib = 1;
    a.write = Some((0, "d2d"));
    run_checked(&a);
}

#[test]
fn wait_file_holds_the_replica_after_done() {
    let dir = std::env::temp_dir().join(format!("tandem-replica-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let flag = dir.join("go");
    let _ = std::fs::remove_file(&flag);
    let mut a = Args::new(2, 1, 2);
    a.wait_file = Some(flag.to_str().expect("utf-8 path").to_string());
    let hold = Duration::from_millis(400);
    let creator = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(hold);
            std::fs::write(&flag, b"").expect("create the wait file");
        })
    };
    let t0 = Instant::now();
    let (out, _) = run_checked(&a);
    let took = t0.elapsed();
    creator.join().expect("creator thread");
    // A lower bound only: the replica cannot have exited before the file existed.
    assert!(
        took >= hold,
        "exited after {took:?}, before the wait file existed: {out}"
    );
    let order: Vec<&str> = out
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(order, ["DONE", "SHIM"], "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_command_lines_are_refused() {
    let bad: &[&[&str]] = &[
        &[],
        &["--seed", "1", "--requests", "2"],
        &["--weights-mib", "2", "--requests", "2"],
        &["--weights-mib", "2", "--seed", "1"],
        &["--weights-mib", "0", "--seed", "1", "--requests", "2"],
        &["--weights-mib", "x", "--seed", "1", "--requests", "2"],
        &[
            "--weights-mib",
            "2",
            "--seed",
            "1",
            "--requests",
            "2",
            "--write",
            "memcpy",
        ],
        &[
            "--weights-mib",
            "2",
            "--seed",
            "1",
            "--requests",
            "2",
            "--write-after",
            "0",
        ],
        &[
            "--weights-mib",
            "2",
            "--seed",
            "1",
            "--requests",
            "2",
            "--write-after",
            "2",
            "--write",
            "memcpy",
        ],
        &[
            "--weights-mib",
            "2",
            "--seed",
            "1",
            "--requests",
            "2",
            "--write-after",
            "0",
            "--write",
            "poke",
        ],
        &[
            "--weights-mib",
            "2",
            "--seed",
            "1",
            "--requests",
            "2",
            "--bogus",
            "1",
        ],
        &["--weights-mib", "2", "--seed", "1", "--requests"],
    ];
    for argv in bad {
        let out = run_host("replica", argv, &Env::fake_only());
        out.assert_code(EXIT_USAGE);
        assert!(out.stdout.is_empty(), "{out}");
        assert!(out.stderr.starts_with("usage: replica"), "{out}");
    }
}

#[test]
fn a_failing_driver_call_prints_error_and_exits_2() {
    // Weights larger than the fake device: cuMemAlloc_v2 fails with CUDA_ERROR_OUT_OF_MEMORY.
    let argv = ["--weights-mib", "64", "--seed", "1", "--requests", "1"];
    let env = Env::fake_only().var("FAKECUDA_TOTAL_MEM", &(32 * MIB).to_string());
    let out = run_host("replica", &argv, &env);
    out.assert_code(2);
    assert_eq!(out.lines("ERROR "), ["ERROR cuMemAlloc_v2 rc=2"], "{out}");
    assert!(out.lines("DONE").is_empty(), "{out}");
}
