#![allow(dead_code)] // each test binary that includes it uses part of it
//! Shared by the round-trip tests (`trace_capture.rs`,
//! `trace_roundtrip_predict.rs`): a trace replayed through the shim by the
//! `replay` host (tests/hosts/replay.c) and captured by tandemd with
//! `tandemctl trace`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tandem_e2e::coord::{client_env, kv_u64, spawn_host, tandemctl, Proc, Tandemd, TestDir};
use tandem_gpusim::trace::{Op, Trace};

/// The trace in the replay host's line form (tests/hosts/replay.c).
/// Device-to-host copies are left out: the shim does not report them, so
/// no capture can hold them.
pub fn script(t: &Trace) -> String {
    let mut kernels: BTreeMap<(String, u64, u32, u32), usize> = BTreeMap::new();
    let mut defs = String::new();
    let mut ops = String::new();
    for op in &t.ops {
        match op {
            Op::Kernel(k) => {
                let n = kernels.len();
                // The trace's registers and shared memory (static and
                // dynamic) become the function's attributes (what the fake
                // driver's cuFuncGetAttribute reports); the launch asks for
                // no dynamic shared memory, so a capture's static + dynamic
                // is the trace's.
                let key = (
                    k.name.clone(),
                    k.duration_ns,
                    k.regs_per_thread,
                    k.smem_per_block,
                );
                let i = *kernels.entry(key).or_insert_with(|| {
                    defs.push_str(&format!(
                        "kernel {} {} regs={} smem={}\n",
                        k.name, k.duration_ns, k.regs_per_thread, k.smem_per_block
                    ));
                    n
                });
                ops.push_str(&format!(
                    "K {i} {} {} {} {} {} {} {} {} {}\n",
                    k.grid[0],
                    k.grid[1],
                    k.grid[2],
                    k.block[0],
                    k.block[1],
                    k.block[2],
                    0,
                    k.stream,
                    k.host_gap_ns
                ));
            }
            Op::CopyH2d {
                bytes,
                stream,
                host_gap_ns,
            } => ops.push_str(&format!("H {bytes} {stream} {host_gap_ns}\n")),
            Op::CopyD2h { .. } => {}
            Op::Sync { host_gap_ns } => ops.push_str(&format!("S {host_gap_ns}\n")),
        }
    }
    defs + &ops
}

/// Writes `script` (the replay host's line form) to `dir/<name>.replay`
/// and starts the `replay` host on it as a client of `d` of class `class`,
/// with `args` after the file. Returns the host once it has registered,
/// and its client id.
pub fn start_replay(
    dir: &TestDir,
    d: &Tandemd,
    name: &str,
    script: &str,
    class: &str,
    args: &[&str],
) -> (Proc, u64) {
    let file = dir.path().join(format!("{name}.replay"));
    std::fs::write(&file, script).expect("write the replay script");
    // Copies move no bytes (the fake's memcpy is CPU time a real GPU's
    // async copy from pinned memory does not take; tests/fake-driver's
    // copies.rs).
    let env = client_env(d.socket())
        .var("TANDEM_CLASS", class)
        .var("FAKECUDA_COPY_NO_DATA", "1");
    let mut all = vec![file.to_str().expect("UTF-8 path")];
    all.extend_from_slice(args);
    let mut host = spawn_host("replay", &all, &env);
    let ready = host.wait_line("READY", Duration::from_secs(30));
    let id = kv_u64(&ready, "client_id");
    assert!(id > 0, "the replay registered: {ready}");
    (host, id)
}

/// Replays `source` as `class` for `seconds` (each unit bracketed by the
/// explicit request API if `explicit`), captures it with `tandemctl trace`
/// after `capture_after`, and returns the captured trace, or what
/// `tandemctl trace` said.
#[allow(clippy::too_many_arguments)] // each is one knob of the replay
pub fn try_round_trip(
    dir: &TestDir,
    d: &Tandemd,
    source: &Trace,
    class: &str,
    quiet_us: &str,
    seconds: &str,
    capture_after: Duration,
    explicit: bool,
) -> Result<Trace, String> {
    // One replay at a time: a replay spins through its host gaps, and two
    // at once on a 2-core machine delay each other's launches and syncs,
    // which the capture measures as kernel time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut args = vec!["--seconds", seconds, "--quiet-us", quiet_us];
    if explicit {
        args.push("--explicit");
    }
    let (mut host, id) = start_replay(dir, d, &source.job, &script(source), class, &args);
    std::thread::sleep(capture_after);
    let out = dir.path().join(format!("{}.captured.json", source.job));
    let _ = std::fs::remove_file(&out);
    // The whole replay: at least the default 60 s.
    let window = seconds
        .parse::<f64>()
        .map_or(60, |s| (s.ceil() as u64).max(60));
    let res = tandemctl(
        d.socket(),
        &[
            "trace",
            &id.to_string(),
            "--seconds",
            &window.to_string(),
            "--out",
            out.to_str().expect("UTF-8 path"),
        ],
    )
    .output()
    .expect("run tandemctl trace");
    host.wait_exit(Duration::from_secs(120));
    if !res.status.success() {
        return Err(String::from_utf8_lossy(&res.stderr).trim().to_string());
    }
    let text = std::fs::read_to_string(&out).expect("the captured trace");
    Trace::from_json(&text).map_err(|e| format!("{e}\n{text}"))
}

/// [`try_round_trip`], which must succeed.
pub fn round_trip(
    dir: &TestDir,
    d: &Tandemd,
    source: &Trace,
    class: &str,
    quiet_us: &str,
    seconds: &str,
    capture_after: Duration,
) -> Trace {
    try_round_trip(
        dir,
        d,
        source,
        class,
        quiet_us,
        seconds,
        capture_after,
        false,
    )
    .unwrap_or_else(|e| panic!("tandemctl trace failed: {e}\n{}", d.log()))
}

/// The default configuration with `[trace] window = window` (its `[trace]
/// mark_every_ns` is 1000000 by default: the inference job's kernels
/// measured by marks, not only their sum by syncs).
pub fn with_inference_marks(window: u32) -> String {
    let d = tandem_e2e::coord::default_config();
    let table = "\n[trace]\nwindow = 32768\nmark_every_ns = 1000000\n";
    assert!(d.contains(table), "the default config's [trace] table");
    d.replacen(
        table,
        &format!("\n[trace]\nwindow = {window}\nmark_every_ns = 1000000\n"),
        1,
    )
}
