//! tandemd's CPU use while it consumes a target launch rate (default
//! 100,000 launches/s) from several launcher processes, and while idle.
//!
//! `cargo bench -p tandem-e2e --bench coordinator_cpu [-- --rate N --clients K --seconds S]`
//! `cargo bench -p tandem-e2e --bench coordinator_cpu -- --capture-rounds R [--rate N ...]`
//!
//! With `--capture-rounds R`: R rounds, each measuring the busy load on a
//! tandemd with capture off (`[trace] window = 0`) and then on (the default
//! window, what `tandemctl trace` reads), side by side; prints each round and
//! the ratio of the medians.
//!
//! CPU is utime + stime of the tandemd process from /proc/<pid>/stat, read
//! before and after a fixed wall-clock window, reported as % of one core.
//! The launch rate actually consumed is the change of /stats
//! `totals.launches` over the same window. Prints a report; asserts nothing.

use std::time::{Duration, Instant};

use tandem_e2e::coord::{
    clients, clk_tck, cpu_ticks, poll, ready_client_id, spawn_launchers, total, Tandemd, TestDir,
    EXIT, SETTLE,
};

struct Window {
    cpu_pct: f64,
    rate: f64,
    dropped: u64,
    secs: f64,
}

fn measure(d: &Tandemd, secs: f64) -> Window {
    let s0 = d.stats();
    let c0 = cpu_ticks(d.pid()).expect("tandemd stat");
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let c1 = cpu_ticks(d.pid()).expect("tandemd stat");
    let wall = t0.elapsed().as_secs_f64();
    let s1 = d.stats();
    let cpu_s = (c1 - c0) as f64 / clk_tck() as f64;
    Window {
        cpu_pct: cpu_s / wall * 100.0,
        rate: (total(&s1, "launches") - total(&s0, "launches")) as f64 / wall,
        dropped: total(&s1, "dropped") - total(&s0, "dropped"),
        secs: wall,
    }
}

/// Measures `secs` while `n` launchers each launch `per_client` per second.
fn with_clients(d: &Tandemd, n: usize, per_client: f64, secs: f64) -> Window {
    let per = per_client.to_string();
    let mut ls = spawn_launchers(d.socket(), n, &["--rate", &per, "--until-stdin", "--hold"]);
    for l in &mut ls {
        ready_client_id(l);
    }
    poll(SETTLE, "all launchers listed", || {
        let st = d.try_stats()?;
        if clients(&st).len() == n {
            Ok(())
        } else {
            Err(st.to_string())
        }
    });
    // Warm-up: let the rate and the daemon's polling settle.
    std::thread::sleep(Duration::from_secs(1));
    let w = measure(d, secs);
    for l in &mut ls {
        l.send_line("stop");
        l.wait_line("DONE ", EXIT);
        l.close_stdin();
        l.wait_exit(EXIT);
    }
    poll(SETTLE, "the launchers reclaimed", || {
        let st = d.try_stats()?;
        if clients(&st).is_empty() {
            Ok(())
        } else {
            Err(st.to_string())
        }
    });
    w
}

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The default configuration with `[trace] window = <window>`.
fn config_with_window(window: u32) -> String {
    let d = tandem_e2e::coord::default_config();
    let c = d.replacen("\nwindow = 32768\n", &format!("\nwindow = {window}\n"), 1);
    assert!(c.contains(&format!("\nwindow = {window}\n")), "{c}");
    c
}

/// `rounds` of the busy load on a tandemd with capture off, then on.
fn capture_rounds(rounds: usize, nclients: usize, rate: f64, secs: f64) {
    let mut off = Vec::new();
    let mut on = Vec::new();
    for round in 0..rounds {
        for (window, out) in [(0u32, &mut off), (32_768, &mut on)] {
            let dir = TestDir::new("cpu-capture");
            let d = Tandemd::start_with_config(&dir, &config_with_window(window));
            let w = with_clients(&d, nclients, rate / nclients as f64, secs);
            let per_100k = w.cpu_pct * 100_000.0 / w.rate.max(1.0);
            println!(
                "  round {round}: capture {}: {:9.0} launches/s, tandemd {:5.2}% of one core, {per_100k:5.2}% per 100k launches/s, dropped {}",
                if window == 0 { "off" } else { "on " },
                w.rate,
                w.cpu_pct,
                w.dropped
            );
            out.push(per_100k);
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[(v.len() - 1) / 2]
    };
    let (a, b) = (median(&mut off), median(&mut on));
    println!(
        "tandemd CPU per 100k launches/s, median of {rounds} rounds: capture off {a:.2}%, on {b:.2}% of one core (on/off {:.2}x)",
        b / a
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --benches` runs this without --bench: build-check only.
    if !args.iter().any(|a| a == "--bench") {
        return;
    }
    let rate = arg(&args, "--rate", 100_000.0);
    let nclients = arg(&args, "--clients", 4.0) as usize;
    let secs = arg(&args, "--seconds", 5.0);
    let rounds = arg(&args, "--capture-rounds", 0.0) as usize;
    if rounds > 0 {
        capture_rounds(rounds, nclients, rate, secs);
        return;
    }

    let dir = TestDir::new("cpu");
    let d = Tandemd::start(&dir);
    let idle = measure(&d, secs.min(5.0));
    let quiet = with_clients(&d, nclients, 1.0, secs.min(5.0));
    let busy = with_clients(&d, nclients, rate / nclients as f64, secs);

    println!(
        "tandemd CPU (utime+stime from /proc/{}/stat, CLK_TCK {}):",
        d.pid(),
        clk_tck()
    );
    println!(
        "  idle, no clients:        {:6.2}% of one core over {:.1} s",
        idle.cpu_pct, idle.secs
    );
    println!(
        "  {nclients} clients, 1 launch/s each: {:6.2}% of one core over {:.1} s",
        quiet.cpu_pct, quiet.secs
    );
    println!(
        "  {nclients} clients at {:>9.0} launches/s (target {rate:.0}): {:6.2}% of one core over \
         {:.1} s; {:.2}% per 100k launches/s; records dropped: {}",
        busy.rate,
        busy.cpu_pct,
        busy.secs,
        if busy.rate > 0.0 {
            busy.cpu_pct * 100_000.0 / busy.rate
        } else {
            f64::NAN
        },
        busy.dropped
    );
}
